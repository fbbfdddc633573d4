"""Pulling images: the puller run as a host runs it — its one file copied
into a directory of its own, started with this machine's python3, checking
signatures with ssh-keygen against an allowed-signers file — against a
loopback HTTP server serving what `consfig.image.publish` wrote.  The images are
stand-ins (a zip application that notes each run), so that what is tested
is the fetching, checking and applying, not the image.  Keys and signatures
themselves are tested in test_signing.py."""

import fcntl
import http.server
import json
import os
import pathlib
import shutil
import subprocess
import sys
import threading
import time

import pytest

import hy  # noqa: F401
from consfig.image import publish, puller
from imageserver import ImageServer, stand_in_image
from sshsigning import allowed, new_key, old_key

HOST = "web1.example.org"
PYTHON3 = shutil.which("python3", path="/usr/bin:/bin") or sys.executable


@pytest.fixture
def key(tmp_path):
    return new_key(tmp_path, "signing")


class Host:
    """A host's side: the puller installed in a directory of its own, its
    allowed-signers file, configuration and state directory, and a marker
    file its stand-in images write to when applied."""

    def __init__(self, root, url, keys, python=(PYTHON3,), **config):
        self.root = root
        lib = root / "lib"
        lib.mkdir(parents=True)
        shutil.copyfile(pathlib.Path(puller.__file__).with_name("puller.py"), lib / "puller.py")
        self.state = root / "state"
        self.marker = root / "applied"
        self.config = root / "pull.json"
        self.config.write_text(json.dumps({
            "url": url, "host": HOST,
            "allowed-signers": allowed(root / "allowed_signers", *keys),
            "state-directory": str(self.state), "python": PYTHON3, **config}))
        self.argv = [*python, str(lib / "puller.py"), str(self.config)]
        self.env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}

    def pull(self):
        return subprocess.run(self.argv, capture_output=True, text=True, timeout=120, env=self.env)

    def applied(self):
        return self.marker.read_text().splitlines() if self.marker.exists() else []


def assert_refused(r, why):
    """R, a run of the puller, was refused (status 3), saying WHY."""
    assert r.returncode == puller.EX_REFUSED, (r.returncode, r.stderr)
    assert "REFUSED" in r.stderr and why in r.stderr, r.stderr


def published(tmp_path, key, text, host_marker):
    out = tmp_path / "pub"
    image = stand_in_image(tmp_path / "image.pyz", host_marker, text)
    publish.publish_images({HOST: image}, str(out), key)
    return out


def test_the_puller_fetches_checks_and_applies(tmp_path, key):
    out = published(tmp_path, key, "v1", tmp_path / "host/applied")
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [key.line])
        r = host.pull()
        assert r.returncode == 0, r.stderr
        assert host.applied() == ["v1"]
        assert "new image for web1.example.org" in r.stdout, r.stdout
        assert (host.state / "image.pyz").read_bytes() == (out / HOST).read_bytes()
        assert (host.state.stat().st_mode & 0o777) == 0o700, "the state may hold secrets"


def test_a_second_pull_downloads_nothing(tmp_path, key):
    out = published(tmp_path, key, "v1", tmp_path / "host/applied")
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [key.line])
        assert host.pull().returncode == 0
        before = server.answers
        r = host.pull()
        assert r.returncode == 0, r.stderr
        again = server.answers[len(before):]
        assert sorted(again) == [(f"/{HOST}", 304), (f"/{HOST}.sshsig", 304)], again
        assert host.applied() == ["v1", "v1"], "an unchanged image is still applied"


def test_a_new_publication_is_fetched_and_applied(tmp_path, key):
    out = published(tmp_path, key, "v1", tmp_path / "host/applied")
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [key.line])
        assert host.pull().returncode == 0
        published(tmp_path, key, "v2", tmp_path / "host/applied")
        r = host.pull()
        assert r.returncode == 0, r.stderr
        assert host.applied() == ["v1", "v2"]
        assert server.downloads(f"/{HOST}") == 2


