"""Collect Hy tests (tests/**/test_*.hy) alongside Python ones."""

import pathlib
import os
import sys

import hy  # noqa: F401  -- registers the .hy importer
import pytest
from _pytest.assertion import rewrite as _rewrite

# Helper modules here (harness, sshlab) are imported by their names
# (pytest runs with --import-mode=importlib, which does not put test
# directories on sys.path).
sys.path.insert(0, os.path.dirname(__file__))


# Hermetic runs: this test process (one per xdist worker) keeps its cache,
# its deployment lock and its state apart from every other consfig run on the
# machine, root's included, so that a deployment elsewhere never makes a test
# wait on its lock, and a test never writes to the machine's real state.
# Tests about sharing them set their own.  Done at import, before any test
# module reads the environment.
def _hermetic_directories():
    import tempfile
    top = tempfile.mkdtemp(prefix="consfig-test-home-")
    for var, sub in (("XDG_CACHE_HOME", "cache"), ("XDG_STATE_HOME", "state"),
                     ("STATE_DIRECTORY", "state/consfig")):
        path = os.path.join(top, sub)
        os.makedirs(path, mode=0o700, exist_ok=True)
        os.environ[var] = path
    return top


HERMETIC_HOME = _hermetic_directories()


# What the environment cannot cover: where consfig falls back to the home
# the password database gives (an XDG_CACHE_HOME that is relative or that
# others can write, a $HOME that is not the user's: the tests of exactly
# that), root's cache is root's real ~/.cache/consfig, holding the
# deployment lock of any other consfig run on the machine.  So the test run
# takes a mount namespace of its own, in which that directory is one of the
# run's: done once, in the process pytest starts, before it starts a thread
# or a worker; the workers, the lab's sshd and all they start inherit it.
def _private_roots_cache(top):
    if os.geteuid() != 0 or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    clone_newns, ms_bind, ms_rec, ms_private = 0x20000, 0x1000, 0x4000, 0x40000
    real = os.path.join(os.path.expanduser("~root"), ".cache", "consfig")
    os.makedirs(real, mode=0o700, exist_ok=True)
    private = os.path.join(top, "roots-cache")
    os.makedirs(private, mode=0o700)
    for what, call in (("unshare the mount namespace", lambda: libc.unshare(clone_newns)),
                       ("make / private", lambda: libc.mount(b"none", b"/", None,
                                                             ms_rec | ms_private, None)),
                       (f"bind {private} over {real}",
                        lambda: libc.mount(private.encode(), real.encode(), None, ms_bind, None))):
        if call() != 0:
            why = f"the test run could not {what}: {os.strerror(ctypes.get_errno())}"
            # In CI that is an error (a run that could wait on the machine's
            # lock must not pass as hermetic); elsewhere, the tests of the
            # fallback location may then wait on it, and say so.
            if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
                raise RuntimeError(why)
            import warnings
            warnings.warn(why)
            return


_private_roots_cache(HERMETIC_HOME)


# A suite started in the background of a non-interactive shell (`cmd &`,
# as CI runners may) inherits SIGINT and SIGQUIT ignored, and so does every
# program a test starts: a `consfig converge` that a test stops as Ctrl-C
# does would never hear it (each such test then waited 60 s and failed).
# The tests' programs start as they would from a terminal.
def _signals_as_from_a_terminal():
    import signal
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGQUIT) is signal.SIG_IGN:
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)


_signals_as_from_a_terminal()

