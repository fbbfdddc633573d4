"""UEFI boot images and LUKS roots (props/disk.hy, props/vm.hy), on loop
devices and as data.  Their boot, under OVMF, with the root unlocked by the
key file in the initramfs, is test_vm.py's one boot."""

import os
import re
import shutil
import subprocess

import pytest

import hy  # noqa: F401
from hy.models import Keyword as K

from harness import unavailable, wait_until

from consfig.data.items import MissingData, reset_data_sources
from consfig.errors import PropspecError
from consfig.model.context import applying
from consfig.model.host import Host
from consfig.props import disk, vm
from consfig.transport.local import LocalConnection

KEY = b"a key for the tests \x00\xff\n$(reboot) -rf"

ESP = {K("size"): "32M", K("type"): K("esp"), K("fs"): K("vfat"), K("mount"): "/boot/efi"}
BOOT = {K("size"): "128M", K("fs"): K("ext4"), K("mount"): "/boot"}


def _root(**kw):
    return {K("size"): K("rest"), K("fs"): K("ext4"), K("mount"): "/",
            **{K(k): v for k, v in kw.items()}}


# PBKDF2's fewest iterations: the key is unlocked under emulation, tens of
# times slower than here, and a count given is not measured first (seconds).
UEFI_LUKS = {K("table"): K("gpt"), K("size"): "2G",
             K("partitions"): [ESP, BOOT,
                               _root(luks={K("name"): "cryptroot", K("iterations"): 1000})]}


def _volumes(*partitions):
    return {K("table"): K("gpt"), K("size"): "1G", K("partitions"): list(partitions)}


@pytest.mark.parametrize("volumes, says", [
    (_volumes(ESP, _root(luks="cryptroot")), "needs a /boot partition of its own"),
    (_volumes(ESP, {**BOOT, K("luks"): "cryptboot"}, _root()), "only the root filesystem"),
    (_volumes(ESP, BOOT, _root(luks="-rf")), ":luks \"-rf\""),
    (_volumes(ESP, BOOT, _root(luks="a b")), ":luks \"a b\""),
    (_volumes(ESP, BOOT, _root(luks={K("name"): "root", K("iter-time"): 1})), "iter-time"),
    (_volumes(ESP, BOOT, _root(luks={K("name"): "root", K("iterations"): 10})), "iterations"),
    (_volumes(ESP, BOOT, _root(luks={K("name"): "root", K("iterations"): 1000, K("iter-time"): 10})),
     "not both"),
    (_volumes(ESP, BOOT, _root(luks={K("name"): "root", K("cipher"): "x"})), ":luks"),
    (_volumes(ESP, BOOT, {**_root(luks="root"), K("size"): "60M"}), "needs more than 64 MiB"),
])
def test_has_volumes_refuses_a_luks_root_it_cannot_build_at_load(volumes, says):
    with pytest.raises(PropspecError, match=says.replace("(", r"\(")):
        disk.has_volumes(volumes)


def test_a_disk_with_an_esp_gets_grub_for_uefi_unless_told_otherwise():
    norm = disk.normalise_volumes(UEFI_LUKS)
    assert disk.image_bootloader(norm, {}) == "grub-efi"
    assert disk.image_bootloader(norm, {"bootloader": K("grub-bios")}) == "grub-bios"
    bios = disk.normalise_volumes(_volumes({K("size"): "1M", K("type"): K("bios-boot")}, _root()))
    assert disk.image_bootloader(bios, {}) == "grub-bios"
    both = disk.normalise_volumes(_volumes({K("size"): "1M", K("type"): K("bios-boot")}, ESP, _root()))
    assert disk.image_bootloader(both, {}) == "grub-hybrid", "both partitions get both GRUBs"
    assert disk.image_bootloader(both, {"bootloader": K("grub-bios")}) == "grub-bios"


def test_a_hybrid_image_gets_both_grubs_images_inside():
    packages = disk.boot_packages("grub-hybrid", False)
    assert "grub-pc-bin" in packages and "grub-efi-amd64-bin" in packages, packages
    assert "cryptsetup-initramfs" not in packages, packages
    assert disk.boot_packages("grub-bios", False) == disk.BOOT_PACKAGES


