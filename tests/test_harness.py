"""The test harness proves what it claims: a fixture that cannot start is a
skip with its reason outside CI and an error in CI, and the SSH lab cleans
up after a killed run."""

import os
import pwd
import subprocess
import sys
import tempfile

import pytest

from harness import wait_until
from sshlab import ROOT_PREFIX, SUDOERS_PREFIX, USER_PREFIX

TESTS = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.path.dirname(TESTS)


def _pytest(args, env, cwd):
    """Run pytest on ARGS in a child process; return (exit code, output)."""
    # -n 0: the child runs in one process, whatever addopts ask of xdist.
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           "-n", "0", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


def _env(ci, **extra):
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    if ci:
        env["CI"] = "true"
    return {**env, **extra}


def _lab_run(tmp_path, ci, **extra):
    """Run, in a child pytest, one test that uses a fresh SSH lab."""
    (tmp_path / "test_uses_lab.py").write_text(
        "def test_uses_lab(sshlab):\n    assert sshlab.port\n")
    return _pytest(["-p", "sshlab", str(tmp_path / "test_uses_lab.py")],
                   _env(ci, PYTHONPATH=TESTS, **extra), tmp_path)


def test_wait_until_returns_what_the_predicate_gave():
    tries = iter([0, None, "ready"])
    assert wait_until(lambda: next(tries), 5, "the third try") == "ready"


def test_wait_until_fails_naming_what_it_waited_for():
    with pytest.raises(AssertionError, match="waited 0.1 s for the moon"):
        wait_until(lambda: False, 0.1, "the moon")


def test_in_ci_an_ssh_lab_that_cannot_start_is_an_error(tmp_path):
    code, out = _lab_run(tmp_path, True, CONSFIG_TEST_SSHD="/nonexistent/sshd")
    assert code == 1 and "1 error" in out, out
    assert "/nonexistent/sshd" in out and "in CI this is an error" in out, out


def test_outside_ci_an_ssh_lab_that_cannot_start_is_a_skip_saying_why(tmp_path):
    code, out = _lab_run(tmp_path, False, CONSFIG_TEST_SSHD="/nonexistent/sshd")
    assert code == 0 and "1 skipped" in out, out
    assert "SKIPPED" in out and "/nonexistent/sshd" in out, out


def _chroot_run(tmp_path, ci):
    """Run, in a child pytest, a test that needs the Debian chroot, with the
    chroot's cache where no directory can be made."""
    test = "tests/props/test_chroot_fixture.py::test_chroot_is_debian_of_this_suite"
    return _pytest([test], _env(ci, CONSFIG_TEST_CACHE="/dev/null/consfig-tests"), PROJECT)


def test_in_ci_a_chroot_that_cannot_be_had_is_an_error(tmp_path):
    code, out = _chroot_run(tmp_path, True)
    assert code == 1 and "1 error" in out, out
    assert "no Debian chroot for tests" in out and "/dev/null/consfig-tests" in out, out


def test_outside_ci_a_chroot_that_cannot_be_had_is_a_skip_saying_why(tmp_path):
    code, out = _chroot_run(tmp_path, False)
    assert code == 0 and "1 skipped" in out, out
    assert "no Debian chroot for tests" in out, out


def _dead_pid():
    child = subprocess.Popen(["true"])
    child.wait()
    assert not os.path.exists(f"/proc/{child.pid}")
    return child.pid


