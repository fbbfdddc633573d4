"""A file write cut off half-way — the controller killed, the SSH session
killed — leaves the old file as it was and no temporary behind; a later
write cleans up what an earlier, killed one left."""

import glob
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import hy  # noqa: F401
from hy.models import Keyword as K

from consfig.transport.chain import close_chain, establish_chain, parse_chain
from consfig.apply.combinators import eseqprops
from consfig.model.context import establishing_for
from consfig.errors import ConnectionFailed
from consfig.model.host import make_host

sys.path.insert(0, os.path.dirname(__file__))
from harness import wait_until  # noqa: E402
from labservers import second_server  # noqa: E402

BIG = 50_000_000
ORIGINAL = b"the original content\n"


def chain(config):
    return [[K("ssh"), K("config"), config, K("host"), "lab"], K("sudo")]


def establish(config):
    with establishing_for(make_host("lab", None, None, eseqprops())):
        return establish_chain(parse_chain(chain(config)))


def temporaries(directory):
    return glob.glob(os.path.join(directory, ".consfig-*"))


def partly_written(directory, at_least=2_000_000):
    return any(os.path.getsize(t) >= at_least for t in temporaries(directory)
               if os.path.exists(t))




def kill_sshd_only(server):
    # sshd's own processes, not the command it runs: that is what a
    # session dying looks like to the command.
    for pid in [server.proc.pid] + server.session_pids():
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().startswith("sshd"):
                    os.kill(pid, signal.SIGKILL)
        except (FileNotFoundError, ProcessLookupError):
            pass


def assert_left_as_it_was(target):
    wait_until(lambda: not temporaries(str(target.parent)), 15, "the temporary to be removed")
    assert target.read_bytes() == ORIGINAL, "the original is intact"


CONTROLLER = """
import sys
import hy  # noqa: F401
from hy.models import Keyword as K
from consfig.transport.chain import establish_chain, parse_chain
from consfig.apply.combinators import eseqprops
from consfig.model.context import establishing_for
from consfig.model.host import make_host
config, path, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
with establishing_for(make_host("lab", None, None, eseqprops())):
    conns = establish_chain(parse_chain([[K("ssh"), K("config"), config, K("host"), "lab"],
                                         K("sudo")]))
    conns[-1].write_file(path, b"n" * size)
"""


def test_a_controller_killed_mid_upload_leaves_the_original(sshlab, tmp_path):
    target = tmp_path / "data" / "big file"
    target.parent.mkdir()
    target.write_bytes(ORIGINAL)
    controller = subprocess.Popen([sys.executable, "-c", CONTROLLER, sshlab.config,
                                   str(target), str(BIG)])
    try:
        wait_until(lambda: partly_written(str(target.parent)), 60, "the upload to start")
    finally:
        controller.kill()
        controller.wait(10)
    assert_left_as_it_was(target)


def test_an_ssh_session_killed_mid_upload_leaves_the_original(sshlab, tmp_path):
    server, config = second_server(sshlab, tmp_path)
    target = tmp_path / "data" / "big file"
    target.parent.mkdir()
    target.write_bytes(ORIGINAL)
    conns = establish(config)
    failures = []

    def upload():
        try:
            conns[-1].write_file(str(target), b"n" * BIG)
        except ConnectionFailed as e:
            failures.append(e)

    writer = threading.Thread(target=upload, daemon=True)
    writer.start()
    try:
        wait_until(lambda: partly_written(str(target.parent)), 60, "the upload to start")
        kill_sshd_only(server)
        writer.join(30)
        assert failures, "the write failed"
        assert_left_as_it_was(target)
    finally:
        close_chain(conns)
        server.stop()


def test_a_short_upload_is_refused_not_renamed(sshlab, tmp_path):
    # What the target does when its input ends early, whatever the cause:
    # the script is told how much to expect.
    target = tmp_path / "f"
    target.write_bytes(ORIGINAL)
    conns = establish(sshlab.config)
    try:
        script = conns[-1].write_script(str(target), 10)
        code, out, err = conns[-1].run_script(script, b"12345", 30)
        assert code != 0, "five bytes of ten is a failure"
        assert b"5 of 10 bytes" in err, err
    finally:
        close_chain(conns)
    assert target.read_bytes() == ORIGINAL
    assert temporaries(str(tmp_path)) == []


@pytest.mark.parametrize("hops", ["ssh-sudo", "local"])
def test_a_write_removes_stale_temporaries_of_its_own(sshlab, tmp_path, hops):
    stale = tmp_path / ".consfig-AbCd1234"
    fresh = tmp_path / ".consfig-EfGh5678"
    others = tmp_path / ".consfig-notours1"
    for p in (stale, fresh, others):
        p.write_bytes(b"left by a killed run")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    os.utime(others, (old, old))
    os.chown(others, 1, 1)
    if hops == "local":
        from consfig.transport.local import LocalConnection
        conns = [LocalConnection()]
    else:
        conns = establish(sshlab.config)
    try:
        conns[-1].write_file(str(tmp_path / "f"), b"new\n")
    finally:
        close_chain(conns)
    assert (tmp_path / "f").read_bytes() == b"new\n"
    assert not stale.exists(), "a stale temporary of ours is removed"
    assert fresh.exists(), "one that may belong to a write under way is kept"
    assert others.exists(), "another user's is not ours to remove"
