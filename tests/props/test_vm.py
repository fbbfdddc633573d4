"""Virtual machines (props/vm.hy) and bootable disk images: ONE real QEMU
boot for the whole suite (TCG where there is no KVM), through the command
line, of a hybrid disk image (both GRUBs, a LUKS root) that `vm.running`
builds from the VM's host: under OVMF, unlocking its root with the key in
its initramfs, until its own consfig image applies; then, once that VM
stopped, the same disk under SeaBIOS until its kernel runs the initramfs."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

import hy
from hy.models import Keyword as K

from harness import unavailable, wait_until
from machines_lab import (BOOT_BOUND, MARKER_UNIT, console_text, console_with_marker,
                          marker_unit_text, vm_running)

from consfig.errors import PropspecError
from consfig.props import vm

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ui"))
from clirun import consfig  # noqa: E402

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


# The one boot's disk: both GRUBs (a BIOS boot partition and an ESP), a
# /boot of its own and a LUKS root, unlocked at boot by the key file in
# the initramfs.  PBKDF2's fewest iterations: the key is unlocked under
# emulation, tens of times slower than here, and a count given is not
# measured first (seconds).
VOLUMES = {K("table"): K("gpt"), K("size"): "2G",
           K("partitions"): [{K("size"): "1M", K("type"): K("bios-boot")},
                             {K("size"): "32M", K("type"): K("esp"), K("fs"): K("vfat"),
                              K("mount"): "/boot/efi"},
                             {K("size"): "128M", K("fs"): K("ext4"), K("mount"): "/boot"},
                             {K("size"): "64M", K("fs"): K("swap")},
                             {K("size"): K("rest"), K("fs"): K("ext4"), K("mount"): "/",
                              K("luks"): {K("name"): "cryptroot", K("iterations"): 1000}}]}
KEY = b"a key for the tests \x00\xff\n$(reboot) -rf"

SITE = """(require consfig *)
(import consfig *)
(use-props consfig.props [apt disk file image os systemd vm])
(try-register-data-source :files-tree :location {data})
(defhost vmhost.invalid {{:deploy [:local]}}
  (vm.running* {name} {{:disk {disk} :firmware :uefi :image {{:tarball {tarball}}}}}
    (os.debian-stable {suite} :{arch})
    (disk.has-volumes {volumes})
    (apt.installed-minimally "python3")
    (file.has-content {unit_path} {unit_text})
    (image.installed)
    (image.applied-periodically :every "1min" :via :systemd :random-delay 0 :first-after 1)
    ;; Skipped while building (no services start in the chroot): only an
    ;; application on the booted machine starts it.
    (systemd.started {unit})))
"""

# What the guest says on its console before the marker: what the build's
# apt log, inside its encrypted root, holds (initramfs-tools' own
# configuration activated its trigger, which made the whole initramfs
# again after the kernel's made it: 53 s of the 60 s the boot packages
# took; without zstd, a recommendation, it fell back to gzip).
REPORT = ('grep -c "update-initramfs: Generating" /var/log/apt/term.log | sed "s/^/initramfs-made: /"; '
          'grep -q "No zstd" /var/log/apt/term.log && echo initramfs-without-zstd; ')


def _deploy_site(site):
    """`consfig deploy` of the site's one host, as a user runs it."""
    r = consfig("deploy", "--consfig", site, "vmhost.invalid", timeout=BOOT_BOUND)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    return r.stdout + r.stderr


@pytest.fixture(scope="module")
def booted(debian_chroot_tarball, tmp_path_factory):
    """The one VM boot of the suite, through the command line: a site whose
    host runs `vm.running*` with the VM's propspec, which builds its hybrid
    image (both GRUBs, a LUKS root whose key is in the site's data) from the
    cached tarball and boots it under OVMF; yields (image, name, site,
    output)."""
    from proptest import deploy_propspec, host_arch, host_suite
    if os.geteuid() != 0:
        unavailable("building a disk image needs root")
    for tool in ["qemu-system-x86_64", "sfdisk", "mkfs.ext4", "mkfs.vfat", "mcopy", "cryptsetup",
                 "losetup"]:
        if not shutil.which(tool):
            unavailable(f"{tool} is not installed (apt-get install qemu-system-x86 fdisk e2fsprogs "
                        "dosfstools mtools cryptsetup-bin)")
    if not os.path.exists(vm.OVMF):
        unavailable(f"{vm.OVMF} is not there (apt-get install ovmf)")
    directory = tmp_path_factory.mktemp("vm")
    image = directory / "vm1.img"
    site = directory / "vmsite.hy"
    keys = directory / "data" / f"--luks-key--{NAME}"
    keys.mkdir(parents=True)
    (keys / "cryptroot").write_bytes(KEY)
    # A JSON string is a Hy string literal too.
    q = json.dumps
    site.write_text(SITE.format(name=q(NAME), disk=q(str(image)), data=q(str(directory / "data")),
                                tarball=q(str(debian_chroot_tarball)), suite=q(host_suite()),
                                arch=host_arch(), volumes=hy.repr(VOLUMES),
                                unit_path=q(f"/etc/systemd/system/{MARKER_UNIT}"),
                                unit_text=q(marker_unit_text(REPORT)), unit=q(MARKER_UNIT)))
    try:
        out = _deploy_site(site)
        assert os.path.exists(image), f"vm.running built no image:\n{out[-3000:]}"
        yield image, NAME, site, out
    finally:
        deploy_propspec([K("local")], vm.removed(NAME), check=False)


