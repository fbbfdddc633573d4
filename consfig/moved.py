"""The names consfig's modules had before they were grouped into layer
packages (issue 21), and the importer that keeps them working.

A consfig written against the flat layout imports `consfig.fleet`,
`consfig.keep` or `(require consfig.fact [deffact])`; each such name is an
alias of the module's new home (`consfig.deployer.fleet` …): the same module
object, imported once.  Properties defined in consfig's core keep the names
they were printed and stored under (`consfig.combinators.seqprops`), which a
propspec read back from data, a target's state files and an image still
use: `public_name` gives that name.

Ground layer: standard library only, imported by `consfig/__init__.py`.
"""

import importlib
import importlib.util
import sys

# old name -> new name, for every module that moved.  Where a package took
# a module's old name (`consfig.data`, `consfig.site`, `consfig.image`,
# `consfig.converge`), the package forwards that module's names instead
# (`forward`).
MOVED = {
    "consfig.frames": "consfig.transport.frames",
    "consfig.hop": "consfig.transport.hop",
    "consfig.safepath": "consfig.transport.safepath",
    "consfig.chain": "consfig.transport.chain",
    "consfig.context": "consfig.model.context",
    "consfig.watchspec": "consfig.model.watchspec",
    "consfig.property": "consfig.model.property",
    "consfig.propspec": "consfig.model.propspec",
    "consfig.host": "consfig.model.host",
    "consfig.fact": "consfig.model.fact",
    "consfig.events": "consfig.apply.events",
    "consfig.engine": "consfig.apply.engine",
    "consfig.actions": "consfig.apply.actions",
    "consfig.targetstate": "consfig.apply.targetstate",
    "consfig.combinators": "consfig.apply.combinators",
    "consfig.meta": "consfig.apply.meta",
    "consfig.handlers": "consfig.apply.handlers",
    "consfig.rebooting": "consfig.apply.rebooting",
    "consfig.lock": "consfig.apply.lock",
    "consfig.noservices": "consfig.apply.noservices",
    "consfig.datacache": "consfig.data.transit",
    "consfig.datasources": "consfig.data.sources",
    "consfig.precompile": "consfig.python_hop.precompile",
    "consfig.bundle": "consfig.python_hop.bundle",
    "consfig.payload": "consfig.python_hop.payload",
    "consfig.keep": "consfig.python_hop.keep",
    "consfig.remote": "consfig.python_hop.controller",
    "consfig.serve": "consfig.python_hop.target",
    "consfig.sitefiles": "consfig.site.files",
    "consfig.deployment": "consfig.deployer.deployment",
    "consfig.fleet": "consfig.deployer.fleet",
    "consfig.report": "consfig.deployer.report",
    "consfig.terminal": "consfig.deployer.terminal",
    "consfig.fabric": "consfig.deployer.fabric",
    "consfig.watch": "consfig.converge.watch",
    "consfig.converge_controller": "consfig.converge.controller",
    "consfig.publish": "consfig.image.publish",
    "consfig.puller": "consfig.image.puller",
    "consfig.imageboot": "consfig.ui.image_main",
    "consfig.cli": "consfig.ui.cli",
    "consfig.repl": "consfig.ui.repl",
}

# The packages that took a module's name, and the module whose names they forward.
FORWARDED = {
    "consfig.data": "consfig.data.items",
    "consfig.site": "consfig.site.load",
    "consfig.image": "consfig.image.build",
    "consfig.converge": "consfig.converge.agent",
}

_PUBLIC = {new: old for old, new in MOVED.items()}
_PUBLIC.update({module: package for package, module in FORWARDED.items()})


def public_name(module):
    """The name properties defined in MODULE are qualified with: the
    module's name before the move, so that they keep their names."""
    return _PUBLIC.get(module, module)


def forward(package):
    """A module `__getattr__` for PACKAGE, which took the name of a module
    that moved into it: a name it lacks is looked up in that module."""
    def __getattr__(name):
        if name.startswith("__"):
            raise AttributeError(name)
        module = importlib.import_module(FORWARDED[package])
        try:
            return getattr(module, name)
        except AttributeError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
    return __getattr__


class _Aliases:
    """Imports an old name as the module it now names (asked last, so only
    for names no file answers to).  A finder and loader by protocol, not by
    `importlib.abc`'s classes: importing those brings importlib.resources,
    and with it tempfile and pathlib, onto every :python target."""

    def find_spec(self, name, path=None, target=None):
        if name not in MOVED:
            return None
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec):
        module = importlib.import_module(MOVED[spec.name])
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module):
        # The import system set the alias's spec on the module: it keeps its own.
        module.__spec__ = module.__spec__.loader_state


def install():
    """Make the old names importable (once per process)."""
    if not any(isinstance(f, _Aliases) for f in sys.meta_path):
        sys.meta_path.append(_Aliases())