def test_a_starting_lab_removes_what_a_killed_lab_left_and_only_that(sshlab, tmp_path):
    # What a lab killed before its teardown leaves: its users with their
    # homes, their sudoers rules and its working directory, all named by
    # the pid of the session that made them.
    pid = _dead_pid()
    user = f"{USER_PREFIX}{pid}a"
    subprocess.run(["useradd", "--create-home", user], check=True, timeout=60)
    home = pwd.getpwnam(user).pw_dir
    sudoers = f"{SUDOERS_PREFIX}{user}"
    with open(sudoers, "w") as f:
        f.write(f"{user} ALL=(ALL:ALL) NOPASSWD: ALL\n")
    root = tempfile.mkdtemp(prefix=f"{ROOT_PREFIX}{pid}-")
    try:
        code, out = _lab_run(tmp_path, True)
        assert code == 0, out
        assert user not in [p.pw_name for p in pwd.getpwall()], f"{user} was left"
        assert not os.path.exists(home), f"{home} was left"
        assert not os.path.exists(sudoers), f"{sudoers} was left"
        assert not os.path.exists(root), f"{root} was left"
        # This session's lab is alive: the other lab left it alone.
        assert os.path.exists(f"{SUDOERS_PREFIX}{sshlab.user}")
        assert os.path.isdir(sshlab.home(sshlab.user)) and os.path.isdir(sshlab.root)
    finally:
        subprocess.run(["userdel", "--remove", user], capture_output=True, timeout=60)
        for path in [sudoers, root]:
            subprocess.run(["rm", "-rf", "--", path], timeout=60)


def _under_the_projects_options(tmp_path, workers, *paths):
    """A child pytest of PATHS under tmp_path, with pyproject.toml's
    options (its addopts) and WORKERS pytest-xdist workers."""
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-c", os.path.join(PROJECT, "pyproject.toml"), "--rootdir", str(tmp_path),
                           "-n", str(workers), *map(str, paths)],
                          cwd=tmp_path, env=_env(False), capture_output=True, text=True, timeout=300)


