"Facts: values observed on the target, the conditions of `during`.

  (deffact file-exists [#^ abs-path path]
    \"Something is at PATH.\"
    (:desc f\"{path} exists\")
    (:holds (remote-exists? path))
    (:watch [[\"path\" path]]))

A fact is read, never made true: `:holds` says whether it holds now, and
only reads (through the connection API, so over any chain, as a `:posix`
property's `:check`); `:watch` says what to observe to learn that it may have
changed, as a list of watch specs (see `watch-spec-problem`); an empty list,
or no `:watch`, leaves it to be polled at the host's interval.  `:desc` and
`:hostattrs` are as a property's (a fact may declare the prerequisite data it
reads).  A fact takes typed parameters as a property does.

Applying a fact builds a `Propapp`, as applying a property does, so a fact
application is propspec data: it prints as Hy, reads back, travels as JSON,
and its arguments are checked where it is written.  It stands only as the
condition of a `during` (consfig.apply.combinators); anywhere else in a propspec
it is refused when the host is prepared.

(Not to be confused with the facts one host reads from another's hostattrs,
consfig.model.host.)  The library's facts are in consfig.props.fact."

(import consfig.errors [PropspecError]
        consfig.model.property [Propapp Property find-property stored-name hostattrs-of note-definition
                                properties definition-where site-where]
        consfig.types [Type show])

(setv _SUBROUTINES #("desc" "hostattrs" "holds" "watch"))

(defclass Fact [Property]
  "A fact: a property's name, type, parameters, `:desc` and `:hostattrs`,
with HOLDS (whether it holds now) and WATCHES (its watch specs), both
functions of its parameters.  It has no :check, :apply or :unapply."
  (setv kind "fact")

  (defn __init__ [self name type lambda-list * holds [watch None] [hostattrs None]
                  [doc None] [desc None] [where None]]
    (.__init__ (super) name type lambda-list :doc doc :desc desc :where where
               :hostattrs _refuse-outside-during :announce False)
    (setv self.holds holds
          self.watches watch
          self.fact-hostattrs hostattrs))

  (defn __repr__ [self]
    f"<fact {self.short-name} {self.lambda-list}>"))

(defn _refuse-outside-during [#* _ #** __]
  ;; The :hostattrs a fact has as a property: it runs only when the fact
  ;; stands where a property is wanted.
  (setv p (.get hostattrs-of))
  (raise (PropspecError (+ f"{(. (find-property p.name) short-name)} is a fact, not a property: "
                           "it can only be the condition of a during, "
                           f"as in (during {(repr p)} PROPAPP…)")
                        (site-where p))))

(defn define-fact [name type lambda-list #** kwargs]
  "Make a `Fact` and register it, as a property is, under its qualified NAME."
  (setv f (Fact name type lambda-list #** kwargs))
  (note-definition f"fact {f.short-name}" f.where)
  (setv (get properties name) f)
  f)

(defn fact? [x]
  "Whether X is a `Fact`."
  (isinstance x Fact))

(defn fact-application? [x]
  "Whether X is the application of a fact (a `Propapp` of a `Fact`)."
  (and (isinstance x Propapp)
       (fact? (try (find-property x.name) (except [PropspecError] None)))))

(setv fact-application
      (Type "fact-application"
            "a fact application, such as (fact.file-exists \"/etc/consfig/maintenance\")"
            fact-application?))

(defn _call [which propapp]
  (setv f (find-property propapp.name)
        #(args kwargs) (.bind f propapp.args))
  ((getattr f which) #* args #** kwargs))

(defn fact-holds? [propapp]
  "Whether the fact applied by PROPAPP holds on the target, now."
  (bool (_call "holds" propapp)))

(defn fact-hostattrs [propapp]
  "Run the `:hostattrs` of the fact applied by PROPAPP, if it has one."
  (when (. (find-property propapp.name) fact-hostattrs)
    (setv token (.set hostattrs-of propapp))
    (try (_call "fact_hostattrs" propapp)
         (finally (.reset hostattrs-of token)))))

(defn watch-spec-problem [spec]
  "What is wrong with SPEC as a watch spec, or None.  A watch spec is a list:
`[\"path\" ABS-PATH]` (the file or directory at ABS-PATH, which need not
exist), `[\"unit\" NAME]` (a systemd unit's state), `[\"dpkg\"]` (the
installed packages), `[\"poll\" SECONDS]` (look again every SECONDS)."
  (setv ok-seconds (fn [v] (and (isinstance v #(int float)) (not (isinstance v bool)) (> v 0))))
  (cond (not (and (isinstance spec list) spec)) "is not a non-empty list"
        (= (get spec 0) "path")
        (when (not (and (= (len spec) 2) (isinstance (get spec 1) str)
                        (.startswith (get spec 1) "/") (not-in "\x00" (get spec 1))))
          "must be [\"path\" ABS-PATH], with an absolute path")
        (= (get spec 0) "unit")
        (when (not (and (= (len spec) 2) (isinstance (get spec 1) str) (get spec 1)
                        (not (.startswith (get spec 1) "-"))))
          "must be [\"unit\" NAME]")
        (= (get spec 0) "dpkg")
        (when (!= (len spec) 1) "must be [\"dpkg\"]")
        (= (get spec 0) "poll")
        (when (not (and (= (len spec) 2) (ok-seconds (get spec 1))))
          "must be [\"poll\" SECONDS], with a positive number of seconds")
        True "is not one of [\"path\" …] [\"unit\" …] [\"dpkg\"] [\"poll\" …]"))

(defn fact-watch [propapp]
  "The watch specs of the fact applied by PROPAPP (a list of lists, see
`watch-spec-problem`): [] when it has no `:watch`.  A spec that is not one
is a `PropspecError` naming the fact."
  (setv f (find-property propapp.name))
  (when (not f.watches) (return []))
  (setv specs (list (_call "watches" propapp)))
  (for [s specs]
    (setv problem (watch-spec-problem s))
    (when problem
      (raise (PropspecError f"{f.short-name}: its :watch gave {(show s)}, which {problem}"
                            (site-where propapp)))))
  specs)

(defn _parse-deffact [name args]
  ;; [TYPE] PARAMS [DOC] (:subroutine …)…
  (setv args (list args)
        type "posix"
        doc None
        subs [])
  (when (and args (isinstance (get args 0) hy.models.Keyword))
    (setv type (. (.pop args 0) name)))
  (when (not (and args (isinstance (get args 0) hy.models.List)))
    (raise (PropspecError f"deffact {name}: expected [parameters] after the name")))
  (setv params (.pop args 0))
  (when (and args (isinstance (get args 0) hy.models.String))
    (setv doc (str (.pop args 0))))
  (for [form args]
    (when (not (and (isinstance form hy.models.Expression) form
                    (isinstance (get form 0) hy.models.Keyword)
                    (in (. (get form 0) name) _SUBROUTINES)))
      (raise (PropspecError (+ f"deffact {name}: expected (:desc …), (:hostattrs …), "
                               f"(:holds …) or (:watch …), got {(hy.repr form)}"))))
    (.append subs #((. (get form 0) name) form)))
  (when (not-in "holds" (lfor [k _] subs k))
    (raise (PropspecError f"deffact {name}: a fact needs (:holds …)")))
  #(type params doc subs))

(defmacro deffact [_hy_compiler name #* args]
  "Define the fact NAME, of an optional TYPE (`:posix`, the default, or
`:python`), taking PARAMS:

  (deffact file-exists [#^ abs-path path]
    \"Something is at PATH.\"
    (:desc f\"{path} exists\")
    (:holds (remote-exists? path))
    (:watch [[\"path\" path]]))

is equivalent to binding `file-exists` to a `Fact` registered as
`MODULE.file-exists`, whose subroutines are functions of PARAMS."
  (setv #(type params doc subs) (_parse-deffact name args))
  `(setv ~name (hy.I.consfig/model/fact.define-fact
                 ~(+ (stored-name _hy_compiler.module.__name__) "." (str name))
                 ~type
                 (fn ~params None)
                 :doc ~doc
                 :where ~(definition-where _hy_compiler)
                 ~@(sum (gfor [k form] subs
                              [(hy.models.Keyword k) `(fn ~params ~@(cut form 1 None))])
                        []))))

(export :objects [Fact define-fact fact? fact-application? fact-application fact-holds?
                  fact-hostattrs fact-watch watch-spec-problem]
        :macros [deffact])
