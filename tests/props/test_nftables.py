"""nftables: rulesets checked with nft -c, loaded atomically, and refused
when they would cut the deploying SSH connection — for real, each
deployment in a network namespace of its own (this machine's firewall is
never touched): `consfig deploy` runs under `ip netns exec`, with the
SSH_CONNECTION an SSH session would give it.  Over the SSH lab, see
tests/connections/test_nftables_lab.py."""

import sys

import pytest

import hy  # noqa: F401

from consfig.errors import PropspecError
from consfig.props import nftables
from netnssite import (CONTROLLER, NetnsSite, in_netns, messages, netns,  # noqa: F401
                       notes, run, status)

ALLOWS_SSH = """\
table inet filter {
  chain input {
    type filter hook input priority 0; policy drop;
    iif lo accept
    ct state established,related accept
    tcp dport 22 accept
  }
}
"""

ALLOWS_WEB_ONLY = ALLOWS_SSH.replace("tcp dport 22 accept", "tcp dport { 80, 443 } accept")

ALLOWS_SSH_ON_ETH0 = ALLOWS_SSH.replace("tcp dport 22 accept",
                                        'iifname "eth0" ip saddr 10.77.0.0/24 tcp dport 22 accept')

def ruleset_in(netns):
    return in_netns(netns, "nft", "list", "ruleset")


def namespaces():
    return set(run("ip", "netns", "list").stdout.split())


class Site(NetnsSite):
    def __init__(self, directory, netns):
        super().__init__(directory, netns, ["nftables"])
        self.conf = directory / "nftables.conf"

    def rules(self, text, name="rules.nft"):
        (self.dir / name).write_text(text)
        return name


@pytest.fixture
def site(tmp_path, netns):
    return Site(tmp_path, netns)


def prop(site, name, **kw):
    extra = "".join(f" :{k} {v}" for k, v in kw.items())
    return f'(nftables.has-ruleset-from-site "{name}" :conf "{site.conf}"{extra})'


def test_a_ruleset_that_keeps_ssh_is_loaded_written_and_then_holds(site):
    name = site.rules(ALLOWS_SSH)
    events = site.deploy(prop(site, name), ssh_connection=CONTROLLER)
    assert status(events) == "changed", messages(events)
    assert "tcp dport 22 accept" in ruleset_in(site.netns)
    assert site.conf.read_text() == "#!/usr/sbin/nft -f\nflush ruleset\n" + ALLOWS_SSH
    assert "still gets through" in notes(events)
    assert status(site.deploy(prop(site, name), ssh_connection=CONTROLLER)) == "no-change"
    site.checks_clean(prop(site, name), ssh_connection=CONTROLLER)


def test_a_ruleset_that_would_cut_the_ssh_connection_is_refused_and_nothing_changes(site):
    before = ruleset_in(site.netns)
    name = site.rules(ALLOWS_WEB_ONLY)
    events = site.deploy(prop(site, name), ssh_connection=CONTROLLER)
    assert status(events) == "failed"
    assert "would cut the deploying SSH connection" in messages(events)
    assert "from 10.77.0.1 to port 22" in messages(events)
    assert ruleset_in(site.netns) == before, "nothing was loaded"
    assert not site.conf.exists(), "nothing was written"
    assert not any(n.startswith("consfig-probe") for n in namespaces()), "its scratch went"


def test_force_loads_it_all_the_same(site):
    name = site.rules(ALLOWS_WEB_ONLY)
    events = site.deploy(prop(site, name, force="True"), ssh_connection=CONTROLLER)
    assert status(events) == "changed", messages(events)
    assert "80, 443" in ruleset_in(site.netns)


def test_a_rule_for_the_interface_the_connection_comes_by_is_understood(site):
    name = site.rules(ALLOWS_SSH_ON_ETH0)
    events = site.deploy(prop(site, name), ssh_connection=CONTROLLER)
    assert status(events) == "changed", messages(events)


def test_a_connection_from_elsewhere_than_the_rule_allows_is_refused(site):
    name = site.rules(ALLOWS_SSH_ON_ETH0)
    events = site.deploy(prop(site, name), ssh_connection="10.99.0.1 40022 10.77.0.2 22")
    assert "would cut the deploying SSH connection" in messages(events)


def test_an_invalid_ruleset_is_refused_with_what_nft_said_and_nothing_changes(site):
    before = ruleset_in(site.netns)
    name = site.rules("table inet filter {\n  chain input {\n    tcp dport ssh acept\n  }\n}\n")
    events = site.deploy(prop(site, name), ssh_connection=CONTROLLER)
    assert status(events) == "failed"
    assert "the ruleset is not valid (nft -c -f)" in messages(events)
    assert "acept" in messages(events)
    assert ruleset_in(site.netns) == before
    assert not site.conf.exists()


def test_with_no_ssh_session_there_is_no_connection_to_keep(site):
    name = site.rules(ALLOWS_WEB_ONLY)
    events = site.deploy(prop(site, name))
    assert status(events) == "changed", messages(events)
    assert "no SSH connection to keep" in notes(events)


