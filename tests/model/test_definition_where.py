"""Where a definition was written (`definition-where`), as messages and
stored properties give it: a site's file as its user sees it, and consfig's
own modules by their place in the package, whoever compiled them and from
wherever.  Their bytecode is installed, shipped in bundles and images: a
path of the machine that compiled it must not be in it."""

import types

import hy
import pytest
from hy.compiler import HyASTCompiler

from consfig.model import property as prop

where = getattr(prop, hy.mangle("definition-where"))


# (module, its file: absolute, or relative to the working directory, which
# is a new directory), where its definitions are said to be.
CASES = {
    "a library module, compiled anywhere, is placed in the package":
        ("consfig.props.disk", "/home/someone/src/consfig/build/lib/consfig/props/disk.hy",
         "consfig/props/disk.hy"),
    "a library module below the working directory is placed in the package too":
        ("consfig.props.disk", "props/disk.hy", "consfig/props/disk.hy"),
    "a library package is placed by its __init__ file":
        ("consfig.props", "/srv/checkout/props/__init__.hy", "consfig/props/__init__.hy"),
    "a site below the working directory is relative to it":
        ("consfig_site_web", "sites/web.hy", "sites/web.hy"),
    "a site elsewhere keeps its whole path":
        ("consfig_site_web", "/etc/consfig/web.hy", "/etc/consfig/web.hy"),
}


@pytest.mark.parametrize("module, filename, said", CASES.values(), ids=list(CASES))
def test_a_definition_is_placed_so(module, filename, said, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    c = HyASTCompiler(types.ModuleType(module), str(tmp_path / filename))
    assert where(c) == said, where(c)
