"""ufw: rules, default policies, on and off — for real, each deployment in a
network namespace of its own whose /etc/ufw and /etc/default are private
copies (`ip netns exec` mounts /etc/netns/NAME/* over /etc), so that this
machine's firewall and its ufw configuration are never touched.  A change
that would cut the deploying SSH connection (SSH_CONNECTION as a session
would give it) is refused unless forced."""

import shutil
import pathlib

import pytest

import hy  # noqa: F401

from consfig.errors import PropspecError
from consfig.props import ufw
from netnssite import (CONTROLLER, NetnsSite, in_netns, messages, netns,  # noqa: F401
                       notes, run, status)

pytestmark = pytest.mark.skipif(not shutil.which("ufw"), reason="ufw is not installed")


@pytest.fixture
def site(tmp_path, netns):
    private = pathlib.Path("/etc/netns") / netns
    private.mkdir(parents=True)
    try:
        shutil.copytree("/etc/ufw", private / "ufw", symlinks=True)
        shutil.copytree("/etc/default", private / "default", symlinks=True)
        for f in ["user.rules", "user6.rules"]:
            text = (private / "ufw" / f).read_text()
            assert "### tuple ###" not in text, f"this machine's /etc/ufw/{f} has rules already"
        (private / "ufw/ufw.conf").write_text("ENABLED=no\nLOGLEVEL=low\n")
        s = NetnsSite(tmp_path, netns, ["ufw"])
        s.private = private
        yield s
    finally:
        shutil.rmtree(private, ignore_errors=True)


def ufw_status(site):
    return in_netns(site.netns, "ufw", "status", "verbose")


def input_rules(site):
    return in_netns(site.netns, "iptables", "-S", "ufw-user-input")


SSH_RULE = "(ufw.has-rule :allow :port 22 :proto :tcp)"
SETUP = SSH_RULE + ' (ufw.has-rule :allow :port 443 :proto :tcp :from "192.0.2.0/24") ' \
    "(ufw.default-policy :incoming :deny) (ufw.logging :medium) (ufw.enabled)"


def test_rules_policies_and_ufw_on_then_a_second_run_changes_nothing(site):
    events = site.deploy(SETUP, ssh_connection=CONTROLLER)
    assert status(events) == "changed", messages(events)
    shown = ufw_status(site)
    assert "Status: active" in shown, shown
    assert "Default: deny (incoming)" in shown and "Logging: on (medium)" in shown, shown
    assert "22/tcp" in shown and "192.0.2.0/24" in shown, shown
    assert "--dport 22 -j ACCEPT" in input_rules(site), "the rules are loaded in the kernel"
    assert "still gets through" in notes(events)
    assert (site.private / "ufw/user.rules").read_text().count("### tuple ###") == 2
    assert status(site.deploy(SETUP, ssh_connection=CONTROLLER)) == "no-change"
    assert "ENABLED=no" in pathlib.Path("/etc/ufw/ufw.conf").read_text(), \
        "this machine's ufw is as it was"


def test_enabling_ufw_without_a_rule_for_ssh_is_refused_and_nothing_changes(site):
    events = site.deploy("(ufw.default-policy :incoming :deny :force True) (ufw.enabled)",
                         ssh_connection=CONTROLLER)
    assert status(events) == "failed"
    assert "enabling ufw would cut the deploying SSH connection" in messages(events)
    assert "from 10.77.0.1 to port 22" in messages(events)
    assert "Status: inactive" in ufw_status(site)


def test_force_enables_it_all_the_same(site):
    events = site.deploy("(ufw.enabled :force True)", ssh_connection=CONTROLLER)
    assert status(events) == "changed", messages(events)
    assert "Status: active" in ufw_status(site)


def test_a_deny_rule_that_replaces_the_allow_for_ssh_is_refused_one_after_it_is_not(site):
    site.deploy(SSH_RULE + " (ufw.enabled)", ssh_connection=CONTROLLER)
    # ufw replaces a rule that differs only by its action where it stands.
    refused = site.deploy("(ufw.has-rule :deny :port 22 :proto :tcp)", ssh_connection=CONTROLLER)
    assert status(refused) == "failed"
    assert "the rule deny tcp 22" in messages(refused), messages(refused)
    assert "ALLOW IN" in ufw_status(site), "the allow rule is still there"
    after = site.deploy('(ufw.has-rule :deny :port 22 :proto :tcp :from "10.77.0.0/24")',
                        ssh_connection=CONTROLLER)
    assert status(after) == "changed", messages(after)
    removing = site.deploy(f"(unapplied {SSH_RULE})", ssh_connection=CONTROLLER)
    assert status(removing) == "failed"
    assert "removing the rule allow tcp 22" in messages(removing), messages(removing)
    assert "ALLOW IN" in ufw_status(site), "the allow rule is still there"


def test_a_rule_replaces_one_that_differs_only_by_its_action_where_it_stands():
    a = ["allow", "tcp", "22", "0.0.0.0/0", "any", "0.0.0.0/0", "in"]
    b = ["allow", "tcp", "80", "0.0.0.0/0", "any", "0.0.0.0/0", "in"]
    d = ["deny"] + a[1:]
    assert ufw.with_rules([a, b], [d]) == [d, b]
    assert ufw.with_rules([b], [d]) == [b, d]


