"""More of the user module in the Debian chroot: system accounts, full
names, primary groups and home directories."""

import pytest

import hy  # noqa: F401
from consfig.errors import PropspecError
from consfig.props import user

from proptest import apply_twice, deploy_propspec, failure_text, in_chroot, unapply

pytestmark = pytest.mark.chroot


def passwd(root, name):
    return in_chroot(root, f"getent passwd {name}").stdout.strip().split(":")


def test_has_system_account_makes_a_daemon_account(chroot_chain, debian_chroot):
    apply_twice(chroot_chain, user.has_system_account("svc"))
    name, _, uid, gid, _, home, shell = passwd(debian_chroot, "svc")
    assert int(uid) < 1000 and home == "/nonexistent" and shell == "/usr/sbin/nologin", (uid, home, shell)
    assert in_chroot(debian_chroot, "getent group svc").stdout.split(":")[2] == gid
    unapply(chroot_chain, user.has_system_account("svc"))
    assert in_chroot(debian_chroot, "getent passwd svc", check=False).returncode == 2


def test_has_full_name_keeps_the_other_gecos_fields(chroot_chain, debian_chroot):
    deploy_propspec(chroot_chain, user.has_account("dora"))
    in_chroot(debian_chroot, "usermod -c 'Old Name,Room 1,555' dora")
    apply_twice(chroot_chain, user.has_full_name("dora", "Dora Q. Explorer"))
    assert passwd(debian_chroot, "dora")[4].split(",")[:3] == ["Dora Q. Explorer", "Room 1", "555"]


def test_has_primary_group_changes_it(chroot_chain, debian_chroot):
    deploy_propspec(chroot_chain, [user.has_account("erin"), user.group_exists("staffers")])
    apply_twice(chroot_chain, user.has_primary_group("erin", "staffers"))
    assert in_chroot(debian_chroot, "id -gn erin").stdout.strip() == "staffers"


def test_has_primary_group_of_no_group_fails(chroot_chain):
    deploy_propspec(chroot_chain, user.has_account("erin"))
    outcome, events = deploy_propspec(chroot_chain, user.has_primary_group("erin", "nosuchgroup"),
                                      check=False)
    assert outcome.status == "failed" and "there is no group nosuchgroup" in failure_text(events)


def test_has_home_directory_moves_the_files(chroot_chain, debian_chroot):
    deploy_propspec(chroot_chain, user.has_account("fred"))
    in_chroot(debian_chroot, "echo hi > /home/fred/note")
    apply_twice(chroot_chain, user.has_home_directory("fred", "/srv/fred home"))
    assert passwd(debian_chroot, "fred")[5] == "/srv/fred home"
    assert (debian_chroot / "srv/fred home/note").read_text() == "hi\n"


def test_hostile_values_are_refused():
    for bad in [lambda: user.has_full_name("dora", "x:0:0"), lambda: user.has_full_name("dora", "a\nb"),
                lambda: user.has_system_account("-o"), lambda: user.has_primary_group("erin", "-g"),
                lambda: user.has_home_directory("fred", "relative"),
                lambda: user.has_system_account("svc", shell="/bin/sh\nroot")]:
        with pytest.raises(PropspecError):
            bad()


def test_lacks_account_deletes_it_and_its_home_when_asked(chroot_chain, debian_chroot):
    deploy_propspec(chroot_chain, [user.has_account("gina"), user.has_account("hank")])
    apply_twice(chroot_chain, user.lacks_account("gina"))
    assert in_chroot(debian_chroot, "getent passwd gina", check=False).returncode == 2
    assert (debian_chroot / "home/gina").is_dir(), "the home stays by default"
    apply_twice(chroot_chain, user.lacks_account("hank", remove_home=True))
    assert not (debian_chroot / "home/hank").exists()


def test_lacks_account_refuses_a_name_starting_with_a_dash():
    with pytest.raises(PropspecError):
        user.lacks_account("-r")
