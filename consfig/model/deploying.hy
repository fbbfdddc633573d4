"The macros a site deploys with: `deploy` and `deploy-these`, which take a
bare hostname symbol and an unevaluated propspec.

  (deploy [:ssh :python] athena)
  (deploy-these :ssh athena (cmd.single \"apt-get\" \"update\"))

Their expansions call `consfig.deployer.deployment`'s `deploy*` and
`deploy-these*` where they are used, on the controller: this module, which
`(require consfig *)` brings everywhere (a target's Python too), imports
nothing of the deployer."

(import hy.models [Keyword String]
        consfig.model.propspec [dotted->name walk-body])

(defn _host-form [host]
  (setv name (dotted->name host))
  (if (and name (in "." name)) (String name) host))

(defn _chain-form [chain]
  ;; A bare `:local` in a function call would mark a keyword argument.
  (if (isinstance chain Keyword) `(quote ~chain) chain))

(setv _DEPLOY-OPTIONS #{"check" "diff" "verbosity" "unapply" "sink" "persist" "options"})

(defn _split-options [forms]
  ;; `(deploy :ssh athena :check True (extra …))`: the keywords that name
  ;; an option of `deploy*` take the form after them; a propapp is never a
  ;; bare keyword, so what is left is the propspec.
  (setv options [] propapps [] forms (list forms) i 0)
  (while (< i (len forms))
    (setv f (get forms i))
    (if (and (isinstance f Keyword) (in f.name _DEPLOY-OPTIONS) (< (+ i 1) (len forms)))
        (do (.extend options [f (get forms (+ i 1))])
            (+= i 2))
        (do (.append propapps f)
            (+= i 1))))
  #(options propapps))

(defmacro deploy [_hy_compiler chain host #* additional]
  "Deploy HOST over CHAIN, then apply ADDITIONAL (an unevaluated propspec):
`(deploy [:ssh :python] athena)`, `(deploy :local athena.example.com)`.
Options of `deploy*` may come among them: `(deploy :ssh athena :check True)`."
  (setv #(options additional) (_split-options additional))
  `(hy.I.consfig/deployer/deployment.deploy* ~(_chain-form chain) ~(_host-form host)
     ~@options
     :additional ~(when additional
                    `(hy.I.consfig/model/propspec.eseqprops-of
                       [~@(walk-body additional _hy_compiler)]))))

(defmacro deploy-these [_hy_compiler chain host #* propapps]
  "Apply just PROPAPPS (an unevaluated propspec) to HOST over CHAIN:
`(deploy-these :ssh athena (cmd.single \"apt-get\" \"update\"))`.  Options
of `deploy*` may come among them: `:check True`."
  (setv #(options propapps) (_split-options propapps))
  `(hy.I.consfig/deployer/deployment.deploy-these* ~(_chain-form chain) ~(_host-form host)
     (hy.I.consfig/model/propspec.eseqprops-of [~@(walk-body propapps _hy_compiler)])
     ~@options))

(export :macros [deploy deploy-these])
