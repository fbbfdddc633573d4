"What a property's `:apply` or `:unapply` returns when it changed nothing.

Its own module so that the engine, the combinators and every property can
import it without importing one another."

(import hy.models [Keyword])

(setv NO-CHANGE (Keyword "no-change"))

(export :objects [NO-CHANGE])
