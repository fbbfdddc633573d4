"""/etc/default/grub's kernel command line in the Debian chroot (without
GRUB installed: the file is made here, and update-grub is not there to
run), read back by the shell as grub-mkconfig reads it."""

import pytest

import hy  # noqa: F401
from consfig.errors import PropspecError
from consfig.props import grub

from proptest import apply_twice, deploy_propspec, failure_text, in_chroot, said, unapply

pytestmark = pytest.mark.chroot

START = 'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="quiet console=tty1"\nGRUB_CMDLINE_LINUX=""\n'


@pytest.fixture
def defaults(debian_chroot):
    f = debian_chroot / "etc/default/grub"
    f.write_text(START)
    yield f
    f.unlink()


def value(root, variable):
    return in_chroot(root, f". /etc/default/grub; echo \"${variable}\"").stdout.strip()


def test_has_kernel_options_adds_and_replaces_keys(chroot_chain, debian_chroot, defaults):
    events = apply_twice(chroot_chain, grub.has_kernel_options("console=ttyS0,115200", "console=tty0", "nomodeset"))
    assert value(debian_chroot, "GRUB_CMDLINE_LINUX_DEFAULT") == "quiet console=ttyS0,115200 console=tty0 nomodeset"
    assert "update-grub is not installed" in said(events), said(events)
    unapply(chroot_chain, grub.has_kernel_options("console=ttyS0,115200", "console=tty0", "nomodeset"))
    assert value(debian_chroot, "GRUB_CMDLINE_LINUX_DEFAULT") == "quiet"


def test_all_kernels_goes_to_grub_cmdline_linux(chroot_chain, debian_chroot, defaults):
    apply_twice(chroot_chain, grub.has_kernel_options("systemd.unified_cgroup_hierarchy=1", all_kernels=True))
    assert value(debian_chroot, "GRUB_CMDLINE_LINUX") == "systemd.unified_cgroup_hierarchy=1"
    assert value(debian_chroot, "GRUB_CMDLINE_LINUX_DEFAULT") == "quiet console=tty1"


def test_a_value_that_expands_is_left_for_a_person(chroot_chain, defaults):
    defaults.write_text('GRUB_CMDLINE_LINUX_DEFAULT="$EXTRA quiet"\n')
    outcome, events = deploy_propspec(chroot_chain, grub.has_kernel_options("nomodeset"), check=False)
    assert outcome.status == "failed" and "edit it by hand" in failure_text(events), failure_text(events)
    assert defaults.read_text() == 'GRUB_CMDLINE_LINUX_DEFAULT="$EXTRA quiet"\n'


def test_no_grub_defaults_is_a_failure(chroot_chain):
    outcome, events = deploy_propspec(chroot_chain, grub.has_kernel_options("quiet"), check=False)
    assert outcome.status == "failed" and "is GRUB installed" in failure_text(events), failure_text(events)


def test_hostile_options_are_refused():
    for bad in ["quiet'; reboot; '", "a b", "-x", "init=$(id)", "a\nGRUB_X=1"]:
        with pytest.raises(PropspecError):
            grub.has_kernel_options(bad)
