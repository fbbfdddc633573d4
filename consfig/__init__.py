"""consfig: declarative configuration management and deployment in Hy.

``(require consfig *)`` brings in the macros (defprop, defproplist,
defpropspec, defhost, deploy, deploy-these, props, propapp, use-props,
try-register-data-source, deffact, defassertion, defdataspace);
``(import consfig *)`` the functions a consfig and its properties use.
"""

from types import ModuleType as _ModuleType

import hy  # noqa: F401  -- lets Python import the .hy modules below

# Hy's `require` reads `_hy_macros` from this module's dict, not through
# getattr: the modules that define the macros are imported at once.  None
# of them is the deployer's: a target's Python imports this package, and
# deploys nothing from its own side.
from consfig.model import dataspace, deploying as _deploying, fact, host, property, propspec
import consfig.data.items as _data

_MACRO_MODULES = (property, propspec, host, _deploying, _data, fact, dataspace)

# The modules whose names `(import consfig *)` brings: each module's own
# `(export …)` list, and no name exported by two of them as two different
# things (tests/ground/test_exports.py).  They are imported when one of their names is
# first asked for (PEP 562), not with this package: the target of a
# :python hop imports it on the way to `consfig.python_hop.target`, and there applies a
# propspec with a small part of the library.
_MODULES = ("model.property", "model.propspec", "model.host", "deployer.deployment",
            "nested.deploys", "deployer.fleet", "image.build", "apply.combinators", "apply.handlers", "model.fact",
            "apply.meta", "apply.actions", "model.context", "transport.chain",
            "transport.hop", "types", "apply.engine", "errors", "data.items", "data.sources",
            "python_hop.keep", "model.watchspec", "model.dataspace", "options")

_hy_macros = {}
for _m in _MACRO_MODULES:
    for _name in getattr(_m, "_hy_export_macros", ()):
        _hy_macros[_name] = _m._hy_macros[_name]
_hy_export_macros = list(_hy_macros)
del _m, _name


def _load_all():
    import importlib
    names = []
    for module_name in _MODULES:
        module = importlib.import_module(f"consfig.{module_name}")
        for name in getattr(module, "__all__", ()):
            # A name that is also one of consfig's modules (the type
            # `propspec`) stays the module: `consfig.model.propspec.read-propspec`
            # must not depend on whether a site has run `(import consfig *)`.
            if isinstance(globals().get(name), _ModuleType):
                continue
            obj = getattr(module, name)
            if name in names and globals()[name] is not obj:
                raise ImportError(f"consfig.{module_name} exports {name}, which another "
                                  "module of (import consfig *) exports as something else")
            if name not in names:
                globals()[name] = obj
                names.append(name)
    # For Python users, the deployment functions under Python-friendly
    # names.  (In Hy, `deploy` and `deploy-these` are the macros; `deploy*`
    # the functions.)
    deployment = importlib.import_module("consfig.deployer.deployment")
    globals()["deploy"] = deployment.__dict__[hy.mangle("deploy*")]
    globals()["deploy_these"] = deployment.__dict__[hy.mangle("deploy-these*")]
    fleet = importlib.import_module("consfig.deployer.fleet")
    globals()["deploy_hosts"] = fleet.__dict__[hy.mangle("deploy-hosts*")]
    globals()["__all__"] = names


def __getattr__(name):
    """A name of the library's, its modules imported the first time one is asked for."""
    if "__all__" not in globals():
        _load_all()
        if name in globals():
            return globals()[name]
    raise AttributeError(f"module 'consfig' has no attribute {name!r}")


def __dir__():
    """Every name, as `dir` and a REPL's completion want them."""
    if "__all__" not in globals():
        _load_all()
    return sorted(globals())