def test_a_flushed_firewall_is_loaded_again(site):
    name = site.rules(ALLOWS_SSH)
    site.deploy(prop(site, name), ssh_connection=CONTROLLER)
    run("ip", "netns", "exec", site.netns, "nft", "flush", "ruleset")
    events = site.deploy(prop(site, name), ssh_connection=CONTROLLER)
    assert status(events) == "changed", messages(events)
    assert "tcp dport 22 accept" in ruleset_in(site.netns)


def test_check_mode_shows_the_diff_checks_and_loads_nothing(site):
    before = ruleset_in(site.netns)
    name = site.rules(ALLOWS_SSH)
    events = site.deploy(prop(site, name), ssh_connection=CONTROLLER, check=True)
    assert status(events) == "changed"
    assert [e["status"] for e in events if e["event"] == "end"] == ["would-change"]
    assert any(e["event"] == "diff" and "+    tcp dport 22 accept" in e["text"]
               for e in events), events
    assert ruleset_in(site.netns) == before
    assert not site.conf.exists()
    bad = site.rules(ALLOWS_WEB_ONLY, "bad.nft")
    events = site.deploy(prop(site, bad), ssh_connection=CONTROLLER, check=True)
    assert "would cut the deploying SSH connection" in messages(events)


def test_a_hostile_ssh_connection_is_refused_not_run(site, tmp_path):
    marker = tmp_path / "pwned"
    name = site.rules(ALLOWS_SSH)
    events = site.deploy(prop(site, name), ssh_connection=f"$(touch {marker}) 1 10.77.0.2 22")
    assert status(events) == "failed"
    assert "cannot tell the deploying SSH connection" in messages(events)
    assert not marker.exists()


def test_a_ruleset_is_given_flush_ruleset_when_it_lacks_it():
    assert nftables.ruleset_text("table ip t {}") == "#!/usr/sbin/nft -f\nflush ruleset\ntable ip t {}\n"
    assert nftables.ruleset_text("#!/usr/sbin/nft -f\ntable ip t {}\n") == \
        "#!/usr/sbin/nft -f\nflush ruleset\ntable ip t {}\n"
    kept = "#!/usr/sbin/nft -f\n# ours\nflush ruleset\ntable ip t {}\n"
    assert nftables.ruleset_text(kept) == kept


def test_the_tables_a_ruleset_defines_are_read_from_it():
    assert nftables.declared_tables(ALLOWS_SSH + "table t2 {}\nadd table ip6 t3\n") == \
        {"table inet filter", "table ip t2", "table ip6 t3"}


@pytest.mark.parametrize("bad", [
    dict(ruleset="table\x00"),
    dict(ruleset="x", force="yes"),
    dict(ruleset="x", conf="relative.conf"),
    dict(ruleset="x", conf="/etc/nft\x00"),
])
def test_hostile_arguments_are_refused_where_written(bad):
    with pytest.raises(PropspecError):
        nftables.has_ruleset(**bad)


def test_a_site_file_that_is_not_there_is_a_load_error_naming_it(site, tmp_path):
    events_or_error = run(sys.executable, "-m", "consfig", "deploy", "--consfig",
                          str(tmp_path / "nosuch.hy"), "fw")
    assert events_or_error.returncode != 0
    (tmp_path / "site.hy").write_text(
        '(require consfig *)\n(import consfig *)\n(use-props consfig.props [nftables])\n'
        '(defhost fw.consfig.invalid {:deploy :local}\n'
        '  (nftables.has-ruleset-from-site "missing.nft"))\n')
    r = run(sys.executable, "-m", "consfig", "deploy", "--consfig", str(tmp_path / "site.hy"),
            "fw", cwd=tmp_path)
    assert r.returncode != 0
    assert "missing.nft" in r.stdout + r.stderr
    assert "No such file" in r.stdout + r.stderr


INERT = "table inet consfig_chroot_test {\n  chain c {\n  }\n}\n"


@pytest.mark.chroot
def test_in_a_chroot_the_ruleset_is_checked_and_written_never_loaded(chroot_chain, debian_chroot):
    from consfig.apply.combinators import eseqprops
    from consfig.props import apt
    from proptest import apply_twice, checks_clean, this_os
    host_before = run("nft", "list", "ruleset").stdout
    try:
        spec = eseqprops(this_os(), apt.installed("nftables"), nftables.has_ruleset(INERT))
        events = apply_twice(chroot_chain, spec)
        checks_clean(chroot_chain, spec)
        assert (debian_chroot / "etc/nftables.conf").read_text() == \
            "#!/usr/sbin/nft -f\nflush ruleset\n" + INERT
        assert any("not loaded: this runs in a chroot" in e.get("text", "") for e in events)
        assert run("nft", "list", "ruleset").stdout == host_before, \
            "the machine's own firewall is as it was"
    finally:
        run("nft", "delete", "table", "inet", "consfig_chroot_test")


@pytest.mark.chroot
def test_in_a_chroot_an_invalid_ruleset_is_refused_all_the_same(chroot_chain, debian_chroot):
    from consfig.apply.combinators import eseqprops
    from consfig.props import apt
    from proptest import deploy_propspec, this_os
    outcome, events = deploy_propspec(chroot_chain, eseqprops(
        this_os(), apt.installed("nftables"), nftables.has_ruleset("table inet t { chain c { nope } }")),
        check=False)
    assert outcome.status == "failed"
    assert any("the ruleset is not valid" in e.get("message", "") for e in events), events
