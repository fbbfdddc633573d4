"""hostname.configured inside a Debian chroot: /etc/hostname and /etc/hosts."""

import pytest

import hy  # noqa: F401
from hy.models import Keyword as K
from consfig.props import hostname

from proptest import apply_twice, in_chroot, this_os

pytestmark = pytest.mark.chroot


def test_a_hosts_file_made_from_nothing_still_maps_localhost(chroot_chain, debian_chroot):
    # A tree with no /etc/hosts (debootstrap makes none): services that
    # listen on "localhost", PostgreSQL's default, must still find it.
    (debian_chroot / "etc/hosts").unlink(missing_ok=True)
    apply_twice(chroot_chain, [this_os(), hostname.configured(K("hostname"), "web.example.org")])
    hosts = (debian_chroot / "etc/hosts").read_text()
    assert "127.0.1.1\tweb.example.org\tweb\n" in hosts, hosts
    resolved = in_chroot(debian_chroot, "getent ahostsv4 localhost").stdout
    assert resolved.startswith("127.0.0.1"), f"localhost is not mapped:\n{hosts}"


def test_a_hosts_file_of_the_admins_keeps_its_lines_and_gains_the_hosts_name(chroot_chain,
                                                                             debian_chroot):
    (debian_chroot / "etc/hosts").write_text("127.0.0.1\tlocalhost\n10.0.0.9\tdb\n")
    apply_twice(chroot_chain, [this_os(), hostname.configured(K("hostname"), "web.example.org")])
    assert (debian_chroot / "etc/hosts").read_text() == (
        "127.0.0.1\tlocalhost\n127.0.1.1\tweb.example.org\tweb\n10.0.0.9\tdb\n")