def test_a_connection_from_another_network_than_the_rule_allows_is_refused(site):
    events = site.deploy('(ufw.has-rule :allow :port 22 :proto :tcp :from "192.0.2.0/24") (ufw.enabled)',
                         ssh_connection=CONTROLLER)
    assert "would cut the deploying SSH connection" in messages(events)
    allowed = site.deploy('(ufw.has-rule :allow :port 22 :proto :tcp :from "10.77.0.0/24" :on "eth0") '
                          "(ufw.enabled)", ssh_connection=CONTROLLER)
    assert status(allowed) == "changed", messages(allowed)


def test_unapplying_removes_the_rule_and_turns_ufw_off(site):
    site.deploy(SETUP, ssh_connection=CONTROLLER)
    events = site.deploy('(unapplied (ufw.enabled)) (unapplied (ufw.has-rule :allow :port 443 :proto :tcp :from "192.0.2.0/24"))',
                         ssh_connection=CONTROLLER)
    assert status(events) == "changed", messages(events)
    shown = ufw_status(site)
    assert "Status: inactive" in shown
    assert "192.0.2.0/24" not in in_netns(site.netns, "ufw", "show", "added")


def test_disabled_turns_ufw_off_and_then_checks_clean(site):
    # Turned on by hand, which is quicker than a deployment of SETUP.
    assert "Firewall is active" in in_netns(site.netns, "ufw", "--force", "enable")
    events = site.deploy("(ufw.disabled)", ssh_connection=CONTROLLER)
    assert status(events) == "changed", messages(events)
    assert "Status: inactive" in ufw_status(site)
    site.checks_clean("(ufw.disabled)", ssh_connection=CONTROLLER)


def test_check_mode_reports_and_changes_nothing(site):
    events = site.deploy(SETUP, ssh_connection=CONTROLLER, check=True)
    # ufw's own default is deny already.  A check plays each change against
    # the host as it is: the allow for SSH is not there yet to enable ufw.
    assert [e["status"] for e in events if e["event"] == "end"] == \
        ["would-change", "would-change", "ok", "would-change", "failed"], events
    assert "Status: inactive" in ufw_status(site)
    assert "### tuple ###" not in (site.private / "ufw/user.rules").read_text()
    refused = site.deploy("(ufw.enabled)", ssh_connection=CONTROLLER, check=True)
    assert "would cut the deploying SSH connection" in messages(refused)


def test_with_no_ssh_session_there_is_no_connection_to_keep(site):
    events = site.deploy("(ufw.enabled)")
    assert status(events) == "changed", messages(events)
    assert "no SSH connection to keep" in notes(events)


def test_rule_tuples_are_those_ufw_keeps():
    K = hy.models.Keyword
    assert ufw.rule_tuples(K("allow"), 22, K("tcp"), "any", "any", K("in"), None) == [
        ["allow", "tcp", "22", "0.0.0.0/0", "any", "0.0.0.0/0", "in"],
        ["allow", "tcp", "22", "::/0", "any", "::/0", "in"]]
    assert ufw.rule_tuples(K("deny"), None, K("any"), "10.0.0.1", "any", K("in"), "eth0") == [
        ["deny", "any", "any", "0.0.0.0/0", "any", "10.0.0.1/32", "in_eth0"]]


def test_the_first_matching_rule_decides_and_none_the_default():
    conn = ("10.0.0.5", "10.0.0.1", 22)
    allow = ["allow", "tcp", "22", "0.0.0.0/0", "any", "0.0.0.0/0", "in"]
    deny = ["deny", "any", "any", "0.0.0.0/0", "any", "10.0.0.0/8", "in"]
    assert ufw.admits(conn, "eth0", [allow, deny], "deny", True) is True
    assert ufw.admits(conn, "eth0", [deny, allow], "allow", True) is False
    assert ufw.admits(conn, "eth0", [], "deny", True) is False
    assert ufw.admits(conn, "eth0", [], "deny", False) is True
    assert ufw.admits(("127.0.0.1", "127.0.0.1", 22), "lo", [], "deny", True) is True
    assert ufw.admits(conn, "eth0", [["allow", "tcp", "22", "0.0.0.0/0", "40000", "0.0.0.0/0", "in"]],
                         "deny", True) is None


@pytest.mark.parametrize("bad", [
    dict(act=hy.models.Keyword("accept")),
    dict(act=hy.models.Keyword("allow"), port=0),
    dict(act=hy.models.Keyword("allow"), port="22; reboot"),
    dict(act=hy.models.Keyword("allow"), from_="$(reboot)"),
    dict(act=hy.models.Keyword("allow"), from_="-any"),
    dict(act=hy.models.Keyword("allow"), on="-eth0"),
    dict(act=hy.models.Keyword("allow"), on="eth0\nx"),
    dict(act=hy.models.Keyword("allow"), from_="10.0.0.0/8", to="::1"),
    dict(act=hy.models.Keyword("limit")),
    dict(act=hy.models.Keyword("allow"), force="yes"),
])
def test_hostile_arguments_are_refused_where_written(bad):
    with pytest.raises(PropspecError):
        ufw.has_rule(**bad)


@pytest.mark.chroot
def test_in_a_chroot_ufw_is_refused_with_why(chroot_chain):
    from consfig.props import ufw as u
    from proptest import deploy_propspec
    before = run("iptables", "-S").stdout
    outcome, events = deploy_propspec(chroot_chain, u.enabled(), check=False)
    assert outcome.status == "failed"
    assert any("ufw changes the running firewall" in e.get("message", "") for e in events), events
    assert run("iptables", "-S").stdout == before
