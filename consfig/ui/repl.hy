"`consfig repl`: a Hy REPL with consfig's macros required, its functions
imported, and optionally a site consfig loaded, so that `(athena)` deploys;
`(doc file.has-content)` shows a property's documentation."

(import os
        sys
        types
        consfig.apply.engine [Outcome]
        consfig.errors [ConsfigError]
        consfig.deployer.report [error]
        consfig.site.load [load-consfig]
        consfig.model.host [hosts]
        importlib.util
        consfig.python_hop.keep)

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
  "The module the REPL evaluates in: the consfig FILE's, or a fresh one.
It has `(reload-consfig)`, which loads FILE again and rebinds its names."
  (setv module (if file
                   (load-consfig file)
                   (setx m (types.ModuleType "consfig_repl"))))
  (setv (get sys.modules module.__name__) module)
  (hy.eval '(do (require consfig *) (import consfig *)) :module module)
  ;; `(doc file.has-content)`: a macro, so that the name is not evaluated
  ;; (`file` is bound only where a consfig used `use-props`).
  (hy.eval '(defmacro doc [name]
              "Show the documentation of the property NAME (`consfig doc NAME`)."
              `(print (hy.I.consfig/ui/doc.describe
                        (hy.I.consfig/ui/doc.find-documented
                          ~(hy.I.consfig/ui/doc.written-name name)))))
           :module module)
  (setv (get module.__dict__ (hy.mangle "reload-consfig"))
        (fn [] (reload-consfig module file)))
  module)

(defn reload-consfig [module file]
  "Load the consfig FILE again and rebind the names it defines in MODULE
(the REPL's), so that a host deploys as it is now written.  Return the
number of hosts it defines."
  (when (not file)
    (raise (ConsfigError "no consfig was loaded in this REPL, so there is nothing to reload")))
  ;; Python trusts a cached compilation whose source has the same size and
  ;; modification second: an edit made within the second of the last load
  ;; (a script, a quick fix) would be missed.
  (try (os.remove (importlib.util.cache-from-source (os.path.abspath file)))
       (except [OSError] None))
  (setv fresh (load-consfig file))
  (.update module.__dict__ (dfor [k v] (.items (vars fresh))
                                 :if (not-in k #("__name__" "__loader__" "__spec__"))
                                 k v))
  (setv (get sys.modules module.__name__) module)
  (len (lfor h (.values hosts) :if (in h (.values (vars fresh))) h)))

(defn run-repl [[file None]]
  "Start an interactive REPL in `repl-module`; return its exit status: 1
when a deployment made in it failed, else 0.  Deployments made in it keep
their chains open (`consfig.python_hop.keep`); `(disconnect)` closes them, and they
are closed when it exits."
  ;; What is deployed from here is deployed again soon: keep its chain.
  (setv consfig.python_hop.keep.persist-by-default True)
  (setv module (repl-module file)
        repl (REPL :locals module.__dict__))
  (try (.run repl)
       (finally (consfig.python_hop.keep.disconnect)))
  (if repl.failed? 1 0))

(export :objects [REPL repl-module run-repl])
