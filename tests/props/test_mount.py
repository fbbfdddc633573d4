"""mount and fstab inside a Debian chroot.  The mounts are real (tmpfs
below the chroot, on this machine); each test unmounts what it mounted."""

import subprocess

import pytest

import hy  # noqa: F401
from consfig.apply.combinators import unapplied
from consfig.props import fstab, mount

from proptest import LOCAL, apply_twice, deploy_propspec, this_os, unapply

pytestmark = pytest.mark.chroot

ENTRY = "tmpfs /mnt/consfig-demo tmpfs size=1m,mode=0755 0 0"


def mounted(path):
    return subprocess.run(["findmnt", "--mountpoint", str(path)],
                          capture_output=True, timeout=30).returncode == 0


def test_has_entries_merges_by_mount_point(chroot_chain, debian_chroot):
    tab = debian_chroot / "etc/fstab"
    tab.write_text("# <file system> <mount point> <type> <options> <dump> <pass>\n"
                   "UUID=1234 /srv ext4 defaults 0 2\n")
    entries = ["none /srv ext4 noatime 0 2", ENTRY]
    apply_twice(chroot_chain, [this_os(), fstab.has_entries(*entries)])
    assert tab.read_text() == ("# <file system> <mount point> <type> <options> <dump> <pass>\n"
                               "UUID=1234 /srv ext4 noatime 0 2\n" + ENTRY + "\n")
    unapply(chroot_chain, fstab.has_entries("none /srv ext4 noatime 0 2"))
    assert tab.read_text() == ("# <file system> <mount point> <type> <options> <dump> <pass>\n"
                               + ENTRY + "\n")


def test_a_malformed_entry_is_refused(chroot_chain):
    with pytest.raises(Exception, match="each of entries must be an fstab line"):
        deploy_propspec(chroot_chain, [this_os(), fstab.has_entries("/dev/sda1 /srv")])


def test_mounted_mounts_from_fstab_and_unapply_unmounts(chroot_chain, debian_chroot):
    point = debian_chroot / "mnt/consfig-demo"
    try:
        apply_twice(chroot_chain, [this_os(), fstab.has_entries(ENTRY),
                                   mount.mounted("/mnt/consfig-demo")])
        assert mounted(point)
        apply_twice(chroot_chain, [this_os(), unapplied(mount.mounted("/mnt/consfig-demo"))])
        assert not mounted(point)
    finally:
        subprocess.run(["umount", str(point)], capture_output=True, timeout=30)


def test_unmounted_below_unmounts_nested_mounts(chroot_chain, debian_chroot):
    base = debian_chroot / "srv/nest"
    inner = base / "inner"
    try:
        subprocess.run(["mkdir", "-p", str(base)], check=True, timeout=30)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(base)],
                       check=True, timeout=30)
        inner.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(inner)],
                       check=True, timeout=30)
        apply_twice(chroot_chain, [this_os(), mount.unmounted_below("/srv/nest")])
        assert not mounted(inner) and not mounted(base)
    finally:
        for p in (inner, base):
            subprocess.run(["umount", str(p)], capture_output=True, timeout=30)


def test_unmounted_below_over_python_detaches_nested_and_stacked_mounts(tmp_path):
    # The target's Python detaches each mount through a descriptor of it:
    # a name with a space (\040 in mountinfo), a mount inside another, and
    # two mounted at the same place.
    base = tmp_path / "a b"
    inner = base / "inner"
    base.mkdir()
    try:
        for p in (base, base):
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(p)],
                           check=True, timeout=30)
        inner.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(inner)],
                       check=True, timeout=30)
        apply_twice(LOCAL, [this_os(), mount.unmounted_below(str(base))])
        assert not mounted(inner) and not mounted(base), "something is still mounted"
    finally:
        for p in (inner, base, base):
            subprocess.run(["umount", "--lazy", str(p)], capture_output=True, timeout=30)
