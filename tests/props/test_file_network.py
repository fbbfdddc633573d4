"""file.downloaded and file.extracted, against an HTTP server on loopback
(python3 -m http.server, started here): over :local (the target's own
Python downloads), over a shell (curl), and in the test chroot (curl or
wget, as installed there)."""

import hashlib
import io
import os
import pathlib
import socket
import subprocess
import sys
import tarfile
import threading
import time
import zipfile

import pytest

import hy  # noqa: F401
from hy.models import Keyword as K

from consfig.apply.combinators import eseqprops
from consfig.errors import PropspecError
from consfig.props import apt, file
from harness import wait_until
from proptest import LOCAL, apply_twice, deploy_propspec, statuses, this_os
from sshlab import free_port

# Through sudo (to root, as we are): a shell, where curl downloads.
LOCAL_SUDO = [K("local"), K("sudo")]


class Server:
    """python3 -m http.server serving ROOT on 127.0.0.1."""

    def __init__(self, root):
        self.root = root
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "--directory",
             str(root), str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def up():
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return True
            except OSError:
                return False
        wait_until(up, 20, "the HTTP server to listen")

    def url(self, name):
        return f"http://127.0.0.1:{self.port}/{name}"

    def publish(self, name, data):
        (self.root / name).write_bytes(data)
        return self.url(name), hashlib.sha256(data).hexdigest()

    def stop(self):
        self.proc.kill()
        self.proc.wait(10)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("www"))
    yield s
    s.stop()


def leftovers(directory):
    return [p.name for p in pathlib.Path(directory).iterdir() if p.name.startswith(".consfig-")]


@pytest.mark.parametrize("chain", [LOCAL, LOCAL_SUDO], ids=["python", "shell"])
def test_a_file_is_downloaded_once_and_then_holds(server, tmp_path, chain):
    data = os.urandom(300_000)
    url, digest = server.publish("blob.bin", data)
    dest = tmp_path / "blob.bin"
    apply_twice(chain, file.downloaded(url, str(dest), sha256=digest, mode=0o640))
    assert dest.read_bytes() == data
    assert dest.stat().st_mode & 0o777 == 0o640
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("chain", [LOCAL, LOCAL_SUDO], ids=["python", "shell"])
def test_a_wrong_checksum_is_refused_and_nothing_is_written(server, tmp_path, chain):
    url, digest = server.publish("tampered.bin", b"not what you think\n")
    dest = tmp_path / "tampered.bin"
    dest.write_bytes(b"the old one\n")
    outcome, events = deploy_propspec(chain, file.downloaded(url, str(dest), sha256="0" * 64),
                                      check=False)
    assert outcome.status == "failed"
    message = "\n".join(e.get("message", "") for e in events)
    assert f"its SHA-256 is {digest}, not the {'0' * 64} wanted" in message, message
    assert dest.read_bytes() == b"the old one\n"
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("chain", [LOCAL, LOCAL_SUDO], ids=["python", "shell"])
def test_a_missing_file_is_a_failure_that_leaves_nothing(server, tmp_path, chain):
    dest = tmp_path / "nothing"
    outcome, events = deploy_propspec(
        chain, file.downloaded(server.url("no-such-file"), str(dest), sha256="0" * 64), check=False)
    assert outcome.status == "failed"
    assert "could not download" in "\n".join(e.get("message", "") for e in events)
    assert not dest.exists() and leftovers(tmp_path) == []


@pytest.mark.parametrize("chain", [LOCAL, LOCAL_SUDO], ids=["python", "shell"])
def test_a_server_that_never_answers_is_given_up_after_the_timeout(tmp_path, chain):
    # Accepts, and says nothing.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    accepted = []
    t = threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True)
    t.start()
    started = time.monotonic()
    outcome, _ = deploy_propspec(chain, file.downloaded(
        f"http://127.0.0.1:{listener.getsockname()[1]}/slow", str(tmp_path / "slow"),
        sha256="0" * 64, timeout=2), check=False)
    assert outcome.status == "failed"
    assert time.monotonic() - started < 30
    assert leftovers(tmp_path) == [] and not (tmp_path / "slow").exists()
    listener.close()


def test_check_mode_says_it_would_download_and_writes_nothing(server, tmp_path):
    url, digest = server.publish("check.bin", b"x\n")
    dest = tmp_path / "check.bin"
    outcome, events = deploy_propspec(LOCAL, file.downloaded(url, str(dest), sha256=digest),
                                      check_mode=True)
    assert list(statuses(events).values()) == ["would-change"]
    assert any(f"{dest} would be downloaded" in e.get("text", "") for e in events)
    assert not dest.exists()


