"""The chroot fixture and the proptest helpers themselves."""

import subprocess

import pytest

import hy  # noqa: F401
from consfig.props import file

from proptest import apply_twice, host_suite, in_chroot, pack, this_os

pytestmark = pytest.mark.chroot


def test_chroot_is_debian_of_this_suite(debian_chroot):
    text = (debian_chroot / "etc/os-release").read_text()
    assert f"VERSION_CODENAME={host_suite()}" in text, text


def test_apply_twice_through_chroot_hop(chroot_chain, debian_chroot):
    p = file.has_content("/etc/consfig-fixture", "hello\n")
    apply_twice(chroot_chain, [this_os(), p])
    assert (debian_chroot / "etc/consfig-fixture").read_text() == "hello\n"
    assert in_chroot(debian_chroot, "cat /etc/consfig-fixture").stdout == "hello\n"


def test_a_failed_pack_says_what_tar_said_and_leaves_no_part(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    tarball = tmp_path / "chroot.tar.zst"
    with pytest.raises(RuntimeError) as e:
        pack(tmp_path / "no-such-root", tarball, work)
    assert "no-such-root" in str(e.value) and "tar exit" in str(e.value), str(e.value)
    assert list(work.iterdir()) == [] and not tarball.exists(), list(tmp_path.rglob("*"))


def test_a_new_chroots_first_apt_command_builds_no_package_cache(debian_chroot_tarball, tmp_path):
    # apt's binary caches (2 x 39 MB, 1.5 s of a core to build from the
    # lists) are made once, in the tree every chroot's overlay reads, not
    # in each chroot by its first apt command.
    from proptest import overlay_copy, remove_tree
    box, root = overlay_copy(debian_chroot_tarball, tmp_path)
    try:
        r = subprocess.run(["chroot", str(root), "apt-get", "install", "-s", "-qq", "hello"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        made = [p.name for p in (box / "upper/var/cache/apt").glob("*.bin")]
        assert not made, f"the chroot's first apt command built {made}"
    finally:
        remove_tree(box)
