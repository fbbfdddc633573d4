"""sysctl: the file in /etc/sysctl.d in the Debian chroot (where the running
kernel, this machine's, is left alone), and the running kernel over :local
inside network and mount namespaces of the test's own (livens.py), whose
net.* parameters and /etc/sysctl.d are private to it."""

import pathlib

import pytest

import hy  # noqa: F401
from consfig.errors import PropspecError
from consfig.props import sysctl

from livens import in_namespaces
from proptest import apply_twice, deploy_propspec, diffs, unapply

FORWARD = pathlib.Path("/proc/sys/net/ipv4/ip_forward")


@pytest.mark.chroot
def test_the_file_is_written_and_the_running_kernel_left_alone_in_a_chroot(
        debian_chroot, chroot_chain):
    before = FORWARD.read_text()
    p = sysctl.has_values("net.ipv4.ip_forward", 1, "net.ipv4.ip_local_port_range", "20000 60999")
    events = apply_twice(chroot_chain, p)
    assert (debian_chroot / "etc/sysctl.d/90-consfig.conf").read_text() == (
        "net.ipv4.ip_forward = 1\nnet.ipv4.ip_local_port_range = 20000 60999\n")
    assert any("the running kernel is left alone (in a chroot" in e.get("text", "") for e in events)
    assert FORWARD.read_text() == before, "this machine's kernel untouched"
    unapply(chroot_chain, p)
    assert (debian_chroot / "etc/sysctl.d/90-consfig.conf").read_text() == ""


@pytest.mark.chroot
def test_a_value_already_in_the_file_is_changed_in_place(debian_chroot, chroot_chain):
    conf = debian_chroot / "etc/sysctl.d/60-site.conf"
    conf.parent.mkdir(exist_ok=True)
    conf.write_text("# the site's\nvm.swappiness=60\nkernel.panic = 10\n")
    apply_twice(chroot_chain, sysctl.has_value("vm.swappiness", 10, file="60-site.conf"))
    assert conf.read_text() == "# the site's\nvm.swappiness=10\nkernel.panic = 10\n"
    conf.unlink()


@pytest.mark.chroot
def test_check_mode_shows_the_change_to_the_file_and_writes_nothing(debian_chroot, chroot_chain):
    outcome, events = deploy_propspec(chroot_chain, sysctl.has_value("vm.swappiness", 5,
                                                                     file="70-check.conf"),
                                      check_mode=True)
    assert outcome.exit_code(True) == 2
    assert "+vm.swappiness = 5" in "".join(d["text"] for d in diffs(events))
    assert not (debian_chroot / "etc/sysctl.d/70-check.conf").exists()


def test_a_value_is_applied_to_the_running_kernel():
    before = FORWARD.read_text()
    p = sysctl.has_value("net.ipv4.ip_forward", 1)
    first, second, live, conf = in_namespaces(
        [["apply", p], ["apply", p],
         ["sh", "cat /proc/sys/net/ipv4/ip_forward"], ["sh", "cat /etc/sysctl.d/90-consfig.conf"]],
        tmpfs=["/etc/sysctl.d"])
    assert first["status"] == "changed", first
    assert second["status"] == "no-change", second
    assert live["stdout"] == "1\n"
    assert conf["stdout"] == "net.ipv4.ip_forward = 1\n"
    assert FORWARD.read_text() == before, "only the namespace's parameter changed"


def test_a_running_value_changed_behind_its_back_is_set_again():
    p = sysctl.has_value("net.ipv4.ip_local_port_range", "20000 60999")
    results = in_namespaces(
        [["apply", p], ["sh", "sysctl -q -w net.ipv4.ip_local_port_range='30000 40000'"],
         ["check", p], ["apply", p], ["sh", "cat /proc/sys/net/ipv4/ip_local_port_range"]],
        tmpfs=["/etc/sysctl.d"])
    check, again, live = results[2], results[3], results[4]
    assert check["exit_code"] == 2, check
    assert "net.ipv4.ip_local_port_range: 30000 40000 → 20000 60999 on the running kernel" \
        in check["notes"], check
    assert again["status"] == "changed", again
    assert live["stdout"].split() == ["20000", "60999"]


def test_a_parameter_the_kernel_lacks_fails_and_writes_nothing():
    applied, conf = in_namespaces(
        [["apply", sysctl.has_value("net.ipv4.no_such_parameter", 1)],
         ["sh", "ls -A /etc/sysctl.d"]],
        tmpfs=["/etc/sysctl.d"])
    assert applied["status"] == "failed"
    assert "the running kernel has no parameter net.ipv4.no_such_parameter" in applied["failures"]
    assert conf["stdout"] == "", "no file written"


def test_unapplying_removes_the_line_and_says_the_kernel_keeps_the_value():
    p = sysctl.has_value("net.ipv4.ip_forward", 1)
    applied, unapplied, conf = in_namespaces(
        [["apply", p], ["unapply", p], ["sh", "cat /etc/sysctl.d/90-consfig.conf"]],
        tmpfs=["/etc/sysctl.d"])
    assert unapplied["status"] == "changed"
    assert any("keeps its values until the next boot" in n for n in unapplied["notes"])
    assert conf["stdout"] == ""


def test_hostile_keys_values_and_files_are_refused_where_they_are_written():
    for make in [lambda: sysctl.has_value("../../../etc/shadow", 1),
                 lambda: sysctl.has_value("net/../../x", 1),
                 lambda: sysctl.has_value("-kernel.panic", 1),
                 lambda: sysctl.has_value("kernel.panic", "1\nkernel.sysrq = 1"),
                 lambda: sysctl.has_value("kernel.panic", "$(reboot)\x00"),
                 lambda: sysctl.has_value("kernel.panic", 1, file="../../etc/passwd.conf"),
                 lambda: sysctl.has_value("kernel.panic", 1, file="x.txt"),
                 lambda: sysctl.has_values("kernel.panic", 1, "kernel.sysrq"),
                 lambda: sysctl.has_values({"kernel panic": 1})]:
        with pytest.raises(PropspecError):
            make()