def test_a_url_with_shell_in_it_is_only_a_url(server, tmp_path):
    marker = tmp_path / "pwned"
    outcome, _ = deploy_propspec(LOCAL_SUDO, file.downloaded(
        server.url(f"a$(touch%20{marker})`touch%20{marker}`;touch"), str(tmp_path / "d"),
        sha256="0" * 64), check=False)
    assert outcome.status == "failed"
    assert not marker.exists()


@pytest.mark.parametrize("bad", [
    dict(url="file:///etc/shadow"),
    dict(url="-o/etc/passwd"),
    dict(url="http://example.org/a\nb"),
    dict(url="http://example.org/a b"),
    dict(url="http://example.org/'"),
    dict(sha256="abc"),
    dict(sha256="g" * 64),
    dict(path="relative"),
    dict(path="/nul\x00"),
    dict(mode=644 * 1000),
])
def test_hostile_arguments_are_refused_where_written(bad):
    args = {"url": "http://example.org/x", "path": "/tmp/x", "sha256": "0" * 64, **bad}
    with pytest.raises(PropspecError):
        file.downloaded(args.pop("url"), args.pop("path"), **args)


# Archives

def tar_bytes(members, mode="w:gz"):
    """A tar archive of MEMBERS: (name, bytes) for a file, (name, None) for a
    directory, (name, ("symlink"|"hardlink", target)) for a link."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tar:
        for name, what in members:
            info = tarfile.TarInfo(name)
            info.uid = info.gid = 4242
            if what is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif isinstance(what, tuple):
                info.type = tarfile.SYMTYPE if what[0] == "symlink" else tarfile.LNKTYPE
                info.linkname = what[1]
                tar.addfile(info)
            else:
                info.size, info.mode = len(what), 0o644
                tar.addfile(info, io.BytesIO(what))
    return buf.getvalue()


def zip_bytes(members):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members:
            z.writestr(name, data)
    return buf.getvalue()


@pytest.mark.parametrize("chain", [LOCAL, LOCAL_SUDO], ids=["python", "shell"])
def test_a_tar_archive_is_unpacked_once_and_its_marker_holds_its_hash(tmp_path, chain):
    archive = tmp_path / "app.tar.gz"
    data = tar_bytes([("app/", None), ("app/bin/run", b"#!/bin/sh\n"),
                      ("app/odd name 'q' \"dq\" $(x)\n.txt", b"odd\n"),
                      ("app/caf\xe9-\udcff", b"bytes\n"), ("app/link", ("symlink", "bin/run"))])
    archive.write_bytes(data)
    dest = tmp_path / "opt"
    apply_twice(chain, file.extracted(str(archive), str(dest)))
    assert (dest / "app/bin/run").read_bytes() == b"#!/bin/sh\n"
    assert (dest / "app/odd name 'q' \"dq\" $(x)\n.txt").read_bytes() == b"odd\n"
    assert (dest / os.fsdecode(b"app/caf\xc3\xa9-\xff")).read_bytes() == b"bytes\n"
    assert os.readlink(dest / "app/link") == "bin/run"
    assert (dest / "app/bin/run").stat().st_uid == 0, "never the archive's owner"
    markers = [p for p in dest.iterdir() if p.name.startswith(".consfig-extracted-")]
    assert [m.read_text() for m in markers] == [hashlib.sha256(data).hexdigest() + " strip-components=0\n"]


def test_a_new_archive_is_unpacked_over_the_old_files(tmp_path):
    archive, dest = tmp_path / "a.tar", tmp_path / "out"
    archive.write_bytes(tar_bytes([("v", b"1\n")], "w"))
    deploy_propspec(LOCAL, file.extracted(str(archive), str(dest)))
    archive.write_bytes(tar_bytes([("v", b"2\n")], "w"))
    outcome, _ = deploy_propspec(LOCAL, file.extracted(str(archive), str(dest)))
    assert outcome.status == "changed"
    assert (dest / "v").read_text() == "2\n"


def test_strip_components_drops_the_leading_directory(tmp_path):
    archive, dest = tmp_path / "p-1.0.tar.xz", tmp_path / "p"
    archive.write_bytes(tar_bytes([("p-1.0/", None), ("p-1.0/README", b"hi\n")], "w:xz"))
    apply_twice(LOCAL, file.extracted(str(archive), str(dest), strip_components=1))
    assert (dest / "README").read_text() == "hi\n"


def test_a_zip_archive_is_unpacked_too(tmp_path):
    archive, dest = tmp_path / "site.zip", tmp_path / "www"
    archive.write_bytes(zip_bytes([("index.html", b"<p>hi</p>\n"), ("css/a.css", b"p{}\n")]))
    apply_twice(LOCAL_SUDO, file.extracted(str(archive), str(dest)))
    assert (dest / "css/a.css").read_bytes() == b"p{}\n"


@pytest.mark.parametrize("members,why", [
    ([("ok", b"x"), ("../evil", b"x")], "leads out of the directory"),
    ([("/etc/evil", b"x")], "leads out of the directory"),
    ([("l", ("symlink", "/etc")), ("l/passwd", b"x")], "symbolic link to '/etc'"),
    ([("d/l", ("symlink", "../../x"))], "symbolic link to '../../x'"),
    ([("h", ("hardlink", "../outside"))], "hard link to '../outside'"),
])
def test_an_archive_that_would_escape_is_refused_and_nothing_unpacked(tmp_path, members, why):
    archive, dest = tmp_path / "evil.tar", tmp_path / "dest"
    archive.write_bytes(tar_bytes(members, "w"))
    outcome, events = deploy_propspec(LOCAL, file.extracted(str(archive), str(dest)), check=False)
    assert outcome.status == "failed"
    message = "\n".join(e.get("message", "") for e in events)
    assert why in message, message
    assert not dest.exists(), "nothing was unpacked"
    assert not (tmp_path / "evil").exists() and not (tmp_path / "outside").exists()


def test_a_zip_with_a_way_out_is_refused(tmp_path):
    archive, dest = tmp_path / "evil.zip", tmp_path / "dest"
    archive.write_bytes(zip_bytes([("../../evil", b"x")]))
    outcome, events = deploy_propspec(LOCAL, file.extracted(str(archive), str(dest)), check=False)
    assert outcome.status == "failed"
    assert not dest.exists()


def test_a_missing_archive_fails_but_check_mode_says_it_would_be_unpacked(tmp_path):
    prop = file.extracted(str(tmp_path / "later.tar"), str(tmp_path / "d"))
    _, events = deploy_propspec(LOCAL, prop, check_mode=True)
    assert list(statuses(events).values()) == ["would-change"]
    outcome, events = deploy_propspec(LOCAL, prop, check=False)
    assert outcome.status == "failed"
    assert "does not exist" in "\n".join(e.get("message", "") for e in events)


def test_check_mode_unpacks_nothing(tmp_path):
    archive, dest = tmp_path / "a.tar", tmp_path / "out"
    archive.write_bytes(tar_bytes([("v", b"1\n")], "w"))
    _, events = deploy_propspec(LOCAL, file.extracted(str(archive), str(dest)), check_mode=True)
    assert list(statuses(events).values()) == ["would-change"]
    assert not dest.exists()


@pytest.mark.parametrize("bad", [
    dict(archive="rel.tar"), dict(directory="rel"), dict(format=K("rar")),
    dict(strip_components=-1), dict(strip_components="1"),
])
def test_hostile_extraction_arguments_are_refused_where_written(bad):
    args = {"archive": "/tmp/a.tar", "directory": "/tmp/d", **bad}
    with pytest.raises(PropspecError):
        file.extracted(args.pop("archive"), args.pop("directory"), **args)


@pytest.mark.chroot
def test_in_the_chroot_a_release_is_downloaded_with_what_is_there_and_unpacked(
        chroot_chain, debian_chroot, server):
    data = tar_bytes([("tool-2.0/", None), ("tool-2.0/bin/tool", b"#!/bin/sh\necho 2\n")])
    url, digest = server.publish("tool-2.0.tar.gz", data)
    # Nothing to download with in a minimal Debian: says so.
    outcome, events = deploy_propspec(chroot_chain, file.downloaded(
        url, "/opt/tool.tar.gz", sha256=digest), check=False)
    assert outcome.status == "failed"
    assert "no curl, wget or python3 here" in "\n".join(e.get("message", "") for e in events)
    for tool in ["wget", "curl"]:
        (debian_chroot / "opt/tool.tar.gz").unlink(missing_ok=True)
        apply_twice(chroot_chain, eseqprops(
            this_os(), apt.installed(tool),
            file.downloaded(url, "/opt/tool.tar.gz", sha256=digest),
            file.extracted("/opt/tool.tar.gz", "/opt/tool", strip_components=1)))
        assert (debian_chroot / "opt/tool/bin/tool").read_bytes() == b"#!/bin/sh\necho 2\n"
        (debian_chroot / "opt/tool/bin/tool").unlink()
        for m in (debian_chroot / "opt/tool").glob(".consfig-extracted-*"):
            m.unlink()
