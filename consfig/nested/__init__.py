"""nested: deployments made from a host, as part of its own (`deploys`:
`deploys`, `deploys-these`, `deploy-nested`), on the controller or on a
target after a `:python` hop; and `apply-on-target`, which a deployment
from the controller shares.  The properties that make chroots, containers
and disks deploy into them through it, not through the deployer.

May import: the ground, transport, model, apply and data.
"""
