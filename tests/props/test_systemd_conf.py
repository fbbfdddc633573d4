"""systemd's own configuration in a Debian chroot with systemd installed:
the default target, user units enabled for everyone, component drop-ins
(logind, journald, timesyncd) and tmpfiles.d.  No systemd runs here, so
what is tested is what lands on disk, read back by systemd's own tools."""

import pytest

import hy  # noqa: F401
from consfig.errors import PropspecError
from consfig.props import apt, journald, service, systemd, timesyncd, tmpfiles, user

from proptest import apply_twice, checks_clean, deploy_propspec, diffs, failure_text, in_chroot, said, this_os, unapply

pytestmark = pytest.mark.chroot


@pytest.fixture(scope="module")
def root(debian_chroot, chroot_chain):
    deploy_propspec(chroot_chain, [this_os(), service.without_starting_services(
        apt.installed_minimally("systemd"))])
    return debian_chroot


def test_default_target_is_set_offline(root, chroot_chain):
    apply_twice(chroot_chain, systemd.default_target("multi-user.target"))
    assert in_chroot(root, "systemctl get-default").stdout.strip() == "multi-user.target"


def test_default_target_must_be_a_target():
    for bad in ["multi-user.service", "-multi-user.target"]:
        with pytest.raises(PropspecError):
            systemd.default_target(bad)


def test_enabled_for_all_users_links_a_user_unit(root, chroot_chain):
    (root / "etc/systemd/user").mkdir(parents=True, exist_ok=True)
    (root / "etc/systemd/user/demo.service").write_text(
        "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=default.target\n")
    apply_twice(chroot_chain, systemd.enabled_for_all_users("demo.service"))
    assert (root / "etc/systemd/user/default.target.wants/demo.service").is_symlink()
    unapply(chroot_chain, systemd.enabled_for_all_users("demo.service"))
    assert not (root / "etc/systemd/user/default.target.wants/demo.service").exists()


def test_configured_writes_a_component_drop_in_systemd_reads(root, chroot_chain):
    p = systemd.configured("logind", "Login", {"HandleLidSwitch": "ignore", "KillUserProcesses": "yes"})
    apply_twice(chroot_chain, p)
    f = root / "etc/systemd/logind.conf.d/consfig.conf"
    assert f.read_text() == "# Written by consfig.\n[Login]\nHandleLidSwitch=ignore\nKillUserProcesses=yes\n"
    got = in_chroot(root, "systemd-analyze cat-config systemd/logind.conf").stdout
    assert "HandleLidSwitch=ignore" in got, got
    unapply(chroot_chain, p)
    assert not f.exists()


def test_configured_refuses_hostile_settings():
    for args in [("logind", "Login", "A", "b\nRemoveIPC=yes"), ("../x", "Login", "A", "b"),
                 ("logind", "Login]\n[X", "A", "b"), ("logind", "Login", "A=B", "c"),
                 ("logind", "Login", "A")]:
        with pytest.raises(PropspecError):
            systemd.configured(*args)


def test_journald_persistent_keeps_the_journal_on_disk(root, chroot_chain):
    events = apply_twice(chroot_chain, journald.persistent())
    assert (root / "var/log/journal").is_dir()
    assert "Storage=persistent" in (root / "etc/systemd/journald.conf.d/consfig-storage.conf").read_text()
    assert "not restarting systemd-journald" in said(events), said(events)


def test_journald_configured_in_check_mode_shows_a_diff(root, chroot_chain):
    outcome, events = deploy_propspec(chroot_chain, journald.configured("SystemMaxUse", "200M"),
                                      check_mode=True)
    assert "+SystemMaxUse=200M" in "".join(e["text"] for e in diffs(events)), diffs(events)
    assert not (root / "etc/systemd/journald.conf.d/consfig.conf").exists()
    apply_twice(chroot_chain, journald.configured("SystemMaxUse", "200M"))


