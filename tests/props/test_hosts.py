"""/etc/hosts entries in the Debian chroot, read back with getent."""

import pytest

import hy  # noqa: F401
from consfig.errors import PropspecError
from consfig.props import hosts

from proptest import apply_twice, in_chroot, unapply

pytestmark = pytest.mark.chroot

START = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n# a comment\n10.0.0.9\told db\n"


@pytest.fixture
def etc_hosts(debian_chroot):
    f = debian_chroot / "etc/hosts"
    f.write_text(START)
    return f


def test_has_entry_maps_the_names_and_takes_them_off_other_entries(chroot_chain, debian_chroot, etc_hosts):
    apply_twice(chroot_chain, hosts.has_entry("192.0.2.10", "db.example.com", "db"))
    assert etc_hosts.read_text() == START.replace("10.0.0.9\told db", "10.0.0.9\told") \
        + "192.0.2.10\tdb.example.com db\n"
    got = in_chroot(debian_chroot, "getent hosts db").stdout.split()
    assert got[0] == "192.0.2.10", got


def test_has_entry_leaves_the_other_address_family_alone(chroot_chain, etc_hosts):
    apply_twice(chroot_chain, hosts.has_entry("127.0.0.1", "localhost", "me"))
    assert etc_hosts.read_text() == START.replace("127.0.0.1\tlocalhost", "127.0.0.1\tlocalhost me")


def test_has_entry_unapplied_takes_its_names_off(chroot_chain, etc_hosts):
    apply_twice(chroot_chain, hosts.has_entry("192.0.2.10", "db.example.com"))
    unapply(chroot_chain, hosts.has_entry("192.0.2.10", "db.example.com"))
    assert "192.0.2.10" not in etc_hosts.read_text()


def test_lacks_names_drops_names_and_empty_entries(chroot_chain, etc_hosts):
    apply_twice(chroot_chain, hosts.lacks_names("old", "db"))
    assert etc_hosts.read_text() == START.replace("10.0.0.9\told db\n", "")


def test_hostile_addresses_and_names_are_refused():
    for args in [("192.0.2.1\n10.0.0.1", "x"), ("fe80::1%eth0 x", "y"), ("192.0.2.1", "-x"),
                 ("192.0.2.1", "a b"), ("192.0.2.1",)]:
        with pytest.raises(PropspecError):
            hosts.has_entry(*args)
