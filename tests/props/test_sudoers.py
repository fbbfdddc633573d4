"""sudoers drop-ins, in the Debian chroot with sudo installed: checked by
the chroot's own visudo, and read by its sudo."""

import pytest

import hy  # noqa: F401
from consfig.errors import PropspecError
from consfig.props import apt, sudoers, user

from proptest import apply_twice, deploy_propspec, diffs, failure_text, in_chroot, this_os, unapply

pytestmark = pytest.mark.chroot

RULE = "alice ALL=(root) NOPASSWD: /usr/bin/id\n"


@pytest.fixture(scope="module")
def root(debian_chroot, chroot_chain):
    deploy_propspec(chroot_chain, [this_os(), apt.installed_minimally("sudo"),
                                   user.has_account("alice")])
    return debian_chroot


@pytest.fixture
def chroot(root):
    yield root
    in_chroot(root, "find /etc/sudoers.d -mindepth 1 ! -name README -delete")


def listing(root):
    return sorted(p.name for p in (root / "etc/sudoers.d").iterdir())


def test_a_drop_in_is_written_read_only_and_sudo_reads_it(chroot, chroot_chain):
    apply_twice(chroot_chain, sudoers.drop_in("alice", RULE))
    f = chroot / "etc/sudoers.d/alice"
    assert f.read_text() == RULE
    assert oct(f.stat().st_mode & 0o777) == "0o440"
    assert (f.stat().st_uid, f.stat().st_gid) == (0, 0)
    assert "(root) NOPASSWD: /usr/bin/id" in in_chroot(chroot, "sudo -l -U alice").stdout


def test_a_final_newline_is_added(chroot, chroot_chain):
    apply_twice(chroot_chain, sudoers.drop_in("alice", RULE.rstrip("\n")))
    assert (chroot / "etc/sudoers.d/alice").read_text() == RULE


def test_an_invalid_drop_in_fails_and_leaves_the_old_file(chroot, chroot_chain):
    deploy_propspec(chroot_chain, sudoers.drop_in("alice", RULE))
    outcome, events = deploy_propspec(chroot_chain,
                                      sudoers.drop_in("alice", "alice ALL=(root) NOPASSWD /usr/bin/id\n"),
                                      check=False)
    assert outcome.status == "failed"
    assert "syntax error" in failure_text(events), failure_text(events)
    assert (chroot / "etc/sudoers.d/alice").read_text() == RULE
    assert listing(chroot) == ["README", "alice"], "no temporary left behind"
    assert in_chroot(chroot, "visudo -c -q").returncode == 0


def test_a_drop_in_that_clashes_with_the_rest_is_taken_back(chroot, chroot_chain):
    deploy_propspec(chroot_chain, sudoers.drop_in("admins", "User_Alias ADMINS = alice\n"))
    outcome, events = deploy_propspec(chroot_chain,
                                      sudoers.drop_in("more", "User_Alias ADMINS = root\n"),
                                      check=False)
    assert outcome.status == "failed"
    assert "would be invalid" in failure_text(events), failure_text(events)
    assert listing(chroot) == ["README", "admins"]
    assert in_chroot(chroot, "visudo -c -q").returncode == 0, "sudo still works"


def test_check_mode_shows_the_drop_in_and_writes_nothing(chroot, chroot_chain):
    outcome, events = deploy_propspec(chroot_chain, sudoers.drop_in("alice", RULE), check_mode=True)
    assert outcome.exit_code(True) == 2
    assert "+" + RULE in "".join(d["text"] for d in diffs(events))
    assert listing(chroot) == ["README"]


def test_unapplied_drop_in_is_removed(chroot, chroot_chain):
    deploy_propspec(chroot_chain, sudoers.drop_in("alice", RULE))
    unapply(chroot_chain, sudoers.drop_in("alice", RULE))
    assert listing(chroot) == ["README"]


def test_hostile_values_are_refused_where_they_are_written():
    for name in ["with.dot", "backup~", "-x", "../sudoers", "a b", "a\nb", ""]:
        with pytest.raises(PropspecError):
            sudoers.drop_in(name, RULE)
    with pytest.raises(PropspecError):
        sudoers.drop_in("alice", "alice ALL=(ALL) ALL\x00")


def test_shell_syntax_in_the_text_is_only_text(chroot, chroot_chain):
    outcome, events = deploy_propspec(chroot_chain,
                                      sudoers.drop_in("odd", "$(touch /tmp/pwned) ALL=ALL\n"),
                                      check=False)
    assert outcome.status == "failed", "visudo refuses it"
    assert not (chroot / "tmp/pwned").exists()
    assert listing(chroot) == ["README"]


def test_user_can_sudo_writes_a_rule_sudo_reads(chroot, chroot_chain):
    p = sudoers.user_can_sudo("alice", "/usr/bin/id", "/usr/bin/true", nopasswd=True)
    apply_twice(chroot_chain, p)
    assert (chroot / "etc/sudoers.d/user-alice").read_text() == \
        "alice ALL=(ALL:ALL) NOPASSWD: /usr/bin/id, /usr/bin/true\n"
    assert "NOPASSWD: /usr/bin/id, /usr/bin/true" in in_chroot(chroot, "sudo -l -U alice").stdout
    unapply(chroot_chain, p)
    assert listing(chroot) == ["README"]


def test_user_can_sudo_anything_by_default(chroot, chroot_chain):
    apply_twice(chroot_chain, sudoers.user_can_sudo("alice"))
    assert (chroot / "etc/sudoers.d/user-alice").read_text() == "alice ALL=(ALL:ALL) ALL\n"


def test_user_can_sudo_refuses_hostile_commands():
    for args in [("alice", "/bin/sh, ALL"), ("alice", "/usr/bin/id\nbob ALL=(ALL) ALL"),
                 ("alice", "id"), ("-alice",), ("alice", "/usr/bin/id:x")]:
        with pytest.raises(PropspecError):
            sudoers.user_can_sudo(*args)
