"""logrotate drop-ins in the Debian chroot, checked and run by its own
logrotate."""

import pytest

import hy  # noqa: F401
from hy.models import Keyword
from consfig.errors import PropspecError
from consfig.props import apt, logrotate

from proptest import apply_twice, deploy_propspec, failure_text, in_chroot, this_os, unapply

pytestmark = pytest.mark.chroot


@pytest.fixture(scope="module")
def root(debian_chroot, chroot_chain):
    deploy_propspec(chroot_chain, [this_os(), apt.installed_minimally("logrotate")])
    return debian_chroot


def test_rotates_writes_a_stanza_logrotate_runs(root, chroot_chain):
    (root / "var/log/app").mkdir(exist_ok=True)
    (root / "var/log/app/a.log").write_text("line\n")
    p = logrotate.rotates("app", "/var/log/app/*.log", frequency=Keyword("daily"), keep=3)
    apply_twice(chroot_chain, p)
    assert (root / "etc/logrotate.d/app").read_text() == (
        "/var/log/app/*.log {\n    daily\n    rotate 3\n    compress\n    delaycompress\n"
        "    missingok\n    notifempty\n}\n")
    in_chroot(root, "logrotate --force --state /tmp/lr.state /etc/logrotate.d/app")
    assert (root / "var/log/app/a.log.1").exists()
    unapply(chroot_chain, p)
    assert not (root / "etc/logrotate.d/app").exists()


def test_configured_refuses_what_logrotate_rejects_and_keeps_the_old_file(root, chroot_chain):
    deploy_propspec(chroot_chain, logrotate.configured("keep", "/var/log/keep.log {\n    weekly\n}\n"))
    outcome, events = deploy_propspec(chroot_chain, logrotate.configured(
        "keep", "/var/log/keep.log {\n    sometimes\n}\n"), check=False)
    assert outcome.status == "failed" and "invalid" in failure_text(events), failure_text(events)
    assert "weekly" in (root / "etc/logrotate.d/keep").read_text()
    assert not list((root / "tmp").glob("consfig-logrotate.*")), "no temporary left"


def test_hostile_values_are_refused():
    for bad in [lambda: logrotate.rotates("app", "/var/log/a.log {\n}\n/etc/shadow"),
                lambda: logrotate.rotates("app", "relative.log"),
                lambda: logrotate.rotates("a.b", "/var/log/x"),
                lambda: logrotate.rotates("-app", "/var/log/x"),
                lambda: logrotate.rotates("app", "/var/log/x", size="1M; rm")]:
        with pytest.raises(PropspecError):
            bad()
