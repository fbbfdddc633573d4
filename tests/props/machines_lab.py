"""A host to build into a bootable disk image, shared by the VM tests and
bench/machines.py: its propspec carries its own consfig image, applied
from a systemd timer a minute after boot, and a unit that only that
application starts, which writes MARKER to the serial console."""

import hy  # noqa: F401
from hy.models import Keyword as K

MARKER = "consfig-applied-on-first-boot"
MARKER_UNIT = "consfig-firstboot-marker.service"

VOLUMES = {K("table"): K("gpt"), K("size"): "2G",
           K("partitions"): [{K("size"): "1M", K("type"): K("bios-boot")},
                             {K("size"): "64M", K("fs"): K("swap")},
                             {K("size"): K("rest"), K("fs"): K("ext4"), K("mount"): "/"}]}


def marker_unit_text():
    return ("[Unit]\nDescription=Say on the serial console that consfig applied\n\n"
            "[Service]\nType=oneshot\nRemainAfterExit=yes\n"
            f"ExecStart=/bin/sh -c 'echo {MARKER} > /dev/ttyS0'\n")


def self_applying_host(name, volumes=VOLUMES):
    from consfig.apply.combinators import eseqprops
    from consfig.model.host import make_host
    from consfig.props import apt, disk, file, image, systemd
    from proptest import this_os
    return make_host(name, None, None, eseqprops(
        this_os(), disk.has_volumes(volumes),
        apt.installed_minimally("python3"),
        file.has_content(f"/etc/systemd/system/{MARKER_UNIT}", marker_unit_text()),
        image.installed(),
        image.applied_periodically(every="1min", via=K("systemd"), random_delay=0, first_after=1),
        # Skipped while building (no services start in the chroot): only an
        # application on the booted machine starts it.
        systemd.started(MARKER_UNIT)))
