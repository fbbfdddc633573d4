"""consfig's build step beyond pyproject.toml: its Hy modules compiled once.

Python compiles a .py module at install; nothing compiles a .hy one, so an
installed consfig was compiled at run time, by whoever ran it first.  Where
that user could not write site-packages, or bytecode writing was off
(PYTHONDONTWRITEBYTECODE), every `consfig` command compiled all of it again
(seconds each time); and the bytecode written at run time was no part of the
install record, so `pip uninstall` (and `pip install -e` over an install)
left it behind, a namespace package that shadowed the next install.

So the wheel carries the bytecode of every .hy module, made here, as
hash-checked .pyc files: valid whatever the mtime pip gives the sources,
checked against each source's hash when imported, and listed in the install
record like every file of the wheel."""

import os
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

# Run in a Python of its own whose path is the build tree: compiling a
# module runs the modules it `require`s, which must be the ones being built.
# It writes no bytecode but the hash-checked files it means to.
_COMPILE = r"""
import importlib.util, os, sys
sys.dont_write_bytecode = True
root = sys.argv[1]
sys.path.insert(0, root)
import hy
from hy.importer import HyLoader
from importlib._bootstrap_external import _code_to_hash_pyc
failed = []
# Bytecode an earlier build left in the build tree is not this build's.
for d, dirs, files in os.walk(os.path.join(root, "consfig")):
    if os.path.basename(d) == "__pycache__":
        for f in files:
            os.unlink(os.path.join(d, f))
for d, dirs, files in os.walk(os.path.join(root, "consfig")):
    dirs.sort()
    for f in sorted(files):
        if not f.endswith(".hy"):
            continue
        path = os.path.join(d, f)
        name = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
        with open(path, "rb") as src:
            source = src.read()
        try:
            code = HyLoader(name, path).source_to_code(source, path)
        except Exception as e:
            failed.append(f"{name}: {e}")
            continue
        pyc = importlib.util.cache_from_source(path)
        os.makedirs(os.path.dirname(pyc), exist_ok=True)
        with open(pyc, "wb") as out:
            out.write(_code_to_hash_pyc(code, importlib.util.source_hash(source), True))
for line in failed:
    print("consfig build: not compiled (compiled at run time instead):", line, file=sys.stderr)
"""


class build_py_with_hy_bytecode(build_py):
    """build_py, then the Hy modules in the build tree compiled beside it."""

    def run(self):
        super().run()
        if not self.dry_run:
            # Its environment is the build's: an isolated build finds hy
            # through it.
            r = subprocess.run([sys.executable, "-c", _COMPILE, os.path.abspath(self.build_lib)])
            if r.returncode != 0:
                # The wheel is still whole without it: the modules are
                # compiled at run time, as before.
                print("consfig build: the Hy modules could not be compiled", file=sys.stderr)


setup(cmdclass={"build_py": build_py_with_hy_bytecode})
