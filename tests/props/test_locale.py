"""locale: generating locales and choosing them, inside a Debian chroot."""

import pytest

import hy  # noqa: F401
from consfig.props import locale

from proptest import apply_twice, deploy_propspec, in_chroot, this_os, unapply

pytestmark = pytest.mark.chroot


def test_normalise_matches_locale_a():
    assert locale.normalise("en_GB.UTF-8") == "en_GB.utf8"
    assert locale.normalise("de_DE.ISO-8859-15@euro") == "de_DE.iso885915@euro"
    assert locale.normalise("C") == "C"


def test_available_generates_and_unapply_ungenerates(chroot_chain, debian_chroot):
    apply_twice(chroot_chain, [this_os(), locale.available("en_GB.UTF-8")])
    assert "en_GB.utf8" in in_chroot(debian_chroot, "locale -a").stdout.split()
    assert "\nen_GB.UTF-8 UTF-8\n" in (debian_chroot / "etc/locale.gen").read_text()
    unapply(chroot_chain, locale.available("en_GB.UTF-8"))
    assert "en_GB.utf8" not in in_chroot(debian_chroot, "locale -a").stdout.split()
    assert "\n# en_GB.UTF-8 UTF-8\n" in (debian_chroot / "etc/locale.gen").read_text()


def test_a_locale_glibc_does_not_know_fails(chroot_chain):
    outcome, events = deploy_propspec(chroot_chain, [this_os(), locale.available("xx_YY.UTF-8")],
                                      check=False)
    assert outcome.status == "failed"
    assert any("xx_YY.UTF-8 is not in /etc/locale.gen" in (e.get("message") or "")
               for e in events)


def test_selected_for_sets_the_variables(chroot_chain, debian_chroot):
    p = locale.selected_for("en_GB.UTF-8", "LC_PAPER", "LC_MONETARY")
    apply_twice(chroot_chain, [this_os(), p])
    text = (debian_chroot / "etc/default/locale").read_text()
    assert "LC_PAPER=en_GB.UTF-8" in text and "LC_MONETARY=en_GB.UTF-8" in text, text
    got = in_chroot(debian_chroot, ". /etc/default/locale; LC_PAPER=$LC_PAPER locale -k height")
    assert "height=297" in got.stdout, got.stdout
    unapply(chroot_chain, p)
    got = in_chroot(debian_chroot, '. /etc/default/locale; echo "${LC_PAPER-unset} ${LC_MONETARY-unset}"')
    assert got.stdout == "unset unset\n", got.stdout
    assert "en_GB.utf8" in in_chroot(debian_chroot, "locale -a").stdout.split()
