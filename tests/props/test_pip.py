"""pip: virtual environments with pinned packages and pipx applications, in
the test chroot, from a directory of wheels in it (no index is asked: the
properties pass PIP_NO_INDEX and PIP_FIND_LINKS to every pip they run)."""

import glob
import os
import shutil

import pytest

import hy  # noqa: F401
from consfig.errors import PropspecError
from consfig.props import apt, pip, service, user

from proptest import (apply_twice, checks_clean, deploy_propspec, failure_text, in_chroot, said, this_os,
                      unapply)

pytestmark = pytest.mark.chroot

WHEELS = ["six-1.17.0", "flake8-7.4.1", "mccabe-0.7.0", "pycodestyle-2.15.0", "pyflakes-4.0.0",
          "pytest-8.4.2", "pytest-9.1.1", "iniconfig-2.3.0", "packaging-26.3", "pluggy-1.6.0",
          "pygments-2.21.0"]
SOURCE = os.environ.get("CONSFIG_TEST_WHEELS", "/opt/pypi/files")
OFFLINE = {"no_index": True, "find_links": "/srv/wheels"}


@pytest.fixture(scope="module")
def root(debian_chroot, chroot_chain):
    deploy_propspec(chroot_chain, [this_os(), service.without_starting_services(
        apt.installed_minimally("python3-venv", "pipx"))])
    wheels = debian_chroot / "srv/wheels"
    wheels.mkdir(parents=True)
    for w in WHEELS:
        found = glob.glob(os.path.join(SOURCE, w + "-*.whl"))
        assert found, f"no wheel of {w} in {SOURCE} (set CONSFIG_TEST_WHEELS)"
        shutil.copy(found[0], wheels)
    return debian_chroot


def freeze(root, path):
    return set(in_chroot(root, f"{path}/bin/python -m pip freeze").stdout.split())


def test_venv_is_made_with_its_pins_and_left_alone_after(chroot_chain, root):
    p = pip.venv_installed("/opt/app", "six==1.17.0", **OFFLINE)
    apply_twice(chroot_chain, p)
    checks_clean(chroot_chain, p)
    assert freeze(root, "/opt/app") == {"six==1.17.0"}


def test_a_pin_brings_its_dependencies(chroot_chain, root):
    apply_twice(chroot_chain, pip.venv_installed("/opt/lint", "flake8==7.4.1", **OFFLINE))
    assert freeze(root, "/opt/lint") == {"flake8==7.4.1", "mccabe==0.7.0", "pycodestyle==2.15.0",
                                         "pyflakes==4.0.0"}


def test_a_changed_pin_installs_that_version(chroot_chain, root):
    deploy_propspec(chroot_chain, pip.venv_installed("/opt/tests", "pytest==8.4.2", **OFFLINE))
    assert "pytest==8.4.2" in freeze(root, "/opt/tests")
    apply_twice(chroot_chain, pip.venv_installed("/opt/tests", "pytest==9.1.1", **OFFLINE))
    assert "pytest==9.1.1" in freeze(root, "/opt/tests")


def test_an_exact_venv_loses_what_it_does_not_pin(chroot_chain, root):
    deploy_propspec(chroot_chain, pip.venv_installed("/opt/exact", "six==1.17.0",
                                                     "pycodestyle==2.15.0", **OFFLINE))
    apply_twice(chroot_chain, pip.venv_installed("/opt/exact", "six==1.17.0", exact=True,
                                                 **OFFLINE))
    assert freeze(root, "/opt/exact") == {"six==1.17.0"}


def test_an_exact_venv_that_misses_a_dependency_fails_pip_check(chroot_chain, root):
    outcome, events = deploy_propspec(
        chroot_chain, pip.venv_installed("/opt/partial", "flake8==7.4.1", exact=True, **OFFLINE),
        check=False)
    assert outcome.status == "failed"
    text = failure_text(events)
    assert "pip check in /opt/partial" in text and "must include every dependency" in text, text
    assert "pyflakes" in text, "pip says what is missing"


def test_pin_spelling_follows_pypi(chroot_chain, root):
    apply_twice(chroot_chain, pip.venv_installed("/opt/spelled", "Six==1.17", **OFFLINE))


