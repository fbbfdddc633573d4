"""The test chroot's cache (tests/props/chrootcache.py): its apt index is
trimmed to the packages the sources name, and what they need."""

import subprocess

import pytest

from chrootcache import index_names, source_words, trim_index

INDEX = """\
Package: web
Version: 1.0
Depends: libweb (>= 1.2) | libweb-compat, base:any
Pre-Depends: early
Recommends: extra
Suggests: optional
Description: a web server
 spread over two lines

Package: libweb
Version: 1.3
Depends: deep

Package: libweb-compat
Version: 1.0

Package: base
Version: 2

Package: early
Version: 1

Package: extra
Version: 1

Package: optional
Version: 1

Package: deep
Version: 1

Package: mta-one
Version: 1
Provides: mail-transport-agent

Package: mta-two
Version: 1
Provides: mail-transport-agent (= 1)

Package: unrelated
Version: 1
Depends: base
"""


def _packages(index_text):
    return {line.split(": ", 1)[1] for line in index_text.splitlines()
            if line.startswith("Package: ")}


def test_a_wanted_package_keeps_all_it_depends_on_recommends_and_every_alternative():
    kept = _packages(trim_index(INDEX, {"web"}))
    assert kept == {"web", "libweb", "libweb-compat", "base", "early", "extra", "deep"}, kept


def test_what_nothing_wanted_needs_is_left_out_even_if_suggested():
    kept = _packages(trim_index(INDEX, {"web"}))
    assert not kept & {"optional", "unrelated", "mta-one"}, kept


def test_a_wanted_virtual_name_keeps_every_package_that_provides_it():
    kept = _packages(trim_index(INDEX, {"mail-transport-agent"}))
    assert kept == {"mta-one", "mta-two"}, kept


def test_kept_stanzas_are_whole_and_apart():
    text = trim_index(INDEX, {"web"})
    assert "Description: a web server\n spread over two lines\n\n" in text, text
    assert text.endswith("\n\n") and "\n\n\n" not in text, repr(text[-200:])


def test_a_name_no_package_has_keeps_nothing():
    assert trim_index(INDEX, {"no-such-thing"}) == "", "nothing kept"


def test_source_words_come_from_every_source_file_but_bytecode(tmp_path):
    (tmp_path / "props").mkdir()
    (tmp_path / "props" / "web.hy").write_text('(apt.installed "nginx-light")\n')
    (tmp_path / "props" / "__pycache__").mkdir()
    (tmp_path / "props" / "__pycache__" / "web.txt").write_text("stale-word\n")
    (tmp_path / "README.md").write_text("install cowsay\n")
    words = source_words(tmp_path)
    assert {"nginx-light", "cowsay"} <= words, sorted(words)
    assert "stale-word" not in words, sorted(words)


@pytest.mark.chroot
def test_a_chroot_finds_a_package_the_sources_name_and_not_one_they_do_not(
        debian_chroot_tarball, tmp_path):
    from chrootcache import _tarball_names
    from proptest import overlay_copy, remove_tree
    box, root = overlay_copy(debian_chroot_tarball, tmp_path)
    try:
        lists = root / "var/lib/apt/lists"
        kept, installable = set(), set()
        for index in lists.glob("*_Packages"):
            text = index.read_text(errors="replace")
            kept |= _packages(text)
            installable |= index_names(text)
        left_out = sorted(_tarball_names(debian_chroot_tarball) - installable - source_words())
        assert "hello" in kept and left_out, (len(kept), len(left_out))

        def simulate(name):
            return subprocess.run(["chroot", str(root), "apt-get", "install", "-s", "-qq", name],
                                  capture_output=True, text=True, timeout=120)
        named = simulate("hello")
        assert named.returncode == 0, named.stderr
        unnamed = simulate(left_out[0])
        assert unnamed.returncode != 0 and "Unable to locate package" in unnamed.stderr, \
            (left_out[0], unnamed.stderr)
    finally:
        remove_tree(box)
