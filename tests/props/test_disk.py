"""Disk volumes (props/disk.hy): declared and checked at load, and made real
in a raw image with real loop devices, sfdisk and mkfs."""

import os
import shutil
import subprocess
import sys

import pytest

import hy  # noqa: F401
from hy.models import Keyword as K

from harness import unavailable

from consfig.transport.local import LocalConnection
from consfig.model.context import applying
from consfig.errors import PropspecError
from consfig.model.host import Host
from consfig.props import disk

GPT = {K("table"): K("gpt"), K("size"): "64M",
       K("partitions"): [{K("size"): "1M", K("type"): K("bios-boot")},
                         {K("size"): "16M", K("fs"): K("vfat"), K("mount"): "/boot/efi",
                          K("type"): K("esp"), K("label"): "EFI"},
                         {K("size"): "8M", K("fs"): K("swap")},
                         {K("size"): K("rest"), K("fs"): K("ext4"), K("mount"): "/",
                          K("label"): "root"}]}


def _with(volumes, **changes):
    v = dict(volumes)
    v.update({K(k): x for k, x in changes.items()})
    return v


def _part(**kw):
    return {K(k): x for k, x in kw.items()}


ROOT = _part(size=K("rest"), fs=K("ext4"), mount="/")


@pytest.mark.parametrize("volumes, says", [
    (_with(GPT, size="8M"), "more than the disk's 8 MiB"),
    (_with(GPT, partitions=[ROOT, _part(size="1M", fs=K("ext4"), mount="/")]), "root filesystems"),
    (_with(GPT, partitions=[_part(size="4M", fs=K("zfs"), mount="/")]), "unknown filesystem :zfs"),
    (_with(GPT, partitions=[ROOT, _part(size="4M", fs=K("ext4"), mount="/srv")]),
     "only the last partition"),
    (_with(GPT, partitions=[_part(size="4M", fs=K("ext4"), mount="/srv")]), "no root filesystem"),
    (_with(GPT, partitions=[_part(size="4M", fs=K("ext4"), type=K("esp"), mount="/")]),
     "EFI system partition holds a :vfat"),
    (_with(GPT, partitions=[_part(size="4M", fs=K("ext4"), mount="/a\nb"), ROOT]), "mount point"),
    (_with(GPT, partitions=[_part(size="4M", fs=K("vfat"), label="TOOLONGFORFAT", mount="/boot"),
                            ROOT]), "label"),
    (_with(GPT, partitions=[_part(size="-4M", fs=K("ext4")), ROOT]), "size \"-4M\""),
    (_with(GPT, table=K("apm")), "unknown partition table :apm"),
    (_with(GPT, size=None, partitions=[ROOT]), "need a :size"),
    (_with(GPT, table=K("msdos"), partitions=[_part(size="1M", type=K("bios-boot")), ROOT]),
     "msdos table has no partition type :bios-boot"),
    (_with(GPT, partitions=[_part(size="1M", fs=K("swap"), mount="/swap"), ROOT]),
     "cannot be mounted"),
])
def test_has_volumes_refuses_bad_volumes_at_load(volumes, says):
    with pytest.raises(PropspecError, match=says.replace("(", r"\(")):
        disk.has_volumes(volumes)


def test_has_volumes_accepts_a_gpt_disk_and_records_it():
    p = disk.has_volumes(GPT)
    norm = disk.normalise_volumes(GPT)
    assert [x["size"] for x in norm["partitions"]] == [1, 16, 8, "rest"], norm
    assert p is not None, "no propapp"


def test_sfdisk_script_sizes_and_types_each_partition():
    script = disk.sfdisk_script(disk.normalise_volumes(GPT))
    assert script == ("label: gpt\n\n"
                      "size=1MiB, type=21686148-6449-6E6F-744E-656564454649\n"
                      "size=16MiB, type=U\nsize=8MiB, type=S\ntype=L\n"), script


def test_fstab_lines_put_root_first_and_name_filesystems_by_uuid():
    lines = disk.fstab_lines(disk.normalise_volumes(GPT), {1: "AAAA-BBBB", 2: "s-w-a-p", 3: "r-o-o-t"})
    assert lines == ["UUID=r-o-o-t / ext4 defaults 0 1",
                     "UUID=s-w-a-p none swap sw 0 0",
                     "UUID=AAAA-BBBB /boot/efi vfat defaults 0 2"], lines


