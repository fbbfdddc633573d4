"""/etc/default/keyboard and /etc/resolv.conf in the Debian chroot."""

import os

import pytest

import hy  # noqa: F401
from consfig.errors import PropspecError
from consfig.props import keyboard, resolv

from proptest import apply_twice, deploy_propspec, failure_text, in_chroot

pytestmark = pytest.mark.chroot


def test_keyboard_configured_sets_only_what_is_given(chroot_chain, debian_chroot):
    f = debian_chroot / "etc/default/keyboard"
    f.write_text('XKBMODEL="pc105"\nXKBLAYOUT="us"\nXKBVARIANT=""\nXKBOPTIONS=""\nBACKSPACE="guess"\n')
    apply_twice(chroot_chain, keyboard.configured(layout="gb", options="ctrl:nocaps,compose:ralt"))
    got = in_chroot(debian_chroot, ". /etc/default/keyboard; echo \"$XKBMODEL|$XKBLAYOUT|$XKBOPTIONS|$BACKSPACE\"")
    assert got.stdout == "pc105|gb|ctrl:nocaps,compose:ralt|guess\n", got.stdout


def test_keyboard_refuses_hostile_values():
    for kw in [{"layout": "us\nXKBMODEL=evil"}, {"layout": "$(reboot)"}, {"options": "a b"}, {}]:
        with pytest.raises(PropspecError):
            keyboard.configured(**kw)


def test_resolv_configured_writes_the_file(chroot_chain, debian_chroot):
    p = resolv.configured("192.0.2.53", "2001:db8::53", search=["example.com", "corp.example"],
                          options=["rotate", "timeout:2"])
    apply_twice(chroot_chain, p)
    assert (debian_chroot / "etc/resolv.conf").read_text() == (
        "# Written by consfig.\nsearch example.com corp.example\nnameserver 192.0.2.53\n"
        "nameserver 2001:db8::53\noptions rotate timeout:2\n")


def test_resolv_refuses_a_symlinked_resolv_conf(chroot_chain, debian_chroot):
    f = debian_chroot / "etc/resolv.conf"
    f.unlink()
    os.symlink("../run/systemd/resolve/stub-resolv.conf", f)
    outcome, events = deploy_propspec(chroot_chain, resolv.configured("192.0.2.53"), check=False)
    assert outcome.status == "failed" and "is a symlink" in failure_text(events), failure_text(events)
    assert f.is_symlink()


def test_resolv_refuses_hostile_values():
    for args, kw in [(("192.0.2.1\nnameserver 10.0.0.1",), {}), (("192.0.2.1",), {"search": ["a b"]}),
                     (("192.0.2.1",), {"options": ["ndots:1\nnameserver x"]}), ((), {}),
                     (("192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4"), {})]:
        with pytest.raises(PropspecError):
            resolv.configured(*args, **kw)