@pytest.mark.slow
@pytest.mark.chroot
def test_a_built_image_boots_under_ovmf_unlocks_its_root_and_applies_its_consfig(booted):
    image, name, _, out = booted
    console = console_with_marker(name)
    # Booted by UEFI (the kernel found EDK II's tables), from the root that
    # the initramfs unlocked with its key file, mounted from device-mapper.
    for line in ["efi: EFI v", "cryptroot: set up successfully", "EXT4-fs (dm-0): mounted filesystem"]:
        assert line in console, f"{line!r} is not on the console:\n{console[-3000:]}"
    assert "a key for the tests" not in out + console, "the key reached the output or the console"
    # Both GRUBs' partitions: a BIOS boot partition and an ESP.
    dump = subprocess.run(["sfdisk", "--dump", str(image)], capture_output=True, text=True).stdout
    assert "C12A7328-F81F-11D2-BA4B-00A0C93EC93B" in dump and "21686148" in dump, dump


@pytest.mark.slow
@pytest.mark.chroot
def test_a_built_images_initramfs_is_made_once_and_compressed_as_debian_does(booted):
    console = console_with_marker(booted[1])
    # (A getty's prompt may come first on the line.)
    made = re.findall(r"initramfs-made: (\d+)", console)
    assert made == ["1"], f"the initramfs was made {made} times:\n{console[-3000:]}"
    assert "initramfs-without-zstd" not in console, console[-3000:]


@pytest.mark.slow
@pytest.mark.chroot
def test_an_existing_image_with_a_luks_root_is_left_as_it_is_and_says_why(booted, tmp_path):
    from consfig.data.items import reset_data_sources
    from consfig.props import disk
    from proptest import data_item, deploy_propspec, statuses
    from machines_lab import self_applying_host
    image, name, _, _ = booted
    host = self_applying_host(name, VOLUMES)
    reset_data_sources()
    data_item(tmp_path, *disk.luks_key_item(name, "cryptroot"), KEY)
    seen = []
    try:
        outcome, events = deploy_propspec([K("local")], disk.raw_image_built_for(
            {K("tarball"): "/nonexistent.tar"}, host, str(image)), sink=seen.append)
    finally:
        reset_data_sources()
    assert outcome.status == "no-change", statuses(events)
    said = " ".join(e.get("text", "") for e in seen if isinstance(e, dict))
    assert "root is encrypted (LUKS)" in said and "remove the image to build it anew" in said, said
    # (Its VM still runs: the image's own writes are the guest's.)
    ran = [e["text"] for e in seen if isinstance(e, dict) and e.get("text", "").startswith("$ ")]
    assert not [c for c in ran if c.split()[1] in ("losetup", "mount", "cryptsetup", "tar")], \
        f"the image was opened: {ran}"


@pytest.mark.slow
@pytest.mark.chroot
def test_the_running_vm_changes_nothing_and_stopped_ends_qemu(booted):
    from proptest import deploy_propspec, statuses
    image, name, site, _ = booted
    # Its disk is in use: vm.running leaves it alone (builds nothing) while
    # QEMU runs.
    out = _deploy_site(site)
    assert "No changes were made" in out, out[-3000:]
    from consfig.model.host import find_host
    from consfig.site.load import load_consfig
    from proptest import checks_clean
    load_consfig(str(site))
    checks_clean([K("local")], find_host("vmhost.invalid"))
    outcome, events = deploy_propspec([K("local")], vm.stopped(name))
    assert outcome.status == "changed", statuses(events)
    checks_clean([K("local")], vm.stopped(name))
    assert not vm_running(name), "QEMU still runs"
    assert not os.path.exists(vm.pid_file(name)), "the PID file is left"
    leftover = subprocess.run(["pgrep", "-f", f"-name {name} "], capture_output=True, text=True).stdout
    assert not leftover, f"a QEMU process is left: {leftover}"


@pytest.mark.slow
@pytest.mark.chroot
def test_the_hybrid_image_boots_its_kernel_under_seabios_too(booted):
    # The BIOS half of the hybrid, the same disk once its VM stopped: GRUB
    # for BIOS loads the kernel and its initramfs, which starts, and the
    # machine is powered off there (its root is still mounted read-only, if
    # at all).  The rest of the boot is the one above.
    from proptest import checks_clean, deploy_propspec, statuses
    image, name, _, _ = booted
    assert not vm_running(name), "the VM still runs: its disk is in use"
    bios = name + "b"
    try:
        outcome, events = deploy_propspec([K("local")], vm.running(
            bios, {K("disk"): str(image), K("firmware"): K("bios")}))
        assert outcome.status == "changed", statuses(events)
        wait_until(lambda: "Run /init as init process" in console_text(bios) or not vm_running(bios),
                   timeout=BOOT_BOUND, what="the kernel GRUB loaded under SeaBIOS to run its initramfs")
        console = console_text(bios)
        assert "Run /init as init process" in console, console[-3000:]
        assert "efi: EFI v" not in console, "booted by UEFI"
        outcome, events = deploy_propspec([K("local")], vm.removed(bios))
        assert outcome.status == "changed", statuses(events)
        checks_clean([K("local")], vm.removed(bios))
        assert not vm_running(bios) and not os.path.exists(vm.console_log(bios)), "not removed"
    finally:
        deploy_propspec([K("local")], vm.removed(bios), check=False)


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
