"""reboot.at-end: the request, the flag and the order, against real
processes.  This machine is never rebooted: the command that would schedule
the reboot is a script that writes down how it was called (given as
:command, or found first on PATH for the default one).  Waiting for a host
to come back is tested over the SSH lab (tests/connections/test_reboot_lab.py)."""

import os
import pathlib
import shutil
import stat
import subprocess

import pytest

import hy  # noqa: F401

from consfig.apply.combinators import eseqprops, on_change, seqprops
from consfig.errors import PropspecError
from consfig.apply.handlers import handler, notifies
from consfig.props import cmd, file, reboot
from consfig.image.build import state_directory
from proptest import HOSTNAME, LOCAL, checks_clean, deploy_propspec, in_chroot, statuses

DESC = "Rebooted at the end of the deployment"


def fake_command(directory, log, name="fake-reboot"):
    """A program that appends `NAME ARGS…` to LOG, and returns."""
    path = directory / name
    path.write_text(f'#!/bin/sh\necho "{name}" "$@" >> "{log}"\n')
    path.chmod(0o755)
    return str(path)


@pytest.fixture(autouse=True)
def no_handler_left_owed():
    """What a test's failing handler leaves owed on this machine (the target
    of :local) goes with the test."""
    owed = pathlib.Path(state_directory(), "handlers", f"{HOSTNAME}.json")
    owed.unlink(missing_ok=True)
    yield
    owed.unlink(missing_ok=True)


@pytest.fixture
def log(tmp_path):
    return tmp_path / "log"


@pytest.fixture
def fake(tmp_path, log):
    return fake_command(tmp_path, log)


def lines(log):
    return log.read_text().splitlines() if log.exists() else []


def logged(log, word):
    return cmd.script('echo "$2" >> "$1"', str(log), word)


def test_a_reboot_asked_for_twice_is_scheduled_once_at_the_end_after_the_handlers(
        fake, log, tmp_path):
    conf = str(tmp_path / "conf")
    outcome, events = deploy_propspec(LOCAL, eseqprops(
        reboot.at_end(command=[fake, "-r", "+1"]),
        notifies("restart", file.has_content(conf, "x\n")),
        handler("restart", logged(log, "handler")),
        on_change(file.has_content(conf + ".2", "y\n"), reboot.at_end(command=[fake, "-r", "+1"])),
        logged(log, "last property")))
    assert lines(log) == ["last property", "handler", "fake-reboot -r +1"]
    assert statuses(events)[DESC] == "changed"
    assert outcome.status == "changed"
    # An action, so converged where it is applied on a change, which is
    # then not there: no reboot is asked for.
    checks_clean(LOCAL, on_change(file.has_content(conf + ".2", "y\n"),
                                  reboot.at_end(command=[fake, "-r", "+1"])))
    assert lines(log) == ["last property", "handler", "fake-reboot -r +1"], "the check rebooted nothing"


def test_the_note_says_so_and_carries_the_boot_id_for_whoever_waits(fake, log):
    _, events = deploy_propspec(LOCAL, reboot.at_end(command=[fake], wait=42))
    notes = [e for e in events if e.get("reboot")]
    assert len(notes) == 1, events
    assert notes[0]["reboot"] == {
        "boot-id": open("/proc/sys/kernel/random/boot_id").read().strip(), "wait": 42}
    assert "reboots (reboot.at-end)" in notes[0]["text"]


def test_a_deployment_that_failed_does_not_reboot(fake, log):
    outcome, events = deploy_propspec(LOCAL, seqprops(
        reboot.at_end(command=[fake]),
        cmd.single("false")), check=False)
    assert outcome.status == "failed"
    assert lines(log) == [], "nothing was scheduled"
    assert statuses(events)[DESC] == "skipped"
    assert any("not rebooting (reboot.at-end): this deployment failed" in e.get("text", "")
               for e in events), events


