"""However a deployment over a POSIX chain ends — the controller interrupted
or killed — no command it started on the target survives it.  Over
[[:ssh] :sudo] to the loopback lab, where `pgrep` sees the target's processes."""

import os
import signal
import subprocess
import sys

import pytest

from harness import running, signal_once_running, wait_until

CONTROLLER = """
import sys
import hy
from hy.models import Keyword as K
import consfig.deployer.deployment
from consfig.apply.combinators import seqprops
from consfig.model.host import make_host
from consfig.props import cmd
deploy = getattr(consfig.deployer.deployment, hy.mangle("deploy*"))
chain = [[K("ssh"), K("host"), "lab", K("config"), sys.argv[1]], K("sudo")]
# The command is put together here, so that this command line does not match it.
outcome = deploy(chain, make_host("lab", None, None, seqprops(cmd.single("sleep", sys.argv[2]))),
                 sink=lambda e: None)
sys.exit(1 if outcome.status == "failed" else 0)
"""


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL])
def test_a_controller_ended_by_a_signal_leaves_no_command_on_the_target(sshlab, how):
    number = f"6{os.getpid()}{int(how)}"
    marker = f"^sleep {number}$"
    signal_once_running([sys.executable, "-c", CONTROLLER, sshlab.config, number], marker, how)
    wait_until(lambda: not running(marker), 15,
               f"the root sleep on the target to end after the controller's {how.name}")


def _ancestor_running(pid, name):
    """The nearest ancestor of PID whose command line mentions NAME."""
    while pid > 1:
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if name.encode() in f.read():
                return pid
    return None


def _python_controller(sleep):
    return CONTROLLER.replace('K("sudo")]', 'K("sudo"), K("python")]').replace(
        'cmd.single("sleep", sys.argv[2])',
        'cmd.single("sleep", sys.argv[2])' if sleep else 'cmd.single("true")')


def test_a_target_python_killed_leaves_no_command_and_the_lock_free(sshlab):
    number = f"7{os.getpid()}"
    marker = f"^sleep {number}$"
    controller = subprocess.Popen([sys.executable, "-c", _python_controller(True),
                                   sshlab.config, number],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: running(marker), 30, f"{marker} to run on the target")
        sleep = int(subprocess.run(["pgrep", "-f", marker], capture_output=True,
                                   text=True).stdout.split()[0])
        python = _ancestor_running(sleep, "python")
        assert python, "no Python above the command on the target"
        os.kill(python, signal.SIGKILL)
        wait_until(lambda: not running(marker), 15,
                   "the command to end with the target's Python, killed")
        assert controller.wait(60) == 1, "the controller did not report a failure"
    finally:
        controller.kill()
        controller.wait()
    again = subprocess.run([sys.executable, "-c", _python_controller(False), sshlab.config, "0"],
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, f"a redeploy after the kill failed: {again.stderr[-2000:]}"
