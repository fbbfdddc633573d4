"""Inside the shared booted container (tests/props/conftest.py): what
belongs to the machine's kernel (swap, kernel-wide sysctls, modules) is left
alone, with a note; and the container is named after its host."""


import pytest

import hy  # noqa: F401
from consfig.apply.combinators import eseqprops
from consfig.props import kmod, swap, sysctl

from proptest import deploy_propspec, failure_text, said, this_os

pytestmark = [pytest.mark.chroot, pytest.mark.slow]


def test_a_swap_file_in_a_container_is_not_the_machines_swap(booted_container):
    p = swap.file_exists("/swapfile", "32M")
    try:
        outcome, events = deploy_propspec(booted_container.chain, eseqprops(this_os(), p),
                                          check=False)
        assert outcome.status == "changed", failure_text(events)
        assert ("/swapfile not used now: the running kernel is left alone "
                "(in a container (systemd-nspawn): its kernel is the machine's)") in said(events)
        assert "swapfile" not in open("/proc/swaps").read(), "the machine's swap untouched"
        assert (booted_container.root / "swapfile").exists()
    finally:
        outcome, events = deploy_propspec(booted_container.chain, eseqprops(this_os(), p),
                                          unapply=True, check=False)
    assert outcome.status == "changed", failure_text(events)
    assert not (booted_container.root / "swapfile").exists()


def test_a_kernel_wide_sysctl_in_a_container_is_left_to_the_machine(booted_container):
    before = open("/proc/sys/vm/swappiness").read()
    want = "61" if before.strip() != "61" else "62"
    p = sysctl.has_value("vm.swappiness", want, file="91-cfkernel.conf")
    outcome, events = deploy_propspec(booted_container.chain, eseqprops(this_os(), p), check=False)
    assert outcome.status == "changed", failure_text(events)
    assert ("vm.swappiness: the running kernel is left alone (in a container (systemd-nspawn): "
            "its kernel is the machine's)") in said(events)
    assert open("/proc/sys/vm/swappiness").read() == before, "the machine's kernel untouched"
    assert (booted_container.root / "etc/sysctl.d/91-cfkernel.conf").read_text() == \
        f"vm.swappiness = {want}\n"
    deploy_propspec(booted_container.chain, eseqprops(this_os(), p), unapply=True)


def test_a_module_in_a_container_is_not_loaded_into_the_machines_kernel(booted_container):
    p = kmod.loaded_at_boot("cfnosuchmodule")
    outcome, events = deploy_propspec(booted_container.chain, eseqprops(this_os(), p), check=False)
    assert outcome.status == "changed", failure_text(events)
    assert ("cfnosuchmodule not loaded now: the running kernel is left alone "
            "(in a container (systemd-nspawn): its kernel is the machine's)") in said(events)
    deploy_propspec(booted_container.chain, eseqprops(this_os(), p), unapply=True)


def test_a_container_is_named_after_its_host_at_every_deployment(booted_container):
    # The shared container is the worker's: a test before this one may have
    # deployed another host into it (the walk's athena.example.org).
    # container.nspawn-running names it after its host each time.
    from hy.models import Keyword
    from consfig.props import container
    renamed = booted_container.inside("/bin/sh", "-c", "hostname athena && echo athena >/etc/hostname")
    assert renamed.returncode == 0, renamed.stderr
    deploy_propspec([Keyword("local")],
                    container.nspawn_running(booted_container.name,
                                             {Keyword("root"): str(booted_container.root)}, this_os()))
    assert booted_container.inside("hostname").stdout.strip() == booted_container.name
    assert (booted_container.root / "etc/hostname").read_text() == booted_container.name + "\n"
