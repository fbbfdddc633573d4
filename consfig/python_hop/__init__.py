"""python_hop: the `:python` hop, by side of the wire.  The controller's
side (`controller`: the session, apply-remotely), the target's
(`target`: the serve loop), what is shipped (`bundle`, compiled by
`precompile`), what travels with a host (`payload`), and sessions kept open
between deployments (`keep`).  The bootstrap the target runs first is
`consfig/boot.py`, in the ground: it runs alone, and both sides take the
cache's paths from it.

May import: the ground, transport, model, apply and data.  Imports inside
functions stay only where their start-up cost was measured (see
docs/python-hop.md).
"""