def _loops_of(image):
    out = subprocess.run(["losetup", "--noheadings", "--output", "NAME", "--associated", str(image)],
                         capture_output=True, text=True).stdout
    return out.split()


@pytest.fixture
def tools():
    if os.geteuid() != 0:
        unavailable("loop devices need root")
    for tool in ["sfdisk", "mkfs.vfat", "mkfs.ext4", "losetup"]:
        if not shutil.which(tool):
            unavailable(f"{tool} is not installed (apt-get install fdisk dosfstools e2fsprogs)")


def test_partitioned_image_holds_the_table_and_filesystems_and_releases_its_loops(tools, tmp_path):
    image = tmp_path / "disk.img"
    norm = disk.normalise_volumes(GPT)
    with applying(Host("image.test.invalid", None), LocalConnection()):
        uuids = disk.partitioned_image(norm, str(image))
    assert image.stat().st_size == 64 * 1024 * 1024, image.stat().st_size
    dump = subprocess.run(["sfdisk", "--dump", str(image)], capture_output=True, text=True).stdout
    partitions = [line for line in dump.splitlines() if " : start=" in line]
    assert "label: gpt" in dump and len(partitions) == 4, dump
    assert sorted(uuids) == [1, 2, 3], uuids
    assert not _loops_of(image), "loop devices left attached"
    # Each filesystem is really there, of its type, at its partition.
    with applying(Host("image.test.invalid", None), LocalConnection()):
        with disk.OpenedImage(str(image)) as opened:
            kinds = [subprocess.run(["blkid", "-o", "value", "-s", "TYPE", d],
                                    capture_output=True, text=True).stdout.strip()
                     for d in opened.devices]
            mnt = tmp_path / "mnt"
            opened.mount(opened.devices[3], str(mnt))
            assert os.path.isdir(mnt / "lost+found"), "the root filesystem does not mount"
    assert kinds == ["", "vfat", "swap", "ext4"], kinds
    assert not _loops_of(image), "loop devices left attached after close"
    assert not os.path.ismount(tmp_path / "mnt"), "left mounted"


def test_a_failed_partitioning_leaves_no_image_and_no_loop(tools, tmp_path):
    image = tmp_path / "disk.img"
    norm = disk.normalise_volumes(GPT)
    if shutil.which("mkfs.btrfs"):
        pytest.skip("needs a filesystem this machine cannot make, and mkfs.btrfs is here")
    norm["partitions"][3]["fs"] = "btrfs"  # attached, then mkfs.btrfs is not found
    with applying(Host("image.test.invalid", None), LocalConnection()):
        with pytest.raises(Exception):
            disk.partitioned_image(norm, str(image))
    assert not image.exists(), "a half-made image is left"
    assert not _loops_of(image), "loop devices left attached"


# No vfat here: the test machines' kernel may lack it (it can be made, not mounted).
IMAGE_VOLUMES = {K("table"): K("gpt"), K("size"): "1G",
                 K("partitions"): [{K("size"): "1M", K("type"): K("bios-boot")},
                                   {K("size"): "64M", K("fs"): K("ext4"), K("mount"): "/boot"},
                                   {K("size"): "16M", K("fs"): K("swap")},
                                   {K("size"): K("rest"), K("fs"): K("ext4"), K("mount"): "/"}]}


# The GRUB and kernel install is the VM test's (tests/props/test_vm.py):
# these build trees alone, in seconds.
NO_BOOT = {K("bootloader"): K("none")}


def _image_host(name, motd):
    from consfig.apply.combinators import eseqprops
    from consfig.model.host import make_host
    from consfig.props import file
    from proptest import this_os
    return make_host(name, None, None, eseqprops(this_os(), disk.has_volumes(IMAGE_VOLUMES),
                                                 file.has_content("/etc/motd", motd),
                                                 file.has_content("/boot/marker", "on /boot\n")))


def _read_from_image(image, tmp_path, *paths):
    mnt = tmp_path / "look"
    with applying(Host("image.test.invalid", None), LocalConnection()):
        with disk.OpenedImage(str(image)) as opened:
            opened.mount(opened.devices[3], str(mnt))
            opened.mount(opened.devices[1], str(mnt / "boot"))
            found = {p: (mnt / p).read_text() if (mnt / p).exists() else None for p in paths}
    return found