@pytest.mark.parametrize("volumes, firmware", [
    (UEFI_LUKS, "uefi"),
    (_volumes({K("size"): "1M", K("type"): K("bios-boot")}, _root()), "bios"),
    # Both (a hybrid disk): SeaBIOS, unless told.
    (_volumes({K("size"): "1M", K("type"): K("bios-boot")}, ESP, _root()), "bios"),
    ({**_volumes(ESP, _root()), K("table"): K("msdos")}, "bios"),
])
def test_a_vm_boots_by_uefi_when_its_raw_disk_is_gpt_with_an_esp_alone(volumes, firmware, tmp_path):
    if not shutil.which("sfdisk"):
        unavailable("sfdisk is not installed (apt-get install fdisk)")
    image = tmp_path / "disk.img"
    norm = disk.normalise_volumes(volumes)
    subprocess.run(["truncate", "-s", f"{disk.disk_mebibytes(norm)}M", str(image)], check=True)
    subprocess.run(["sfdisk", "--quiet", str(image)], input=disk.sfdisk_script(norm), text=True,
                   check=True)
    with applying(Host("vm.test.invalid", None), LocalConnection()):
        assert vm.firmware_of({"disk": str(image)}) == firmware
        assert vm.firmware_of({"disk": str(image), "firmware": K("bios")}) == "bios"
        assert vm.firmware_of({"disk": str(image) + ".qcow2"}) == "bios", "a qcow2 disk is not read"
        assert vm.firmware_of({"disk": str(tmp_path / "none.img")}) == "bios", "no disk, no table"


def test_a_luks_roots_image_unlocks_it_as_its_mapper_name_with_the_key_in_the_initramfs():
    norm = disk.normalise_volumes(UEFI_LUKS)
    lines = disk.fstab_lines(norm, {0: "AAAA-BBBB", 1: "b-o-o-t", 2: "r-o-o-t"})
    assert lines[0] == "/dev/mapper/cryptroot / ext4 defaults 0 1", lines
    packages = disk.boot_packages("grub-efi", True)
    assert "grub-efi-amd64-bin" in packages and "grub-pc-bin" not in packages, packages
    assert "cryptsetup-initramfs" in packages and packages[0] == disk.BOOT_KERNEL, packages
    cfg = disk.grub_cfg("/vmlinuz-6", "/initrd.img-6", "b-o-o-t", "r-o-o-t",
                        root_device="/dev/mapper/cryptroot")
    assert " root=/dev/mapper/cryptroot ro " in cfg, cfg


def test_qemu_boots_by_uefi_with_ovmf_only_when_told():
    argv = vm.qemu_argv("web1", {"disk": "/srv/a.img", "firmware": "uefi"})
    assert argv[argv.index("-bios") + 1] == vm.OVMF, argv
    assert "-bios" not in vm.qemu_argv("web1", {"disk": "/srv/a.img"}), "BIOS is SeaBIOS, QEMU's own"
    with pytest.raises(PropspecError, match=":firmware"):
        vm.running("web1", {K("disk"): "/x.img", K("firmware"): K("coreboot")})


@pytest.fixture
def loop(tmp_path):
    if os.geteuid() != 0:
        unavailable("loop devices need root")
    for tool in ["cryptsetup", "mkfs.ext4", "mkfs.vfat", "mcopy", "debugfs", "losetup"]:
        if not shutil.which(tool):
            unavailable(f"{tool} is not installed (apt-get install cryptsetup-bin e2fsprogs "
                        "dosfstools mtools)")
    backing = tmp_path / "part.img"
    subprocess.run(["truncate", "-s", "96M", str(backing)], check=True)
    device = subprocess.run(["losetup", "--show", "--find", str(backing)], capture_output=True,
                            text=True, check=True).stdout.strip()
    try:
        yield device
    finally:
        subprocess.run(["losetup", "--detach", device])


def test_a_filesystem_is_encrypted_in_place_without_device_mapper(loop, tmp_path):
    # Made as a build makes it: ending LUKS-RESERVE-MIB before the device.
    subprocess.run(["mkfs.ext4", "-q", "-F", loop, f"{(96 - disk.LUKS_RESERVE_MIB) * 1024}k"],
                   check=True)
    with applying(Host("image.test.invalid", None), LocalConnection()):
        disk.encrypt_in_place(loop, KEY, "0b9e2a3c-5d6e-4f70-8a9b-0c1d2e3f4a5b", None,
                              iterations=1000)
    probe = subprocess.run(["blkid", "-p", "-o", "export", loop], capture_output=True,
                           text=True).stdout
    assert "TYPE=crypto_LUKS" in probe and "UUID=0b9e2a3c-5d6e-4f70-8a9b-0c1d2e3f4a5b" in probe, probe
    key = tmp_path / "key"
    key.write_bytes(KEY)
    opens = subprocess.run(["cryptsetup", "open", "--test-passphrase", f"--key-file={key}", loop])
    assert opens.returncode == 0, "the key does not open it"
    dump = subprocess.run(["cryptsetup", "luksDump", loop], capture_output=True, text=True).stdout
    assert "pbkdf2" in dump and re.search(r"Iterations:\s+1000\n", dump) \
        and "offset: 16777216 [bytes]" in dump, dump


