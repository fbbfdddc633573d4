"""However a deployment over a :python hop ends — a command timing out, the
controller interrupted or killed — no process it started on the target
survives it.  Over [:local :python], where the target is this machine and
`pgrep` sees its processes."""

import os
import signal
import subprocess
import sys
import time

import pytest
from hy.models import Keyword

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from remote_helpers import HERE, deploy, no_leftover, rp, seqprops, single  # noqa: E402

from consfig.host import Host  # noqa: E402

LOCAL_PYTHON = [Keyword("local"), Keyword("python")]


def wait_for(predicate, within=30):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def running(marker):
    return subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0


def test_a_command_timeout_stops_the_command_on_the_target(tmp_path, events):
    marker = f"sleep 5{os.getpid()}"
    host = Host("target.example", seqprops(rp.ran_for_at_most(f"{marker}; echo late", 1)))
    started = time.monotonic()
    outcome = deploy(LOCAL_PYTHON, host, sink=events)
    assert time.monotonic() - started < 20, "the timeout did not end the command"
    assert outcome.status == "failed", events.ends()
    [failed] = [e for e in events.events if e["event"] == "end" and e["status"] == "failed"]
    assert "timed out after 1 s" in failed["message"], failed
    assert no_leftover(marker), "the command is still running on the target"


CONTROLLER = """
import sys
sys.path.insert(0, {here!r})
from hy.models import Keyword
from remote_helpers import deploy, rp, seqprops, single
from consfig.host import Host
# The command is put together here, so that this command line does not match it.
deploy([Keyword("local"), Keyword("python")],
       Host("target.example", seqprops(rp.pid_recorded(sys.argv[1]), single("sleep " + sys.argv[2]))),
       sink=lambda e: None)
"""


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_a_controller_ended_by_a_signal_leaves_nothing_on_the_target(how, tmp_path):
    number = f"4{os.getpid()}{int(how)}"
    marker = f"sleep {number}"
    pid_file = tmp_path / "pid"
    controller = subprocess.Popen([sys.executable, "-c", CONTROLLER.format(here=HERE),
                                   str(pid_file), number],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert wait_for(lambda: running(marker)), "the command never started"
        controller.send_signal(how)
        controller.wait(30)
    finally:
        controller.kill()
        controller.wait()
    assert no_leftover(marker), f"the command survived the controller's {how.name}"
    target = int(pid_file.read_text().split()[0])
    assert wait_for(lambda: not os.path.exists(f"/proc/{target}"), 10), \
        "the target's Python survived"
