"""However a deployment over a :python hop ends — a command timing out, the
controller interrupted or killed — no process it started on the target
survives it.  Over [:local :python], where the target is this machine and
`pgrep` sees its processes."""

import os
import signal
import sys
import time

import pytest
from hy.models import Keyword

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import running, signal_once_running, wait_until  # noqa: E402
from remote_helpers import HERE, deploy, rp, seqprops  # noqa: E402

from consfig.model.host import Host  # noqa: E402

LOCAL_PYTHON = [Keyword("local"), Keyword("python")]


def test_a_command_timeout_stops_the_command_on_the_target(tmp_path, events):
    marker = f"sleep 5{os.getpid()}"
    host = Host("target.example", seqprops(rp.ran_for_at_most(f"{marker}; echo late", 1)))
    started = time.monotonic()
    outcome = deploy(LOCAL_PYTHON, host, sink=events)
    assert time.monotonic() - started < 20, "the timeout did not end the command"
    assert outcome.status == "failed", events.ends()
    [failed] = [e for e in events.events if e["event"] == "end" and e["status"] == "failed"]
    assert "timed out after 1 s" in failed["message"], failed
    wait_until(lambda: not running(marker), 10, "the command on the target to end")


CONTROLLER = """
import sys
sys.path.insert(0, {here!r})
from hy.models import Keyword
from remote_helpers import deploy, rp, seqprops, single
from consfig.model.host import Host
# The command is put together here, so that this command line does not match it.
deploy([Keyword("local"), Keyword("python")],
       Host("target.example", seqprops(rp.pid_recorded(sys.argv[1]), single("sleep", sys.argv[2]))),
       sink=lambda e: None)
"""


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_a_controller_ended_by_a_signal_leaves_nothing_on_the_target(how, tmp_path):
    number = f"4{os.getpid()}{int(how)}"
    marker = f"sleep {number}"
    pid_file = tmp_path / "pid"
    signal_once_running([sys.executable, "-c", CONTROLLER.format(here=HERE), str(pid_file), number],
                        marker, how)
    wait_until(lambda: not running(marker), 10,
               f"the command on the target to end after the controller's {how.name}")
    target = int(pid_file.read_text().split()[0])
    wait_until(lambda: not os.path.exists(f"/proc/{target}"), 10, "the target's Python to end")
