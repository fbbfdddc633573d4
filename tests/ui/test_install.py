"""The README's two commands, in order, in one fresh environment: `pip install
.`, run consfig, then `pip install -e '.[test]'`, and the `consfig` command
still works.  A real venv and real pip; consfig's own dependencies come from
the test environment (PYTHONPATH), the build's from the package index."""

import os
import site
import subprocess
import sys
import sysconfig
import zipfile

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from clirun import REPO  # noqa: E402

pytestmark = pytest.mark.slow


def _run(argv, env, timeout=300):
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, cwd="/")
    assert r.returncode == 0, f"{' '.join(map(str, argv))} failed:\n{r.stdout[-3000:]}{r.stderr[-3000:]}"
    return r


@pytest.fixture
def venv(tmp_path):
    """A fresh venv whose Python sees the test environment's packages (hy,
    rich, …) through PYTHONPATH, but not its editable consfig."""
    d = tmp_path / "venv"
    # No pip of its own (ensurepip costs seconds): this environment's pip
    # installs into it (`pip --python`).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(d)], check=True, timeout=120)
    deps = [p for p in [sysconfig.get_paths()["purelib"], *site.getsitepackages()]
            if os.path.isdir(p)]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE",)}
    env.update(PYTHONPATH=os.pathsep.join(dict.fromkeys(deps)),
               PIP_DISABLE_PIP_VERSION_CHECK="1", CONSFIG_DEMO_DIR=str(tmp_path / "demo"))
    return d / "bin", env


def _pip(bindir, env, *args):
    # pip itself sees only the new venv: on PYTHONPATH it would also see the
    # test environment's consfig.  The build's own requirements (setuptools,
    # hy) come from the package index, as for any user.
    _run([sys.executable, "-m", "pip", "--python", bindir / "python", *args],
         {k: v for k, v in env.items() if k != "PYTHONPATH"})


def _pip_install(bindir, env, *what):
    _pip(bindir, env, "install", "-q", "--no-deps", *what)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """consfig's wheel, built once for this module as `pip install .` builds
    it (an isolated build, its requirements from the package index): the
    tests install this one (building is most of their time: the Hy modules
    are compiled into the wheel)."""
    d = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(d), str(REPO)],
         {k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    [built] = d.glob("consfig-*.whl")
    return built


def test_the_wheel_contains_every_hy_file_and_nothing_beside_consfig(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = set()
    for folder, package in [("consfig", "consfig"), ("props", "consfig/props"),
                            ("connections", "consfig/connections"), ("hosts", "consfig/hosts")]:
        for f in (REPO / folder).rglob("*.hy"):
            expected.add(f"{package}/{f.relative_to(REPO / folder).as_posix()}")
    assert expected, "found .hy files"
    assert expected <= names, sorted(expected - names)
    assert {n.split("/")[0] for n in names if not n.startswith("consfig-")} == {"consfig"}


def test_an_install_that_has_run_uninstalls_without_a_trace(venv, wheel):
    # What broke `pip install .` then `pip install -e .`: bytecode that Hy
    # wrote at run time into site-packages was no part of the install
    # record, so the old install's directory stayed, a namespace package
    # that shadowed the editable one (`No module named 'consfig.ui.cli'`).
    bindir, env = venv
    _pip_install(bindir, env, str(wheel))
    first = _run([bindir / "consfig", "deploy", "demo"], env)
    assert "demo.localhost" in first.stdout, first.stdout
    purelib = _run([bindir / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                   env).stdout.strip()
    _pip(bindir, env, "uninstall", "-q", "-y", "consfig")
    left = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(purelib, "consfig"))
            for f in fs]
    assert not left, f"left in site-packages after uninstall: {left[:10]}"


def test_install_then_editable_install_keeps_the_consfig_command_working(venv, wheel):
    # The README's own sequence: `pip install .` is the module's wheel,
    # built as that builds it, installed (.ci/run types the very words,
    # before the tests, in CI's own environment).
    bindir, env = venv
    _pip_install(bindir, env, str(wheel))
    _run([bindir / "consfig", "deploy", "demo"], env)
    _pip_install(bindir, env, "-e", f"{REPO}[test]")
    version = _run([bindir / "consfig", "--version"], env)
    assert version.stdout.startswith("consfig "), version.stdout


def test_an_installed_consfig_carries_its_bytecode(venv, wheel):
    bindir, env = venv
    _pip_install(bindir, env, str(wheel))
    out = _run([bindir / "python", "-c",
                "import consfig, os; print(os.path.dirname(consfig.__file__))"], env).stdout
    package = out.strip()
    record = [p for p in os.listdir(os.path.dirname(package)) if p.startswith("consfig-")
              and p.endswith(".dist-info")]
    assert record, os.listdir(os.path.dirname(package))
    listed = open(os.path.join(os.path.dirname(package), record[0], "RECORD")).read()
    hy_modules = [os.path.relpath(os.path.join(d, f), os.path.dirname(package))
                  for d, _, files in os.walk(package) for f in files if f.endswith(".hy")]
    assert any(m.startswith("consfig/apply/") for m in hy_modules), hy_modules
    for m in hy_modules:
        folder, f = os.path.split(m)
        tag = f"{folder}/__pycache__/{f[:-3]}.{sys.implementation.cache_tag}.pyc"
        assert tag in listed, f"{tag} is not in the install record"
