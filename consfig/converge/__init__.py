"""converge: keeping hosts converged.  The agent on the target (`agent`),
its watches (`watch`: inotify, D-Bus, dpkg, polls), and `consfig converge`
on the controller (`controller`).

May import: every layer below it, up to deployer.
"""
