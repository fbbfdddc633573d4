"""Virtual machines (props/vm.hy) and bootable disk images: ONE real QEMU
boot for the whole suite (TCG where there is no KVM), of a disk image that
`vm.running` builds from the VM's host, whose own consfig image applies on
first boot."""

import json
import os
import shutil
import subprocess

import pytest

import hy
from hy.models import Keyword as K

from harness import unavailable, wait_until
from machines_lab import MARKER, self_applying_host

from consfig.errors import PropspecError
from consfig.props import vm

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
    ({K("disk"): "/x.img", K("image"): {K("tarball"): "/t.tar"}}, ":image is for building"),
    ({K("disk"): "/x.img", K("image"): {K("tarball"): "relative.tar"}}, ":image"),
])
def test_vm_running_refuses_bad_options_at_load(options, says):
    with pytest.raises(PropspecError, match=says):
        vm.running("web1", options)


def test_vm_running_with_a_host_refuses_a_disk_it_cannot_build_at_load():
    from consfig.props import apt
    with pytest.raises(PropspecError, match="must be a raw image"):
        vm.running("web1", {K("disk"): "/srv/web1.qcow2"}, apt.installed("nginx"))
    with pytest.raises(PropspecError, match="must be a raw image"):
        vm.running("web1", {K("disk"): "/srv/web1.img", K("format"): K("qcow2")}, apt.installed("nginx"))


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
def booted(debian_chroot_tarball, tmp_path_factory):
    """The one VM boot: `vm.running` given the VM's host, which builds its
    image from the cached tarball and boots it; yields (image, name)."""
    from proptest import deploy_propspec, statuses
    if os.geteuid() != 0:
        unavailable("building a disk image needs root")
    for tool in ["qemu-system-x86_64", "sfdisk", "mkfs.ext4", "losetup", "debugfs"]:
        if not shutil.which(tool):
            unavailable(f"{tool} is not installed (apt-get install qemu-system-x86 fdisk e2fsprogs)")
    image = tmp_path_factory.mktemp("vm") / "vm1.img"
    options = {K("disk"): str(image), K("image"): {K("tarball"): str(debian_chroot_tarball)}}
    host = self_applying_host("vm1.image.invalid")
    try:
        outcome, events = deploy_propspec([K("local")], vm.running(NAME, options, host))
        assert outcome.status == "changed", statuses(events)
        assert os.path.exists(image), "vm.running built the image"
        yield image, NAME, options, host
    finally:
        deploy_propspec([K("local")], vm.removed(NAME), check=False)


def _root_file(image, path):
    """The file PATH of the image's root filesystem (its last partition),
    read without mounting it."""
    dump = subprocess.run(["sfdisk", "--json", str(image)], capture_output=True, text=True,
                          check=True, timeout=60).stdout
    table = json.loads(dump)["partitiontable"]
    last = table["partitions"][-1]
    sector = table.get("sectorsize", 512)
    loop = subprocess.run(["losetup", "--read-only", "--find", "--show",
                           "--offset", str(last["start"] * sector),
                           "--sizelimit", str(last["size"] * sector), str(image)],
                          capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    try:
        # -c: the guest was powered off (its journal not replayed, bitmaps
        # stale), and this only reads.
        r = subprocess.run(["debugfs", "-c", "-R", f"cat {path}", loop], capture_output=True,
                           text=True, check=True, timeout=60)
        assert r.stdout, f"debugfs read nothing of {path}: {r.stderr}"
        return r.stdout
    finally:
        subprocess.run(["losetup", "-d", loop], timeout=60)


def _console(name):
    try:
        with open(vm.console_log(name), "rb") as f:
            return f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


@pytest.mark.slow
@pytest.mark.chroot
def test_a_built_image_boots_under_qemu_and_applies_its_consfig_on_first_boot(booted):
    image, name, _, _ = booted
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
def test_the_running_vm_changes_nothing_and_stopped_ends_qemu(booted):
    from proptest import deploy_propspec, statuses
    image, name, options, host = booted
    # Its disk is in use: vm.running leaves it alone (builds nothing) while
    # QEMU runs.
    outcome, events = deploy_propspec([K("local")], vm.running(name, options, host))
    assert outcome.status == "no-change", statuses(events)
    outcome, events = deploy_propspec([K("local")], vm.stopped(name))
    assert outcome.status == "changed", statuses(events)
    assert not vm_running(name), "QEMU still runs"
    assert not os.path.exists(vm.pid_file(name)), "the PID file is left"
    leftover = subprocess.run(["pgrep", "-f", f"-name {name} "], capture_output=True, text=True).stdout
    assert not leftover, f"a QEMU process is left: {leftover}"


@pytest.mark.slow
@pytest.mark.chroot
def test_a_built_images_initramfs_is_made_once_and_compressed_as_debian_does(booted):
    # initramfs-tools' own configuration activates its trigger, which made
    # the whole initramfs again after the kernel's made it (53 s of the 60 s
    # the boot packages took); without zstd (a recommendation) it fell back
    # to gzip.  (After the VM stopped: its disk is no longer in use.)
    image, name, _, _ = booted
    log = _root_file(image, "/var/log/apt/term.log")
    made = log.count("update-initramfs: Generating")
    assert made == 1, f"the initramfs was made {made} times:\n{log[-3000:]}"
    assert "No zstd" not in log, log[-3000:]


def test_the_dotted_form_takes_the_vms_propspec_as_its_trailing_forms(tmp_path):
    # As a site file writes it, compiled by Hy: the macro, not a call.
    site = tmp_path / "vmsite.hy"
    site.write_text('(require consfig *)\n(import consfig *)\n(use-props consfig.props [apt vm])\n'
                    '(setv P (vm.running* "web1" {:disk "/srv/web1.img"} (apt.installed "nginx")))\n')
    import importlib.util
    spec = importlib.util.spec_from_file_location("vmsite", site)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    p = module.P
    assert p.name == "consfig.props.vm.running", hy.repr(p)
    assert hy.repr(p.args[2]) == '(consfig.combinators.eseqprops (consfig.props.apt.installed "nginx"))', \
        hy.repr(p)
