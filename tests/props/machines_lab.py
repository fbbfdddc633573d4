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


def marker_unit_text(report=""):
    """The marker unit's text; REPORT (shell commands, without single
    quotes or dollars) writes what the guest has to say before the marker."""
    assert "'" not in report and "$" not in report, report
    return ("[Unit]\nDescription=Say on the serial console that consfig applied\n\n"
            "[Service]\nType=oneshot\nRemainAfterExit=yes\n"
            f"ExecStart=/bin/sh -c '{{ {report}echo {MARKER}; }} > /dev/ttyS0'\n")


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


# How long a guest may take, under emulation on a busy 2-core machine, to
# boot and apply its image (the timer fires a second after boot): inside
# pytest-timeout's 600 s, so that a failure shows the console.
BOOT_BOUND = 540


def console_text(name):
    """What the VM NAME has written to its serial console so far."""
    from consfig.props import vm
    try:
        with open(vm.console_log(name), "rb") as f:
            return f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def vm_running(name):
    """Whether consfig's QEMU of the VM NAME runs."""
    from consfig.model.context import applying
    from consfig.model.host import Host
    from consfig.props import vm
    from consfig.transport.local import LocalConnection
    with applying(Host("vm.test.invalid", None), LocalConnection()):
        return getattr(vm, hy.mangle("running?"))(name)


def console_with_marker(name):
    """The VM NAME's console once it says MARKER; a failure showing its end
    when it does not within BOOT_BOUND, or QEMU ends first."""
    from harness import wait_until
    try:
        wait_until(lambda: MARKER in console_text(name) or not vm_running(name),
                   timeout=BOOT_BOUND,
                   what="the guest to say on its serial console that consfig applied")
    except AssertionError:
        raise AssertionError(f"no {MARKER!r} on the console within {BOOT_BOUND} s; it ends:\n"
                             + console_text(name)[-3000:])
    console = console_text(name)
    assert MARKER in console, f"QEMU ended early; the console ends:\n{console[-3000:]}"
    return console
