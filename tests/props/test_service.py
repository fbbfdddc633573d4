"""service: `without-starting-services` and `no-services`, inside a Debian
chroot.  The service is a SysV init script that records what it was asked to
do, so that it shows if anything runs it."""

import pytest

import hy  # noqa: F401
from consfig.props import cmd, service

from proptest import apply_twice, deploy_propspec, in_chroot, statuses, this_os, unapply

pytestmark = pytest.mark.chroot

INIT_SCRIPT = """#!/bin/sh
state=/var/lib/consfig-demo.running
echo "$1" >> /var/log/consfig-demo.log
case "$1" in
  start) touch $state ;;
  stop) rm -f $state ;;
  restart|reload|force-reload) ;;
  status) test -e $state ;;
  *) exit 3 ;;
esac
"""


@pytest.fixture(scope="module")
def demo(debian_chroot):
    script = debian_chroot / "etc/init.d/consfig-demo"
    script.write_text(INIT_SCRIPT)
    script.chmod(0o755)
    return debian_chroot


def log(root):
    p = root / "var/log/consfig-demo.log"
    return p.read_text().split() if p.exists() else []


def clear(root):
    in_chroot(root, "rm -f /var/log/consfig-demo.log /var/lib/consfig-demo.running")


def test_service_actions_do_nothing_without_starting_services(chroot_chain, demo):
    clear(demo)
    events = apply_twice(
        chroot_chain,
        [this_os(),
         service.without_starting_services(
             service.running("consfig-demo"), service.restarted("consfig-demo"),
             service.reloaded("consfig-demo"))],
        changes=False)
    assert log(demo) == [], log(demo)
    said = " ".join(e["text"] for e in events if e["event"] == "output")
    assert "not starting consfig-demo: services are not started here" in said, said


def test_policy_forbids_starts_for_the_duration_and_goes_away(chroot_chain, demo):
    clear(demo)
    deploy_propspec(chroot_chain, [this_os(), service.without_starting_services(
        cmd.script("/usr/sbin/policy-rc.d consfig-demo start; test $? = 101"),
        cmd.script("invoke-rc.d consfig-demo start 2>&1 | grep -q 'denied execution'"))])
    assert log(demo) == [], "invoke-rc.d ran the init script despite policy-rc.d"
    assert not (demo / "usr/sbin/policy-rc.d").exists()


def test_an_existing_policy_comes_back_even_after_a_failure(chroot_chain, demo):
    policy = demo / "usr/sbin/policy-rc.d"
    policy.write_text("#!/bin/sh\n# the admin's own\nexit 0\n")
    policy.chmod(0o700)
    try:
        outcome, events = deploy_propspec(chroot_chain, [this_os(), service.without_starting_services(
            cmd.single("grep", "-q", "consfig", "/usr/sbin/policy-rc.d"),
            cmd.script("exit 3"))], check=False)
        assert outcome.status == "failed"
        assert statuses(events)["Ran grep -q consfig /usr/sbin/policy-rc.d"] == "changed"
        assert statuses(events)["Ran exit 3"] == "failed"
        assert policy.read_text() == "#!/bin/sh\n# the admin's own\nexit 0\n"
        assert policy.stat().st_mode & 0o777 == 0o700
        assert not list(policy.parent.glob(".policy-rc.d.consfig-*"))
    finally:
        policy.unlink()


def test_no_services_owns_the_policy(chroot_chain, demo):
    clear(demo)
    apply_twice(chroot_chain, [this_os(), service.no_services(),
                               service.running("consfig-demo")])
    assert log(demo) == []
    assert in_chroot(demo, "/usr/sbin/policy-rc.d x start", check=False).returncode == 101
    unapply(chroot_chain, service.no_services())
    assert not (demo / "usr/sbin/policy-rc.d").exists()
