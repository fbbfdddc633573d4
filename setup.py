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

class build_py_with_hy_bytecode(build_py):
    """build_py, then the Hy modules in the build tree compiled beside it."""

    def run(self):
        super().run()
        if not self.dry_run:
            # Its environment is the build's: an isolated build finds hy
            # through it.
            root = os.path.abspath(self.build_lib)
            # Bytecode an earlier build left in the build tree is not this build's.
            for d, dirs, files in os.walk(os.path.join(root, "consfig")):
                if os.path.basename(d) == "__pycache__":
                    for f in files:
                        os.unlink(os.path.join(d, f))
            # In a Python of its own whose path is the build tree: compiling a
            # module runs the modules it `require`s, which must be the ones
            # being built.
            # On every core: most of a build's time (27 s of a core).
            r = subprocess.run([sys.executable, os.path.join(root, "consfig", "python_hop", "precompile.py"),
                                root, "--under", "consfig", "--hy-only",
                                "--jobs", str(len(os.sched_getaffinity(0)))])
            if r.returncode != 0:
                # The wheel is still whole without it: the modules are
                # compiled at run time, as before.
                print("consfig build: the Hy modules could not be compiled", file=sys.stderr)


setup(cmdclass={"build_py": build_py_with_hy_bytecode})
