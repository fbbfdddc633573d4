"""systemd: unit links made without a running systemd, inside a Debian
chroot with the systemd package installed (under
`service.without-starting-services`, as one would build an image).

Nothing here starts a unit: no systemd runs in the chroot, and tests must
not touch the services of the machine they run on.  So started, stopped,
restarted and reloaded are tested only for what they do where no service
manager runs — say so and change nothing."""

import os

import pytest

import hy  # noqa: F401
from consfig.props import apt, service, systemd

from proptest import apply_twice, deploy_propspec, in_chroot, this_os, unapply

pytestmark = pytest.mark.chroot

UNIT = """[Unit]
Description=consfig test unit

[Service]
ExecStart=/bin/true

[Install]
WantedBy={target}
"""


@pytest.fixture(scope="module")
def root(debian_chroot, chroot_chain):
    deploy_propspec(chroot_chain, [this_os(), service.without_starting_services(
        apt.installed_minimally("systemd"))])
    system = debian_chroot / "usr/lib/systemd/system"
    (system / "consfig-demo.service").write_text(UNIT.format(target="multi-user.target"))
    user = debian_chroot / "usr/lib/systemd/user"
    user.mkdir(parents=True, exist_ok=True)
    (user / "consfig-demo.service").write_text(UNIT.format(target="default.target"))
    return debian_chroot


WANTS = "etc/systemd/system/multi-user.target.wants/consfig-demo.service"


def test_enabled_links_the_unit_without_a_running_systemd(chroot_chain, root):
    apply_twice(chroot_chain, [this_os(), systemd.enabled("consfig-demo.service")])
    assert os.readlink(root / WANTS).endswith("lib/systemd/system/consfig-demo.service")
    unapply(chroot_chain, systemd.enabled("consfig-demo.service"))
    assert not os.path.lexists(root / WANTS)


def test_check_mode_says_how_a_unit_would_change_and_enables_nothing(chroot_chain, root):
    outcome, events = deploy_propspec(chroot_chain, [this_os(), systemd.enabled("consfig-demo.service")],
                                      check_mode=True)
    notes = [e["text"] for e in events if e["event"] == "output"]
    assert "consfig-demo.service: disabled → enabled" in notes, notes
    assert outcome.exit_code(True) == 2
    assert not os.path.lexists(root / WANTS), "nothing enabled"


def test_disabled_removes_the_link_and_unapplied_enables(chroot_chain, root):
    in_chroot(root, "systemctl enable consfig-demo.service")
    apply_twice(chroot_chain, [this_os(), systemd.disabled("consfig-demo.service")])
    assert not os.path.lexists(root / WANTS)
    unapply(chroot_chain, systemd.disabled("consfig-demo.service"))
    assert os.path.lexists(root / WANTS)
    in_chroot(root, "systemctl disable consfig-demo.service")


def test_a_missing_unit_is_disabled(chroot_chain, root):
    apply_twice(chroot_chain, [this_os(), systemd.disabled("no-such-unit.service")],
                changes=False)


def test_masked_links_to_dev_null(chroot_chain, root):
    masked = root / "etc/systemd/system/consfig-demo.service"
    apply_twice(chroot_chain, [this_os(), systemd.masked("consfig-demo.service")])
    assert os.readlink(masked) == "/dev/null"
    apply_twice(chroot_chain, [this_os(), systemd.disabled("consfig-demo.service")],
                changes=False)
    unapply(chroot_chain, systemd.masked("consfig-demo.service"))
    assert not os.path.lexists(masked)


def test_user_instance_units_are_enabled_in_the_users_home(chroot_chain, root):
    link = root / "root/.config/systemd/user/default.target.wants/consfig-demo.service"
    p = systemd.enabled("consfig-demo.service", user_instance=True)
    apply_twice(chroot_chain, [this_os(), p])
    assert os.readlink(link).endswith("lib/systemd/user/consfig-demo.service")
    unapply(chroot_chain, p)
    assert not os.path.lexists(link)


def test_user_instance_units_are_masked_and_disabled(chroot_chain, root):
    masked = root / "root/.config/systemd/user/consfig-demo.service"
    apply_twice(chroot_chain, [this_os(), systemd.masked("consfig-demo.service",
                                                         user_instance=True)])
    assert os.readlink(masked) == "/dev/null"
    apply_twice(chroot_chain, [this_os(), systemd.disabled("consfig-demo.service",
                                                           user_instance=True)],
                changes=False)
    unapply(chroot_chain, systemd.masked("consfig-demo.service", user_instance=True))
    assert not os.path.lexists(masked)


@pytest.mark.parametrize("prop", ["started", "restarted", "reloaded", "daemon_reloaded"])
def test_runtime_actions_say_a_chroot_starts_none_and_change_nothing(chroot_chain, root, prop):
    p = (systemd.daemon_reloaded() if prop == "daemon_reloaded"
         else getattr(systemd, prop)("consfig-demo.service"))
    events = apply_twice(chroot_chain, [this_os(), p], changes=False)
    said = " ".join(e["text"] for e in events if e["event"] == "output")
    assert "services are not started in a chroot" in said, said


def test_stopped_holds_where_no_manager_runs(chroot_chain, root):
    apply_twice(chroot_chain, [this_os(), systemd.stopped("consfig-demo.service")],
                changes=False)


@pytest.mark.parametrize("prop", ["started", "restarted", "reloaded"])
def test_a_runtime_action_fails_on_a_live_host_where_no_manager_runs(prop):
    # A live host (not a chroot, services allowed) whose PID 1 is not
    # systemd: the unit cannot be started, and saying `ok` hid that an image's
    # pull timer (`image.pulled-from :via :systemd`) would never run.  /run is
    # an empty tmpfs in the namespace, so no manager is seen whatever runs here.
    from livens import in_namespaces
    [result] = in_namespaces([["apply", getattr(systemd, prop)("consfig-demo.service")]],
                             tmpfs=["/run"])
    assert result["status"] == "failed", result
    assert "no systemd service manager runs here" in result["failures"], result