def test_the_suites_workers_each_take_whole_test_files(tmp_path):
    # A module's fixtures (a chroot with packages, a lab, a container) are
    # made once only if all its tests run on one worker: what pyproject's
    # addopts ask of pytest-xdist must keep a file together (loadgroup's
    # marks once silently did not, under pytest 9).
    record = tmp_path / "ran"
    for name in "ab":
        (tmp_path / f"test_{name}.py").write_text(
            "import os, pytest\n"
            "@pytest.mark.parametrize('i', range(8))\n"
            f"def test_{name}(i):\n"
            f"    with open({str(record)!r}, 'a') as f:\n"
            f"        f.write('{name} ' + os.environ['PYTEST_XDIST_WORKER'] + '\\n')\n")
    proc = _under_the_projects_options(tmp_path, 2, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    workers = {}
    for line in record.read_text().splitlines():
        name, worker = line.split()
        workers.setdefault(name, set()).add(worker)
    assert all(len(w) == 1 for w in workers.values()), f"a file's tests were split: {workers}"


def test_the_suites_workers_take_files_in_collection_order(tmp_path):
    # tests/conftest.py puts the longest files first (LONGEST_FIRST); that
    # holds only if pytest-xdist keeps the collection's order.  Since 3.8 it
    # reorders files by their number of tests unless told not to: the
    # 380 quick lint tests went first and the 2-minute VM boot last.
    record = tmp_path / "ran"
    for name, count in (("a", 1), ("b", 8)):
        (tmp_path / f"test_{name}.py").write_text(
            "import pytest\n"
            f"@pytest.mark.parametrize('i', range({count}))\n"
            f"def test_{name}(i):\n"
            f"    with open({str(record)!r}, 'a') as f:\n"
            f"        f.write('{name}\\n')\n")
    proc = _under_the_projects_options(tmp_path, 1, tmp_path / "test_a.py", tmp_path / "test_b.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran = record.read_text().split()
    assert ran[0] == "a", f"the file collected first ran first: {ran}"


def test_a_suite_started_with_sigint_ignored_starts_its_programs_hearing_it(tmp_path):
    # `cmd &` in a script starts the suite with SIGINT ignored, and every
    # program a test starts would inherit that: an agent a test stops as
    # Ctrl-C does would never stop.  conftest starts them as a terminal would.
    (tmp_path / "test_child.py").write_text(
        "import subprocess\n"
        "def test_child():\n"
        "    status = subprocess.run(['grep', 'SigIgn', '/proc/self/status'],\n"
        "                            capture_output=True, text=True).stdout\n"
        "    ignored = int(status.split()[1], 16)\n"
        "    assert not ignored & (1 << 1), f'SIGINT ignored: {status}'\n")
    import signal
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                           "-p", "conftest", str(tmp_path / "test_child.py")],
                          cwd=tmp_path, env=_env(False, PYTHONPATH=TESTS), capture_output=True,
                          text=True, timeout=300,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_hy_module_is_stale_until_compiled_and_again_once_changed(tmp_path):
    # What the controller compiles before the workers start
    # (tests/hybytecode.py): only what Python would not take as it is.
    import hybytecode
    from consfig.python_hop.precompile import compile_modules
    path = tmp_path / "m.hy"
    path.write_text("(setv X 1)\n")
    module = [("m", str(path))]
    assert hybytecode.stale(module) == module, "no bytecode yet"
    assert compile_modules(module, str(tmp_path)) == [], "it compiles"
    assert hybytecode.stale(module) == [], "compiled: Python takes its bytecode"
    path.write_text("(setv X 2)\n")
    assert hybytecode.stale(module) == module, "its source changed"


def test_bytecode_of_an_install_is_taken_only_for_a_source_that_is_the_same(tmp_path, monkeypatch):
    # CI installs the wheel before the editable install the tests run from:
    # the checkout takes the wheel's bytecode of each module whose source
    # it was compiled from, and no other.
    import importlib.util
    import hybytecode
    from consfig.python_hop.precompile import compile_modules
    checkout, installed = tmp_path / "checkout", tmp_path / "site" / "consfig"
    for top in (checkout / "props", installed / "props"):
        top.mkdir(parents=True)
        (top / "same.hy").write_text("(setv X 1)\n")
    (checkout / "props" / "edited.hy").write_text("(setv X 3)\n")
    (installed / "props" / "edited.hy").write_text("(setv X 2)\n")
    compile_modules([(f"consfig.props.{m}", str(installed / "props" / f"{m}.hy"))
                     for m in ("same", "edited")], str(tmp_path / "site"))
    monkeypatch.setattr(hybytecode, "PROJECT", str(checkout))
    monkeypatch.setattr(hybytecode, "PACKAGES", {"props": "consfig.props"})
    assert hybytecode.adopt(str(installed)) == 1, "one module is the same"
    modules = hybytecode.hy_modules()
    assert hybytecode.stale(modules) == [("consfig.props.edited", str(checkout / "props" / "edited.hy"))]
    assert not os.path.exists(importlib.util.cache_from_source(str(checkout / "props" / "edited.hy")))


def test_every_hy_module_of_consfig_is_warmed_under_its_own_name_and_no_test_is():
    # A Hy module's code holds the name it was compiled under: a test helper
    # compiled as tests.python_hop.remote_testprops registered its
    # properties under that name, and was imported as remote_testprops.
    import hybytecode
    names = {name for name, _ in hybytecode.hy_modules()}
    for expected in ("consfig.apply.engine", "consfig.props.file", "consfig.connections.sudo",
                     "consfig.hosts.example"):
        assert expected in names, f"{expected} is compiled before the workers start"
    assert not [n for n in names if not n.startswith("consfig.")], "only consfig's own modules"


def test_every_file_scheduled_first_is_a_test_file_of_the_suite():
    # A file renamed or removed would silently fall back to its usual place.
    [conftest] = [m for m in list(sys.modules.values())
                  if getattr(m, "__file__", None) == os.path.join(TESTS, "conftest.py")]
    missing = [f for f in conftest.LONGEST_FIRST if not os.path.isfile(os.path.join(TESTS, f))]
    assert not missing, f"LONGEST_FIRST names files the suite does not have: {missing}"
