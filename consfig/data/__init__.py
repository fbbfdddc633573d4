"""data: prerequisite data.  Items, secrets, sources, require/provide/get
(`items`), the sources that call programs (`sources`), where versions are
kept between deployments (`store`), and how data travels over a `:python`
hop (`transit`).

May import: the ground, transport, model and apply.
"""
