"""Swap files and crypttab entries: in the Debian chroot (where the running
kernel is left alone), and a swap file the running kernel swaps on, over
:local, on a loop-mounted ext4 file system of the test's own, with a
private overlay on /etc (livens.py)."""

import os
import subprocess

import pytest

import hy  # noqa: F401
from consfig.errors import PropspecError
from consfig.props import crypttab, swap

from livens import in_namespaces
from proptest import apply_twice, deploy_propspec, failure_text, in_chroot, said, statuses, unapply

MIB = 1024 * 1024


def is_swap(path):
    return subprocess.run(["blkid", "-p", "-s", "TYPE", "-o", "value", str(path)],
                          capture_output=True, text=True, timeout=60).stdout.strip() == "swap"


@pytest.mark.chroot
def test_a_swap_file_is_made_and_listed_and_not_used_in_a_chroot(debian_chroot, chroot_chain):
    f = debian_chroot / "var/swap file"
    events = apply_twice(chroot_chain, swap.file_exists("/var/swap file", "16M"))
    assert f.stat().st_size == 16 * MIB
    assert oct(f.stat().st_mode & 0o777) == "0o600"
    assert is_swap(f)
    assert "/var/swap\\040file none swap sw 0 0\n" in (debian_chroot / "etc/fstab").read_text()
    assert any("not used now: the running kernel is left alone (in a chroot)" in e.get("text", "")
               for e in events)
    assert "/var/swap file" not in open("/proc/swaps").read().replace("\\040", " ")
    assert not (debian_chroot / "var/swap file.consfig-new").exists()


@pytest.mark.chroot
def test_a_swap_file_of_another_size_is_made_anew(debian_chroot, chroot_chain):
    deploy_propspec(chroot_chain, swap.file_exists("/swapfile", "16M"))
    apply_twice(chroot_chain, swap.file_exists("/swapfile", 24 * MIB))
    assert (debian_chroot / "swapfile").stat().st_size == 24 * MIB
    assert is_swap(debian_chroot / "swapfile")
    assert (debian_chroot / "etc/fstab").read_text().count("/swapfile ") == 1


@pytest.mark.chroot
def test_a_file_that_is_not_swap_is_never_replaced(debian_chroot, chroot_chain):
    precious = debian_chroot / "srv/precious"
    precious.parent.mkdir(exist_ok=True)
    precious.write_text("data\n")
    outcome, events = deploy_propspec(chroot_chain, swap.file_exists("/srv/precious", "16M"),
                                      check=False)
    assert outcome.status == "failed"
    assert "/srv/precious exists and is not a swap file" in failure_text(events)
    assert precious.read_text() == "data\n"


@pytest.mark.chroot
def test_check_mode_says_what_would_be_made_and_makes_nothing(debian_chroot, chroot_chain):
    outcome, events = deploy_propspec(chroot_chain, swap.file_exists("/checked", "16M"),
                                      check_mode=True)
    assert outcome.exit_code(True) == 2, statuses(events)
    assert any(e.get("text") == f"/checked would be made: {16 * MIB} bytes of swap" for e in events)
    assert not (debian_chroot / "checked").exists()
    assert "/checked " not in (debian_chroot / "etc/fstab").read_text()


@pytest.mark.chroot
def test_unapplied_swap_file_is_removed_with_its_line(debian_chroot, chroot_chain):
    p = swap.file_exists("/swap-gone", "16M")
    deploy_propspec(chroot_chain, p)
    unapply(chroot_chain, p)
    assert not (debian_chroot / "swap-gone").exists()
    assert "/swap-gone " not in (debian_chroot / "etc/fstab").read_text()


@pytest.fixture
def scratch_fs(tmp_path):
    """An ext4 file system on a loop device, mounted in this machine's mount
    namespace (so that a swap on it can always be turned off from here)."""
    image, mnt = tmp_path / "fs.img", tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["truncate", "-s", "96M", str(image)], check=True, timeout=60)
    subprocess.run(["mkfs.ext4", "-q", str(image)], check=True, timeout=120)
    subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], check=True, timeout=60)
    try:
        yield mnt
    finally:
        for f in mnt.iterdir():
            subprocess.run(["swapoff", str(f)], capture_output=True, timeout=600)
        subprocess.run(["umount", str(mnt)], check=True, timeout=120)


def machine_container():
    """What kind of container this machine is ("docker"…), or None."""
    r = subprocess.run(["systemd-detect-virt", "--container"], capture_output=True, text=True,
                       timeout=60)
    return r.stdout.strip() if r.returncode == 0 else None


def test_a_swap_file_is_swapped_on_by_the_running_kernel(scratch_fs):
    if machine_container():
        pytest.skip(f"this machine is a container ({machine_container()}): its kernel is not its "
                    "own, test_in_a_container_the_kernel_is_left_alone is the test here")
    path = f"{scratch_fs}/swap file"
    p = swap.file_exists(path, "32M")
    first, second, proc, fstab, off = in_namespaces(
        [["apply", p], ["apply", p], ["sh", "cat /proc/swaps"], ["sh", "cat /etc/fstab"],
         ["unapply", p]],
        overlay=["/etc"])
    assert first["status"] == "changed", first
    assert second["status"] == "no-change", second
    assert swap.fstab_escaped(path) in proc["stdout"], proc
    assert f"{swap.fstab_escaped(path)} none swap sw 0 0\n" in fstab["stdout"]
    assert off["status"] == "changed", off
    assert swap.fstab_escaped(path) not in open("/proc/swaps").read(), "swapped off on unapply"
    assert list(scratch_fs.iterdir()) == [scratch_fs / "lost+found"]
    assert swap.fstab_escaped(path) not in open("/etc/fstab").read(), "this machine's fstab untouched"


