"""systemd: unit files and drop-ins written and verified, and lingering,
inside a Debian chroot with the systemd package installed.

No systemd runs in the chroot, so the manager is never asked to reread
anything here: the properties say so.  What is tested is what lands on
disk, and that `systemd-analyze verify` (the chroot's own) keeps a bad
text out."""

import os

import pytest

import hy  # noqa: F401
from consfig.errors import PropspecError
from consfig.props import apt, service, systemd, user

from proptest import (apply_twice, deploy_propspec, diffs, failure_text, in_chroot, said,
                      this_os, unapply)

pytestmark = pytest.mark.chroot

UNIT = """[Unit]
Description=consfig test unit

[Service]
ExecStart=/bin/sleep 1000

[Install]
WantedBy=multi-user.target
"""


@pytest.fixture(scope="module")
def root(debian_chroot, chroot_chain):
    deploy_propspec(chroot_chain, [this_os(), service.without_starting_services(
        apt.installed_minimally("systemd"))])
    return debian_chroot


def leftovers(root):
    return [n for n in os.listdir(root / "tmp") if n.startswith("consfig-unit.")]


def test_unit_file_is_written_verified_and_left_alone_the_second_time(chroot_chain, root):
    events = apply_twice(chroot_chain, [this_os(), systemd.unit_file("cfg-demo.service", UNIT)])
    path = root / "etc/systemd/system/cfg-demo.service"
    assert path.read_text() == UNIT
    assert path.stat().st_mode & 0o7777 == 0o644
    assert "not reloading systemd: services are not started in a chroot" in said(events)
    assert [d["path"] for d in diffs(events)] == ["/etc/systemd/system/cfg-demo.service"]
    assert leftovers(root) == [], "the staged copy is gone"


def test_check_mode_shows_the_diff_and_writes_nothing(chroot_chain, root):
    new = UNIT.replace("consfig test unit", "changed")
    outcome, events = deploy_propspec(chroot_chain, [this_os(),
                                                     systemd.unit_file("cfg-check.service", new)],
                                      check_mode=True)
    assert outcome.exit_code(True) == 2
    assert any("+Description=changed" in d["text"] for d in diffs(events)), diffs(events)
    assert not (root / "etc/systemd/system/cfg-check.service").exists()


@pytest.mark.parametrize("bad, complaint", [
    ("[Service\nExecStart=/bin/true\n", "Invalid section header"),
    ("[Service]\nExecStart=/usr/bin/no-such-program\n", "is not executable"),
    ("[Service]\nExecStart=/bin/true\nExecStrat=/bin/false\n", "Unknown key"),
])
def test_an_invalid_unit_fails_and_leaves_the_old_file(chroot_chain, root, bad, complaint):
    path = root / "etc/systemd/system/cfg-keep.service"
    deploy_propspec(chroot_chain, [this_os(), systemd.unit_file("cfg-keep.service", UNIT)])
    outcome, events = deploy_propspec(chroot_chain, [this_os(),
                                                     systemd.unit_file("cfg-keep.service", bad)],
                                      check=False)
    assert outcome.status == "failed"
    text = failure_text(events)
    assert "/etc/systemd/system/cfg-keep.service would be invalid; left unchanged" in text, text
    assert complaint in text, text
    assert "consfig-unit." not in text, "the message names the real file, not the staged one"
    assert path.read_text() == UNIT
    assert leftovers(root) == []


def test_unapplying_a_unit_file_disables_and_removes_it(chroot_chain, root):
    deploy_propspec(chroot_chain, [this_os(), systemd.unit_file("cfg-gone.service", UNIT),
                                   systemd.enabled("cfg-gone.service")])
    wants = root / "etc/systemd/system/multi-user.target.wants/cfg-gone.service"
    assert os.path.lexists(wants)
    unapply(chroot_chain, systemd.unit_file("cfg-gone.service", UNIT))
    assert not (root / "etc/systemd/system/cfg-gone.service").exists()
    assert not os.path.lexists(wants), "no link left to a unit that is gone"


def test_a_template_unit_is_verified_and_written(chroot_chain, root):
    text = "[Service]\nExecStart=/bin/echo %i\n"
    apply_twice(chroot_chain, [this_os(), systemd.unit_file("cfg-tpl@.service", text)])
    assert (root / "etc/systemd/system/cfg-tpl@.service").read_text() == text


DROP_IN = "[Service]\nNice=5\n"


