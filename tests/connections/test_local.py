"""The :local connection: commands and files on this machine, for real."""

import os
import pwd
import time

import hy
import pytest

from consfig.transport.local import LocalConnection
from consfig.errors import CommandFailed, CommandTimedOut
from consfig.transport.hop import Script
from harness import wait_until


@pytest.fixture
def conn():
    return LocalConnection()


def test_run_passes_input_env_and_cwd(conn, tmp_path):
    result = conn.run(Script("cat; printf '%s' \"$GREETING\"; pwd"), input="from stdin\n",
                      env={"GREETING": "hé $(x)"}, cwd=str(tmp_path))
    assert result.stdout == f"from stdin\nhé $(x){tmp_path}\n"


def test_run_argv_quotes_every_element(conn, tmp_path):
    hostile = "a b'c\"d$(touch pwned)`x`*"
    result = conn.run(["printf", "%s", hostile], cwd=str(tmp_path))
    assert result.stdout == hostile
    assert list(tmp_path.iterdir()) == []


def test_failing_command_carries_command_exit_code_and_output(conn):
    with pytest.raises(CommandFailed) as e:
        conn.run(Script("echo out; echo err >&2; exit 3"))
    assert e.value.exit_code == 3
    assert "exit 3" in e.value.command
    assert "out" in str(e.value) and "err" in str(e.value)
    assert conn.run(Script("exit 4"), check=False).exit_code == 4


def test_timeout_kills_the_whole_process_group_promptly(conn, tmp_path):
    pidfile = tmp_path / "pid"
    started = time.monotonic()
    with pytest.raises(CommandTimedOut) as e:
        conn.run(Script(f"sleep 60 & echo $! > {pidfile}; wait"), timeout=0.5)
    assert time.monotonic() - started < 5
    assert "timed out after 0.5 s" in str(e.value)
    pid = int(pidfile.read_text())
    wait_until(lambda: process_state(pid) in (None, "Z"), 5, "the background sleep to be killed too")


def process_state(pid):
    """The state letter of process PID, or None when it is gone.  (Killed
    orphans may linger as zombies where nothing reaps them.)"""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def test_write_file_keeps_mode_and_owner(conn, tmp_path):
    path = tmp_path / "f"
    path.write_text("old")
    os.chmod(path, 0o640)
    nobody = pwd.getpwnam("nobody")
    os.chown(path, nobody.pw_uid, nobody.pw_gid)
    conn.write_file(str(path), b"new")
    st = path.stat()
    assert path.read_bytes() == b"new"
    assert (st.st_mode & 0o7777, st.st_uid, st.st_gid) == (0o640, nobody.pw_uid, nobody.pw_gid)


def test_write_file_sets_mode_and_owner_on_request(conn, tmp_path):
    path = tmp_path / "f"
    conn.write_file(str(path), b"x", mode=0o600, owner="nobody")
    st = path.stat()
    assert (st.st_mode & 0o7777, st.st_uid) == (0o600, pwd.getpwnam("nobody").pw_uid)


def test_new_file_gets_the_mode_the_umask_allows(conn, tmp_path):
    old = os.umask(0o027)
    try:
        conn.write_file(str(tmp_path / "f"), b"x")
    finally:
        os.umask(old)
    assert (tmp_path / "f").stat().st_mode & 0o777 == 0o640


def test_failed_write_leaves_no_temporary_file(conn, tmp_path):
    target = tmp_path / "dir"
    target.mkdir()
    with pytest.raises(OSError):
        conn.write_file(str(target), b"cannot replace a directory")
    assert [p.name for p in tmp_path.iterdir()] == ["dir"]


def test_write_into_missing_directory_says_which(conn, tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        conn.write_file(str(tmp_path / "no/such/f"), b"x")
    assert f"directory {tmp_path}/no/such does not exist" in str(e.value)


def test_read_file_and_exists(conn, tmp_path):
    (tmp_path / "f").write_bytes(b"\x00\xffbinary")
    os.symlink(tmp_path / "missing", tmp_path / "dangling")
    assert conn.read_file(str(tmp_path / "f")) == b"\x00\xffbinary"
    with pytest.raises(FileNotFoundError):
        conn.read_file(str(tmp_path / "none"))
    exists = getattr(conn, hy.mangle("exists?"))
    assert exists(str(tmp_path / "dangling"))
    assert not exists(str(tmp_path / "none"))
