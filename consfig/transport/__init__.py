"""transport: reaching a target.  The hop protocol (`hop`: Connection, Hop,
Script, bounded output), the wire frames both sides of a `:python` hop
speak (`frames`), parsing and establishing chains of hops (`chain`), and
symlink-safe paths on a target (`safepath`).  The hop types themselves are
`consfig.connections.*`.

May import: the ground (consfig.util, errors, types, boot).
"""
