"The `:local` hop: the machine consfig runs on.  The connection itself is
`consfig.transport.local.LocalConnection`, which the core uses without a hop."

(import consfig.transport.hop [Hop]
        consfig.transport.local [LocalConnection LocalProcess kill-running])

(defn establish [upstream]
  (LocalConnection))

(setv HOP (Hop "local" {} establish))

(export :objects [LocalConnection LocalProcess kill-running HOP])
