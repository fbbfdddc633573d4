"""Benchmark: machines consfig makes (props/container.hy, props/disk.hy),
from the cached test tarball (tests/props/conftest.py builds it), as root.

    python3 bench/machines.py [--runs 3]

Measures, in wall-clock seconds of one deploy* call over :local:

  container first   nspawn-running on a fresh tree from the tarball (installs
                    systemd and dbus inside with apt, from the .debs cached by
                    the tests where there are some, boots, applies a file)
  container again   the same, nothing to change (median of --runs)
  container stop    nspawn-stopped (an orderly power-off)
  image first       raw-image-built-for: a 1 GiB sparse GPT image with /boot,
                    swap and / (partitions, mkfs, the tarball unpacked, the
                    host's propspec applied in a chroot, fstab)
  image again       the same, nothing to change (median of --runs; opens the
                    image, re-applies inside, closes it)
  image disk        the image's allocated bytes (du), the most it takes
  bootable first    raw-image-built-for with GRUB: a 2 GiB GPT image of the
                    self-applying host of tests/props/machines_lab.py (the
                    tarball unpacked; kernel, initramfs, GRUB, systemd and
                    python3 installed by apt from the mirror, or its proxy)
  bootable again    the same, nothing to change (median of --runs)
  bootable disk     its allocated bytes (du)
  boot to applied   vm.running, then until the guest's serial console says
                    its own consfig image applied (the timer fires 60 s after
                    boot; TCG emulation where there is no KVM)
Both images are built from the tarball; "image" without a bootloader
(`:bootloader :none`), "bootable" with GRUB.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "tests"), os.path.join(HERE, "..", "tests", "props")]

import hy  # noqa: E402,F401
from hy.models import Keyword as K  # noqa: E402

from proptest import deploy_propspec, ensure_tarball, remove_tree, this_os, unpack  # noqa: E402
from consfig.apply.combinators import eseqprops  # noqa: E402
from consfig.model.host import make_host  # noqa: E402
from consfig.props import container, disk, file, vm  # noqa: E402
from machines_lab import MARKER, self_applying_host  # noqa: E402

LOCAL = [K("local")]


def timed(propspec):
    start = time.monotonic()
    outcome, _ = deploy_propspec(LOCAL, propspec)
    return time.monotonic() - start, outcome.status


def build_figures(label, built, image, runs):
    t, status = timed(built)
    print(f"{label + ' first':<17} {t:7.2f} s  ({status})")
    again = [timed(built)[0] for _ in range(runs)]
    print(f"{label + ' again':<17} {statistics.median(again):7.2f} s")
    du = subprocess.run(["du", "-B1", image], capture_output=True, text=True).stdout.split()[0]
    print(f"{label + ' disk':<17} {int(du) / 2**20:7.1f} MiB")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    tarball = ensure_tarball()
    work = tempfile.mkdtemp(prefix="consfig-bench-machines-")
    name = f"cfbench{os.getpid()}"
    root = unpack(tarball, work)
    try:
        running = container.nspawn_running(name, {K("root"): str(root)},
                                           eseqprops(this_os(), file.has_content("/etc/motd", "b\n")))
        t, status = timed(running)
        print(f"container first   {t:7.2f} s  ({status})")
        again = [timed(running)[0] for _ in range(args.runs)]
        print(f"container again   {statistics.median(again):7.2f} s")
        t, _ = timed(container.nspawn_stopped(name))
        print(f"container stop    {t:7.2f} s")
        timed(container.nspawn_removed(name))

        volumes = {K("table"): K("gpt"), K("size"): "1G",
                   K("partitions"): [{K("size"): "1M", K("type"): K("bios-boot")},
                                     {K("size"): "64M", K("fs"): K("ext4"), K("mount"): "/boot"},
                                     {K("size"): "16M", K("fs"): K("swap")},
                                     {K("size"): K("rest"), K("fs"): K("ext4"), K("mount"): "/"}]}
        host = make_host("bench.image.invalid", None, None,
                         eseqprops(this_os(), disk.has_volumes(volumes),
                                   file.has_content("/etc/motd", "image\n")))
        image = os.path.join(work, "bench.img")
        build_figures("image", disk.raw_image_built_for(
            {K("tarball"): str(tarball), K("bootloader"): K("none")}, host, image), image, args.runs)
        bootable = os.path.join(work, "bootable.img")
        build_figures("bootable", disk.raw_image_built_for(
            {K("tarball"): str(tarball)}, self_applying_host(f"{name}.image.invalid"), bootable),
            bootable, args.runs)
        start = time.monotonic()
        timed(vm.running(name, {K("disk"): bootable}))
        log = vm.console_log(name)
        try:
            while time.monotonic() - start < 900:
                if os.path.exists(log) and MARKER.encode() in open(log, "rb").read():
                    print(f"boot to applied   {time.monotonic() - start:7.2f} s")
                    break
                time.sleep(1)
            else:
                print("boot to applied   not within 900 s")
        finally:
            timed(vm.removed(name))
    finally:
        if os.path.exists(root):
            remove_tree(root)
        subprocess.run(["rm", "-rf", "--one-file-system", work])


if __name__ == "__main__":
    main()