def test_drop_in_is_written_for_an_existing_unit(chroot_chain, root):
    deploy_propspec(chroot_chain, [this_os(), systemd.unit_file("cfg-drop.service", UNIT)])
    events = apply_twice(chroot_chain, [this_os(),
                                        systemd.drop_in("cfg-drop.service", "nice", DROP_IN)])
    path = root / "etc/systemd/system/cfg-drop.service.d/nice.conf"
    assert path.read_text() == DROP_IN
    assert path.stat().st_mode & 0o7777 == 0o644
    assert "not reloading systemd" in said(events)
    shown = in_chroot(root, "systemd-analyze cat-config systemd/system/cfg-drop.service").stdout
    assert "Nice=5" in shown, shown
    unapply(chroot_chain, systemd.drop_in("cfg-drop.service", "nice", DROP_IN))
    assert not (root / "etc/systemd/system/cfg-drop.service.d").exists(), \
        "the empty directory goes with it"


def test_an_invalid_drop_in_fails_and_leaves_the_old_one(chroot_chain, root):
    deploy_propspec(chroot_chain, [this_os(), systemd.unit_file("cfg-drop2.service", UNIT),
                                   systemd.drop_in("cfg-drop2.service", "nice.conf", DROP_IN)])
    path = root / "etc/systemd/system/cfg-drop2.service.d/nice.conf"
    outcome, events = deploy_propspec(
        chroot_chain, [this_os(), systemd.drop_in("cfg-drop2.service", "nice.conf",
                                                  "[Service]\nNice=very\n")],
        check=False)
    assert outcome.status == "failed"
    text = failure_text(events)
    assert "/etc/systemd/system/cfg-drop2.service.d/nice.conf would be invalid" in text, text
    assert "Failed to parse nice priority" in text, text
    assert path.read_text() == DROP_IN
    assert leftovers(root) == []


def test_a_drop_in_for_a_unit_that_is_not_there_fails(chroot_chain, root):
    outcome, events = deploy_propspec(
        chroot_chain, [this_os(), systemd.drop_in("no-such.service", "x", DROP_IN)], check=False)
    assert outcome.status == "failed"
    assert "no-such.service not found" in failure_text(events), failure_text(events)
    assert not (root / "etc/systemd/system/no-such.service.d").exists()


def test_hostile_text_is_only_ever_file_content(chroot_chain, root):
    text = "[Unit]\nDescription=$(touch /tmp/pwned) `touch /tmp/pwned2` ' \" ;\n\n[Service]\nExecStart=/bin/true\n"
    apply_twice(chroot_chain, [this_os(), systemd.unit_file("cfg-hostile.service", text)])
    assert (root / "etc/systemd/system/cfg-hostile.service").read_text() == text
    assert not (root / "tmp/pwned").exists() and not (root / "tmp/pwned2").exists()


@pytest.mark.parametrize("call", [
    lambda: systemd.unit_file("../../bin/sh.service", UNIT),
    lambda: systemd.unit_file("-x.service", UNIT),
    lambda: systemd.unit_file("foo.service\nx", UNIT),
    lambda: systemd.unit_file("foo", UNIT),
    lambda: systemd.unit_file("foo.service", "a\x00b"),
    lambda: systemd.drop_in("foo.service", "../x", DROP_IN),
    lambda: systemd.drop_in("foo.service", ".hidden", DROP_IN),
    lambda: systemd.drop_in("foo.service/..", "x", DROP_IN),
    lambda: systemd.lingering_enabled("-rf"),
    lambda: systemd.lingering_enabled("a/b"),
])
def test_hostile_names_are_refused_when_written(call):
    with pytest.raises(PropspecError):
        call()


def test_systemd_analyze_missing_is_a_clear_failure(fresh_chroot):
    chain = [[hy.models.Keyword("chroot"), hy.models.Keyword("into"), str(fresh_chroot)]]
    outcome, events = deploy_propspec(chain, [this_os(), systemd.unit_file("x.service", UNIT)],
                                      check=False)
    assert outcome.status == "failed"
    assert "systemd-analyze is not installed here" in failure_text(events), failure_text(events)
    assert not (fresh_chroot / "etc/systemd/system/x.service").exists()


def test_lingering_is_recorded_for_logind_where_no_manager_runs(chroot_chain, root):
    linger = root / "var/lib/systemd/linger/lingerer"
    apply_twice(chroot_chain, [this_os(), user.has_account("lingerer"),
                               systemd.lingering_enabled("lingerer")])
    assert linger.exists()
    unapply(chroot_chain, systemd.lingering_enabled("lingerer"))
    assert not linger.exists()


def test_lingering_for_a_missing_user_fails(chroot_chain, root):
    outcome, events = deploy_propspec(chroot_chain, [this_os(),
                                                     systemd.lingering_enabled("nobody-here")],
                                      check=False)
    assert outcome.status == "failed"
    assert "there is no user nobody-here" in failure_text(events)
    assert not (root / "var/lib/systemd/linger/nobody-here").exists()
