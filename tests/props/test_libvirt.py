"""libvirt domains (props/libvirt.hy) against a real libvirtd and QEMU
under TCG: the daemon started by consfig where no systemd runs, a tiny
domain (no disk: its BIOS finds nothing to boot, and runs) defined,
started, destroyed and undefined.  The daemons the module started are
stopped at its end."""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

import hy  # noqa: F401
from hy.models import Keyword

from harness import unavailable, wait_until
from proptest import apply_twice, checks_clean, deploy_propspec, host_arch, host_suite, statuses, this_os

from consfig.errors import PropspecError
from consfig.props import libvirt

REPO = pathlib.Path(__file__).resolve().parents[2]
NAME = f"cfvirt{os.getpid()}"
LOCAL = [Keyword("local")]
OPTIONS = {Keyword("memory"): 32, Keyword("accel"): Keyword("tcg"), Keyword("network"): False}


def _virsh(*args):
    return subprocess.run(["virsh", "-c", "qemu:///system", "-q", *args], capture_output=True,
                          text=True, timeout=60)


def _alive(pid_file):
    try:
        pid = pathlib.Path(pid_file).read_text().strip()
        return "State:\tZ" not in pathlib.Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def _kill_daemons():
    for d in ["libvirtd", "virtlogd"]:
        if _alive(f"/run/{d}.pid"):
            subprocess.run(["kill", pathlib.Path(f"/run/{d}.pid").read_text().strip()])
    wait_until(lambda: not _alive("/run/libvirtd.pid") and not _alive("/run/virtlogd.pid"),
               30, "the libvirt daemons to end")


# The daemon the domain tests use runs QEMU as root (its qemu.conf, bound
# over the system's in a mount namespace of its own): in this sandbox
# /dev/kvm belongs to a group that is not kvm, so libvirt finds that KVM,
# which its probe of QEMU saw, is not usable by libvirt-qemu, deems its cache
# of QEMU's capabilities stale, and probes QEMU anew (40 s) at every call.
_ROOT_QEMU = """
cp /etc/libvirt/qemu.conf "$1" && printf 'user = "root"\\ngroup = "root"\\n' >> "$1" &&
mount --bind "$1" /etc/libvirt/qemu.conf && exec libvirtd -d
"""


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    if not shutil.which("libvirtd"):
        unavailable("libvirt is not installed (apt-get install libvirt-daemon-system libvirt-clients)")
    if _alive("/run/libvirtd.pid"):
        unavailable("a libvirtd runs already: these tests start and stop their own")
    conf = tmp_path_factory.mktemp("libvirt") / "qemu.conf"
    try:
        apply_twice(LOCAL, libvirt.daemon_running())
        assert _virsh("uri").stdout.strip() == "qemu:///system", "libvirtd does not answer"
        _kill_daemons()
        subprocess.run(["virtlogd", "-d"], check=True, timeout=60)
        subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", _ROOT_QEMU, "sh",
                        str(conf)], check=True, timeout=60)
        wait_until(lambda: _virsh("uri").returncode == 0, 30, "the tests' libvirtd to answer")
        yield
    finally:
        _virsh("destroy", NAME)
        _virsh("undefine", NAME)
        _kill_daemons()
        for f in [libvirt.console_log(NAME), f"{libvirt.LOG_DIR}/{NAME}.log"]:
            if os.path.exists(f):
                os.unlink(f)


def test_daemon_running_starts_libvirtd_without_systemd_and_again_changes_nothing(daemon):
    # The fixture applied it twice, as its first step, and asked virsh.
    assert _virsh("uri").returncode == 0, "no libvirtd answers"
    # libvirt is this machine's (the module needs it): installed finds it.
    spec = [this_os(), libvirt.installed(), libvirt.daemon_running()]
    deploy_propspec(LOCAL, spec)
    checks_clean(LOCAL, spec)


def test_defined_defines_the_domain_and_again_changes_nothing(daemon):
    apply_twice(LOCAL, libvirt.defined(NAME, OPTIONS))
    checks_clean(LOCAL, libvirt.defined(NAME, OPTIONS))
    info = _virsh("dominfo", NAME).stdout
    assert "Persistent:     yes" in info and "32768 KiB" in info, info


def test_defined_otherwise_drifts_and_is_defined_again_keeping_its_uuid(daemon):
    uuid = _virsh("domuuid", NAME).stdout.strip()
    bigger = {**OPTIONS, Keyword("memory"): 48}
    outcome, events = deploy_propspec(LOCAL, libvirt.defined(NAME, bigger), check_mode=True)
    assert outcome.exit_code(True) == 2, f"a changed definition did not drift: {statuses(events)}"
    apply_twice(LOCAL, libvirt.defined(NAME, bigger))
    assert "49152 KiB" in _virsh("dominfo", NAME).stdout, "not defined again"
    assert _virsh("domuuid", NAME).stdout.strip() == uuid, "its UUID changed"


