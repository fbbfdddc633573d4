"""More of the file module in the Debian chroot: files that merely exist,
tab-separated config, managed blocks, lineinfile-style edits, empty
directories, and modes and owners over a whole tree."""

import os

import pytest

import hy  # noqa: F401
from consfig.errors import PropspecError
from consfig.props import file

from proptest import apply_twice, deploy_propspec, diffs, failure_text, in_chroot, unapply

pytestmark = pytest.mark.chroot


def test_exists_makes_an_empty_file_and_keeps_content(chroot_chain, debian_chroot):
    apply_twice(chroot_chain, file.exists("/srv/flag", mode=0o600))
    f = debian_chroot / "srv/flag"
    assert f.read_bytes() == b"" and f.stat().st_mode & 0o777 == 0o600, f.stat()
    f.write_text("kept\n")
    apply_twice(chroot_chain, file.exists("/srv/flag"), changes=False)
    assert f.read_text() == "kept\n"


def test_exists_refuses_a_directory(chroot_chain, debian_chroot):
    (debian_chroot / "srv/adir").mkdir()
    outcome, events = deploy_propspec(chroot_chain, file.exists("/srv/adir"), check=False)
    assert outcome.status == "failed"
    assert "not a regular file" in failure_text(events), failure_text(events)


def test_contains_conf_tab_sets_keys_with_tabs(chroot_chain, debian_chroot):
    f = debian_chroot / "srv/tab.conf"
    f.write_text("# comment\n#alpha 1\nbeta 2\n")
    apply_twice(chroot_chain, file.contains_conf_tab("/srv/tab.conf", "alpha", "9", "gamma", "x y"))
    assert f.read_text() == "# comment\nalpha 9\nbeta 2\ngamma\tx y\n"


def test_contains_conf_tab_refuses_a_newline_in_a_value():
    with pytest.raises(PropspecError):
        file.contains_conf_tab("/srv/tab.conf", "k", "v\nother 1")


def test_has_block_writes_replaces_and_removes_its_block(chroot_chain, debian_chroot):
    f = debian_chroot / "srv/blocky"
    f.write_text("before\n")
    apply_twice(chroot_chain, file.has_block("/srv/blocky", "web", "a", "b"))
    assert f.read_text() == "before\n# BEGIN consfig web\na\nb\n# END consfig web\n"
    f.write_text(f.read_text() + "after\n")
    apply_twice(chroot_chain, file.has_block("/srv/blocky", "web", "c"))
    assert f.read_text() == "before\n# BEGIN consfig web\nc\n# END consfig web\nafter\n"
    unapply(chroot_chain, file.has_block("/srv/blocky", "web", "c"))
    assert f.read_text() == "before\nafter\n"


def test_has_block_in_check_mode_shows_a_diff_and_writes_nothing(chroot_chain, debian_chroot):
    f = debian_chroot / "srv/blocky2"
    f.write_text("x\n")
    outcome, events = deploy_propspec(chroot_chain, file.has_block("/srv/blocky2", "b", ";k=v", comment=";"),
                                      check_mode=True)
    assert outcome.status == "changed", outcome
    assert "+; BEGIN consfig b" in diffs(events)[0]["text"], diffs(events)
    assert f.read_text() == "x\n"


def test_has_block_refuses_a_begin_marker_without_its_end(chroot_chain, debian_chroot):
    f = debian_chroot / "srv/broken"
    f.write_text("# BEGIN consfig web\nmine\n")
    outcome, events = deploy_propspec(chroot_chain, file.has_block("/srv/broken", "web", "a"),
                                      check=False)
    assert outcome.status == "failed" and "mend it by hand" in failure_text(events)
    assert f.read_text() == "# BEGIN consfig web\nmine\n"


def test_has_block_refuses_a_hostile_name():
    for name in ["-x", "a\nb"]:
        with pytest.raises(PropspecError):
            file.has_block("/srv/blocky", name, "a")


def test_has_line_matching_replaces_the_first_match_and_drops_the_rest(chroot_chain, debian_chroot):
    f = debian_chroot / "srv/lineinfile"
    f.write_text("a\n#PermitRootLogin yes\nPermitRootLogin yes\nb\n")
    apply_twice(chroot_chain, file.has_line_matching("/srv/lineinfile", r"^#?PermitRootLogin\b",
                                                     "PermitRootLogin no"))
    assert f.read_text() == "a\nPermitRootLogin no\nb\n"


def test_has_line_matching_appends_once_a_line_that_does_not_match(chroot_chain, debian_chroot):
    f = debian_chroot / "srv/lineinfile2"
    f.write_text("a\n")
    apply_twice(chroot_chain, file.has_line_matching("/srv/lineinfile2", r"^zzz", "added"))
    assert f.read_text() == "a\nadded\n"


def test_has_line_matching_refuses_a_line_with_a_newline():
    with pytest.raises(PropspecError):
        file.has_line_matching("/srv/x", "a", "a\nb")


def test_empty_directory_does_not_exist_removes_only_empty_ones(chroot_chain, debian_chroot):
    (debian_chroot / "srv/empty").mkdir()
    apply_twice(chroot_chain, file.empty_directory_does_not_exist("/srv/empty"))
    assert not (debian_chroot / "srv/empty").exists()
    (debian_chroot / "srv/full").mkdir()
    (debian_chroot / "srv/full/f").write_text("x")
    outcome, events = deploy_propspec(chroot_chain, file.empty_directory_does_not_exist("/srv/full"),
                                      check=False)
    assert outcome.status == "failed" and "not removed" in failure_text(events), failure_text(events)
    assert (debian_chroot / "srv/full/f").exists()


def test_tree_has_modes_sets_files_and_directories_apart(chroot_chain, debian_chroot):
    t = debian_chroot / "srv/tree"
    (t / "-sub dir").mkdir(parents=True)
    (t / "-sub dir/f").write_text("x")
    (t / "g").write_text("y")
    os.chmod(t / "g", 0o4755)
    os.chmod(t / "-sub dir", 0o2700)
    os.symlink("/etc/passwd", t / "link")
    apply_twice(chroot_chain, file.tree_has_modes("/srv/tree", files=0o640, directories=0o750))
    modes = {p: os.lstat(t / p).st_mode & 0o7777 for p in ["", "-sub dir", "-sub dir/f", "g"]}
    assert modes == {"": 0o750, "-sub dir": 0o750, "-sub dir/f": 0o640, "g": 0o640}, modes
    assert (debian_chroot / "etc/passwd").stat().st_mode & 0o777 == 0o644, "a symlink is not followed"


def test_tree_has_modes_needs_a_mode():
    with pytest.raises(PropspecError):
        file.tree_has_modes("/srv/tree")


def test_tree_has_ownership_chowns_the_tree_not_through_links(chroot_chain, debian_chroot):
    t = debian_chroot / "srv/owned"
    (t / "d").mkdir(parents=True)
    (t / "d/f").write_text("x")
    os.symlink("/etc/hostname", t / "link")
    apply_twice(chroot_chain, file.tree_has_ownership("/srv/owned", user="nobody", group=100))
    nobody = in_chroot(debian_chroot, "id -u nobody").stdout.strip()
    for p in ["", "d", "d/f", "link"]:
        st = os.lstat(t / p)
        assert (str(st.st_uid), st.st_gid) == (nobody, 100), (p, st)
    assert (debian_chroot / "etc/hostname").stat().st_uid == 0


def test_tree_has_ownership_refuses_a_user_starting_with_a_dash():
    with pytest.raises(PropspecError):
        file.tree_has_ownership("/srv/owned", user="-R")
