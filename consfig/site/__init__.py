"""site: a site's consfig.  Loading it under a stable module name, with
file:line errors (`load`), and its templates and trees, read on the
controller (`files`).

May import: the ground, transport, model, apply, data and python_hop.
"""
