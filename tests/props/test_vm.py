"""Virtual machines (props/vm.hy) and bootable disk images: ONE real QEMU
boot for the whole suite (TCG where there is no KVM), of a disk image that
`vm.running` builds from the VM's host, whose own consfig image applies on
first boot."""

import json
import os
import shutil
import subprocess
import sys

import pytest

import hy
from hy.models import Keyword as K

from harness import unavailable
from machines_lab import BOOT_BOUND, MARKER_UNIT, console_with_marker, marker_unit_text, vm_running

from consfig.errors import PropspecError
from consfig.props import vm

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ui"))
from clirun import REPO  # noqa: E402

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


SITE = """(require consfig *)
(import consfig *)
(use-props consfig.props [apt disk file image os systemd vm])
(defhost vmhost.invalid {{:deploy [:local]}}
  (vm.running* {name} {{:disk {disk} :image {{:tarball {tarball}}}}}
    (os.debian-stable {suite} :{arch})
    (disk.has-volumes {{:table :gpt :size "2G"
                        :partitions [{{:size "1M" :type :bios-boot}}
                                     {{:size "64M" :fs :swap}}
                                     {{:size :rest :fs :ext4 :mount "/"}}]}})
    (apt.installed-minimally "python3")
    (file.has-content {unit_path} {unit_text})
    (image.installed)
    (image.applied-periodically :every "1min" :via :systemd :random-delay 0 :first-after 1)
    ;; Skipped while building (no services start in the chroot): only an
    ;; application on the booted machine starts it.
    (systemd.started {unit})))
"""


def _deploy_site(site):
    """`consfig deploy` of the site's one host, as a user runs it."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    r = subprocess.run([sys.executable, "-m", "consfig", "deploy", "--consfig", str(site),
                        "vmhost.invalid"], capture_output=True, text=True, env=env, cwd=REPO,
                       timeout=BOOT_BOUND)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    return r.stdout


@pytest.fixture(scope="module")
def booted(debian_chroot_tarball, tmp_path_factory):
    """The one VM boot, through the command line: a site whose host runs
    `vm.running*` with the VM's propspec, which builds its image from the
    cached tarball and boots it; yields (image, name, site)."""
    from proptest import deploy_propspec, host_arch, host_suite
    if os.geteuid() != 0:
        unavailable("building a disk image needs root")
    for tool in ["qemu-system-x86_64", "sfdisk", "mkfs.ext4", "losetup", "debugfs"]:
        if not shutil.which(tool):
            unavailable(f"{tool} is not installed (apt-get install qemu-system-x86 fdisk e2fsprogs)")
    directory = tmp_path_factory.mktemp("vm")
    image = directory / "vm1.img"
    site = directory / "vmsite.hy"
    # A JSON string is a Hy string literal too.
    q = json.dumps
    site.write_text(SITE.format(name=q(NAME), disk=q(str(image)),
                                tarball=q(str(debian_chroot_tarball)), suite=q(host_suite()),
                                arch=host_arch(), unit_path=q(f"/etc/systemd/system/{MARKER_UNIT}"),
                                unit_text=q(marker_unit_text()), unit=q(MARKER_UNIT)))
    try:
        out = _deploy_site(site)
        assert os.path.exists(image), f"vm.running built no image:\n{out[-3000:]}"
        yield image, NAME, site
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


@pytest.mark.slow
@pytest.mark.chroot
def test_a_built_image_boots_under_qemu_and_applies_its_consfig_on_first_boot(booted):
    image, name, _ = booted
    console_with_marker(name)


@pytest.mark.slow
@pytest.mark.chroot
def test_the_running_vm_changes_nothing_and_stopped_ends_qemu(booted):
    from proptest import deploy_propspec, statuses
    image, name, site = booted
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
def test_a_built_images_initramfs_is_made_once_and_compressed_as_debian_does(booted):
    # initramfs-tools' own configuration activates its trigger, which made
    # the whole initramfs again after the kernel's made it (53 s of the 60 s
    # the boot packages took); without zstd (a recommendation) it fell back
    # to gzip.  (After the VM stopped: its disk is no longer in use.)
    image, name, _ = booted
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