@pytest.mark.slow
@pytest.mark.chroot
def test_raw_image_is_built_from_the_hosts_definition_and_rebuilt_as_a_no_change(
        tools, debian_chroot_tarball, tmp_path):
    from proptest import checks_clean, deploy_propspec, statuses
    image = tmp_path / "web1.img"
    host = _image_host("web1.image.invalid", "built into the image\n")
    prop = disk.raw_image_built_for(NO_BOOT | {K("tarball"): str(debian_chroot_tarball)}, host, str(image))
    outcome, events = deploy_propspec([K("local")], prop)
    assert outcome.status == "changed", statuses(events)
    assert not _loops_of(image), "loop devices left attached"
    assert not os.path.exists(f"{image}.consfig-partial"), "the partial image is left"
    found = _read_from_image(image, tmp_path, "etc/motd", "etc/fstab", "boot/marker")
    assert found["etc/motd"] == "built into the image\n", found
    fstab = [line.split()[1:3] for line in found["etc/fstab"].splitlines()[1:]]
    assert fstab == [["/", "ext4"], ["none", "swap"], ["/boot", "ext4"]], fstab
    assert found["boot/marker"] == "on /boot\n", "/boot was not mounted while applying"
    again, events = deploy_propspec([K("local")], prop)
    assert again.status == "no-change", f"an unchanged rebuild changed: {statuses(events)}"
    assert not _loops_of(image), "loop devices left attached after the rebuild"
    checks_clean([K("local")], prop)
    changed_host = _image_host("web1.image.invalid", "changed\n")
    checked, events = deploy_propspec(
        [K("local")], disk.raw_image_built_for(NO_BOOT | {K("tarball"): str(debian_chroot_tarball)},
                                               changed_host, str(image)), check_mode=True)
    assert checked.exit_code(True) == 2, f"check mode misses a changed propspec: {statuses(events)}"
    assert _read_from_image(image, tmp_path, "etc/motd")["etc/motd"] == "built into the image\n", \
        "check mode changed the image"
    assert not _loops_of(image), "loop devices left attached after check mode"


@pytest.mark.chroot
def test_raw_image_in_check_mode_says_what_it_would_build_and_builds_nothing(
        tools, debian_chroot_tarball, tmp_path):
    from proptest import deploy_propspec, statuses
    image = tmp_path / "new.img"
    seen = []
    outcome, events = deploy_propspec(
        [K("local")], disk.raw_image_built_for({K("tarball"): str(debian_chroot_tarball)},
                                               _image_host("web3.image.invalid", "x\n"), str(image)),
        check_mode=True, sink=seen.append)
    assert outcome.exit_code(True) == 2, statuses(events)
    said = " ".join(e.get("text", "") for e in seen if isinstance(e, dict))
    assert "would be built: a 1024 MiB gpt disk of 4 partitions" in said and "GRUB" in said, said
    assert not image.exists() and not os.path.exists(f"{image}.consfig-partial"), "check mode built"


@pytest.mark.slow
@pytest.mark.chroot
def test_raw_image_build_cleans_up_after_a_killed_one(tools, debian_chroot_tarball, tmp_path):
    from proptest import deploy_propspec, statuses
    image = tmp_path / "web2.img"
    partial = tmp_path / "web2.img.consfig-partial"
    subprocess.run(["truncate", "-s", "64M", str(partial)], check=True)
    stale = subprocess.run(["losetup", "--show", "--find", str(partial)], capture_output=True,
                           text=True, check=True).stdout.strip()
    try:
        host = _image_host("web2.image.invalid", "second\n")
        outcome, events = deploy_propspec(
            [K("local")], disk.raw_image_built_for(NO_BOOT | {K("tarball"): str(debian_chroot_tarball)},
                                                   host, str(image)))
        assert outcome.status == "changed", statuses(events)
        assert not _loops_of(partial) and not _loops_of(image), "loop devices left attached"
        assert image.exists() and not partial.exists(), "not finished under the final name"
    finally:
        subprocess.run(["losetup", "--detach", stale], capture_output=True)


# The installer: an image written to a block device (a real loop device).

