"""apply: making properties hold.  The engine (`engine`: checks, failures,
check mode, NO-CHANGE), the events it emits (`events`), what properties
call (`actions`), the combinators (`combinators`), meta-parameters
(`meta`), handlers (`handlers`), state kept on the target (`targetstate`),
the deployment lock (`lock`), "no services here" (`noservices`), and
waiting for a host that rebooted (`rebooting`).

May import: the ground, transport and model.
"""
