"""Test infrastructure for the property library: a real Debian chroot.

Contract (for anyone writing tests under tests/props/):

``debian_chroot_tarball`` (session scope)
    Path of a tarball of a Debian chroot made with ``debootstrap
    --variant=minbase`` of this machine's suite and architecture (from
    /etc/os-release and dpkg), from the Debian mirror this machine's apt uses
    (override with ``CONSFIG_TEST_MIRROR``).  It is built once and cached as
    ``~/.cache/consfig-tests/debian-<suite>-<arch>-minbase.tar.zst``
    (override the directory with ``CONSFIG_TEST_CACHE``); later runs just
    unpack it.  ``python3 tests/props/chrootcache.py`` builds it ahead
    (.ci/run does, while it installs consfig).  Its apt lists are up to date as of the build, and it has the
    host's /etc/resolv.conf, so ``apt-get install`` works inside.  The build
    holds a lock, so parallel test runs share one build.  A tarball older than
    ``CONSFIG_TEST_MAX_AGE_DAYS`` (default 14) is rebuilt, so its apt lists
    do not go too stale for the mirror.  Tests are skipped (with the reason)
    when we are not root, debootstrap is missing or the build fails — errors
    in CI, where a suite that never ran must not pass.

``debian_chroot`` (module scope)
    A ``pathlib.Path`` to a fresh copy of that chroot, private to one test
    module (an overlay whose lower layer is the tarball unpacked once, next
    to it, and never written; ``proptest.overlay_copy``): tests in a module share it (and each other's changes), tests in
    different modules do not.  Whatever is mounted below it is unmounted and
    it is deleted when the module is done.  .debs downloaded into its
    /var/cache/apt/archives are kept in the cache and given to the next
    copies, so packages are fetched from the mirror once, not once per run.

``fresh_chroot`` (function scope)
    The same, but private to one test (an overlay on the tarball's tree,
    unpacked once: a mount).

``chroot_chain`` (module scope)
    ``[[:chroot :into "<debian_chroot>"]]``, the chain to deploy into it.

``booted_container`` (session scope)
    A systemd-nspawn container booted from a copy of that chroot with its
    own systemd as PID 1 (``container.nspawn-running``; systemd and dbus
    installed by apt from the cached .debs, so after the first run without
    the mirror): for tests that need a real service manager, such as
    starting units.  Its ``name``, ``root`` and ``chain``
    (``[[:nspawn :machine NAME]]``).  Shared by the tests of one pytest-xdist worker (tests must
    leave it running); stopped and deleted at the end.  Needs
    systemd-container.

Mark tests that use these with ``@pytest.mark.chroot`` (``-m "not chroot"``
runs the rest); the fixtures themselves skip when no chroot can be had
(and are errors in CI).

Helpers for driving properties and checking their results are in
``proptest.py`` next to this file (``from proptest import …``).
"""

import os
import subprocess
import sys

import pytest

import hy  # noqa: F401
from hy.models import Keyword

# Test modules here import the helpers as `proptest` (pytest runs with
# --import-mode=importlib, which does not put test directories on sys.path).
sys.path.insert(0, os.path.dirname(__file__))

from harness import unavailable  # noqa: E402
from proptest import ensure_tarball, keep_debs, overlay_copy, remove_tree  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "chroot: needs a Debian chroot (root, debootstrap, a mirror)")


@pytest.fixture(scope="session")
def debian_chroot_tarball():
    if os.geteuid() != 0:
        unavailable("chroot tests need root")
    try:
        return ensure_tarball()
    except (RuntimeError, subprocess.SubprocessError, OSError) as e:
        unavailable(f"no Debian chroot for tests: {e}")


def _chroot_copy(tarball, tmp_path_factory):
    box, root = overlay_copy(tarball, tmp_path_factory.getbasetemp())
    try:
        yield root
    finally:
        keep_debs(root, tarball)
        remove_tree(box)


@pytest.fixture(scope="module")
def debian_chroot(debian_chroot_tarball, tmp_path_factory):
    yield from _chroot_copy(debian_chroot_tarball, tmp_path_factory)


@pytest.fixture
def fresh_chroot(debian_chroot_tarball, tmp_path_factory):
    yield from _chroot_copy(debian_chroot_tarball, tmp_path_factory)


@pytest.fixture(scope="module")
def chroot_chain(debian_chroot):
    from consfig.transport.chain import hop_spec
    from consfig.errors import ChainError
    try:
        hop_spec("chroot")
    except ChainError:
        unavailable("the :chroot hop (connections/chroot.hy) is not there yet")
    return [[Keyword("chroot"), Keyword("into"), str(debian_chroot)]]


class BootedContainer:
    def __init__(self, name, root):
        self.name = name
        self.root = root
        self.chain = [[Keyword("nspawn"), Keyword("machine"), name]]

    def inside(self, *argv, timeout=60):
        """Run ARGV in the container: the CompletedProcess (text)."""
        from consfig.connections.nspawn import enter_argv
        return subprocess.run(enter_argv(self.name, list(argv)), capture_output=True, text=True,
                              timeout=timeout)


@pytest.fixture(scope="session")
def booted_container(debian_chroot_tarball, tmp_path_factory):
    import shutil
    from consfig.props import container
    from proptest import deploy_propspec, failure_text, this_os
    if not shutil.which("systemd-nspawn"):
        unavailable("systemd-nspawn is not installed (apt-get install systemd-container)")
    name = f"cfshared{os.getpid()}"
    box, root = overlay_copy(debian_chroot_tarball, tmp_path_factory.getbasetemp())
    try:
        outcome, events = deploy_propspec(
            [Keyword("local")], container.nspawn_running(name, {Keyword("root"): str(root)}, this_os()),
            check=False)
        if outcome.status == "failed":
            unavailable(f"the shared container did not boot: {failure_text(events)}")
        yield BootedContainer(name, root)
    finally:
        deploy_propspec([Keyword("local")], container.nspawn_stopped(name), check=False)
        for p in [f"/var/lib/machines/{name}", f"/etc/systemd/nspawn/{name}.nspawn"]:
            if os.path.islink(p) or os.path.isfile(p):
                os.unlink(p)
        keep_debs(root, debian_chroot_tarball)
        remove_tree(box)
