"""periodic.at-most: a flag file in the applying user's cache on the
target decides whether the propapps are applied again."""

import os
import time

import pytest

import hy  # noqa: F401
from hy.models import Keyword
from consfig.props import cmd, periodic

from proptest import apply_twice, deploy_propspec, in_chroot, this_os, unapply

pytestmark = pytest.mark.chroot


def counter(root):
    p = root / "var/tmp/at-most-count"
    return len(p.read_text()) if p.exists() else 0


def bump():
    return cmd.script("printf x >> /var/tmp/at-most-count")


def test_at_most_daily_applies_once_and_records_it(chroot_chain, debian_chroot):
    p = periodic.at_most(Keyword("daily"), "count things", bump())
    apply_twice(chroot_chain, [this_os(), p])
    assert counter(debian_chroot) == 1
    flag = debian_chroot / "root/.cache/consfig/at-most/count_things"
    assert flag.exists()
    unapply(chroot_chain, periodic.at_most(Keyword("daily"), "count things"))
    assert not flag.exists()


def test_at_most_applies_again_once_the_period_is_over(chroot_chain, debian_chroot):
    in_chroot(debian_chroot, "rm -f /var/tmp/at-most-count")
    p = periodic.at_most(Keyword("hourly"), "count hourly", bump())
    apply_twice(chroot_chain, [this_os(), p])
    flag = debian_chroot / "root/.cache/consfig/at-most/count_hourly"
    old = time.time() - 3601
    os.utime(flag, (old, old))
    deploy_propspec(chroot_chain, [this_os(), p])
    assert counter(debian_chroot) == 2


def test_a_failure_is_tried_again(chroot_chain, debian_chroot):
    p = periodic.at_most(Keyword("weekly"), "fails", cmd.single("false"))
    for _ in range(2):
        outcome, _ = deploy_propspec(chroot_chain, [this_os(), p], check=False)
        assert outcome.status == "failed"
    assert not (debian_chroot / "root/.cache/consfig/at-most/fails").exists()


def test_an_unknown_period_is_refused_before_anything_runs(chroot_chain):
    with pytest.raises(Exception, match="period must be one of :each-reboot"):
        deploy_propspec(chroot_chain, [this_os(), periodic.at_most(Keyword("fortnightly"), "x", bump())])