@pytest.fixture
def small_image(tools, tmp_path):
    image = tmp_path / "small.img"
    norm = disk.normalise_volumes({K("table"): K("gpt"), K("size"): "8M",
                                   K("partitions"): [_part(size=K("rest"), fs=K("ext4"), mount="/")]})
    with applying(Host("image.test.invalid", None), LocalConnection()):
        disk.partitioned_image(norm, str(image))
    return image


@pytest.fixture
def loop_device(tools, tmp_path):
    backing = tmp_path / "disk.raw"
    subprocess.run(["truncate", "-s", "16M", str(backing)], check=True)
    device = subprocess.run(["losetup", "--show", "--find", str(backing)], capture_output=True,
                            text=True, check=True).stdout.strip()
    try:
        yield device
    finally:
        subprocess.run(["umount", device], capture_output=True)
        subprocess.run(["losetup", "--detach", device], capture_output=True)


def _begins_with(device, image):
    size = os.path.getsize(image)
    with open(device, "rb") as d, open(image, "rb") as i:
        return d.read(size) == i.read()


def _failure(events):
    return " ".join(str(getattr(e, "message", "") or "") for e in events)


def test_image_written_to_a_blank_device_then_changes_nothing(small_image, loop_device):
    from proptest import checks_clean, deploy_propspec, statuses
    prop = disk.image_written_to(loop_device, str(small_image))
    outcome, events = deploy_propspec([K("local")], prop)
    assert outcome.status == "changed", statuses(events)
    assert _begins_with(loop_device, small_image), "the device does not hold the image"
    again, events = deploy_propspec([K("local")], prop)
    assert again.status == "no-change", statuses(events)
    checks_clean([K("local")], prop)


def test_image_written_to_refuses_a_device_holding_a_filesystem(small_image, loop_device):
    from proptest import deploy_propspec
    subprocess.run(["mkfs.ext4", "-q", "-F", loop_device], check=True)
    outcome, events = deploy_propspec([K("local")], disk.image_written_to(loop_device, str(small_image)),
                                      check=False)
    assert outcome.status == "failed", "wrote over an ext4 filesystem it was not told to replace"
    from proptest import failure_text
    assert "holds ext4" in failure_text(events) and ':replace ["ext4"]' in failure_text(events), \
        failure_text(events)
    kind = subprocess.run(["blkid", "-p", "-o", "value", "-s", "TYPE", loop_device],
                          capture_output=True, text=True).stdout.strip()
    assert kind == "ext4", f"the filesystem was touched: {kind!r}"


def test_image_written_to_replaces_what_it_is_told_to(small_image, loop_device):
    from proptest import deploy_propspec, statuses
    subprocess.run(["mkfs.ext4", "-q", "-F", loop_device], check=True)
    outcome, events = deploy_propspec(
        [K("local")], disk.image_written_to(loop_device, str(small_image), replace=["ext4"]))
    assert outcome.status == "changed", statuses(events)
    assert _begins_with(loop_device, small_image), "the device does not hold the image"


def test_image_written_to_refuses_a_mounted_device(small_image, loop_device, tmp_path):
    from proptest import deploy_propspec, failure_text
    subprocess.run(["mkfs.ext4", "-q", "-F", loop_device], check=True)
    (tmp_path / "m").mkdir()
    subprocess.run(["mount", loop_device, str(tmp_path / "m")], check=True)
    try:
        outcome, events = deploy_propspec(
            [K("local")], disk.image_written_to(loop_device, str(small_image), replace=True),
            check=False)
    finally:
        subprocess.run(["umount", str(tmp_path / "m")], check=True)
    assert outcome.status == "failed" and "is mounted" in failure_text(events), failure_text(events)


def test_image_written_to_refuses_a_device_too_small(tools, loop_device, tmp_path):
    from proptest import deploy_propspec, failure_text
    image = tmp_path / "big.img"
    subprocess.run(["truncate", "-s", "32M", str(image)], check=True)
    outcome, events = deploy_propspec([K("local")], disk.image_written_to(loop_device, str(image)),
                                      check=False)
    assert outcome.status == "failed" and "does not fit" in failure_text(events), failure_text(events)


def test_image_written_to_in_check_mode_writes_nothing(small_image, loop_device):
    from proptest import deploy_propspec, statuses
    outcome, events = deploy_propspec([K("local")], disk.image_written_to(loop_device, str(small_image)),
                                      check_mode=True)
    assert outcome.exit_code(True) == 2, statuses(events)
    assert not _begins_with(loop_device, small_image), "check mode wrote the image"


