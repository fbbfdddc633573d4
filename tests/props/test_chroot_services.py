"""A chroot never starts daemons: installing a package whose maintainer
scripts start one, starting a service by hand, or leaving a process behind
inside it — when the deployment ends, no process has its root in the chroot,
and policy-rc.d is as it was."""

import os
import subprocess

import pytest

import hy  # noqa: F401
from hy.models import Keyword
from consfig.props import apt, cmd, service, systemd

from proptest import apply_twice, deploy_propspec, in_chroot, rooted_in, this_os

pytestmark = pytest.mark.chroot

POLICY = "usr/sbin/policy-rc.d"


def chain(root):
    return [[Keyword("chroot"), Keyword("into"), str(root)]]


def _kill_rooted(root):
    # Whatever a failing test left running in it must not outlive the test.
    for pid in rooted_in(root):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass


@pytest.fixture
def chroot(debian_chroot):
    """The module's chroot, as each test expects to find it: no policy-rc.d,
    no demo service, nothing running."""
    yield debian_chroot
    _kill_rooted(debian_chroot)
    for leftover in [POLICY, "etc/init.d/consfig-demo", "var/log/consfig-demo.log"]:
        (debian_chroot / leftover).unlink(missing_ok=True)


@pytest.fixture
def own_chroot(fresh_chroot):
    """A chroot for this test alone, for one that installs packages."""
    yield fresh_chroot
    _kill_rooted(fresh_chroot)


def booted_like(root):
    """Make ROOT look, to invoke-rc.d, like a full Debian system in
    runlevel 2 rather than minbase (which has no /sbin/init, so that
    invoke-rc.d blocks every start, and no runlevel(8)): as a chroot does
    whose host's utmp says what runlevel it is in."""
    for name, script in [("init", "exit 0"), ("runlevel", "echo 'N 2'")]:
        p = root / "sbin" / name
        p.write_text(f"#!/bin/sh\n{script}\n")
        p.chmod(0o755)


def test_installing_cron_leaves_no_daemon_running(own_chroot):
    chroot = own_chroot
    booted_like(chroot)
    deploy_propspec(chain(chroot), [this_os(), apt.installed("cron")])
    assert in_chroot(chroot, "command -v cron").returncode == 0, "cron installed"
    assert rooted_in(chroot) == [], f"processes rooted in the chroot: {rooted_in(chroot)}"
    assert not (chroot / POLICY).exists(), "policy-rc.d left behind"


def test_policy_forbids_starts_only_while_the_hop_lasts(chroot):
    deploy_propspec(chain(chroot), [this_os(), cmd.script(
        "/usr/sbin/policy-rc.d cron start; test $? = 101")])
    assert not (chroot / POLICY).exists(), "policy-rc.d left behind"


def test_an_existing_policy_is_restored(chroot):
    mine = "#!/bin/sh\n# the operator's own\nexit 0\n"
    (chroot / POLICY).write_text(mine)
    (chroot / POLICY).chmod(0o750)
    deploy_propspec(chain(chroot), [this_os(), cmd.script(
        "/usr/sbin/policy-rc.d cron start; test $? = 101")])
    assert (chroot / POLICY).read_text() == mine
    assert (chroot / POLICY).stat().st_mode & 0o777 == 0o750
    assert [p.name for p in (chroot / "usr/sbin").glob(".policy-rc.d*")] == []


def test_no_services_property_keeps_its_policy(chroot):
    deploy_propspec(chain(chroot), [this_os(), service.no_services()])
    assert "exit 101" in (chroot / POLICY).read_text(), \
        "the host's own no-services policy is not the hop's to remove"


def test_a_process_left_running_is_ended_when_the_hop_closes(chroot):
    # One that goes at TERM, one that ignores it and needs KILL.
    deploy_propspec(chain(chroot), [this_os(), cmd.script(
        "setsid sleep 100000 </dev/null >/dev/null 2>&1 &\n"
        "setsid sh -c 'trap \"\" TERM; exec sleep 100001' </dev/null >/dev/null 2>&1 &\n"
        "sleep 0.2")])
    assert rooted_in(chroot) == [], f"processes rooted in the chroot: {rooted_in(chroot)}"


def test_a_process_outside_the_chroot_is_left_alone(chroot, tmp_path):
    p = subprocess.Popen(["sleep", "100000"], cwd=str(chroot))
    try:
        deploy_propspec(chain(chroot), [this_os(), cmd.single("true")])
        assert p.poll() is None, "a process on the host, merely in the chroot's directory, was killed"
    finally:
        p.kill()
        p.wait()


INIT_SCRIPT = """#!/bin/sh
echo "$1" >> /var/log/consfig-demo.log
case "$1" in status) exit 3 ;; esac
"""


@pytest.mark.parametrize("prop", ["running", "restarted", "reloaded"])
def test_service_actions_say_a_chroot_starts_no_services(chroot, prop):
    script = chroot / "etc/init.d/consfig-demo"
    script.write_text(INIT_SCRIPT)
    script.chmod(0o755)
    events = apply_twice(chain(chroot), [this_os(), getattr(service, prop)("consfig-demo")],
                         changes=False)
    said = " ".join(e["text"] for e in events if e["event"] == "output")
    assert "services are not started in a chroot" in said, said
    assert not (chroot / "var/log/consfig-demo.log").exists(), "the init script ran"


def test_systemd_started_says_a_chroot_starts_no_services(chroot):
    events = apply_twice(chain(chroot), [this_os(), systemd.started("cron.service")],
                         changes=False)
    said = " ".join(e["text"] for e in events if e["event"] == "output")
    assert "services are not started in a chroot" in said, said


def test_a_python_started_in_a_chroot_starts_no_services(own_chroot):
    chroot = own_chroot
    in_chroot(chroot, "DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-minimal")
    script = chroot / "etc/init.d/consfig-demo"
    script.write_text(INIT_SCRIPT)
    script.chmod(0o755)
    events = apply_twice(chain(chroot) + [Keyword("python")],
                         [this_os(), service.running("consfig-demo")], changes=False)
    said = " ".join(e["text"] for e in events if e["event"] == "output")
    assert "services are not started in a chroot" in said, said
    assert not (chroot / "var/log/consfig-demo.log").exists(), "the init script ran"
    assert rooted_in(chroot) == [], f"processes rooted in the chroot: {rooted_in(chroot)}"
