"""/etc/environment in the Debian chroot, read back as pam_env would."""

import pytest

import hy  # noqa: F401
from consfig.errors import PropspecError
from consfig.props import environment

from proptest import apply_twice, deploy_propspec, diffs

pytestmark = pytest.mark.chroot


def test_has_variables_sets_quotes_and_keeps_other_lines(chroot_chain, debian_chroot):
    f = debian_chroot / "etc/environment"
    f.write_text("LANG=C\n#EDITOR=nano\n")
    apply_twice(chroot_chain, environment.has_variables({"EDITOR": "vim", "GREETING": "hello world"}))
    assert f.read_text() == "LANG=C\nEDITOR=vim\nGREETING='hello world'\n"


def test_has_variables_in_check_mode_shows_a_diff(chroot_chain, debian_chroot):
    f = debian_chroot / "etc/environment"
    before = f.read_text()
    outcome, events = deploy_propspec(chroot_chain, environment.has_variables("PAGER", "less"),
                                      check_mode=True)
    assert "+PAGER=less" in "".join(e["text"] for e in diffs(events)), diffs(events)
    assert f.read_text() == before


def test_lacks_variables_removes_their_lines(chroot_chain, debian_chroot):
    f = debian_chroot / "etc/environment"
    f.write_text("A=1\nexport B=2\nBB=3\n")
    apply_twice(chroot_chain, environment.lacks_variables("A", "B"))
    assert f.read_text() == "BB=3\n"


def test_hostile_values_are_refused():
    for args in [("X", "a\nY=b"), ("X", "it's"), ("X", 'say "hi"'), ("-X", "1"), ("X=Y", "1")]:
        with pytest.raises(PropspecError):
            environment.has_variables(*args)
    with pytest.raises(PropspecError):
        environment.lacks_variables("A|.*")
