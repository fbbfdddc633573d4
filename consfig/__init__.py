"""consfig: declarative configuration management and deployment in Hy.

``(require consfig *)`` brings in the macros (defprop, defproplist,
defpropspec, defhost, deploy, deploy-these, props, propapp, use-props,
try-register-data-source);
``(import consfig *)`` the functions a consfig and its properties use.
"""

import hy  # noqa: F401  -- lets Python import the .hy modules below

from consfig import (actions, chain, combinators, context, data, datasources, deployment,
                     engine, errors, fleet, hop, host, image, keep, property, propspec, result)

_MODULES = (property, propspec, host, deployment, fleet, image, combinators, result, actions,
            context, chain, hop, engine, errors, data, datasources, keep)

__all__ = []
_hy_macros = {}
for _m in _MODULES:
    for _name in getattr(_m, "__all__", ()):
        globals()[_name] = getattr(_m, _name)
        __all__.append(_name)
    for _name in getattr(_m, "_hy_export_macros", ()):
        _hy_macros[_name] = _m._hy_macros[_name]
_hy_export_macros = list(_hy_macros)
del _m, _name

# For Python users: the deployment functions under Python-friendly names.
# (In Hy, `deploy` and `deploy-these` are the macros; `deploy*` the functions.)
deploy = deployment.__dict__[hy.mangle("deploy*")]
deploy_these = deployment.__dict__[hy.mangle("deploy-these*")]
deploy_hosts = fleet.__dict__[hy.mangle("deploy-hosts*")]
