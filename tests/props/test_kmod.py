"""kmod: the files in modules-load.d and modprobe.d in the Debian chroot
(where the running kernel is left alone), and over :local inside namespaces
of the test's own (livens.py) against this machine's running kernel."""

import subprocess

import pytest

import hy  # noqa: F401
from consfig.errors import PropspecError
from consfig.props import kmod

from livens import in_namespaces
from proptest import apply_twice, deploy_propspec, diffs, unapply


@pytest.mark.chroot
def test_a_module_is_listed_for_boot_and_not_loaded_in_a_chroot(debian_chroot, chroot_chain):
    p = [kmod.loaded_at_boot("br_netfilter"), kmod.loaded_at_boot("wireguard")]
    events = apply_twice(chroot_chain, p)
    assert (debian_chroot / "etc/modules-load.d/consfig.conf").read_text() == \
        "br_netfilter\nwireguard\n"
    assert any("br_netfilter not loaded now: the running kernel is left alone (in a chroot)"
               in e.get("text", "") for e in events), events
    unapply(chroot_chain, kmod.loaded_at_boot("br_netfilter"))
    assert (debian_chroot / "etc/modules-load.d/consfig.conf").read_text() == "wireguard\n"


@pytest.mark.chroot
def test_options_are_given_in_a_file_of_the_modules_own(debian_chroot, chroot_chain):
    p = kmod.has_options("snd-hda-intel", "power_save", 1, "model", "auto")
    apply_twice(chroot_chain, p)
    assert (debian_chroot / "etc/modprobe.d/consfig-snd-hda-intel.conf").read_text() == \
        "options snd-hda-intel power_save=1 model=auto\n"
    apply_twice(chroot_chain, kmod.has_options("snd-hda-intel", {"power_save": 0}))
    assert (debian_chroot / "etc/modprobe.d/consfig-snd-hda-intel.conf").read_text() == \
        "options snd-hda-intel power_save=0\n"
    unapply(chroot_chain, p)
    assert not (debian_chroot / "etc/modprobe.d/consfig-snd-hda-intel.conf").exists()


@pytest.mark.chroot
def test_blacklisted_and_never_loaded(debian_chroot, chroot_chain):
    conf = debian_chroot / "etc/modprobe.d/consfig-blacklist.conf"
    apply_twice(chroot_chain, kmod.blacklisted("pcspkr"))
    assert conf.read_text() == "blacklist pcspkr\n"
    apply_twice(chroot_chain, kmod.blacklisted("usb-storage", never_loaded=True))
    assert conf.read_text() == \
        "blacklist pcspkr\nblacklist usb-storage\ninstall usb-storage /bin/false\n"
    apply_twice(chroot_chain, kmod.blacklisted("usb-storage"))
    assert conf.read_text() == "blacklist pcspkr\nblacklist usb-storage\n"
    unapply(chroot_chain, [kmod.blacklisted("pcspkr"), kmod.blacklisted("usb-storage")])
    assert conf.read_text() == ""


@pytest.mark.chroot
def test_check_mode_shows_the_options_file_and_writes_nothing(debian_chroot, chroot_chain):
    outcome, events = deploy_propspec(chroot_chain, kmod.has_options("zfs", "zfs_arc_max", 1024),
                                      check_mode=True)
    assert outcome.exit_code(True) == 2
    assert "+options zfs zfs_arc_max=1024" in "".join(d["text"] for d in diffs(events))
    assert not (debian_chroot / "etc/modprobe.d/consfig-zfs.conf").exists()


def test_on_a_kernel_without_loadable_modules_a_module_is_listed_and_the_kernel_left_alone():
    # This machine's kernel, over :local: a module it has built in is
    # already there; another cannot be loaded where there is no /proc/modules.
    has_modules = in_namespaces([["sh", "test -e /proc/modules && echo yes"]])[0]["stdout"]
    if has_modules:
        pytest.skip("this kernel loads modules; the test is for one that does not")
    p = [kmod.loaded_at_boot("loop"), kmod.loaded_at_boot("dummy")]
    first, second, conf = in_namespaces(
        [["apply", p], ["apply", p], ["sh", "cat /etc/modules-load.d/consfig.conf"]],
        tmpfs=["/etc/modules-load.d"])
    assert first["status"] == "changed", first
    assert second["status"] == "no-change", second
    kind = subprocess.run(["systemd-detect-virt", "--container"], capture_output=True, text=True,
                          timeout=60)
    why = (f"in a container ({kind.stdout.strip()}): its kernel is the machine's"
           if kind.returncode == 0 else "this kernel loads no modules")
    assert f"dummy not loaded now: the running kernel is left alone ({why})" in first["notes"], first
    assert not any(n.startswith("loop not loaded") for n in first["notes"]), \
        "loop is built in, and so loaded"
    assert conf["stdout"] == "loop\ndummy\n"


def test_hostile_module_names_and_options_are_refused_where_they_are_written():
    for make in [lambda: kmod.loaded_at_boot("-v"),
                 lambda: kmod.loaded_at_boot("dummy\nevil"),
                 lambda: kmod.loaded_at_boot("../../etc/x"),
                 lambda: kmod.blacklisted("x y"),
                 lambda: kmod.has_options("zfs"),
                 lambda: kmod.has_options("zfs", "a", "1 install zfs /bin/sh"),
                 lambda: kmod.has_options("zfs", "a b", 1),
                 lambda: kmod.has_options("zfs", "a", '"x'),
                 lambda: kmod.has_options("zfs", "a", 1, "b")]:
        with pytest.raises(PropspecError):
            make()