def test_encrypting_a_device_without_room_for_the_header_fails_and_says_so(loop):
    subprocess.run(["mkfs.ext4", "-q", "-F", loop], check=True)
    from consfig.errors import FailedChange
    with applying(Host("image.test.invalid", None), LocalConnection()):
        with pytest.raises(FailedChange, match="leaves no room for the LUKS header") as e:
            disk.encrypt_in_place(loop, KEY, "0b9e2a3c-5d6e-4f70-8a9b-0c1d2e3f4a5b", 10)
    assert "a key for the tests" not in str(e.value), "the key is in the error"
    probe = subprocess.run(["blkid", "-p", "-o", "value", "-s", "TYPE", loop], capture_output=True,
                           text=True).stdout.strip()
    assert probe == "ext4", f"the filesystem was not left as it was: {probe!r}"


def test_the_esps_loader_is_written_and_compared_without_mounting_it(loop, tmp_path):
    # What a rebuild of a UEFI image relies on to find GRUB in place.
    from consfig.apply.actions import Script, run
    subprocess.run(["mkfs.vfat", loop], check=True, capture_output=True)
    loader, other = tmp_path / "core.efi", tmp_path / "other.efi"
    loader.write_bytes(b"MZ" + os.urandom(4096))
    other.write_bytes(b"MZ" + os.urandom(4096))
    with applying(Host("image.test.invalid", None), LocalConnection()):
        holds = lambda f: run(Script(disk._ESP_HOLDS, loop, str(f)), check=False).exit_code == 0  # noqa: E731
        assert not holds(loader), "an empty ESP holds the loader"
        run(Script(disk._ESP_WRITE, loop, str(loader)))
        assert holds(loader) and not holds(other), "the loader written is not the one found"
        run(Script(disk._ESP_WRITE, loop, str(other)))
        assert holds(other), "the loader is not replaced on an ESP that has one"
    listing = subprocess.run(["mdir", "-b", "-i", loop, "::EFI/BOOT"], capture_output=True, text=True,
                             env={**os.environ, "MTOOLS_SKIP_CHECK": "1"}).stdout
    assert "BOOTX64.EFI" in listing.upper(), listing
    assert not any(loop in line for line in open("/proc/mounts")), "the ESP was mounted"


def _small_host(name):
    from consfig.apply.combinators import eseqprops
    from consfig.model.host import make_host
    from proptest import this_os
    return make_host(name, None, None, eseqprops(this_os(), disk.has_volumes(UEFI_LUKS)))


def test_a_luks_images_key_is_prerequisite_data_missing_before_anything_is_built(tmp_path):
    from proptest import deploy_propspec
    reset_data_sources()
    image = tmp_path / "nokey.img"
    with pytest.raises(MissingData, match=r'"--luks-key--vm3.image.invalid" "cryptroot"'):
        deploy_propspec([K("local")],
                        disk.raw_image_built_for({K("tarball"): "/nonexistent.tar"},
                                                 _small_host("vm3.image.invalid"), str(image)))
    assert not image.exists() and not os.path.exists(f"{image}.consfig-partial"), "something was built"


def test_a_new_uefi_luks_image_in_check_mode_is_described_and_not_built(tmp_path):
    from proptest import data_item, deploy_propspec, statuses
    reset_data_sources()
    data_item(tmp_path, *disk.luks_key_item("vm4.image.invalid", "cryptroot"), KEY)
    image = tmp_path / "new.img"
    seen = []
    try:
        outcome, events = deploy_propspec(
            [K("local")], disk.raw_image_built_for({K("tarball"): "/nonexistent.tar"},
                                                   _small_host("vm4.image.invalid"), str(image)),
            check_mode=True, sink=seen.append)
    finally:
        reset_data_sources()
    assert outcome.exit_code(True) == 2, statuses(events)
    said = " ".join(e.get("text", "") for e in seen if isinstance(e, dict))
    assert "GRUB installed for UEFI on the EFI system partition" in said, said
    assert "the root encrypted with LUKS" in said, said
    assert not image.exists() and not os.path.exists(f"{image}.consfig-partial"), "check mode built"