from sshlab import sshlab  # noqa: E402,F401  -- the SSH test lab, a fixture (after the above)


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: a worker per core and one more.  Many tests wait (a
    container booting, a lease running out, a timer to fire, a server's
    slow answer) and leave their core idle: on 2 cores, 3 workers took the
    suite from 17 min 39 s to 15 min 20 s."""
    return len(os.sched_getaffinity(0)) + 1


# The longest test files, longest first (wall time under three workers on 2
# cores): under --dist loadfile a worker takes the next file in collection
# order, so one of these taken last kept one worker busy for minutes while the
# others sat idle.  Taken first, they overlap the short files instead.  A file
# missing here is only scheduled in its usual place.
LONGEST_FIRST = [
    "props/test_vm.py", "props/test_library_walk.py",
    "props/test_apt_repo.py",
    "props/test_pip.py", "props/test_image_props.py", "dataspace/test_dataspace_live.py",
    "ui/test_install.py", "props/test_postgres.py", "props/test_converge_site.py",
    "props/test_postfix.py", "dataspace/test_fleet_containers.py", "image/test_image.py",
    "props/test_file.hy", "props/test_apt.hy", "props/test_chroot.py", "props/test_container.py",
    "converge/test_converge_promises.py", "props/test_web.py",
]


def pytest_collection_modifyitems(session, config, items):
    tests = pathlib.Path(__file__).resolve().parent
    rank = {str(tests / f): i for i, f in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(str(item.path), len(rank)))


def pytest_sessionstart(session):
    # Before pytest-xdist starts the workers (its own hook runs last): the
    # Hy bytecode they would each compile, compiled once (tests/hybytecode.py).
    if session.config.pluginmanager.has_plugin("dsession"):
        import hybytecode
        session.config.stash[_HY_WARMED] = hybytecode.warm(len(os.sched_getaffinity(0)))


_HY_WARMED = pytest.StashKey()


def pytest_terminal_summary(terminalreporter, config):
    warmed = config.stash.get(_HY_WARMED, None)
    if warmed and warmed[0]:
        compiled, failed, seconds = warmed
        terminalreporter.write_line(
            f"Hy bytecode: compiled {compiled} module{'s' if compiled > 1 else ''} before the "
            f"workers started, in {seconds:.1f} s"
            + (f" ({failed} left to the workers: they did not compile alone)" if failed else ""))


# The test chroot's apt index holds only the packages the sources name
# (tests/props/chrootcache.py, `trim_index`): a failure that apt explains so
# says why, and what to do.
APT_INDEX_HINT = (
    "apt could not find a package in a test chroot.  Its index holds only the packages that\n"
    "the sources (README.md, consfig/, props/, tests/, docs/ ...) name as a whole word, and\n"
    "what they depend on (tests/props/chrootcache.py).  Spell the package's whole name in\n"
    "the test or the property; the next run makes a tree with it.")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if report.failed and "Unable to locate package" in str(report.longrepr):
        report.sections.append(("the test chroot's apt index", APT_INDEX_HINT))


# pytest rewrites the assertions of any file named on its command line, and
# would parse a .hy file as Python; Hy tests give `assert` a message instead.
_should_rewrite = _rewrite.AssertionRewritingHook._should_rewrite
_rewrite.AssertionRewritingHook._should_rewrite = (
    lambda self, name, fn, state:
    not fn.endswith(".hy") and _should_rewrite(self, name, fn, state))


def pytest_collect_file(file_path, parent):
    if file_path.suffix == ".hy" and file_path.name.startswith("test_"):
        return pytest.Module.from_parent(parent, path=file_path)


class EventLog:
    """A sink for engine events that keeps them, for assertions."""

    def __init__(self):
        self.events = []

    def __call__(self, event):
        self.events.append(event)

    def ends(self):
        """(desc, status) for every end event, in order."""
        return [(e["desc"], e["status"]) for e in self.events if e["event"] == "end"]

    def status_of(self, desc):
        found = [s for d, s in self.ends() if d == desc]
        assert found, f"no end event for {desc!r} in {self.ends()}"
        return found[-1]

    def summary(self):
        return [e for e in self.events if e["event"] == "summary"][-1]


@pytest.fixture
def events():
    return EventLog()



def pytest_unconfigure(config):
    import shutil
    shutil.rmtree(HERMETIC_HOME, ignore_errors=True)


