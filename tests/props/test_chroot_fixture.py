"""The chroot fixture and the proptest helpers themselves."""

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
