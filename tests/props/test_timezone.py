"""timezone: /etc/localtime and /etc/timezone inside a Debian chroot."""

import os

import pytest

import hy  # noqa: F401
from consfig.props import timezone

from proptest import apply_twice, deploy_propspec, in_chroot, this_os

pytestmark = pytest.mark.chroot


def test_configured_links_localtime_and_names_the_zone(chroot_chain, debian_chroot):
    apply_twice(chroot_chain, [this_os(), timezone.configured("Europe/London")])
    assert os.readlink(debian_chroot / "etc/localtime") == "/usr/share/zoneinfo/Europe/London"
    assert (debian_chroot / "etc/timezone").read_text() == "Europe/London\n"
    assert in_chroot(debian_chroot, "date +%Z -d 2024-07-01").stdout.strip() == "BST"


def test_an_unknown_zone_fails_and_changes_nothing(chroot_chain, debian_chroot):
    before = os.readlink(debian_chroot / "etc/localtime")
    outcome, events = deploy_propspec(chroot_chain, [this_os(), timezone.configured("Mars/Olympus")],
                                      check=False)
    assert outcome.status == "failed"
    assert any("no timezone Mars/Olympus here" in (e.get("message") or "") for e in events)
    assert os.readlink(debian_chroot / "etc/localtime") == before
