"""site: a site's consfig.  Loading it under a stable module name, with
file:line errors (`load`), and its templates and trees, read on the
controller (`files`).

May import: the ground, transport, model, apply, data and python_hop.
"""
from consfig.moved import forward as _forward

# `consfig.site` was the module `load` is now (`consfig.site.load_consfig`).
__getattr__ = _forward(__name__)