def test_a_failing_handler_keeps_the_host_from_rebooting(fake, log, tmp_path):
    outcome, events = deploy_propspec(LOCAL, eseqprops(
        notifies("h", file.has_content(str(tmp_path / "c"), "x\n")),
        handler("h", cmd.single("false")),
        reboot.at_end(command=[fake])), check=False)
    assert outcome.status == "failed"
    assert lines(log) == []
    assert statuses(events)[DESC] == "skipped"


def test_check_mode_shows_the_reboot_and_schedules_nothing(fake, log):
    outcome, events = deploy_propspec(LOCAL, reboot.at_end(command=[fake]), check_mode=True)
    assert lines(log) == []
    assert statuses(events)[DESC] == "would-change"
    assert any("would reboot (reboot.at-end)" in e.get("text", "") for e in events), events
    assert not any(e.get("reboot") for e in events), "no one is told to wait"


def test_a_failing_command_is_a_failure_that_says_what_ran(tmp_path):
    outcome, events = deploy_propspec(LOCAL, reboot.at_end(command=["false"]), check=False)
    assert outcome.status == "failed"
    failed = [e for e in events if e.get("status") == "failed" and e.get("message")]
    assert failed and failed[0]["desc"] == DESC, events
    assert not any(e.get("reboot") for e in events), "a reboot not scheduled is not waited for"


def test_the_default_is_shutdown_in_a_minute(tmp_path, log, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_command(bin_dir, log, "shutdown")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    # Never the machine's own: the test stops here if PATH did not take.
    assert shutil.which("shutdown") == str(bin_dir / "shutdown")
    deploy_propspec(LOCAL, reboot.at_end())
    assert lines(log) == ["shutdown -r +1"]


def test_a_property_can_ask_for_a_reboot_from_its_apply(fake, log):
    from consfig.model.property import define_property
    asks = define_property(
        "test_reboot.asks", "posix", lambda: None, desc=lambda: "kernel upgraded",
        apply=lambda: reboot.request_reboot("new kernel", command=[fake]))
    _, events = deploy_propspec(LOCAL, eseqprops(asks(), asks()))
    assert lines(log) == ["fake-reboot"]
    assert any("reboots (new kernel)" in e.get("text", "") for e in events), events


@pytest.mark.parametrize("bad", [
    dict(command="shutdown -r now"),          # a string: a program named that
    dict(command=[]),
    dict(command=["-r", "now"]),
    dict(command=["shutdown", "nul\x00"]),
    dict(wait=0),
    dict(wait=10**6),
    dict(wait="600"),
    dict(reason="two\nlines"),
])
def test_hostile_arguments_are_refused_where_written(bad):
    with pytest.raises(PropspecError):
        reboot.at_end(**bad)


@pytest.mark.chroot
def test_in_a_chroot_nothing_reboots(chroot_chain, debian_chroot):
    marker = debian_chroot / "tmp/rebooted"
    script = debian_chroot / "usr/local/sbin/fake-reboot"
    script.write_text("#!/bin/sh\ntouch /tmp/rebooted\n")
    script.chmod(stat.S_IRWXU)
    _, events = deploy_propspec(chroot_chain, reboot.at_end(command=["/usr/local/sbin/fake-reboot"]))
    assert not marker.exists(), "the command ran in the chroot"
    assert any("not rebooting (reboot.at-end): this runs in a chroot" in e.get("text", "")
               for e in events), events
    assert not any(e.get("reboot") for e in events)


@pytest.mark.chroot
def test_a_chroot_is_told_from_a_booted_system_without_the_chroot_hop(debian_chroot):
    # What a host's image run inside a chroot (no :chroot hop to say so) asks.
    assert in_chroot(debian_chroot, reboot.CHROOT_TEST, check=False).returncode == 0
    assert subprocess.run(["/bin/sh", "-c", reboot.CHROOT_TEST]).returncode != 0, \
        "this machine is not a chroot"