def test_a_tampered_image_is_refused_and_nothing_applied(tmp_path, key):
    out = published(tmp_path, key, "v1", tmp_path / "host/applied")
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [key.line])
        assert host.pull().returncode == 0
        good = (host.state / "image.pyz").read_bytes()
        evil = stand_in_image(tmp_path / "evil.pyz", tmp_path / "host/applied", "evil")
        (out / HOST).write_bytes(evil)
        r = host.pull()
        assert r.returncode == puller.EX_REFUSED, (r.returncode, r.stderr)
        assert "REFUSED" in r.stderr and "is not the one signed" in r.stderr, r.stderr
        assert host.applied() == ["v1"], "something was applied after a refusal"
        assert (host.state / "image.pyz").read_bytes() == good, "the last good image was lost"


def test_an_image_signed_by_another_key_is_refused(tmp_path, key):
    other = new_key(tmp_path, "other")
    out = published(tmp_path, other, "v1", tmp_path / "host/applied")
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [key.line])
        assert_refused(host.pull(), "not by a trusted key")
        assert host.applied() == [] and not (host.state / "image.pyz").exists()


def test_an_unsigned_image_is_refused(tmp_path, key):
    out = published(tmp_path, key, "v1", tmp_path / "host/applied")
    (out / f"{HOST}.sshsig").unlink()
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [key.line])
        r = host.pull()
        assert r.returncode == puller.EX_REFUSED, (r.returncode, r.stderr)
        assert "an unsigned image is never applied" in r.stderr, r.stderr
        assert host.applied() == []


def test_an_older_image_is_refused(tmp_path, key):
    out = published(tmp_path, key, "v1", tmp_path / "host/applied")
    old = {p.name: p.read_bytes() for p in out.iterdir()}
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [key.line])
        published(tmp_path, key, "v2", tmp_path / "host/applied")
        assert host.pull().returncode == 0
        for name, data in old.items():
            (out / name).write_bytes(data)
        r = host.pull()
        assert r.returncode == puller.EX_REFUSED, (r.returncode, r.stderr)
        assert "older than the one applied last" in r.stderr, r.stderr
        assert host.applied() == ["v2"]


def test_either_of_two_trusted_keys_will_do(tmp_path, key):
    new = new_key(tmp_path, "new")
    out = published(tmp_path, new, "v1", tmp_path / "host/applied")
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [key.line, new.line])
        r = host.pull()
        assert r.returncode == 0, r.stderr
        assert host.applied() == ["v1"]


def test_an_unreachable_server_is_reported_and_nothing_applied(tmp_path, key):
    out = published(tmp_path, key, "v1", tmp_path / "host/applied")
    with ImageServer(out) as server:
        url = server.url
    host = Host(tmp_path / "host", url, [key.line])
    r = host.pull()
    assert r.returncode == puller.EX_UNREACHABLE, (r.returncode, r.stderr)
    assert "could not fetch" in r.stderr and host.applied() == []


def test_no_application_while_another_runs(tmp_path, key):
    out = published(tmp_path, key, "v1", tmp_path / "host/applied")
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [key.line])
        host.state.mkdir(mode=0o700)
        with open(host.state / "apply.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            r = host.pull()
        assert r.returncode == puller.EX_BUSY, (r.returncode, r.stderr)
        assert "another application is running" in r.stderr and host.applied() == []


def test_a_publication_caught_half_way_is_fetched_again(tmp_path, key):
    out = published(tmp_path, key, "v1", tmp_path / "host/applied")
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [key.line])
        assert host.pull().returncode == 0
        # The publisher has renamed the new image into place, not yet its
        # signature: the puller reads the old signature, then the new image.
        new = stand_in_image(tmp_path / "v2.pyz", tmp_path / "host/applied", "v2")
        new_sig = publish.sign_image(key, HOST, new)
        (out / HOST).write_bytes(new)
        server.after(f"/{HOST}", lambda: (out / f"{HOST}.sshsig").write_bytes(new_sig))
        r = host.pull()
        assert r.returncode == 0, r.stderr
        assert host.applied() == ["v1", "v2"]