_BUILD_SCRIPT = """
import sys
sys.path[:0] = sys.argv[3:]
import hy
from hy.models import Keyword as K
from consfig.apply.combinators import eseqprops
from consfig.model.host import make_host
from consfig.props import disk
from proptest import deploy_propspec, this_os
from test_disk import IMAGE_VOLUMES
host = make_host("web4.image.invalid", None, None, eseqprops(this_os(), disk.has_volumes(IMAGE_VOLUMES)))
deploy_propspec([K("local")], disk.raw_image_built_for(
    {K("tarball"): sys.argv[2], K("bootloader"): K("none")}, host, sys.argv[1]), check=False)
"""


@pytest.mark.slow
@pytest.mark.chroot
def test_an_interrupted_build_leaves_no_mount_loop_or_image(tools, debian_chroot_tarball, tmp_path):
    import signal
    from harness import wait_until
    image = tmp_path / "web4.img"
    partial = tmp_path / "web4.img.consfig-partial"
    here = os.path.dirname(os.path.abspath(__file__))
    build = subprocess.Popen([sys.executable, "-c", _BUILD_SCRIPT, str(image), str(debian_chroot_tarball),
                              here, os.path.dirname(here)], start_new_session=True)
    try:
        # Interrupted while the tarball is being unpacked into the mounted root.
        wait_until(lambda: _loops_of(partial) and _mounted_from(partial), 120,
                   "the build to attach and mount the image")
        build.send_signal(signal.SIGINT)
        build.wait(timeout=120)
    finally:
        if build.poll() is None:
            build.kill()
            build.wait()
    assert not _loops_of(partial), "loop devices left attached"
    assert not _mounted_from(partial), "mounts left"
    assert not image.exists(), "a half-written image under the final name"
    assert not partial.exists(), "the partial image is left"


@pytest.mark.slow
@pytest.mark.chroot
def test_the_next_build_removes_the_mount_point_and_copy_a_killed_build_left(
        tools, debian_chroot_tarball, tmp_path):
    import glob
    import signal
    from harness import wait_until
    image = tmp_path / "web6.img"
    partial = tmp_path / "web6.img.consfig-partial"
    here = os.path.dirname(os.path.abspath(__file__))
    build = subprocess.Popen([sys.executable, "-c", _BUILD_SCRIPT, str(image), str(debian_chroot_tarball),
                              here, os.path.dirname(here)], start_new_session=True)
    try:
        wait_until(lambda: _mounted_from(partial), 120, "the build to mount the image")
    finally:
        os.killpg(build.pid, signal.SIGKILL)
        build.wait(timeout=60)
    # Its own: other builds may run on this machine meanwhile.
    loops = _loops_of(partial)
    with open("/proc/self/mounts") as f:
        mounted = [line.split() for line in f]
    left = {m[1] for m in mounted if m[0] in loops and m[1].startswith("/tmp/consfig-image-")}
    assert left, "the killed build left no mount point: nothing to test"
    # Killed while `settled` copied the image (a filesystem of the build
    # still mounted in another mount namespace), a build leaves the copy:
    # a file of the image's size, under a name of the next build's.
    copy = tmp_path / "web6.img.consfig-partial.consfig-settled"
    with open(copy, "wb") as f:
        f.truncate(os.path.getsize(partial))
    # The next build of the image starts by cleaning up; it then fails
    # (there is no such tarball), which must leave nothing either.
    during = set(glob.glob("/tmp/consfig-image-*"))
    subprocess.run([sys.executable, "-c", _BUILD_SCRIPT, str(image), str(tmp_path / "no.tar"),
                    here, os.path.dirname(here)], timeout=600)
    after = set(glob.glob("/tmp/consfig-image-*"))
    assert not (left & after), f"the killed build's mount point is left: {left & after}"
    assert not [d for d in after - during if _for_image(d, image)], "the failed build left its own"
    assert not _loops_of(partial), "loop devices left attached"
    assert not partial.exists(), "the partial image is left"
    assert not copy.exists(), "the killed build's copy of the image is left"


def _for_image(directory, image):
    # A build's mount point is named for its image (props/disk.hy `_work-prefix`).
    import hashlib
    tag = hashlib.sha256(str(image).encode()).hexdigest()[:12]
    return os.path.basename(directory).startswith(f"consfig-image-{tag}-")


