"Properties, property applications and the property registry.

A property is a named, idempotent piece of configuration.  `defprop` defines
one from subroutines (`:desc`, `:preprocess`, `:hostattrs`, `:check`, `:apply`,
`:unapply`) that all take the property's parameters.  Calling a property
builds a `Propapp`: the property's qualified name and its arguments, checked
against its parameters at once, on the controller.

Arguments are kept as written, Lisp-style: `(os.debian-stable \"bookworm\"
:amd64)` has the keyword `:amd64` as a value, while in `(cmd.single \"ls\"
:cwd \"/tmp\")` `:cwd` names a parameter and so passes a keyword argument."

(import importlib
        inspect
        keyword
        hy.models [Keyword]
        consfig.errors [ConsfigError FailedChange PropspecError site-location]
        consfig.util [keyword-name])

(defclass Propapp []
  "One application of a property: its qualified name and its arguments."
  (setv __slots__ #("name" "args")
        __hash__ None)
  (defn __init__ [self name args]
    (setv self.name name
          self.args (tuple args)))
  (defn __eq__ [self other]
    (and (isinstance other Propapp)
         (= self.name other.name)
         (= self.args other.args)))
  (defn __repr__ [self] (hy.repr self)))

(hy.repr-register Propapp
  (fn [p] (+ "(" (.join " " [p.name #* (map hy.repr p.args)]) ")")))

(setv SUBROUTINES #("desc" "preprocess" "hostattrs" "check" "apply" "unapply"))

;; Every property defined so far, by qualified name.
(setv properties {})

(defclass Property []
  "A property: its name, type, parameters and subroutines.  Call it to get a
`Propapp`."

  (defn __init__ [self name type lambda-list * [doc None] [desc None]
                  [preprocess None] [hostattrs None] [check None] [apply None]
                  [unapply None] [propspec None] [announce True]
                  [opaque-type False] [simulates False]]
    (setv self.name name
          self.type (_type-name type)
          self.signature (inspect.signature lambda-list)
          self.__doc__ doc
          self.desc desc
          self.preprocess preprocess
          self.hostattrs hostattrs
          self.check check
          self.apply apply
          self.unapply unapply
          ;; defproplist and defpropspec: args -> propspec, expanded at preprocess.
          self.propspec propspec
          ;; Combinators such as eseqprops are not announced themselves.
          self.announce announce
          ;; A property that applies its propspec argument elsewhere (another
          ;; host) does not take that propspec's type.
          self.opaque-type opaque-type
          ;; Its :apply and :unapply change nothing in check mode (they ask
          ;; `checking?`), so check mode runs them to learn what would change.
          self.simulates simulates)
    (setv #(self._names self._takes-any-keyword) (_parameter-names self.signature)))

  (defn [property] short-name [self]
    "The name a user writes: `file.has-content` for the library's
`consfig.props.file.has-content`, just `web-base` for a site's
`consfig_site_web.web-base` or a combinator."
    (setv parts (.split self.name "."))
    (.join "." (cut parts (if (.startswith self.name "consfig.props.") -2 -1) None)))

  (defn [property] lambda-list [self]
    (_render-lambda-list self.signature))

  (defn __repr__ [self]
    f"<property {self.short-name} {self.lambda-list}>")

  (defn __call__ [self #* args #** kwargs]
    (setv raw (+ (list args)
                 (sum (gfor [k v] (.items kwargs) [(Keyword (_keyword-for k)) v]) [])))
    (self.bind raw)
    (Propapp self.name raw))

  (defn bind [self raw]
    "Split RAW arguments into positional and keyword ones and check them
against the parameters; return `#(args kwargs)`."
    (setv pos []
          kw {}
          i 0
          n (len raw))
    (while (< i n)
      (setv a (get raw i)
            k (when (isinstance a Keyword) (_parameter-for a.name)))
      (if (and k
               (< (+ i 1) n)
               (or (in k self._names) self._takes-any-keyword)
               (not-in k kw))
          (do (setv (get kw k) (get raw (+ i 1)))
              (+= i 2))
          (do (.append pos a)
              (+= i 1))))
    (try
      (.bind self.signature #* pos #** kw)
      (except [e TypeError]
        (raise (PropspecError
                 (+ f"wrong arguments for property {self.short-name}: {e}\n"
                    f"  it takes {self.lambda-list}\n"
                    f"  it was given {(hy.repr (list raw))}")))))
    #(pos kw)))

(defn _parameter-for [name]
  ;; `:from` names the parameter `from_`: Python forbids `from` as a name.
  (setv m (hy.mangle name))
  (if (keyword.iskeyword m) (+ m "_") m))

(defn _keyword-for [param]
  (setv name (hy.unmangle param))
  (if (and (.endswith name "_") (keyword.iskeyword (cut name 0 -1)))
      (cut name 0 -1)
      name))

(defn _type-name [t]
  (setv name (or (keyword-name t) (str t)))
  (when (not-in name #("posix" "python"))
    (raise (PropspecError f"property type must be :posix or :python, not {(hy.repr t)}")))
  name)

(defn _parameter-names [sig]
  (setv P inspect.Parameter)
  #((frozenset (gfor p (.values sig.parameters)
                     :if (in p.kind #(P.POSITIONAL_OR_KEYWORD P.KEYWORD_ONLY))
                     p.name))
    (any (gfor p (.values sig.parameters) (= p.kind P.VAR_KEYWORD)))))

(defn _render-lambda-list [sig]
  (setv P inspect.Parameter
        out []
        star-done False)
  (for [p (.values sig.parameters)]
    (setv name (_keyword-for p.name))
    (cond
      (= p.kind P.VAR_POSITIONAL) (do (.append out f"#* {name}") (setv star-done True))
      (= p.kind P.VAR_KEYWORD) (.append out f"#** {name}")
      True
      (do (when (and (= p.kind P.KEYWORD_ONLY) (not star-done))
            (.append out "*")
            (setv star-done True))
          (.append out (if (is p.default P.empty)
                           name
                           f"[{name} {(hy.repr p.default)}]")))))
  (+ "[" (.join " " out) "]"))

(defn define-property [name type lambda-list #** kwargs]
  "Make a `Property` and register it under its qualified NAME."
  (setv prop (Property name type lambda-list #** kwargs)
        (get properties name) prop)
  prop)

(defn find-property [name]
  "The property registered under the qualified NAME, importing its module if
need be; `PropspecError` when there is none."
  (when (in name properties)
    (return (get properties name)))
  (setv #(module _ attr) (.rpartition name "."))
  (when module
    (try (importlib.import-module module)
         (except [ImportError] None)))
  (when (not-in name properties)
    (raise (PropspecError f"unknown property {name}")))
  (get properties name))

(defn call-subroutine [prop which propapp]
  "Call PROP's subroutine WHICH with PROPAPP's arguments.  What the
controller-side subroutines (:preprocess, :hostattrs, a defpropspec's body)
raise is a mistake in the consfig: a `PropspecError` naming the property."
  (setv #(args kwargs) (.bind prop propapp.args))
  (try
    ((getattr prop which) #* args #** kwargs)
    (except [e Exception]
      (when (or (not-in which #("preprocess" "hostattrs" "propspec"))
                (isinstance e ConsfigError))
        (raise))
      (raise (PropspecError (+ f"{prop.short-name}: its :{which} failed: "
                               (if (isinstance e FailedChange) "" f"{(. (type e) __name__)}: ")
                               (str e))
                            (site-location e))
             :from e))))

(defn propapps-in [args]
  "The propapps among ARGS, looking one level into lists."
  (setv out [])
  (for [a args]
    (cond (isinstance a Propapp) (.append out a)
          (isinstance a list) (.extend out (gfor x a :if (isinstance x Propapp) x))))
  out)

(defn propapp-type [propapp]
  "\"python\" if PROPAPP or any propapp inside it needs a Python on the target."
  (setv prop (find-property propapp.name))
  (if (or (= prop.type "python")
          (and (not prop.opaque-type)
               (any (gfor p (propapps-in propapp.args) (= (propapp-type p) "python")))))
      "python"
      "posix"))

(defn python-propapps [propapp]
  "The leaf propapps of type `:python` in PROPAPP, for messages."
  (setv prop (find-property propapp.name))
  (cond (= prop.type "python") [propapp]
        prop.opaque-type []
        True (sum (gfor p (propapps-in propapp.args) (python-propapps p)) [])))

(defn propapp-desc [propapp]
  "PROPAPP's description: its `:desc`, or its name and arguments."
  (setv prop (find-property propapp.name))
  (if prop.desc
      (str (call-subroutine prop "desc" propapp))
      (.join " " [prop.short-name
                  #* (gfor a propapp.args :if (not (isinstance a Propapp))
                           (if (isinstance a str) a (hy.repr a)))])))

(defn preprocess-propapp [propapp]
  "Run PROPAPP's `:preprocess`, expand defproplist/defpropspec properties into
the propspec they stand for, and do the same for every propapp inside."
  (setv prop (find-property propapp.name))
  (when prop.preprocess
    (setv propapp (Propapp propapp.name (call-subroutine prop "preprocess" propapp)))
    (.bind prop propapp.args))
  (when prop.propspec
    (setv expansion (call-subroutine prop "propspec" propapp)
          desc (propapp-desc propapp))
    (return ((find-property "consfig.combinators.desc")
              desc (preprocess-propapp expansion))))
  (Propapp propapp.name
           (lfor a propapp.args
                 (cond (isinstance a Propapp) (preprocess-propapp a)
                       (and (isinstance a list) (any (gfor x a (isinstance x Propapp))))
                       (lfor x a (if (isinstance x Propapp) (preprocess-propapp x) x))
                       True a))))

(defn propapp-hostattrs [propapp]
  "Run PROPAPP's `:hostattrs`; by default, that of each propapp it contains."
  (setv prop (find-property propapp.name))
  (if prop.hostattrs
      (call-subroutine prop "hostattrs" propapp)
      (for [p (propapps-in propapp.args)]
        (propapp-hostattrs p))))

(defn _subroutine-form [params form]
  `(fn ~params ~@(cut form 1 None)))

(defmacro defprop [_hy_compiler name type params #* body]
  "Define a property NAME of TYPE (`:posix` or `:python`) taking PARAMS.

  (defprop has-content :posix [path content]
    \"PATH has exactly CONTENT.\"
    (:desc f\"{path} has content\")
    (:check (= (read-remote-file path) content))
    (:apply (write-remote-file path content)))

is equivalent to binding `has-content` to a `Property` registered as
`MODULE.has-content`, plus a `has-content*` macro for the dotted form, where
the last parameter receives the trailing forms as an unevaluated propspec."
  (setv #(doc subs options) (_parse-defprop-body name body)
        module _hy_compiler.module.__name__)
  `(do
     (setv ~name (hy.I.consfig/property.define-property
                   ~(+ module "." (str name))
                   ~(if (isinstance type Keyword) type.name type)
                   (fn ~params None)
                   :doc ~doc
                   ~@(sum (gfor [k form] subs [(hy.models.Keyword k) (_subroutine-form params form)]) [])
                   ~@(sum (gfor [k v] options [(hy.models.Keyword k) v]) [])))
     ~(_dotted-macro-form name module)))

(defn _dotted-macro-form [name module]
  (setv star (hy.models.Symbol (+ (str name) "*")))
  `(defmacro ~star [_hy_compiler #* args]
     (hy.I.consfig/propspec.dotted-expansion _hy_compiler ~module ~(str name) args)))

(defn _parse-defprop-body [name body]
  (setv body (list body)
        doc None
        subs []
        options [])
  (when (and body (isinstance (get body 0) hy.models.String))
    (setv doc (str (.pop body 0))))
  (for [form body]
    (when (not (and (isinstance form hy.models.Expression) form
                    (isinstance (get form 0) Keyword)))
      (raise (PropspecError f"defprop {name}: expected (:subroutine …) forms, got {(hy.repr form)}")))
    (setv k (. (get form 0) name))
    (cond (in k SUBROUTINES) (.append subs #(k form))
          (in k #("announce" "opaque-type" "simulates")) (.append options #(k (get form 1)))
          True (raise (PropspecError (+ f"defprop {name}: unknown subroutine :{k}; "
                                        "use :desc :preprocess :hostattrs :check :apply :unapply")))))
  #(doc subs options))

(export :objects [Propapp Property properties define-property find-property
                  call-subroutine propapps-in propapp-type python-propapps
                  propapp-desc preprocess-propapp propapp-hostattrs]
        :macros [defprop])
