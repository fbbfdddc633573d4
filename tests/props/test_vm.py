"""Virtual machines (props/vm.hy) and bootable disk images: ONE real QEMU
boot for the whole suite (TCG where there is no KVM), of a disk image built
from a host whose own consfig image applies on first boot."""

import os
import shutil
import subprocess

import pytest

import hy
from hy.models import Keyword as K

from harness import unavailable, wait_until
from machines_lab import MARKER, self_applying_host

from consfig.errors import PropspecError
from consfig.props import disk, vm

# How long the guest may take, under emulation on a busy 2-core machine, to
# boot and apply its image (the timer fires a second after boot).
BOOT_BOUND = 600
NAME = f"cfvm{os.getpid()}"


@pytest.mark.parametrize("options, says", [
    ({K("memory"): 512}, "no :disk"),
    ({K("disk"): "relative.img"}, "not an absolute path"),
    ({K("disk"): "/x.img", K("memory"): 8}, ":memory 8"),
    ({K("disk"): "/x.img", K("cpus"): 0}, ":cpus 0"),
    ({K("disk"): "/x.img", K("format"): K("vmdk")}, ":format"),
    ({K("disk"): "/x.img", K("bios"): True}, "unknown option :bios"),
    ({K("disk"): "/x.img", K("accel"): K("hvf")}, ":accel"),
])
def test_vm_running_refuses_bad_options_at_load(options, says):
    with pytest.raises(PropspecError, match=says):
        vm.running("web1", options)


def test_vm_running_refuses_a_bad_machine_name_at_load():
    with pytest.raises(PropspecError):
        vm.running("-rf", {K("disk"): "/x.img"})


def test_qemu_argv_uses_kvm_only_where_it_works_and_logs_the_console():
    argv = vm.qemu_argv("web1", {"disk": "/srv/a,b.qcow2"})
    assert argv[argv.index("-accel") + 1] == "tcg", argv
    argv = vm.qemu_argv("web1", {"disk": "/srv/a,b.qcow2"}, True)
    assert argv[argv.index("-accel") + 1] == "kvm", argv
    argv = vm.qemu_argv("web1", {"disk": "/srv/a,b.qcow2", "accel": K("tcg")}, True)
    assert argv[argv.index("-accel") + 1] == "tcg", argv
    assert "file=/srv/a,,b.qcow2,format=qcow2,if=virtio" in argv, argv
    assert f"file:{vm.console_log('web1')}" in argv, argv


@pytest.fixture(scope="module")
def built(debian_chroot_tarball, tmp_path_factory):
    """A disk image of `self_applying_host` built from the cached tarball."""
    from proptest import deploy_propspec, statuses
    if os.geteuid() != 0:
        unavailable("building a disk image needs root")
    for tool in ["qemu-system-x86_64", "sfdisk", "mkfs.ext4", "losetup", "debugfs"]:
        if not shutil.which(tool):
            unavailable(f"{tool} is not installed (apt-get install qemu-system-x86 fdisk e2fsprogs)")
    image = tmp_path_factory.mktemp("vm") / "vm1.img"
    host = self_applying_host("vm1.image.invalid")
    outcome, events = deploy_propspec(
        [K("local")], disk.raw_image_built_for({K("tarball"): str(debian_chroot_tarball)},
                                               host, str(image)))
    assert outcome.status == "changed", statuses(events)
    return image


@pytest.fixture(scope="module")
def booted(built):
    """The one VM boot: the built image, booted with vm.running; yields
    (image, name)."""
    from proptest import deploy_propspec, statuses
    try:
        outcome, events = deploy_propspec([K("local")], vm.running(NAME, {K("disk"): str(built)}))
        assert outcome.status == "changed", statuses(events)
        yield built, NAME
    finally:
        deploy_propspec([K("local")], vm.removed(NAME), check=False)


def _root_file(image, path):
    """The file PATH of the image's root filesystem (its last partition),
    read without mounting it."""
    dump = subprocess.run(["sfdisk", "--json", str(image)], capture_output=True, text=True,
                          check=True, timeout=60).stdout
    import json
    table = json.loads(dump)["partitiontable"]
    last = table["partitions"][-1]
    sector = table.get("sectorsize", 512)
    loop = subprocess.run(["losetup", "--read-only", "--find", "--show",
                           "--offset", str(last["start"] * sector),
                           "--sizelimit", str(last["size"] * sector), str(image)],
                          capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    try:
        return subprocess.run(["debugfs", "-R", f"cat {path}", loop], capture_output=True,
                              text=True, check=True, timeout=60).stdout
    finally:
        subprocess.run(["losetup", "-d", loop], timeout=60)


@pytest.mark.slow
@pytest.mark.chroot
def test_a_built_images_initramfs_is_made_once_and_compressed_as_debian_does(built):
    # initramfs-tools' own configuration activates its trigger, which made
    # the whole initramfs again after the kernel's made it (53 s of the 60 s
    # the boot packages took); without zstd (a recommendation) it fell back
    # to gzip.
    log = _root_file(built, "/var/log/apt/term.log")
    made = log.count("update-initramfs: Generating")
    assert made == 1, f"the initramfs was made {made} times:\n{log[-3000:]}"
    assert "No zstd" not in log, log[-3000:]


def _console(name):
    try:
        with open(vm.console_log(name), "rb") as f:
            return f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


@pytest.mark.slow
@pytest.mark.chroot
def test_a_built_image_boots_under_qemu_and_applies_its_consfig_on_first_boot(booted):
    image, name = booted
    try:
        wait_until(lambda: MARKER in _console(name) or not vm_running(name), timeout=BOOT_BOUND,
                   what="the guest to say on its serial console that consfig applied")
    except Exception:
        raise AssertionError(f"no {MARKER!r} on the console within {BOOT_BOUND} s; it ends:\n"
                             + _console(name)[-3000:])
    assert MARKER in _console(name), f"QEMU ended early; the console ends:\n{_console(name)[-3000:]}"


def vm_running(name):
    from consfig.transport.local import LocalConnection
    from consfig.model.context import applying
    from consfig.model.host import Host
    with applying(Host("vm.test.invalid", None), LocalConnection()):
        return getattr(vm, hy.mangle("running?"))(name)


@pytest.mark.slow
@pytest.mark.chroot
def test_vm_running_again_changes_nothing_and_stopped_ends_qemu(booted):
    from proptest import deploy_propspec, statuses
    image, name = booted
    outcome, events = deploy_propspec([K("local")], vm.running(name, {K("disk"): str(image)}))
    assert outcome.status == "no-change", statuses(events)
    outcome, events = deploy_propspec([K("local")], vm.stopped(name))
    assert outcome.status == "changed", statuses(events)
    assert not vm_running(name), "QEMU still runs"
    assert not os.path.exists(vm.pid_file(name)), "the PID file is left"
    leftover = subprocess.run(["pgrep", "-f", f"-name {name} "], capture_output=True, text=True).stdout
    assert not leftover, f"a QEMU process is left: {leftover}"
