"""The :chroot hop, against a tiny chroot copied from this machine."""

import os
import subprocess
import sys

import pytest

import hy  # noqa: F401
from hy.models import Keyword

sys.path.insert(0, os.path.dirname(__file__))

from harness import unavailable  # noqa: E402
from minichroot import make_minichroot  # noqa: E402

from consfig.transport.chain import establish_chain, close_chain, parse_chain  # noqa: E402
from consfig.errors import ConnectionFailed  # noqa: E402



@pytest.fixture(autouse=True)
def _needs_root():
    if os.geteuid() != 0:
        unavailable("chroot needs root")

def mounts_under(root):
    with open("/proc/self/mounts") as f:
        return [line.split()[1] for line in f
                if line.split()[1].startswith(str(root) + "/")]


@pytest.fixture
def chroot_dir(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    make_minichroot(str(root))
    yield root
    for m in reversed(mounts_under(root)):
        subprocess.run(["umount", "-l", m])


def chain(root):
    return parse_chain([[Keyword("chroot"), Keyword("into"), str(root)]])


def test_chroot_runs_commands_inside_and_mounts_for_its_lifetime(chroot_dir):
    (chroot_dir / "marker").write_text("inside\n")
    conns = establish_chain(chain(chroot_dir))
    try:
        c = conns[-1]
        assert c.run(["cat", "/marker"]).stdout == "inside\n"
        assert c.where == f"local > chroot:{chroot_dir}"
        assert sorted(mounts_under(chroot_dir)) == sorted(
            str(chroot_dir / d) for d in ["proc", "sys", "dev", "dev/pts"])
        assert getattr(c.run(["cat", "/proc/self/stat"]), hy.mangle("ok?"))
    finally:
        close_chain(conns)
    assert mounts_under(chroot_dir) == []


def test_chroot_file_api_is_inside(chroot_dir):
    conns = establish_chain(chain(chroot_dir))
    try:
        c = conns[-1]
        c.write_file("/etc/motd", b"hello\x00\xff\n", mode=0o640)
        assert (chroot_dir / "etc/motd").read_bytes() == b"hello\x00\xff\n"
        assert oct((chroot_dir / "etc/motd").stat().st_mode & 0o777) == "0o640"
        assert c.read_file("/etc/motd") == b"hello\x00\xff\n"
        assert getattr(c, hy.mangle("exists?"))("/etc/motd")
        assert not os.path.exists("/etc/motd") or open("/etc/motd", "rb").read() != b"hello\x00\xff\n"
    finally:
        close_chain(conns)


def test_chroot_leaves_existing_mounts_alone(chroot_dir):
    subprocess.run(["mount", "-t", "proc", "proc", str(chroot_dir / "proc")], check=True)
    try:
        conns = establish_chain(chain(chroot_dir))
        assert mounts_under(chroot_dir).count(str(chroot_dir / "proc")) == 1
        close_chain(conns)
        assert mounts_under(chroot_dir) == [str(chroot_dir / "proc")]
    finally:
        subprocess.run(["umount", str(chroot_dir / "proc")])


def test_chroot_does_not_mount_through_a_symlink(chroot_dir, tmp_path):
    (chroot_dir / "sys").rmdir()
    (chroot_dir / "sys").symlink_to(tmp_path)
    conns = establish_chain(chain(chroot_dir))
    try:
        assert str(chroot_dir / "sys") not in mounts_under(chroot_dir)
    finally:
        close_chain(conns)


def test_chroot_into_a_missing_directory_is_a_clear_failure(tmp_path):
    with pytest.raises(ConnectionFailed, match="cannot chroot into .*no such directory"):
        establish_chain(chain(tmp_path / "nowhere"))


def test_chroot_unmounts_when_a_later_hop_fails(chroot_dir):
    # The second hop fails after the first chroot is up.
    bad = parse_chain([[Keyword("chroot"), Keyword("into"), str(chroot_dir)],
                       [Keyword("chroot"), Keyword("into"), "/nowhere"]])
    with pytest.raises(ConnectionFailed):
        establish_chain(bad)
    assert mounts_under(chroot_dir) == []


def test_the_controllers_tmpdir_does_not_follow_into_the_chroot(chroot_dir, tmp_path,
                                                                monkeypatch):
    # A directory of the controller's means nothing inside: mktemp there
    # (in a package's postinst, say) would fail on it.
    monkeypatch.setenv("TMPDIR", str(tmp_path / "controllers-own-tmp"))
    (chroot_dir / "tmp").mkdir(exist_ok=True)
    conns = establish_chain(chain(chroot_dir))
    try:
        made = conns[-1].run(["mktemp"]).stdout.strip()
        assert made.startswith("/tmp/"), made
    finally:
        close_chain(conns)


def _deploy_into(root, *propapps):
    import consfig.deployer.deployment
    from consfig.apply.combinators import seqprops
    from consfig.model.host import make_host
    deploy = getattr(consfig.deployer.deployment, hy.mangle("deploy*"))
    events = []
    outcome = deploy([[Keyword("chroot"), Keyword("into"), str(root)]],
                     make_host("ch", None, None, seqprops()), propspec=seqprops(*propapps),
                     sink=events.append)
    return outcome, [e.get("message") or "" for e in events
                     if e["event"] == "end" and e["status"] == "failed"]


@pytest.mark.parametrize("reachable", [True, False], ids=["reachable", "only-root-reaches"])
def test_a_users_directory_in_a_chroot_is_refused_only_where_other_users_can_reach_it(
        tmp_path, reachable):
    # A chroot is walked by a shell: a user's home in it is refused, as
    # anywhere, unless no user but root can reach the chroot at all (a
    # private temporary directory, as a disk image's mount point is).
    import pathlib
    import shutil
    import tempfile
    from consfig.props import file
    # Not under pytest's own directory, which only root may enter.
    outer = pathlib.Path(tempfile.mkdtemp(prefix="consfig-chroot-"))
    request_cleanup = lambda: shutil.rmtree(outer, ignore_errors=True)  # noqa: E731
    os.chmod(outer, 0o755 if reachable else 0o700)
    root = outer / "root"
    root.mkdir()
    os.chmod(root, 0o755)
    make_minichroot(str(root))
    home = root / "home" / "u"
    home.mkdir(parents=True)
    os.chown(home, 65534, 65534)
    try:
        outcome, said = _deploy_into(root, file.has_content("/home/u/x", "y\n"),
                                     file.has_content("/etc/x", "root's\n"))
        wrote_root = (root / "etc" / "x").read_text()
        wrote_home = (home / "x").read_text() if (home / "x").exists() else None
    finally:
        for m in reversed(mounts_under(root)):
            subprocess.run(["umount", "-l", m])
        request_cleanup()
    assert wrote_root == "root's\n", "root's own path was not written"
    if reachable:
        assert outcome.status == "failed" and "add :python" in said[0], (outcome.status, said)
        assert wrote_home is None, "written in a directory its user may change"
    else:
        assert outcome.status == "changed", (outcome.status, said)
        assert wrote_home == "y\n", wrote_home
