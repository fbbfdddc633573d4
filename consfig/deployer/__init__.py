"""deployer: deploying hosts from the controller.  One host (`deployment`:
deploy*, deploy-these*, deploys), many (`fleet`), from a fabfile
(`fabric`), and showing a deployment's events (`report`, with `terminal`
neutralising what a target prints).

May import: every layer below it (ground, transport, model, apply, data,
python_hop, consfig.connections, site).
"""