def test_started_runs_the_domain_under_tcg_and_checks_clean(daemon):
    apply_twice(LOCAL, libvirt.started(NAME))
    assert _virsh("domstate", NAME).stdout.strip() == "running", _virsh("domstate", NAME).stdout
    assert "type='qemu'" in _virsh("dumpxml", NAME).stdout, "not under TCG"
    checks_clean(LOCAL, [libvirt.defined(NAME, {**OPTIONS, Keyword("memory"): 48}), libvirt.started(NAME)])


def test_destroyed_stops_the_domain_and_leaves_no_qemu(daemon):
    apply_twice(LOCAL, libvirt.destroyed(NAME))
    checks_clean(LOCAL, libvirt.destroyed(NAME))
    assert _virsh("domstate", NAME).stdout.strip() == "shut off", _virsh("domstate", NAME).stdout
    assert subprocess.run(["pgrep", "-f", f"guest={NAME},"]).returncode != 0, "QEMU left running"


def test_undefined_removes_the_domain(daemon):
    apply_twice(LOCAL, libvirt.undefined(NAME))
    checks_clean(LOCAL, libvirt.undefined(NAME))
    assert _virsh("domstate", NAME).returncode != 0, "the domain is still defined"


def test_a_disk_path_is_written_into_the_xml_escaped(daemon):
    name = f"{NAME}x"
    disk = "/srv/a&b<c>'\"d.img"
    try:
        apply_twice(LOCAL, libvirt.defined(name, {**OPTIONS, Keyword("disk"): disk}))
        xml = _virsh("dumpxml", name).stdout
        assert "file='/srv/a&amp;b&lt;c&gt;&apos;&quot;d.img'" in xml, xml
    finally:
        _virsh("undefine", name)


def test_starting_an_undefined_domain_is_a_clear_failure(daemon):
    outcome, events = deploy_propspec(LOCAL, libvirt.started("cf-no-such-domain"), check=False)
    assert outcome.status == "failed", statuses(events)
    text = " ".join(str(e.get("message", "")) for e in events)
    assert "define it with libvirt.defined" in text, text


def test_the_documented_domain_is_defined_and_started_by_the_consfig_command(daemon, tmp_path):
    doc = (REPO / "docs/machines.md").read_text().split("### libvirt domains\n", 1)[1]
    block = re.search(r"```hy\n(.*?)```", doc, re.S).group(1)
    name = f"{NAME}doc"
    disk = tmp_path / "web1.img"
    disk.write_bytes(b"\0" * 65536)
    site = tmp_path / "consfig.hy"
    site.write_text("(require consfig *)\n(import consfig *)\n(use-props consfig.props [libvirt os])\n"
                    "(defhost hypervisor.test.invalid {:deploy :local}\n"
                    f'(os.debian-stable "{host_suite()}" :{host_arch()})\n'
                    + block.replace('"web1"', f'"{name}"').replace("/srv/images/web1.img", str(disk))
                    + ")\n")
    try:
        r = subprocess.run([sys.executable, "-m", "consfig", "deploy", "--consfig", str(site),
                            "hypervisor.test.invalid"], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        assert _virsh("domstate", name).stdout.strip() == "running", _virsh("domstate", name).stdout
        assert f"file='{disk}'" in _virsh("dumpxml", name).stdout, "not booted from the disk given"
    finally:
        _virsh("destroy", name)
        _virsh("undefine", name)
        for f in [libvirt.console_log(name), f"{libvirt.LOG_DIR}/{name}.log"]:
            if os.path.exists(f):
                os.unlink(f)


@pytest.mark.parametrize("name", ["../x", "-rf", "a\nb", "a/b", "", "x" * 65, "a<b>"])
def test_a_hostile_domain_name_is_refused_at_load(name):
    for prop in [libvirt.started, libvirt.destroyed, libvirt.undefined]:
        with pytest.raises(PropspecError):
            prop(name)
    with pytest.raises(PropspecError):
        libvirt.defined(name, {})


@pytest.mark.parametrize("options", [{Keyword("disk"): "relative.img"},
                                     {Keyword("disk"): "/a\nb.img"},
                                     {Keyword("memory"): "512"}, {Keyword("memory"): 8},
                                     {Keyword("cpus"): 0}, {Keyword("accel"): Keyword("xen")},
                                     {Keyword("format"): Keyword("vmdk")},
                                     {Keyword("colour"): "red"}])
def test_bad_domain_options_are_refused_at_load(options):
    with pytest.raises(PropspecError):
        libvirt.defined("web1", options)
