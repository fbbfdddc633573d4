"""limits.d drop-ins in the Debian chroot."""

import pytest

import hy  # noqa: F401
from consfig.errors import PropspecError
from consfig.props import limits

from proptest import apply_twice, unapply

pytestmark = pytest.mark.chroot


def test_configured_writes_the_drop_in_and_unapplying_removes_it(chroot_chain, debian_chroot):
    p = limits.configured("db", ["postgres", "-", "nofile", 65536], ["@adm", "hard", "core", "unlimited"])
    apply_twice(chroot_chain, p)
    f = debian_chroot / "etc/security/limits.d/db.conf"
    assert f.read_text() == "# Written by consfig.\npostgres\t-\tnofile\t65536\n@adm\thard\tcore\tunlimited\n"
    unapply(chroot_chain, p)
    assert not f.exists()


def test_hostile_entries_are_refused():
    for args in [("db", ["a\nb", "-", "nofile", 1]), ("db", ["a", "soft", "nofile", "1\n*"]),
                 ("db", ["a", "soft", "made-up", 1]), ("-db", ["a", "soft", "nofile", 1]),
                 ("../x", ["a", "soft", "nofile", 1]), ("db",)]:
        with pytest.raises(PropspecError):
            limits.configured(*args)