def test_under_systemd_a_refusal_is_logged_as_an_error(tmp_path, key):
    other = new_key(tmp_path, "other")
    out = published(tmp_path, other, "v1", tmp_path / "host/applied")
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [key.line])
        r = subprocess.run(host.argv, capture_output=True, text=True, timeout=120,
                           env={"PATH": "/usr/bin:/bin", "JOURNAL_STREAM": "8:1234"})
        assert r.returncode == puller.EX_REFUSED
        assert r.stderr.startswith("<3>consfig-pull: REFUSED"), \
            f"the journal would not see an error: {r.stderr!r}"


class _Trickle(http.server.BaseHTTPRequestHandler):
    """Answers every GET with a promise of 100 kB, then a byte every 0.3 s:
    each read is quick enough for a socket timeout, the whole never ends."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "100000")
        self.end_headers()
        try:
            for _ in range(1000):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.3)
        except OSError:
            pass

    def log_message(self, *args):
        pass


def test_a_trickling_server_is_given_up_within_the_deadline(tmp_path, key):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Trickle)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        host = Host(tmp_path / "host", f"http://127.0.0.1:{server.server_port}",
                    [key.line])
        config = json.loads(host.config.read_text())
        host.config.write_text(json.dumps({**config, "deadline": 3}))
        started = time.monotonic()
        r = host.pull()
        took = time.monotonic() - started
    finally:
        server.shutdown()
        server.server_close()
    assert r.returncode == puller.EX_UNREACHABLE, (r.returncode, r.stderr)
    assert took < 10, f"gave up after {took:.1f} s, for a deadline of 3 s"
    assert "deadline" in r.stderr, r.stderr
    assert host.applied() == [] and not (host.state / "image.pyz").exists()


class _TrickleHeaders(http.server.BaseHTTPRequestHandler):
    """Answers every GET with a status line, then one byte of a header every
    2 s: no read ever waits long enough for a socket timeout, and no body
    ever starts."""

    def do_GET(self):
        self.wfile.write(b"HTTP/1.1 200 OK\r\n")
        self.wfile.flush()
        try:
            for _ in range(1000):
                self.wfile.write(b"X")
                self.wfile.flush()
                time.sleep(2)
        except OSError:
            pass

    def log_message(self, *args):
        pass


def test_a_server_trickling_headers_is_given_up_at_the_deadline(tmp_path, key):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _TrickleHeaders)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        host = Host(tmp_path / "host", f"http://127.0.0.1:{server.server_port}", [key.line],
                    deadline=3, timeout=60)
        started = time.monotonic()
        r = host.pull()
        took = time.monotonic() - started
    finally:
        server.shutdown()
        server.server_close()
    assert r.returncode == puller.EX_UNREACHABLE, (r.returncode, r.stderr)
    assert took < 8, f"gave up after {took:.1f} s, for a deadline of 3 s"
    assert "past the deadline of 3 s" in r.stderr, r.stderr
    assert host.applied() == [] and not (host.state / "image.pyz").exists()


def test_a_server_slower_than_the_minimum_rate_is_given_up(tmp_path, key):
    # Within the deadline, but a byte every 0.3 s: below "min-rate" once
    # the first 10 s are past.
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Trickle)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        host = Host(tmp_path / "host", f"http://127.0.0.1:{server.server_port}", [key.line],
                    deadline=120, **{"min-rate": 100})
        started = time.monotonic()
        r = host.pull()
        took = time.monotonic() - started
    finally:
        server.shutdown()
        server.server_close()
    assert r.returncode == puller.EX_UNREACHABLE, (r.returncode, r.stderr)
    assert 10 <= took < 20, f"gave up after {took:.1f} s: the rate counts from 10 s on"
    assert "slower than the minimum of 100 bytes/s (\"min-rate\")" in r.stderr, r.stderr
    assert host.applied() == [] and not (host.state / "image.pyz").exists()


def test_an_expired_statement_is_refused_saying_how_old_the_last_good_one_is(tmp_path, key):
    out = published(tmp_path, key, "v1", tmp_path / "host/applied")
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [key.line])
        assert host.pull().returncode == 0
        # The same image, signed again a little later, but with a validity
        # that has run out: what a frozen server keeps serving.
        image = (out / HOST).read_bytes()
        published_at = "2026-01-01T00:00:00.000000Z"
        state = json.loads((host.state / "state.json").read_text())
        state["published"] = "2025-12-31T00:00:00.000000Z"
        (host.state / "state.json").write_text(json.dumps(state))
        (out / f"{HOST}.sshsig").write_bytes(
            publish.sign_image(key, HOST, image, published_at, valid_for=3600))
        r = host.pull()
        assert r.returncode == puller.EX_REFUSED, (r.returncode, r.stderr)
        assert "expired 2026-01-01T01:00:00.000000Z" in r.stderr, r.stderr
        assert "the last good one, applied here, was signed 2025-12-31" in r.stderr, r.stderr
        assert host.applied() == ["v1"], "nothing more applied"


def test_a_statement_for_another_host_is_refused(tmp_path, key):
    # db1's own image and statement, validly signed, served as web1's.
    out = tmp_path / "pub"
    image = stand_in_image(tmp_path / "db1.pyz", tmp_path / "host/applied", "db1")
    publish.publish_images({"db1.example.org": image}, str(out), key)
    os.rename(out / "db1.example.org", out / HOST)
    os.rename(out / "db1.example.org.sshsig", out / f"{HOST}.sshsig")
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [key.line])
        assert_refused(host.pull(), "is for db1.example.org, not for web1.example.org")
    assert host.applied() == [] and not (host.state / "image.pyz").exists()


class _Truncating(http.server.BaseHTTPRequestHandler):
    """Serves the files of `directory`, but the image only in part: the
    whole length promised, half of it sent, then the connection closed."""

    directory = None

    def do_GET(self):
        data = (self.directory / self.path.lstrip("/")).read_bytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data if self.path.endswith(".sshsig") else data[:len(data) // 2])
        self.wfile.flush()
        self.close_connection = True

    def log_message(self, *args):
        pass


def test_a_truncated_download_is_refused_and_nothing_applied(tmp_path, key):
    out = published(tmp_path, key, "v1", tmp_path / "host/applied")
    handler = type("Handler", (_Truncating,), {"directory": out})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        host = Host(tmp_path / "host", f"http://127.0.0.1:{server.server_port}", [key.line])
        r = host.pull()
    finally:
        server.shutdown()
        server.server_close()
    assert_refused(r, "is not the one signed")
    size = (out / HOST).stat().st_size
    assert f"is not the one signed ({size // 2} bytes" in r.stderr, r.stderr
    assert f"signed: {size} bytes" in r.stderr, r.stderr
    assert host.applied() == [] and not (host.state / "image.pyz").exists()


def test_an_image_longer_than_signed_is_not_downloaded_past_its_size(tmp_path, key):
    out = published(tmp_path, key, "v1", tmp_path / "host/applied")
    with open(out / HOST, "ab") as f:
        f.write(b"\0" * 1_000_000)
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [key.line])
        assert_refused(host.pull(), "bytes expected")
    assert host.applied() == []


def test_the_puller_needs_only_the_standard_library_and_ssh_keygen(tmp_path, key):
    # python3 -S: no site-packages (no `cryptography`); a PATH of nothing but
    # ssh-keygen.
    probe = subprocess.run([PYTHON3, "-S", "-c", "import cryptography"], capture_output=True)
    assert probe.returncode != 0, "cryptography is importable even with -S"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.symlink(shutil.which("ssh-keygen"), bin_dir / "ssh-keygen")
    out = published(tmp_path, key, "v1", tmp_path / "host/applied")
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [key.line], python=(PYTHON3, "-S"))
        host.env["PATH"] = str(bin_dir)
        r = host.pull()
        assert r.returncode == 0, r.stderr
        assert f"checked with {bin_dir}/ssh-keygen" in r.stdout, r.stdout
        assert host.applied() == ["v1"]
        published(tmp_path, new_key(tmp_path, "other"), "v2", tmp_path / "host/applied")
        assert_refused(host.pull(), "not by a trusted key")
        assert host.applied() == ["v1"]


def test_without_ssh_keygen_nothing_is_applied_and_the_puller_says_what_to_install(tmp_path, key):
    out = published(tmp_path, key, "v1", tmp_path / "host/applied")
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [key.line])
        host.env["PATH"] = str(tmp_path / "empty")
        r = host.pull()
        assert r.returncode == puller.EX_CONFIG, (r.returncode, r.stderr)
        assert "ssh-keygen is not installed" in r.stderr and "openssh-client" in r.stderr, r.stderr
        assert server.answers == [], "fetched what it cannot check"
    assert host.applied() == []


@pytest.mark.parametrize("identity", ["-I", "a\nb", "a,*", ""])
def test_a_hostile_identity_in_the_configuration_is_refused(tmp_path, key, identity):
    out = published(tmp_path, key, "v1", tmp_path / "host/applied")
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [key.line])
        config = json.loads(host.config.read_text())
        host.config.write_text(json.dumps({**config, "identity": identity}))
        r = host.pull()
        assert r.returncode == puller.EX_CONFIG, (r.returncode, r.stderr)
        assert "not a signer identity" in r.stderr, r.stderr
        assert server.answers == []
    assert host.applied() == []


def test_an_allowed_signers_file_that_lists_no_key_is_a_bad_configuration(tmp_path, key):
    host = Host(tmp_path / "host", "http://127.0.0.1:9", [key.line])
    (tmp_path / "host" / "allowed_signers").write_text("# nobody\n")
    r = host.pull()
    assert r.returncode == puller.EX_CONFIG and "lists no key to trust" in r.stderr, r.stderr
    (tmp_path / "host" / "allowed_signers").unlink()
    r = host.pull()
    assert r.returncode == puller.EX_CONFIG and "allowed_signers" in r.stderr, r.stderr


def test_the_new_puller_reads_the_configuration_of_the_old_one(tmp_path):
    # A host whose puller was replaced but whose pull.json was not yet (a
    # pulled-from stopped in between): its old key line still says whom to
    # trust, and what the old puller kept is tidied away.
    old, old_line = old_key(tmp_path)
    publish.keygen_from(old, str(tmp_path / "converted"))
    key = publish.signing_key(str(tmp_path / "converted"))
    out = published(tmp_path, key, "v1", tmp_path / "host/applied")
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [key.line])
        config = json.loads(host.config.read_text())
        del config["allowed-signers"]
        host.config.write_text(json.dumps({**config, "public-keys": [old_line]}))
        host.state.mkdir(mode=0o700)
        (host.state / "image.sig").write_text("consfig-signed-image 1\n")
        r = host.pull()
        assert r.returncode == 0, r.stderr
        assert host.applied() == ["v1"]
        assert puller.trusted_fingerprints((host.state / "allowed_signers").read_text()) == \
            [key.fingerprint]
        assert not (host.state / "image.sig").exists(), "the old puller's signature is left"
        published(tmp_path, new_key(tmp_path, "other"), "v2", tmp_path / "host/applied")
        assert_refused(host.pull(), "not by a trusted key")