def test_in_a_container_the_kernel_is_left_alone(scratch_fs):
    kind = machine_container()
    if not kind:
        pytest.skip("this machine has a kernel of its own; the booted container's test covers it")
    path = f"{scratch_fs}/swap file"
    p = swap.file_exists(path, "32M")
    first, second, off = in_namespaces([["apply", p], ["apply", p], ["unapply", p]],
                                       overlay=["/etc"])
    assert first["status"] == "changed", first
    assert second["status"] == "no-change", second
    assert (f"{path} not used now: the running kernel is left alone (in a container ({kind}): "
            "its kernel is the machine's)") in first["notes"], first["notes"]
    assert swap.fstab_escaped(path) not in open("/proc/swaps").read(), "the machine's swap untouched"
    assert off["status"] == "changed", off
    assert list(scratch_fs.iterdir()) == [scratch_fs / "lost+found"]


def test_removing_a_container_swaps_off_what_the_machine_swaps_on_in_it(scratch_fs):
    # What an older consfig left: the container's /swapfile in the
    # machine's /proc/swaps, which rm cannot remove.
    from hy.models import Keyword
    from consfig.props import container
    name = f"cfswap{os.getpid()}"
    root = scratch_fs / "machine"
    for d in ["etc", "usr"]:
        (root / d).mkdir(parents=True)
    swapfile = root / "swapfile"
    subprocess.run(f"fallocate -l 32M {swapfile} && chmod 600 {swapfile} && mkswap -q {swapfile} "
                   f"&& swapon {swapfile}", shell=True, check=True, timeout=120)
    link = f"/var/lib/machines/{name}"
    os.makedirs("/var/lib/machines", exist_ok=True)
    os.symlink(root, link)
    try:
        outcome, events = deploy_propspec([Keyword("local")], container.nspawn_removed(name),
                                          check=False)
        assert outcome.status == "changed", failure_text(events)
        assert f"{swapfile} was swapped on by the machine's kernel: swapped off" in said(events)
        assert str(swapfile) not in open("/proc/swaps").read()
        assert not root.exists() and not os.path.lexists(link)
    finally:
        subprocess.run(["swapoff", str(swapfile)], capture_output=True, timeout=600)
        if os.path.islink(link):
            os.unlink(link)


def test_hostile_swap_values_are_refused_where_they_are_written():
    for path, size in [("relative", "1G"), ("/swap\nUUID=x / ext4", "1G"), ("/sw\\040ap", "1G"),
                       ("/swap/", "1G"), ("/swap", "1K"), ("/swap", "1G; reboot"), ("/swap", -MIB),
                       ("/swap", True)]:
        with pytest.raises(PropspecError):
            swap.file_exists(path, size)


@pytest.mark.chroot
def test_crypttab_entries_are_matched_by_name(debian_chroot, chroot_chain):
    tab = debian_chroot / "etc/crypttab"
    tab.write_text("# <target name> <source device> <key file> <options>\n"
                   "data UUID=old none luks\nother /dev/sdb1 - luks\n")
    p = crypttab.has_entry("data", "UUID=0b9e-11", key_file="/etc/keys/data.key",
                           options=["luks", "discard"])
    apply_twice(chroot_chain, p)
    assert tab.read_text() == ("# <target name> <source device> <key file> <options>\n"
                               "data UUID=0b9e-11 /etc/keys/data.key luks,discard\n"
                               "other /dev/sdb1 - luks\n")
    apply_twice(chroot_chain, crypttab.has_entry("swap", "/dev/sda3", key_file="/dev/urandom",
                                                 options=["swap", "cipher=aes-xts-plain64", "size=512"]))
    assert tab.read_text().endswith("swap /dev/sda3 /dev/urandom swap,cipher=aes-xts-plain64,size=512\n")
    unapply(chroot_chain, p)
    assert "data " not in tab.read_text()
    assert "other /dev/sdb1 - luks\n" in tab.read_text()


@pytest.mark.chroot
def test_crypttab_is_made_when_missing(debian_chroot, chroot_chain):
    in_chroot(debian_chroot, "rm -f /etc/crypttab")
    apply_twice(chroot_chain, crypttab.has_entry("data", "LABEL=data"))
    assert (debian_chroot / "etc/crypttab").read_text() == "data LABEL=data none luks\n"


def test_hostile_crypttab_values_are_refused_where_they_are_written():
    for kw in [dict(name="-x", source="UUID=a"), dict(name="a\nroot", source="UUID=a"),
               dict(name="d", source="UUID=a b"), dict(name="d", source="$(reboot)"),
               dict(name="d", source="/dev/sda", key_file="key"),
               dict(name="d", source="/dev/sda", options=["luks,noauto"]),
               dict(name="d", source="/dev/sda", options=["luks\nx"])]:
        with pytest.raises(PropspecError):
            crypttab.has_entry(**kw)
