"Deployments: a connection chain and a host.

`deploy*` and `deploy-these*` are the functions (usable from Python too);
`deploy` and `deploy-these` are the macros that take an unevaluated propspec
and a bare hostname symbol."

(import hy.models [Symbol String]
        consfig.connection [parse-chain establish-chain close-chain chain->data
                            establishing-for]
        consfig.engine [apply-host check-propspec-fits]
        consfig.errors [ConsfigError]
        consfig.host [find-host preprocess-host]
        consfig.property [find-property]
        consfig.propspec [dotted->name eseqprops-of walk-body])

(defn _chain-for [chain host]
  (when (is chain None)
    (setv chain host.deploy))
  (when (is chain None)
    (raise (ConsfigError (+ f"host {host.hostname} has no default chain (:deploy in its defhost options); "
                            "give one, e.g. (deploy :local " (get (.split host.hostname ".") 0) ")"))))
  (parse-chain chain))

(defn deploy* [chain host * [propspec None] [additional None] [sink None]
               [verbosity 0] [unapply False]]
  "Deploy HOST (a Host or hostname) over CHAIN (its default chain when None)
and return an `Outcome`.  PROPSPEC replaces the host's propspec; ADDITIONAL
is applied after it.  Events go to SINK, by default a rich `Reporter`.

Everything that can be checked on the controller — the chain, the
propspec's arguments, every :hostattrs — is checked before connecting."
  (setv host (find-host host)
        parsed (_chain-for chain host)
        propspec (or propspec host.propspec))
  (when additional
    (setv propspec ((find-property "consfig.combinators.seqprops") propspec additional)))
  (setv prepared (preprocess-host host propspec))
  (check-propspec-fits prepared.propspec
                       (or (any (gfor [name _] parsed (= name "python")))
                           (all (gfor [name _] parsed (= name "local"))))
                       (hy.repr (chain->data parsed)))
  ;; Imported here, not at the top: a target applying a host after a
  ;; :python hop imports this module but has no rich, and needs none.
  (import consfig.report [Reporter])
  (setv reporter (when (is sink None) (Reporter :verbosity verbosity))
        sink (or sink reporter))
  (setv conns [])
  (with [_ (establishing-for prepared)]
    (try
      (setv conns (establish-chain parsed)
            target (get conns -1))
      (if (hasattr target "apply_remotely")
          (.apply-remotely target prepared sink :unapply unapply :verbosity verbosity)
          (apply-host prepared target sink :unapply unapply))
      (finally
        (close-chain conns)
        (when reporter (.close reporter))))))

(defn deploy-these* [chain host propspec #** kwargs]
  "Apply just PROPSPEC to HOST over CHAIN (with HOST's hostattrs)."
  (deploy* chain host :propspec propspec #** kwargs))

(defn _host-form [host]
  (setv name (dotted->name host))
  (if (and name (in "." name)) (String name) host))

(defmacro deploy [_hy_compiler chain host #* additional]
  "Deploy HOST over CHAIN, then apply ADDITIONAL (an unevaluated propspec):
`(deploy [:ssh :python] athena)`, `(deploy :local athena.example.com)`."
  `(hy.I.consfig/deployment.deploy* ~chain ~(_host-form host)
     :additional ~(when additional
                    `(hy.I.consfig/propspec.eseqprops-of
                       [~@(walk-body additional _hy_compiler)]))))

(defmacro deploy-these [_hy_compiler chain host #* propapps]
  "Apply just PROPAPPS (an unevaluated propspec) to HOST over CHAIN:
`(deploy-these :ssh athena (cmd.single \"apt-get update\"))`."
  `(hy.I.consfig/deployment.deploy-these* ~chain ~(_host-form host)
     (hy.I.consfig/propspec.eseqprops-of [~@(walk-body propapps _hy_compiler)])))

(export :objects [deploy* deploy-these*]
        :macros [deploy deploy-these])
