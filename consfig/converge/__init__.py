"""converge: keeping hosts converged.  The agent on the target (`agent`),
its watches (`watch`: inotify, D-Bus, dpkg, polls), and `consfig converge`
on the controller (`controller`).

May import: every layer below it, up to deployer.
"""
from consfig.moved import forward as _forward

# `consfig.converge` was the module `agent` is now.
__getattr__ = _forward(__name__)