@pytest.mark.parametrize("bios_boot, args, says, not_said", [
    (False, [], "GRUB installed for UEFI on the EFI system partition", "for BIOS"),
    (True, [], "GRUB installed for BIOS, and for UEFI on the EFI system partition", None),
    (True, ["--bootloader", "grub-bios"], "GRUB installed for BIOS", "for UEFI"),
])
def test_the_command_lines_bootloader_follows_the_volumes_unless_told_and_check_mode_says_so(
        tmp_path, bios_boot, args, says, not_said):
    # The site's own data source holds the key; the CLI's --bootloader
    # default follows the volumes: UEFI for an ESP alone, both GRUBs with a
    # BIOS boot partition too.  (Check mode: nothing is built.)
    import sys
    from proptest import host_arch, host_suite
    (tmp_path / "data" / "--luks-key--web6.image.invalid").mkdir(parents=True)
    (tmp_path / "data" / "--luks-key--web6.image.invalid" / "cryptroot").write_bytes(KEY)
    site = tmp_path / "site.hy"
    site.write_text(
        '(require consfig *)\n(import consfig *)\n(use-props consfig.props [os disk])\n'
        '(try-register-data-source :files-tree :location "data")\n'
        '(defhost web6.image.invalid {}\n'
        f'  (os.debian-stable "{host_suite()}" :{host_arch()})\n'
        '  (disk.has-volumes {:table :gpt :size "1G"\n'
        '                     :partitions ['
        + ('{:size "1M" :type :bios-boot}\n                                  ' if bios_boot else '')
        + '{:size "32M" :type :esp :fs :vfat :mount "/boot/efi"}\n'
        '                                  {:size "128M" :fs :ext4 :mount "/boot"}\n'
        '                                  {:size :rest :fs :ext4 :mount "/" :luks "cryptroot"}]}))\n')
    image = tmp_path / "web6.img"
    # Bytecode written: consfig's own modules load compiled, as installed.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    r = subprocess.run([sys.executable, "-m", "consfig", "image", "--consfig", str(site), "web6",
                        "--disk", str(image), "--tarball", "/nonexistent.tar", "--check", *args],
                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    said = r.stdout + r.stderr
    assert r.returncode == 0, f"exit {r.returncode}:\n{said}"
    assert says in said and "root encrypted with LUKS" in said, said
    assert not_said is None or not_said not in said, said
    assert not image.exists(), "check mode built"
    assert "a key for the tests" not in said, "the key is in the output"


@pytest.fixture
def one_partition(tmp_path):
    """A 64 MiB GPT image with one ext4 partition, and a directory to mount it on."""
    if os.geteuid() != 0:
        unavailable("loop devices need root")
    image = tmp_path / "one.img"
    subprocess.run(["truncate", "-s", "64M", str(image)], check=True)
    subprocess.run(["sfdisk", "-q", str(image)], input="label: gpt\n,,L\n", text=True, check=True)
    with applying(Host("image.test.invalid", None), LocalConnection()):
        with disk.OpenedImage(str(image)) as opened:
            subprocess.run(["mkfs.ext4", "-q", "-F", opened.devices[0]], check=True)
    yield image, tmp_path / "mnt"
    with applying(Host("image.test.invalid", None), LocalConnection()):
        disk.release_image(str(image))


def _loops_of(image):
    return subprocess.run(["losetup", "--noheadings", "--output", "NAME", "--associated",
                           str(image)], capture_output=True, text=True).stdout.split()


def _mounted_in_other_namespaces(device):
    """The PIDs of processes in another mount namespace than this one that
    have DEVICE mounted: a copy of this namespace's mounts, taken by a
    process that made its own (a container, `unshare -m`) while it was."""
    ours = os.readlink("/proc/self/ns/mnt")
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/ns/mnt") == ours:
                continue
            with open(f"/proc/{pid}/mountinfo") as f:
                if any(line.split(" - ")[1].split()[1] == device for line in f if " - " in line):
                    found.append(pid)
        except (OSError, IndexError):
            continue
    return found


