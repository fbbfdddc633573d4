"""Small properties a Debian administrator reaches for, in the Debian
chroot against the real programs: dpkg-statoverride, apt.conf.d options
read back by apt-config, groups deleted and left, password aging through
chage, and /etc/shells through add-shell."""

import pytest

import hy  # noqa: F401
from consfig.errors import PropspecError
from consfig.props import apt, dpkg, user

from proptest import apply_twice, deploy_propspec, diffs, in_chroot, statuses, this_os, unapply

pytestmark = pytest.mark.chroot


def test_stat_overridden_sets_the_file_and_dpkg_keeps_it(chroot_chain, debian_chroot):
    deploy_propspec(chroot_chain, user.group_exists("netadmin"))
    p = dpkg.stat_overridden("/usr/bin/ls", "root", "netadmin", 0o750)
    apply_twice(chroot_chain, [this_os(), p])
    assert in_chroot(debian_chroot, "dpkg-statoverride --list /usr/bin/ls").stdout.split() == \
        ["root", "netadmin", "750", "/usr/bin/ls"], "dpkg has not the override"
    assert in_chroot(debian_chroot, "stat -c '%U %G %a' /usr/bin/ls").stdout.split() == \
        ["root", "netadmin", "750"], "the file was not changed"


def test_stat_overridden_replaces_another_override_and_unapplying_removes_it(chroot_chain, debian_chroot):
    apply_twice(chroot_chain, [this_os(), dpkg.stat_overridden("/usr/bin/ls", "root", "root", 0o755)])
    assert in_chroot(debian_chroot, "dpkg-statoverride --list /usr/bin/ls").stdout.split()[:3] == \
        ["root", "root", "755"], "the override was not replaced"
    unapply(chroot_chain, [this_os(), dpkg.stat_overridden("/usr/bin/ls", "root", "root", 0o755)])
    assert in_chroot(debian_chroot, "dpkg-statoverride --list /usr/bin/ls",
                     check=False).stdout == "", "the override is left"


def test_stat_overridden_refuses_a_relative_path_and_a_dashed_user():
    for args in [("usr/bin/ls", "root", "root", 0o755), ("/usr/bin/ls", "-r", "root", 0o755),
                 ("/usr/bin/ls", "root", "root", 0o17777)]:
        with pytest.raises(PropspecError):
            dpkg.stat_overridden(*args)


def test_apt_configured_is_what_apt_config_reads(chroot_chain, debian_chroot):
    p = apt.configured("80consfig-retries", "Acquire::Retries", 3, "Acquire::http::User-Agent", "walk $(x) 1%")
    apply_twice(chroot_chain, [this_os(), p])
    dump = in_chroot(debian_chroot, "apt-config dump").stdout
    assert 'Acquire::Retries "3";' in dump, dump
    assert 'Acquire::http::User-Agent "walk $(x) 1%";' in dump, "the value did not reach apt as given"
    unapply(chroot_chain, [this_os(), p])
    assert not (debian_chroot / "etc/apt/apt.conf.d/80consfig-retries").exists(), "the file is left"


def test_apt_configured_check_mode_shows_the_diff_and_writes_nothing(chroot_chain, debian_chroot):
    outcome, events = deploy_propspec(chroot_chain, [this_os(), apt.configured("81x", "APT::Color", 0)],
                                      check_mode=True)
    assert outcome.exit_code(True) == 2, statuses(events)
    assert any("APT::Color" in str(d) for d in diffs(events)), diffs(events)
    assert not (debian_chroot / "etc/apt/apt.conf.d/81x").exists(), "check mode wrote the file"


def test_apt_configured_refuses_a_quote_a_newline_and_a_bad_name():
    for args in [("x", "A::B", 'a"; APT::X "1'), ("x", "A::B", "a\nb"), ("../x", "A::B", "1"),
                 ("x", "A B", "1"), ("x", "A::B")]:
        with pytest.raises(PropspecError):
            apt.configured(*args)


def test_lacks_group_deletes_it(chroot_chain, debian_chroot):
    deploy_propspec(chroot_chain, user.group_exists("gone"))
    apply_twice(chroot_chain, user.lacks_group("gone"))
    assert in_chroot(debian_chroot, "getent group gone", check=False).returncode == 2, "the group is left"


def test_not_in_groups_takes_the_user_out_and_unapplying_puts_back(chroot_chain, debian_chroot):
    deploy_propspec(chroot_chain, [user.has_account("fay"), user.group_exists("wheelers"),
                                   user.has_groups("fay", "wheelers")])
    p = user.not_in_groups("fay", "wheelers", "no-such-group")
    apply_twice(chroot_chain, p)
    assert "wheelers" not in in_chroot(debian_chroot, "id -nG fay").stdout.split(), "still a member"
    unapply(chroot_chain, p)
    assert "wheelers" in in_chroot(debian_chroot, "id -nG fay").stdout.split(), "not put back"


def test_has_password_aging_sets_only_what_is_given(chroot_chain, debian_chroot):
    deploy_propspec(chroot_chain, user.has_account("gil"))
    in_chroot(debian_chroot, "chage -m 2 gil")
    apply_twice(chroot_chain, user.has_password_aging("gil", max_days=90, warn_days=14))
    fields = in_chroot(debian_chroot, "getent shadow gil").stdout.strip().split(":")
    assert fields[3:6] == ["2", "90", "14"], f"min/max/warn: {fields[3:6]}"


def test_has_password_aging_needs_a_setting():
    with pytest.raises(PropspecError):
        user.has_password_aging("gil")


def test_account_expires_on_the_date_and_never_clears_it(chroot_chain, debian_chroot):
    deploy_propspec(chroot_chain, user.has_account("hal"))
    apply_twice(chroot_chain, user.account_expires("hal", "2027-03-31"))
    assert in_chroot(debian_chroot, "getent shadow hal").stdout.split(":")[7] == "20908", \
        "the expiry is not 2027-03-31 (day 20908)"
    apply_twice(chroot_chain, user.account_expires("hal", "never"))
    assert in_chroot(debian_chroot, "getent shadow hal").stdout.split(":")[7] == "", "still expires"


def test_account_expires_refuses_what_is_not_a_date():
    for bad in ["2027-02-30", "31/03/2027", "-1", "2027-03-31\n", "1970-01-01"]:
        with pytest.raises(PropspecError):
            user.account_expires("hal", bad)


def test_login_shell_listed_adds_and_unapplying_removes(chroot_chain, debian_chroot):
    p = user.login_shell_listed("/usr/local/bin/walksh")
    apply_twice(chroot_chain, p)
    assert "/usr/local/bin/walksh" in (debian_chroot / "etc/shells").read_text().splitlines()
    unapply(chroot_chain, p)
    assert "/usr/local/bin/walksh" not in (debian_chroot / "etc/shells").read_text().splitlines()
