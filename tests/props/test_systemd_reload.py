"""systemd unit files where no systemd runs (this machine, over :local, in
mount namespaces of the test's own: livens.py, with an empty /run, so that
no manager is seen), and where one does (the shared booted container): a
reload that did not happen is done by the next run."""

import subprocess

import pytest

import hy  # noqa: F401
from consfig.connections.nspawn import enter_argv
from consfig.props import systemd

from livens import in_namespaces
from proptest import deploy_propspec, statuses, this_os
from consfig.apply.combinators import eseqprops

UNIT = "[Unit]\nDescription=consfig reload test\n\n[Service]\nExecStart=/bin/sleep 1000\n"
SYSTEM = "/etc/systemd/system"


def test_a_unit_file_where_no_systemd_runs_is_written_and_said_not_failed():
    p = systemd.unit_file("cfg-nosd.service", UNIT)
    first, second, there, unapplied, gone = in_namespaces(
        [["apply", p], ["apply", p], ["sh", f"cat {SYSTEM}/cfg-nosd.service"],
         ["unapply", p], ["sh", f"test -e {SYSTEM}/cfg-nosd.service; echo $?"]],
        tmpfs=["/run"], overlay=["/etc"])
    assert first["status"] == "changed", first
    assert any("not reloading systemd: no systemd service manager runs here" in n
               for n in first["notes"]), first["notes"]
    assert not any(":via :cron" in n for n in first["notes"] + [first["failures"]]), \
        "no hint that does not apply"
    assert second["status"] == "no-change", second
    assert there["stdout"] == UNIT
    assert unapplied["status"] == "changed", unapplied
    assert gone["stdout"] == "1\n", "the file is removed"


def _need_reload(name, unit):
    return subprocess.run(enter_argv(name, ["systemctl", "show", "--property=NeedDaemonReload",
                                            "--value", "--", unit]),
                          capture_output=True, text=True, timeout=60).stdout.strip()


@pytest.mark.chroot
@pytest.mark.slow
def test_a_reload_that_did_not_happen_is_done_by_the_next_run(booted_container):
    unit = "cfg-reload.service"
    first = systemd.unit_file(unit, UNIT)
    outcome, events = deploy_propspec(booted_container.chain, eseqprops(this_os(), first))
    assert outcome.status == "changed", statuses(events)
    # Loaded (a unit nothing holds is forgotten, and read afresh when asked).
    subprocess.run(enter_argv(booted_container.name, ["systemctl", "start", unit]), check=True,
                   capture_output=True, timeout=60)
    assert _need_reload(booted_container.name, unit) == "no"
    # The new text is on disk, the manager has not reread it: as after a
    # run whose reload failed.
    new = UNIT.replace("reload test", "reload test, changed")
    (booted_container.root / "etc/systemd/system" / unit).write_text(new)
    assert _need_reload(booted_container.name, unit) == "yes"
    second = systemd.unit_file(unit, new)
    outcome, events = deploy_propspec(booted_container.chain, eseqprops(this_os(), second),
                                      check_mode=True)
    assert outcome.exit_code(True) == 2, "check mode sees the reload that is owed"
    outcome, events = deploy_propspec(booted_container.chain, eseqprops(this_os(), second))
    assert outcome.status == "changed", statuses(events)
    assert _need_reload(booted_container.name, unit) == "no"
    outcome, events = deploy_propspec(booted_container.chain, eseqprops(this_os(), second))
    assert outcome.status == "no-change", statuses(events)
    subprocess.run(enter_argv(booted_container.name, ["systemctl", "stop", unit]),
                   capture_output=True, timeout=60)
    deploy_propspec(booted_container.chain, eseqprops(this_os(), second), unapply=True)