def test_check_mode_says_what_would_be_installed(chroot_chain, root):
    outcome, events = deploy_propspec(
        chroot_chain, pip.venv_installed("/opt/checked", "six==1.17.0", **OFFLINE), check_mode=True)
    assert outcome.exit_code(True) == 2
    assert "/opt/checked would be created; would install six==1.17.0" in said(events)
    assert not (root / "opt/checked").exists()


def test_a_users_venv_is_theirs(chroot_chain, root):
    apply_twice(chroot_chain, [this_os(), user.has_account("pyuser"),
                               pip.venv_installed("/home/pyuser/venv", "six==1.17.0",
                                                  user="pyuser", **OFFLINE)])
    owners = in_chroot(root, "find /home/pyuser/venv -not -user pyuser | head -3").stdout
    assert owners == "", f"files not pyuser's: {owners}"


def test_unapplied_venv_is_removed(chroot_chain, root):
    p = pip.venv_installed("/opt/gone", "six==1.17.0", **OFFLINE)
    deploy_propspec(chroot_chain, p)
    unapply(chroot_chain, p)
    assert not (root / "opt/gone").exists()


def test_a_package_that_is_nowhere_is_a_clear_failure(chroot_chain, root):
    outcome, events = deploy_propspec(
        chroot_chain, pip.venv_installed("/opt/none", "no-such-package==1.0", **OFFLINE), check=False)
    assert outcome.status == "failed"
    assert "pip install in /opt/none failed" in failure_text(events)
    assert "no-such-package" in failure_text(events)


SYSTEM = {"pipx_home": "/opt/pipx", "bin_dir": "/usr/local/bin"}


def test_pipx_installs_an_application_for_everyone(chroot_chain, root):
    p = pip.pipx_installed("pyflakes==4.0.0", **SYSTEM, **OFFLINE)
    apply_twice(chroot_chain, p)
    checks_clean(chroot_chain, p)
    assert in_chroot(root, "/usr/local/bin/pyflakes --version").stdout.startswith("4.0.0")
    unapply(chroot_chain, p)
    assert not os.path.lexists(root / "usr/local/bin/pyflakes")


def test_pipx_installs_another_version_when_pinned(chroot_chain, root):
    deploy_propspec(chroot_chain, pip.pipx_installed("pytest==8.4.2", **SYSTEM, **OFFLINE))
    apply_twice(chroot_chain, pip.pipx_installed("pytest==9.1.1", **SYSTEM, **OFFLINE))
    assert "9.1.1" in in_chroot(root, "/usr/local/bin/pytest --version").stdout


def test_pipx_for_a_user_goes_to_their_home(chroot_chain, root):
    apply_twice(chroot_chain, [this_os(), user.has_account("pxuser"),
                               pip.pipx_installed("pyflakes", user="pxuser", **OFFLINE)])
    assert os.path.lexists(root / "home/pxuser/.local/bin/pyflakes")
    assert in_chroot(root, "stat -c %U /home/pxuser/.local/pipx/venvs/pyflakes").stdout == "pxuser\n"


@pytest.mark.parametrize("call", [
    lambda: pip.venv_installed("/opt/x", "six"),
    lambda: pip.venv_installed("/opt/x", "six>=1"),
    lambda: pip.venv_installed("/opt/x", "six==1.0; rm -rf /"),
    lambda: pip.venv_installed("/opt/x", "--index-url=http://evil.example/==1"),
    lambda: pip.venv_installed("/opt/x", "-e==1"),
    lambda: pip.venv_installed("relative/venv", "six==1.17.0"),
    lambda: pip.venv_installed("/opt/x", "six==1.17.0", find_links="x y"),
    lambda: pip.venv_installed("/opt/x", "six==1.17.0", python="-c"),
    lambda: pip.venv_installed("/opt/x", "six==1.17.0", user="root;x"),
    lambda: pip.pipx_installed("-x"),
    lambda: pip.pipx_installed("black; rm -rf /"),
    lambda: pip.pipx_installed("black", bin_dir="bin"),
])
def test_hostile_values_are_refused_when_written(call):
    with pytest.raises(PropspecError):
        call()
