"""A deployment that finds its target locked says so at once, even without
-v: who holds the lock, for how long, how long it will wait; and when it
gives up, at -v too, one error line and no traceback."""

import os
import subprocess
import sys
import threading

import pytest

import hy  # noqa: F401

from consfig.apply.lock import target_lock_held

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clirun import REPO  # noqa: E402
from harness import wait_until  # noqa: E402

CHAINS = {"posix": ":local", "python": ":local :python"}


HOLDER = "tester@lab (pid 1), deploying other.example, since earlier"


def holding():
    """This user's deployment lock, held by the test as a deployment would."""
    cache = os.path.join(os.environ["XDG_CACHE_HOME"], "consfig")
    os.makedirs(cache, mode=0o700, exist_ok=True)
    return target_lock_held(cache, {"wait": 5, "holder": HOLDER})


@pytest.fixture
def held():
    with holding():
        yield


def site(tmp_path, chain):
    f = tmp_path / "f"
    s = tmp_path / "site.hy"
    s.write_text(f"""(require consfig *)
(import consfig *)
(use-props consfig.props [file])
(defhost locked.example {{:deploy [{chain}]}}
  (file.has-content "{f}" "x\\n"))
""")
    return s, f


def start(site_path, *more, wait=30):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["CONSFIG_LOCK_WAIT"] = str(wait)
    return subprocess.Popen([sys.executable, "-m", "consfig", "deploy", "--consfig", str(site_path),
                             "locked", *more], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=REPO, env=env)


@pytest.mark.parametrize("chain", list(CHAINS))
def test_a_deployment_says_whom_it_waits_for_without_v(tmp_path, chain):
    s, f = site(tmp_path, CHAINS[chain])
    out = []
    with holding():
        p = start(s)
        reader = threading.Thread(target=lambda: out.extend(p.stdout), daemon=True)
        reader.start()
        try:
            wait_until(lambda: "waiting for the deployment lock" in "".join(out), 120,
                       "the deployment to say it waits")
        except BaseException:
            p.kill()
            raise
        assert not f.exists(), "nothing applied while it waits"
    err = p.stderr.read()
    p.wait(120)
    reader.join(30)
    text = "".join(out)
    assert p.returncode == 0, err
    assert "tester@lab (pid 1), deploying other.example, since earlier" in text, text
    assert "waiting up to 30 s" in text and "(for " in text, text
    assert f.read_text() == "x\n", "applied once the lock was free"


@pytest.mark.parametrize("chain", list(CHAINS))
def test_a_lock_timeout_at_v_is_one_error_and_no_traceback(tmp_path, chain, held):
    s, f = site(tmp_path, CHAINS[chain])
    p = start(s, "-v", wait=1)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 1, (out, err)
    assert "another deployment holds this target: tester@lab (pid 1)" in out + err, (out, err)
    assert "Traceback" not in err + out, err
    assert not f.exists(), "nothing applied"