def _mounted_from(image):
    with open("/proc/self/mounts") as f:
        sources = {line.split()[0] for line in f}
    return [d for d in _loops_of(image) if d in sources]


# `consfig image HOST --disk FILE`: the command line.

def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "consfig", "image", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=900)


def _site(tmp_path):
    from proptest import host_arch, host_suite
    site = tmp_path / "site.hy"
    site.write_text(
        '(require consfig *)\n(import consfig *)\n(use-props consfig.props [os disk file])\n'
        '(defhost web5.image.invalid {}\n'
        f'  (os.debian-stable "{host_suite()}" :{host_arch()})\n'
        '  (disk.has-volumes {:table :msdos :size "600M"\n'
        '                     :partitions [{:size :rest :fs :ext4 :mount "/"}]})\n'
        '  (file.has-content "/etc/motd" "from the command line\\n"))\n')
    return site


def test_image_disk_refuses_a_relative_path_as_a_usage_error(tmp_path):
    r = _cli("--consfig", str(_site(tmp_path)), "web5", "--disk", "web5.img", cwd=tmp_path)
    assert r.returncode == 64, (r.returncode, r.stderr)
    assert "absolute path" in r.stderr, r.stderr
    r = _cli("--consfig", str(_site(tmp_path)), "web5", "-o", str(tmp_path / "x"), "--qcow2",
             str(tmp_path / "x.qcow2"), cwd=tmp_path)
    assert r.returncode == 64, (r.returncode, r.stderr)


@pytest.mark.slow
@pytest.mark.chroot
def test_image_disk_builds_the_hosts_disk_image_and_a_qcow2_from_the_command_line(
        tools, debian_chroot_tarball, tmp_path):
    if not shutil.which("qemu-img"):
        unavailable("qemu-img is not installed (apt-get install qemu-utils)")
    image, qcow2 = tmp_path / "web5.img", tmp_path / "web5.qcow2"
    r = _cli("--consfig", str(_site(tmp_path)), "web5", "--disk", str(image), "--qcow2", str(qcow2),
             "--tarball", str(debian_chroot_tarball), "--bootloader", "none", "--detailed-exitcode",
             cwd=tmp_path)
    assert r.returncode == 2, f"exit {r.returncode}:\n{r.stdout}\n{r.stderr}"
    assert "partitioning" in r.stdout + r.stderr, "no progress shown"
    assert not _loops_of(image), "loop devices left attached"
    info = subprocess.run(["qemu-img", "info", "--output=json", str(qcow2)], capture_output=True,
                          text=True, check=True).stdout
    assert '"format": "qcow2"' in info and '"virtual-size": 629145600' in info, info
    with applying(Host("image.test.invalid", None), LocalConnection()):
        with disk.OpenedImage(str(image)) as opened:
            opened.mount(opened.devices[0], str(tmp_path / "look"))
            motd = (tmp_path / "look/etc/motd").read_text()
    assert motd == "from the command line\n", motd
    r = _cli("--consfig", str(_site(tmp_path)), "web5", "--disk", str(image), "--qcow2", str(qcow2),
             "--tarball", str(debian_chroot_tarball), "--bootloader", "none", "--detailed-exitcode",
             cwd=tmp_path)
    assert r.returncode == 0, f"an unchanged rebuild: exit {r.returncode}:\n{r.stdout}\n{r.stderr}"


@pytest.mark.chroot
def test_boot_packages_given_without_the_kernel_install_no_kernel(fresh_chroot):
    # The kernel goes in last, alone, when it is among PACKAGES: a list
    # without it (a container's image, a kernel of the host's choosing)
    # got linux-image-amd64 all the same.
    from consfig.apply.combinators import eseqprops
    from proptest import checks_clean, deploy_propspec, statuses, this_os
    chain = [[K("chroot"), K("into"), str(fresh_chroot)]]
    spec = eseqprops(this_os(), disk.boot_packages_installed(packages=["zstd"]))
    outcome, events = deploy_propspec(chain, spec)
    assert outcome.status == "changed", statuses(events)
    status = (fresh_chroot / "var/lib/dpkg/status").read_text()
    assert "Package: zstd\n" in status, "zstd is not installed"
    assert "Package: linux-image-amd64\n" not in status, "a kernel was installed, not asked for"
    checks_clean(chain, spec)
