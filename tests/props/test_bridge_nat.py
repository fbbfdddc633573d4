"""bridge and nat: a bridge with a port and an address, forwarding and NAT
rules, made with the real iproute2 and nft in a network namespace of their
own (whose /etc/sysctl.d is a private copy), deployed with `consfig deploy`
under `ip netns exec` as tests/props/netnssite.py does; and the interface
the deploying SSH connection comes by, refused unless forced."""

import json
import pathlib
import shutil

import pytest

import hy  # noqa: F401
from consfig.errors import PropspecError
from consfig.props import bridge, nat
from netnssite import (CONTROLLER, NetnsSite, in_netns, messages, netns,  # noqa: F401
                       notes, status)


@pytest.fixture
def site(tmp_path, netns):
    private = pathlib.Path("/etc/netns") / netns
    (private / "sysctl.d").mkdir(parents=True)
    try:
        s = NetnsSite(tmp_path, netns, ["bridge", "nat"])
        s.private = private
        yield s
    finally:
        shutil.rmtree(private, ignore_errors=True)


def link(site, name):
    out = in_netns(site.netns, "ip", "-j", "-d", "link", "show", "dev", name)
    return json.loads(out)[0] if out.strip() else None


def nat_rules(site):
    return in_netns(site.netns, "nft", "list", "table", "ip", "consfig_nat")


SETUP = """(bridge.exists "br0")
  (bridge.veth-exists "vguest" "vguest-peer")
  (bridge.has-port "br0" "vguest")
  (bridge.has-address "br0" "10.0.3.1/24")
  (nat.forwarding)
  (nat.masquerades "10.0.3.0/24" :out "eth0")
  (nat.port-forwarded 8080 "10.0.3.10" :to-port 80 :on "eth0")"""


def test_a_bridge_with_a_port_an_address_and_nat_then_nothing_to_do(site):
    events = site.deploy(SETUP, ssh_connection=CONTROLLER)
    assert status(events) == "changed", messages(events)
    br = link(site, "br0")
    assert br["linkinfo"]["info_kind"] == "bridge" and "UP" in br["flags"]
    assert link(site, "vguest")["master"] == "br0"
    assert "10.0.3.1/24" in in_netns(site.netns, "ip", "-o", "addr", "show", "dev", "br0")
    assert in_netns(site.netns, "sysctl", "-n", "net.ipv4.ip_forward").strip() == "1"
    assert (site.private / "sysctl.d/90-consfig-forwarding.conf").exists()
    rules = nat_rules(site)
    assert 'ip saddr 10.0.3.0/24 oifname "eth0" masquerade' in rules, rules
    assert 'iifname "eth0" tcp dport 8080 dnat to 10.0.3.10:80' in rules, rules
    assert status(site.deploy(SETUP, ssh_connection=CONTROLLER)) == "no-change"


def test_unapplying_removes_the_rules_the_port_and_the_bridge(site):
    site.deploy(SETUP)
    events = site.deploy("""(unapplied (nat.port-forwarded 8080 "10.0.3.10" :to-port 80 :on "eth0"))
      (unapplied (nat.masquerades "10.0.3.0/24" :out "eth0"))
      (unapplied (bridge.has-address "br0" "10.0.3.1/24"))
      (unapplied (bridge.has-port "br0" "vguest"))
      (unapplied (bridge.exists "br0"))
      (unapplied (bridge.veth-exists "vguest" "vguest-peer"))""")
    assert status(events) == "changed", messages(events)
    assert "consfig:" not in nat_rules(site)
    assert link(site, "br0") is None and link(site, "vguest") is None


def test_other_rules_in_the_table_are_left_alone(site):
    site.deploy('(nat.masquerades "10.0.3.0/24")')
    site.deploy('(nat.masquerades "10.0.4.0/24")')
    site.deploy('(unapplied (nat.masquerades "10.0.3.0/24"))')
    rules = nat_rules(site)
    assert "10.0.4.0/24" in rules and "10.0.3.0/24" not in rules, rules


