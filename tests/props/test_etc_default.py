"""etc-default: shell settings in /etc/default inside a Debian chroot."""

import pytest

import hy  # noqa: F401
from consfig.props import etc_default

from proptest import apply_twice, in_chroot, this_os

pytestmark = pytest.mark.chroot


def test_contains_sets_and_uncomments_keys(chroot_chain, debian_chroot):
    path = debian_chroot / "etc/default/consfig-demo"
    path.write_text("# Defaults for the demo\n#ENABLED=false\nOPTS=\"-v\"\n")
    apply_twice(chroot_chain, [this_os(), etc_default.contains(
        "consfig-demo", "ENABLED", "true", "PATHS", "/srv/a b")])
    text = path.read_text()
    assert text.startswith("# Defaults for the demo\nENABLED=true\nOPTS=\"-v\"\n"), text
    got = in_chroot(debian_chroot, ". /etc/default/consfig-demo; echo \"$ENABLED|$PATHS|$OPTS\"")
    assert got.stdout == "true|/srv/a b|-v\n"
