"""Commands are bounded in time through one mechanism: a command's own
`:timeout`, the default `with-command-timeout` sets around properties, and a
hop's `:command-timeout`.  A command past its bound fails its property, the
deployment goes on as the combinators say, and no process of the command is
left on the target.  Over the sshd lab, whose target is this machine."""

import os
import subprocess
import sys
import time

import pytest
from hy.models import Keyword as K

import hy  # noqa: F401
import consfig.deployer.deployment
from consfig.apply.combinators import seqprops
from consfig.model.host import Host
from consfig.model.property import find_property
from harness import wait_until

sys.path.insert(0, os.path.dirname(__file__))
from labservers import ssh_hop  # noqa: E402

deploy = getattr(consfig.deployer.deployment, hy.mangle("deploy*"))
single = find_property("consfig.props.cmd.single")
script = find_property("consfig.props.cmd.script")
with_command_timeout = find_property("consfig.combinators.with-command-timeout")


def sleep_running(number):
    """Whether `sleep NUMBER` itself runs: anchored, since the command lines
    of sudo and of the shells around it name it too."""
    return subprocess.run(["pgrep", "-f", f"^sleep {number}$"],
                          capture_output=True).returncode == 0


def marker(n):
    return f"{n}{os.getpid()}{time.time_ns() % 10**5}"


def failed_messages(events):
    return [e["message"] for e in events.events
            if e["event"] == "end" and e["status"] == "failed" and "message" in e]


def deploy_bounded(chain, props, events, bound):
    started = time.monotonic()
    outcome = deploy(chain, Host("lab.example", seqprops(*props)), sink=events)
    elapsed = time.monotonic() - started
    assert elapsed < bound, f"the deployment took {elapsed:.0f} s, past {bound} s"
    return outcome


def ssh_sudo(lab, **kw):
    return [ssh_hop(lab.config, **kw), K("sudo")]


def ssh_sudo_python(lab, **kw):
    return [ssh_hop(lab.config, **kw), K("sudo"), K("python")]


CHAINS = {"ssh-sudo": ssh_sudo, "ssh-sudo-python": ssh_sudo_python}


@pytest.mark.parametrize("chain", CHAINS.values(), ids=CHAINS.keys())
def test_the_hops_command_timeout_leaves_no_process_on_the_target(sshlab, events, chain):
    number = marker(1)
    outcome = deploy_bounded(chain(sshlab, command_timeout=2),
                             [single("sleep", number)], events, 30)
    assert outcome.status == "failed", events.ends()
    assert any("timed out after 2 s" in m for m in failed_messages(events)), events.events
    wait_until(lambda: not sleep_running(number), 10, f"sleep {number} to be stopped")


@pytest.mark.parametrize("chain", CHAINS.values(), ids=CHAINS.keys())
def test_a_commands_own_timeout_fails_its_property_and_the_deployment_goes_on(
        sshlab, events, chain, tmp_path):
    number = marker(2)
    after = tmp_path / "after"
    outcome = deploy_bounded(chain(sshlab),
                             [single("sleep", number, timeout=2),
                              script('touch -- "$1"', str(after))], events, 30)
    assert outcome.status == "failed", events.ends()
    [message] = failed_messages(events)
    assert "command timed out after 2 s" in message and number in message, message
    assert after.exists(), "the property after the timed-out one did not run"
    wait_until(lambda: not sleep_running(number), 10, f"sleep {number} to be stopped")


@pytest.mark.parametrize("chain", CHAINS.values(), ids=CHAINS.keys())
def test_with_command_timeout_bounds_every_command_inside_it(sshlab, events, chain):
    first, second = marker(3), marker(4)
    outcome = deploy_bounded(chain(sshlab),
                             [with_command_timeout(2, single("sleep", first)),
                              with_command_timeout(2, script("exec sleep \"$1\"", second))],
                             events, 40)
    assert outcome.status == "failed", events.ends()
    messages = failed_messages(events)
    assert sum("command timed out after 2 s" in m for m in messages) == 2, messages
    for number in (first, second):
        wait_until(lambda: not sleep_running(number), 10, f"sleep {number} to be stopped")


def test_a_commands_own_timeout_wins_over_with_command_timeout(sshlab, events):
    number = marker(5)
    deploy_bounded(ssh_sudo(sshlab),
                   [with_command_timeout(600, single("sleep", number, timeout=1))], events, 20)
    assert any("timed out after 1 s" in m for m in failed_messages(events)), events.events
    wait_until(lambda: not sleep_running(number), 10, f"sleep {number} to be stopped")
