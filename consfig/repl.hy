"`consfig repl`: a Hy REPL with consfig's macros required, its functions
imported, and optionally a site consfig loaded, so that `(athena)` deploys."

(import sys
        types
        consfig.errors [ConsfigError]
        consfig.report [error]
        consfig.site [load-consfig])

(defn _excepthook [previous]
  ;; A user's mistake at the prompt gets its message, not a traceback.
  (fn [kind value tb]
    (if (isinstance value ConsfigError)
        (error value)
        (previous kind value tb))))

(defn repl-module [[file None]]
  "The module the REPL evaluates in: the consfig FILE's, or a fresh one."
  (setv module (if file
                   (load-consfig file)
                   (setx m (types.ModuleType "consfig_repl"))))
  (setv (get sys.modules module.__name__) module)
  (hy.eval '(do (require consfig *) (import consfig *)) :module module)
  module)

(defn run-repl [[file None]]
  "Start an interactive REPL in `repl-module`."
  (setv module (repl-module file)
        sys.excepthook (_excepthook sys.excepthook))
  (.run (hy.REPL :locals module.__dict__)))

(export :objects [repl-module run-repl])
