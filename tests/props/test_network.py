"""network: systemd-networkd .network files and ifupdown interfaces, written
in the test chroot; and, deployed in a network namespace of their own with
the SSH_CONNECTION an SSH session would give (tests/props/netnssite.py), a
change to the interface that connection comes by refused unless forced."""

import pytest

import hy  # noqa: F401
from hy.models import Keyword as K

from consfig.errors import PropspecError
from consfig.props import network
from netnssite import (CONTROLLER, NetnsSite, in_netns, messages, netns,  # noqa: F401
                       notes, status)
from proptest import apply_twice, deploy_propspec, diffs, statuses, unapply

UPLINK = [["Match", {"Name": "eth0"}],
          ["Network", {"Address": "192.0.2.5/24", "Gateway": "192.0.2.1",
                       "DNS": ["192.0.2.53", "192.0.2.54"]}]]


@pytest.mark.chroot
def test_a_networkd_file_is_written_once_and_unapplied_removed(chroot_chain, debian_chroot):
    prop = network.networkd_configured("10-uplink", *UPLINK)
    events = apply_twice(chroot_chain, prop)
    path = debian_chroot / "etc/systemd/network/10-uplink.network"
    assert path.read_text() == ("# Written by consfig.\n[Match]\nName=eth0\n\n[Network]\n"
                                "Address=192.0.2.5/24\nGateway=192.0.2.1\n"
                                "DNS=192.0.2.53\nDNS=192.0.2.54\n")
    assert path.stat().st_mode & 0o777 == 0o644
    assert any("networkd not reloaded: this runs in a chroot" in e.get("text", "") for e in events)
    unapply(chroot_chain, prop)
    assert not path.exists()


@pytest.mark.chroot
def test_check_mode_shows_the_networkd_files_diff(chroot_chain, debian_chroot):
    prop = network.networkd_configured("20-lan", ["Match", {"Name": "eth1"}],
                                       ["Network", {"DHCP": "yes"}])
    _, events = deploy_propspec(chroot_chain, prop, check_mode=True)
    assert list(statuses(events).values()) == ["would-change"]
    assert "+DHCP=yes" in diffs(events)[0]["text"]
    assert not (debian_chroot / "etc/systemd/network/20-lan.network").exists()


@pytest.mark.chroot
def test_an_ifupdown_interface_is_written_and_interfaces_reads_its_directory(
        chroot_chain, debian_chroot):
    prop = network.interface_configured("eth1", method=K("static"),
                                        options={"address": "198.51.100.7/24",
                                                 "dns-nameservers": ["198.51.100.1", "198.51.100.2"]})
    events = apply_twice(chroot_chain, prop)
    assert (debian_chroot / "etc/network/interfaces.d/eth1").read_text() == (
        "# Written by consfig.\nauto eth1\niface eth1 inet static\n"
        "    address 198.51.100.7/24\n"
        "    dns-nameservers 198.51.100.1\n    dns-nameservers 198.51.100.2\n")
    assert "source /etc/network/interfaces.d/*" in \
        (debian_chroot / "etc/network/interfaces").read_text().splitlines()
    assert any("eth1 not brought up: this runs in a chroot" in e.get("text", "") for e in events)
    unapply(chroot_chain, prop)
    assert not (debian_chroot / "etc/network/interfaces.d/eth1").exists()


@pytest.mark.parametrize("make", [
    lambda: network.networkd_configured("../evil", ["Match", {"Name": "x"}]),
    lambda: network.networkd_configured(".hidden", ["Match", {"Name": "x"}]),
    lambda: network.networkd_configured("ok"),
    lambda: network.networkd_configured("ok", ["Ma]tch", {"Name": "x"}]),
    lambda: network.networkd_configured("ok", ["Match", {"Na me": "x"}]),
    lambda: network.networkd_configured("ok", ["Match", {"Name": "x\n[Network]"}]),
    lambda: network.networkd_configured("ok", ["Match", {"Name": ["x", "y\nz"]}]),
    lambda: network.interface_configured("-eth0"),
    lambda: network.interface_configured("eth0/x"),
    lambda: network.interface_configured("a-very-long-interface-name"),
    lambda: network.interface_configured("eth0", options={"address": "1\n  up rm -rf /"}),
    lambda: network.interface_configured("eth0", options={"Up!": "x"}),
    lambda: network.interface_configured("eth0", method=K("bogus")),
    lambda: network.interface_configured("eth0", directory="relative"),
])
def test_hostile_arguments_are_refused_where_written(make):
    with pytest.raises(PropspecError):
        make()


def networkd(site, name, match, **kw):
    extra = "".join(f" :{k} {v}" for k, v in kw.items())
    return (f'(network.networkd-configured "{name}" ["Match" {match}] ["Network" {{"DHCP" "yes"}}]'
            f' :directory "{site.dir}/networkd"{extra})')


def ifupdown(site, name, **kw):
    extra = "".join(f" :{k} {v}" for k, v in kw.items())
    return (f'(network.interface-configured "{name}" :method :dhcp'
            f' :directory "{site.dir}/interfaces.d"{extra})')


@pytest.fixture
def site(tmp_path, netns):
    return NetnsSite(tmp_path, netns, ["network"])


@pytest.mark.parametrize("match", ['{"Name" "eth0"}', '{"Name" "en* eth*"}', '{"Type" "ether"}'],
                         ids=["by-name", "by-glob", "unnamed"])
def test_a_networkd_file_for_the_ssh_interface_is_refused(site, match):
    events = site.deploy(networkd(site, "10-up", match), ssh_connection=CONTROLLER)
    assert status(events) == "failed"
    assert "configures eth0, the interface the deploying SSH connection comes in by" \
        in messages(events)
    assert not (site.dir / "networkd/10-up.network").exists()


def test_a_networkd_file_for_the_ssh_interface_by_its_mac_is_refused(site):
    mac = [w for w in in_netns(site.netns, "ip", "-o", "link", "show", "dev", "eth0").split()
           if w.count(":") == 5][0]
    events = site.deploy(networkd(site, "10-up", f'{{"MACAddress" "{mac.upper()}"}}'),
                         ssh_connection=CONTROLLER)
    assert "configures eth0" in messages(events)


def test_a_networkd_file_for_another_interface_is_written(site):
    events = site.deploy(networkd(site, "20-lan", '{"Name" "eth1"}'), ssh_connection=CONTROLLER)
    assert status(events) == "changed", messages(events)
    assert (site.dir / "networkd/20-lan.network").exists()
    assert "systemd-networkd is not running" in notes(events)


def test_force_writes_it_all_the_same(site):
    events = site.deploy(networkd(site, "10-up", '{"Name" "eth0"}', force="True"),
                         ssh_connection=CONTROLLER)
    assert status(events) == "changed", messages(events)


def test_with_no_ssh_session_any_interface_may_change(site):
    assert status(site.deploy(networkd(site, "10-up", '{"Name" "eth0"}'))) == "changed"


def test_an_ifupdown_interface_carrying_ssh_is_refused_and_another_written(site):
    events = site.deploy(ifupdown(site, "eth0"), ssh_connection=CONTROLLER)
    assert "configures eth0, the interface the deploying SSH connection" in messages(events)
    assert not (site.dir / "interfaces.d/eth0").exists()
    events = site.deploy(ifupdown(site, "eth1"), ssh_connection=CONTROLLER)
    assert status(events) == "changed", messages(events)
    assert (site.dir / "interfaces.d/eth1").read_text().endswith("iface eth1 inet dhcp\n")
    assert "not brought up: ifupdown is not installed here" in notes(events)
