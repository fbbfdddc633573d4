"""The suite is hermetic: a test's deployments, over :local and through the
lab's sudo to root, take a lock and keep state of the test run's own, so a
consfig deployment elsewhere on the machine, holding root's real lock, never
makes a test wait."""

import fcntl
import os

import pytest

import hy  # noqa: F401
from hy.models import Keyword as K

import consfig.apply.lock
import consfig.deployer.deployment
from consfig.apply.combinators import eseqprops
from consfig.model.host import make_host
from consfig.props import file
from consfig.util import state_directory

deploy = getattr(consfig.deployer.deployment, hy.mangle("deploy*"))


@pytest.fixture
def roots_real_lock(monkeypatch):
    """Root's own deployment lock, as another consfig run on this machine
    holds it (the cache root consfig uses without XDG_CACHE_HOME)."""
    if os.geteuid() != 0:
        pytest.skip("holding root's real lock needs root")
    directory = os.path.join(os.path.expanduser("~root"), ".cache", "consfig")
    os.makedirs(directory, mode=0o700, exist_ok=True)
    with open(os.path.join(directory, "deploy.lock"), "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            # Another run holds it already (CI's own holder, .ci/run):
            # that is the condition under test, and waiting for it would
            # wait for the end of the whole run.
            pass
        # Waiting would fail at once instead of after 60 s.
        monkeypatch.setattr(consfig.apply.lock, "LOCK_WAIT", 1)
        yield


def _has_content(path):
    return eseqprops(file.has_content(str(path), "hermetic\n"))


def test_a_local_deployment_does_not_wait_on_roots_real_lock(roots_real_lock, tmp_path):
    deploy([K("local")], make_host("localhost", None, None, eseqprops()),
           propspec=_has_content(tmp_path / "f"), sink=lambda e: None)
    assert (tmp_path / "f").read_text() == "hermetic\n", "the deployment applied"


def test_a_python_hop_does_not_wait_on_roots_real_lock(roots_real_lock, tmp_path):
    deploy([K("local"), K("python")], make_host("localhost", None, None, eseqprops()),
           propspec=_has_content(tmp_path / "f"), sink=lambda e: None)
    assert (tmp_path / "f").read_text() == "hermetic\n", "the deployment applied"


def test_a_lab_deployment_through_sudo_does_not_wait_on_roots_real_lock(
        sshlab, roots_real_lock, tmp_path):
    chain = [[K("ssh"), K("config"), sshlab.config, K("host"), "lab"], K("sudo")]
    deploy(chain, make_host("lab", None, None, eseqprops()),
           propspec=_has_content(tmp_path / "f"), sink=lambda e: None)
    assert (tmp_path / "f").read_text() == "hermetic\n", "the deployment applied"


def test_state_is_kept_apart_from_the_machines():
    assert not state_directory().startswith("/var/lib/consfig"), state_directory()