def test_timesyncd_uses_servers(root, chroot_chain):
    spec = [this_os(), service.without_starting_services(
        timesyncd.uses_servers("ntp1.example.com", "192.0.2.123", fallback=["ntp.example.org"]))]
    apply_twice(chroot_chain, spec)
    checks_clean(chroot_chain, spec)
    assert (root / "etc/systemd/timesyncd.conf.d/consfig.conf").read_text() == (
        "# Written by consfig.\n[Time]\nNTP=ntp1.example.com 192.0.2.123\nFallbackNTP=ntp.example.org\n")


def test_timesyncd_refuses_a_hostile_server():
    for bad in ["ntp.example.com\nFallbackNTP=evil", "-x", "a b"]:
        with pytest.raises(PropspecError):
            timesyncd.uses_servers(bad)


def test_tmpfiles_configured_creates_what_it_describes(root, chroot_chain):
    p = tmpfiles.configured("demo", "d /srv/demo-tmp 0750 root root -", "f /srv/demo-tmp/flag 0640 root root - hi")
    apply_twice(chroot_chain, p)
    assert (root / "srv/demo-tmp").stat().st_mode & 0o777 == 0o750
    assert (root / "srv/demo-tmp/flag").read_text() == "hi"
    unapply(chroot_chain, p)
    assert not (root / "etc/tmpfiles.d/demo.conf").exists()


def test_tmpfiles_a_line_it_rejects_fails(root, chroot_chain):
    outcome, events = deploy_propspec(chroot_chain, tmpfiles.configured("bad", "d /srv/x 99999 root root -"),
                                      check=False)
    assert outcome.status == "failed" and "systemd-tmpfiles" in failure_text(events), failure_text(events)
    deploy_propspec(chroot_chain, tmpfiles.configured("bad", "d /srv/x 0755 root root -"), unapply=True)


def test_tmpfiles_refuses_hostile_lines():
    for args in [("demo", "d relative"), ("demo", "d /x\nd /y"), ("-demo", "d /x"), ("demo",)]:
        with pytest.raises(PropspecError):
            tmpfiles.configured(*args)


def test_runs_on_calendar_writes_verified_units_and_enables_the_timer(root, chroot_chain):
    deploy_propspec(chroot_chain, user.has_system_account("nightly"))
    p = systemd.runs_on_calendar("nightly", "*-*-* 03:00", "/bin/echo", "100% $HOME", user="nightly")
    apply_twice(chroot_chain, p)
    service_text = (root / "etc/systemd/system/nightly.service").read_text()
    assert 'ExecStart="/bin/echo" "100%% $$HOME"\n' in service_text and "User=nightly\n" in service_text
    assert "OnCalendar=*-*-* 03:00\n" in (root / "etc/systemd/system/nightly.timer").read_text()
    assert (root / "etc/systemd/system/timers.target.wants/nightly.timer").is_symlink()
    unapply(chroot_chain, p)
    assert not (root / "etc/systemd/system/nightly.timer").exists()
    assert not (root / "etc/systemd/system/nightly.service").exists()
    assert not (root / "etc/systemd/system/timers.target.wants/nightly.timer").exists()


def test_runs_on_calendar_refuses_a_calendar_systemd_cannot_read(root, chroot_chain):
    outcome, events = deploy_propspec(chroot_chain, systemd.runs_on_calendar("bad", "someday", "/bin/true"),
                                      check=False)
    assert outcome.status == "failed"
    assert not (root / "etc/systemd/system/bad.timer").exists()
    deploy_propspec(chroot_chain, systemd.runs_on_calendar("bad", "someday", "/bin/true"), unapply=True)


def test_runs_on_calendar_refuses_hostile_values():
    for args in [("x", "daily\nExecStartPre=/bin/sh", "/bin/true"), ("x", "daily", "/bin/true", "a\nb"),
                 ("-x", "daily", "/bin/true"), ("x", "daily", "true")]:
        with pytest.raises(PropspecError):
            systemd.runs_on_calendar(*args)