def test_the_interface_of_the_ssh_connection_is_not_made_a_port_unless_forced(site):
    events = site.deploy('(bridge.exists "br0") (bridge.has-port "br0" "eth0")',
                         ssh_connection=CONTROLLER)
    assert status(events) == "failed"
    assert "eth0 is the interface the deploying SSH connection comes in by" in messages(events)
    assert "master" not in link(site, "eth0")
    forced = site.deploy('(bridge.exists "br0") (bridge.has-port "br0" "eth0" :force True)',
                         ssh_connection=CONTROLLER)
    assert status(forced) == "changed", messages(forced)
    assert link(site, "eth0")["master"] == "br0"


def test_a_link_of_the_name_that_is_not_a_bridge_fails(site):
    site.deploy('(bridge.veth-exists "br1" "br1-peer")')
    events = site.deploy('(bridge.exists "br1")')
    assert status(events) == "failed"
    assert "br1 exists and is a veth link, not a bridge" in messages(events)


def test_check_mode_says_what_it_would_make_and_makes_nothing(site):
    events = site.deploy(SETUP, check=True)
    assert "bridge br0 would be made" in notes(events)
    assert link(site, "br0") is None
    assert "consfig:" not in nat_rules(site)


def test_snat_and_a_redirect_are_rules_of_their_own(site):
    body = """(nat.snat "10.0.5.0/24" "10.77.0.2" :out "eth0")
      (nat.redirected 80 8080 :on "eth0")"""
    events = site.deploy(body)
    assert status(events) == "changed", messages(events)
    rules = nat_rules(site)
    assert 'ip saddr 10.0.5.0/24 oifname "eth0" snat to 10.77.0.2' in rules, rules
    assert 'iifname "eth0" tcp dport 80 redirect to :8080' in rules, rules
    assert status(site.deploy(body)) == "no-change"
    site.deploy('(unapplied (nat.redirected 80 8080 :on "eth0"))')
    assert "redirect" not in nat_rules(site) and "snat" in nat_rules(site)


def test_a_link_is_brought_up_and_down_but_not_that_of_the_ssh_connection(site):
    site.deploy('(bridge.veth-exists "va" "vb")')
    in_netns(site.netns, "ip", "link", "set", "va", "down")
    assert status(site.deploy('(bridge.link-up "va")')) == "changed"
    assert "UP" in link(site, "va")["flags"]
    assert status(site.deploy('(unapplied (bridge.link-up "va"))')) == "changed"
    assert "UP" not in link(site, "va")["flags"]
    events = site.deploy('(unapplied (bridge.link-up "eth0"))', ssh_connection=CONTROLLER)
    assert "bringing eth0 down: eth0 is the interface the deploying SSH connection" in messages(events)


@pytest.mark.parametrize("bad", [
    lambda: bridge.exists("br0; reboot"),
    lambda: bridge.exists("-br0"),
    lambda: bridge.exists("a-very-long-bridge-name"),
    lambda: bridge.has_address("br0", "10.0.3.1"),
    lambda: bridge.has_address("br0", "10.0.3.1/24 dev eth0"),
    lambda: nat.masquerades("10.0.3.0/24\" masquerade; flush ruleset #"),
    lambda: nat.masquerades("10.0.3.0/24", out='eth0" accept'),
    lambda: nat.port_forwarded(0, "10.0.3.10"),
    lambda: nat.port_forwarded(80, "10.0.3.10 tcp"),
    lambda: nat.port_forwarded(80, "10.0.3.10", proto=hy.models.Keyword("icmp")),
    lambda: nat.snat("10.0.5.0/24", "10.77.0.2; flush ruleset"),
    lambda: nat.redirected(80, 70000),
    lambda: bridge.link_up("eth0\n"),
])
def test_hostile_arguments_are_refused_where_written(bad):
    with pytest.raises(PropspecError):
        bad()
