"`consfig repl`: a Hy REPL with consfig's macros required, its functions
imported, and optionally a site consfig loaded, so that `(athena)` deploys."

(import sys
        types
        consfig.engine [Outcome]
        consfig.errors [ConsfigError]
        consfig.report [error]
        consfig.site [load-consfig])

(defclass REPL [hy.REPL]
  "Hy's REPL, except that a user's mistake at the prompt (an unknown host, a
broken chain, wrong arguments) gets its message, not a traceback, and that it
remembers whether a deployment made at the prompt failed (`failed?`)."
  (defn __init__ [self #** kwargs]
    (.__init__ (super) :output-fn self._show #** kwargs)
    (setv self.failed? False))

  (defn _show [self value]
    (when (and (isinstance value Outcome) (= value.status "failed"))
      (setv self.failed? True))
    (hy.repr value))
  (defn showtraceback [self]
    (setv e (get (sys.exc-info) 1))
    (if (isinstance e ConsfigError)
        (do (error e)
            (setv (get self.locals (hy.mangle "*e")) e))
        (.showtraceback (super)))))

(defn repl-module [[file None]]
  "The module the REPL evaluates in: the consfig FILE's, or a fresh one."
  (setv module (if file
                   (load-consfig file)
                   (setx m (types.ModuleType "consfig_repl"))))
  (setv (get sys.modules module.__name__) module)
  (hy.eval '(do (require consfig *) (import consfig *)) :module module)
  module)

(defn run-repl [[file None]]
  "Start an interactive REPL in `repl-module`; return its exit status: 1
when a deployment made in it failed, else 0."
  (setv module (repl-module file)
        repl (REPL :locals module.__dict__))
  (.run repl)
  (if repl.failed? 1 0))

(export :objects [REPL repl-module run-repl])
