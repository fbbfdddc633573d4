"""consfig's Hy bytecode, compiled once, on every core, before the suite's
workers start.

Python writes no bytecode on a machine that sets PYTHONDONTWRITEBYTECODE,
nor has any in a fresh clone (CI).  Each pytest-xdist worker then compiled
every consfig module it imported (most of about 20 s of a core each, cold),
and so did each `consfig` command a test ran, and each bundle a python hop
shipped, until one of them happened to write bytecode.
The controller compiles the modules whose bytecode is missing or invalid,
before it starts the workers, which then read it as Python reads any
__pycache__.  CI has none to compile: it installs the wheel first, whose
bytecode the checkout takes (`adopt`).

Valid means what it means to Python: bytecode for the module's own source,
hash-checked.  A module is not compiled again because a macro it uses
changed (clear __pycache__ after changing a macro, as the README says)."""

import json
import os
import subprocess
import sys
import time

PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Where each folder of Hy modules is installed (pyproject.toml's package-dir).
# Not the tests: a Hy module's code holds the name it was compiled under (a
# property's name is its module's), and a test helper is imported under
# more than one (`remote_testprops`, from its folder on sys.path), so a test
# file is compiled by the worker that imports it, under the name it gets.
PACKAGES = {"consfig": "consfig", "props": "consfig.props",
            "connections": "consfig.connections", "hosts": "consfig.hosts"}

_COMPILE = """
import json, sys
from consfig.python_hop import precompile
failed = precompile.compile_modules(json.load(sys.stdin), sys.argv[1])
sys.stdout.write(json.dumps(failed))
"""


def hy_modules():
    """(NAME, PATH) of every Hy module of consfig."""
    from consfig.python_hop.precompile import sources
    out = []
    for folder, package in PACKAGES.items():
        top = os.path.join(PROJECT, folder)
        for path in sources(top, (".hy",)):
            rest = os.path.relpath(path, top)[:-3].split(os.sep)
            out.append((".".join([package, *rest]), path))
    return out


def stale(modules):
    """Those of MODULES whose bytecode is missing or not valid for their
    source."""
    from consfig.python_hop.precompile import _cached_code
    out = []
    for name, path in modules:
        with open(path, "rb") as f:
            source = f.read()
        if _cached_code(path, source) is None:
            out.append((name, path))
    return out


def _compile(modules, jobs):
    # MODULES in JOBS processes side by side; how many failed.
    procs = []
    for i in range(min(jobs, len(modules))):
        p = subprocess.Popen([sys.executable, "-c", _COMPILE, PROJECT],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, cwd=PROJECT)
        procs.append((p, modules[i::jobs]))
    failed = 0
    for p, share in procs:
        try:
            out, _ = p.communicate(json.dumps(share), timeout=600)
            failed += len(json.loads(out or "[]"))
        except (subprocess.TimeoutExpired, ValueError):
            p.kill()
            p.wait()
            failed += len(share)
    return failed


def warm(jobs):
    """Compile the stale Hy modules, on JOBS cores; return (how many were
    compiled, how many failed, seconds taken)."""
    start = time.monotonic()
    todo = stale(hy_modules())
    failed = _compile(todo, jobs) if todo else 0
    return len(todo), failed, time.monotonic() - start


def adopt(installed):
    """Take the bytecode an install of consfig carries (setup.py compiles it
    into the wheel), under INSTALLED (the installed `consfig` package's
    directory), for each Hy module whose source here is the one it was
    compiled from (hash-checked bytecode holds its source's hash): CI
    installs the wheel first, as the README does, and then needs no second
    compile of the same modules.  Return how many were taken."""
    import importlib.util
    from consfig.python_hop.precompile import hash_checked_for, write_pyc
    taken = 0
    for name, path in hy_modules():
        # Installed, NAME is a path under the consfig package.
        there = os.path.join(installed, *name.split(".")[1:]) + ".hy"
        try:
            with open(importlib.util.cache_from_source(there), "rb") as f:
                data = f.read()
            with open(path, "rb") as f:
                source = f.read()
        except OSError:
            continue
        if hash_checked_for(data, source):
            write_pyc(path, data)
            taken += 1
    return taken


if __name__ == "__main__":
    # python3 tests/hybytecode.py --adopt: from the consfig installed in
    # this Python (.ci/run, after `pip install .`).
    if sys.argv[1:] != ["--adopt"]:
        sys.exit("usage: python3 tests/hybytecode.py --adopt")
    import consfig
    print(f"hybytecode: took the bytecode of {adopt(os.path.dirname(consfig.__file__))} Hy modules "
          "from the installed consfig")

