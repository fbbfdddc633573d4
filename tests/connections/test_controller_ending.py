"""However a deployment over a POSIX chain ends — the controller interrupted
or killed — no command it started on the target survives it.  Over
[[:ssh] :sudo] to the loopback lab, where `pgrep` sees the target's processes."""

import os
import signal
import sys

import pytest

from harness import running, signal_once_running, wait_until

CONTROLLER = """
import sys
import hy
from hy.models import Keyword as K
import consfig.deployment
from consfig.combinators import seqprops
from consfig.host import make_host
from consfig.props import cmd
deploy = getattr(consfig.deployment, hy.mangle("deploy*"))
chain = [[K("ssh"), K("host"), "lab", K("config"), sys.argv[1]], K("sudo")]
# The command is put together here, so that this command line does not match it.
deploy(chain, make_host("lab", None, None, seqprops(cmd.single("sleep", sys.argv[2]))),
       sink=lambda e: None)
"""


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL])
def test_a_controller_ended_by_a_signal_leaves_no_command_on_the_target(sshlab, how):
    number = f"6{os.getpid()}{int(how)}"
    marker = f"^sleep {number}$"
    signal_once_running([sys.executable, "-c", CONTROLLER, sshlab.config, number], marker, how)
    wait_until(lambda: not running(marker), 15,
               f"the root sleep on the target to end after the controller's {how.name}")