def test_closing_an_image_waits_for_a_busy_filesystem_rather_than_unmounting_it_lazily(
        one_partition):
    # Unmounted lazily, an ext4 writes its superblock when its last user
    # goes: after a LUKS root was encrypted where it lay, over its header.
    image, mnt = one_partition
    with applying(Host("image.test.invalid", None), LocalConnection()):
        opened = disk.OpenedImage(str(image)).attach()
        opened.mount(opened.devices[0], str(mnt))
        holder = subprocess.Popen(["sleep", "2"], cwd=mnt)
        try:
            problems = opened.close()
            waited = holder.poll() is not None
        finally:
            holder.kill()
            holder.wait()
    assert problems == [], problems
    assert waited, "close() returned while the filesystem was in use: it was unmounted lazily"
    # A loop device is left only where a process of the suite running beside
    # this test made a mount namespace while the image was mounted: that
    # copy holds it (see `disk.settled`), not a lazy unmount here.  Once that
    # copy goes, the kernel detaches the device (losetup --detach marked it
    # so) on its own time: one seen attached, and then held nowhere, must be
    # gone within a bound.
    def unexplained():
        return [d for d in _loops_of(image) if not _mounted_in_other_namespaces(d)]
    try:
        wait_until(lambda: not unexplained(), 10, "the image's loop devices to be detached")
    except AssertionError:
        raise AssertionError(f"{unexplained()} of the image left, its filesystem unmounted "
                             "lazily") from None


def test_a_filesystem_still_in_use_past_the_patience_fails_the_image(one_partition, monkeypatch):
    from consfig.errors import FailedChange
    image, mnt = one_partition
    monkeypatch.setattr(disk, "UNMOUNT_PATIENCE", 1)
    holder = None
    try:
        with applying(Host("image.test.invalid", None), LocalConnection()):
            with pytest.raises(FailedChange, match="still in use"):
                with disk.OpenedImage(str(image)) as opened:
                    opened.mount(opened.devices[0], str(mnt))
                    holder = subprocess.Popen(["sleep", "30"], cwd=mnt)
    finally:
        if holder:
            holder.kill()
            holder.wait()


def test_an_image_mounted_in_another_mount_namespace_is_encrypted_unharmed(tmp_path):
    # A process that makes a mount namespace while an image is built (a
    # service with PrivateTmp, `ip netns exec`, `unshare -m`) takes a copy
    # of the build's mounts: unmounted here, the root filesystem lives on
    # there, and writes its superblock when that process ends, over a LUKS
    # header written meanwhile.
    if os.geteuid() != 0:
        unavailable("loop devices need root")
    image = tmp_path / "pinned.img"
    mnt = tmp_path / "mnt"
    subprocess.run(["truncate", "-s", "128M", str(image)], check=True)
    subprocess.run(["sfdisk", "-q", str(image)], input="label: gpt\n,,L\n", text=True, check=True)
    pin = None
    try:
        with applying(Host("image.test.invalid", None), LocalConnection()):
            with disk.OpenedImage(str(image)) as opened:
                subprocess.run(["mkfs.ext4", "-q", "-F", opened.devices[0],
                                f"{(120 - disk.LUKS_RESERVE_MIB) * 1024}k"], check=True)
                opened.mount(opened.devices[0], str(mnt))
                pinned_loop = os.path.basename(opened.devices[0])
                (mnt / "f").write_text("kept\n")
                pin = subprocess.Popen(["unshare", "-m", "sh", "-c", "echo ready; exec sleep 60"],
                                       stdout=subprocess.PIPE, text=True)
                assert pin.stdout.readline() == "ready\n"
            disk.settled(str(image))
            with disk.OpenedImage(str(image)) as opened:
                disk.encrypt_in_place(opened.devices[0], KEY, "0b9e2a3c-5d6e-4f70-8a9b-0c1d2e3f4a5b",
                                      None, iterations=1000)
        pin.kill()
        pin.wait()
        pin = None
        # The namespace's filesystem ends (writing its superblock), then
        # its loop device.
        wait_until(lambda: not os.path.exists(f"/sys/block/{pinned_loop}/loop/backing_file"), 30,
                   f"{pinned_loop}, held by the other namespace, to be released")
        with applying(Host("image.test.invalid", None), LocalConnection()):
            with disk.OpenedImage(str(image)) as opened:
                luks = subprocess.run(["cryptsetup", "isLuks", "--debug", opened.devices[0]],
                                      capture_output=True, text=True)
        assert luks.returncode == 0, f"the LUKS header was overwritten:\n{luks.stdout[-1500:]}"
    finally:
        if pin:
            pin.kill()
            pin.wait()
