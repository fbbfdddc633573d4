"""sshd_config's validation (`sshd.validate`) in a chroot whose `sshd -t`
hangs: the timeout ends it and leaves nothing behind in /etc/ssh, and the
configuration as it was."""

import os
import subprocess

import pytest

import hy  # noqa: F401
from hy.models import Keyword as K

from consfig.props import sshd
from harness import wait_until
from proptest import deploy_propspec, failure_text, statuses, this_os

pytestmark = pytest.mark.chroot


def test_a_validation_that_times_out_leaves_no_temporary_and_the_file_as_it_was(
        fresh_chroot, monkeypatch):
    (fresh_chroot / "etc/ssh").mkdir(parents=True, exist_ok=True)
    config = fresh_chroot / "etc/ssh/sshd_config"
    config.write_text("PasswordAuthentication yes\n")
    fake = fresh_chroot / "usr/sbin/sshd"
    # A sleep of this test's own, told from any other on the machine.
    hang = f"sleep 300.{os.getpid()}"
    fake.write_text(f"#!/bin/sh\nexec {hang}\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sshd, "VALIDATE_TIMEOUT", 2)
    chain = [[K("chroot"), K("into"), str(fresh_chroot)]]
    outcome, events = deploy_propspec(
        chain, [this_os(), sshd.configured("PasswordAuthentication", "no")], check=False)
    assert outcome.status == "failed", statuses(events)
    assert "timed out" in failure_text(events) or "timeout" in failure_text(events).lower(), \
        failure_text(events)
    left = [f for f in os.listdir(fresh_chroot / "etc/ssh") if f.startswith(".sshd_config.consfig-")]
    assert not left, f"the temporary is left in /etc/ssh: {left}"
    assert config.read_text() == "PasswordAuthentication yes\n", "the configuration was changed"
    # Killed by then, but a process killed under load may not have ended yet.
    wait_until(lambda: not subprocess.run(["pgrep", "-f", f"^{hang}$"], capture_output=True).stdout,
               10, "the hung sshd -t to end")
