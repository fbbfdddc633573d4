"""What any test may lean on: waiting for a condition with a bound, and
saying that a fixture cannot start.

    from harness import unavailable, wait_until

    wait_until(lambda: not running(marker), 10, f"{marker} to end")
"""

import os
import subprocess
import time

import pytest

__all__ = ["in_ci", "run_with_a_private_home_cache", "running", "unavailable", "wait_until"]

_POLL = 0.05


def wait_until(predicate, timeout, what):
    """Call PREDICATE until it returns something true, and return that; fail
    the test, saying it waited TIMEOUT seconds for WHAT, when it never does.
    Tests wait for the condition they mean rather than sleeping a guessed
    time: a guess is too short under load and too long otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"waited {timeout} s for {what}, in vain")
        time.sleep(_POLL)


def running(marker):
    """Whether a process whose command line has MARKER runs on this machine."""
    return subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0


def signal_once_running(argv, marker, how):
    """Start the controller ARGV, wait until a process matching MARKER runs
    (the command it started on the target), then end the controller with
    the signal HOW; it is killed in any case before this returns."""
    controller = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: running(marker), 30, f"{marker} to run on the target")
        controller.send_signal(how)
        controller.wait(30)
    finally:
        controller.kill()
        controller.wait()


def in_ci():
    """Whether we run in CI: CI set to true, 1 or yes (GitHub, GitLab and
    most others set CI=true)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def unavailable(reason):
    """A fixture cannot start, for REASON: skip the test that needs it,
    except in CI, where a suite that was never run must not pass as green,
    so it is an error there."""
    if in_ci():
        pytest.fail(f"{reason} (in CI this is an error, not a skip)", pytrace=False)
    pytest.skip(reason)


def run_with_a_private_home_cache(argv, cache, **kwargs):
    """Run ARGV (subprocess.run's KWARGS) with root's ~/.cache replaced, for
    ARGV and its children alone, by the directory CACHE: a private mount
    namespace.  For the tests of where consfig falls back to when the
    environment names no usable cache (the password database's home): they
    must neither wait on the lock of a real deployment on this machine nor
    leave anything in root's real cache."""
    if os.geteuid() != 0:
        pytest.skip("a private mount namespace needs root")
    home_cache = os.path.join(os.path.expanduser("~root"), ".cache")
    os.makedirs(home_cache, mode=0o700, exist_ok=True)
    os.makedirs(cache, mode=0o700, exist_ok=True)
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "--",
         "sh", "-c", 'mount --bind "$1" "$2" && shift 2 && exec "$@"',
         "sh", str(cache), home_cache, *argv], **kwargs)
