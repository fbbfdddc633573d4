"Properties, property applications and the property registry.

A property is a named, idempotent piece of configuration.  `defprop` defines
one from subroutines (`:desc`, `:preprocess`, `:hostattrs`, `:check`, `:apply`,
`:unapply`) that all take the property's parameters.  Calling a property
builds a `Propapp`: the property's qualified name and its arguments, checked
against its parameters at once, on the controller.

Arguments are kept as written, Lisp-style: `(os.debian-stable \"bookworm\"
:amd64)` has the keyword `:amd64` as a value, while in `(cmd.single \"ls\"
:cwd \"/tmp\")` `:cwd` names a parameter and so passes a keyword argument."

(import contextlib
        difflib
        contextvars
        importlib
        inspect
        keyword
        hy.models [Keyword]
        consfig.model.context [current-host]
        consfig.errors [ConsfigError DeferredRead FailedChange PropspecError site-location
                        site-file?]
        consfig.types [Applicable Binder annotation-type show]
        consfig.model.watchspec [check-watch-specs]
        consfig.util [keyword-name]
        os)

(defclass Propapp [Applicable]
  "One application of a property: its qualified name and its arguments."
  (setv __slots__ #("name" "args" "where")
        __hash__ None)
  (defn __init__ [self name args [where None]]
    ;; WHERE (file:line of the form that wrote it) is for messages only: it
    ;; is neither compared, printed nor sent.
    (setv self.name name
          self.args (tuple args)
          self.where where))
  (defn __eq__ [self other]
    (and (isinstance other Propapp)
         (= self.name other.name)
         (= self.args other.args)))
  ;; As Hy: `hy.repr` prints with `repr` what it has no printer for, so this
  ;; serves both, without `hy.repr-register` importing Hy's printer (and
  ;; fractions, decimal, datetime) wherever this module is imported.
  (defn __repr__ [self]
    (setv prop (.get properties self.name))
    (+ "(" (.join " " [self.name #* (if prop (.render-args prop self.args) (map show self.args))])
       ")")))

(setv SUBROUTINES #("desc" "preprocess" "hostattrs" "check" "apply" "unapply" "watch"))

;; What a combinator declares about itself, so that the engine and the agent
;; ask the property rather than its name (Consfigurator keeps a
;; combinator's behaviour on the property in the same way).  Each is a
;; function of the parameters, as a subroutine is:
;;   :children     the propapps applying it applies, in order (by default
;;                 the propapps among its arguments);
;;   :meta         the meta-parameters it puts in force over them (a dict by
;;                 name: `with-meta`);
;;   :trigger      the propapp whose change sets off the others (`on-change`);
;;   :fact         the fact it holds its propapps during (`during`);
;;   :retractable  whether unapplying it undoes all it did, whatever it holds
;;                 (`unapplied`, `during`);
;;   :handler      the name of the handler it defines (`handler`).
(setv DECLARATIONS #("children" "meta" "trigger" "fact" "retractable" "handler"))
;; And flags, plain values: `:sequence True`, a group that unapplying
;; unapplies member by member, so that it can be opened up (`eseqprops`);
;; `:inverts True`, applying it unapplies what it holds (`unapplied`).
(setv _OPTIONS #("announce" "opaque-type" "simulates" "sequence" "inverts" "action"))

;; Every property defined so far, by qualified name.
(setv properties {})

;; The names the properties of consfig's core are printed and stored under
;; (in propspecs read back from data, a target's state files, an image):
;; their modules' names before the layer packages of issue 21.  Module ->
;; the name its properties are qualified with.  Any other module's
;; properties are qualified with its own name.
(setv STORED-NAMES {"consfig.apply.combinators" "consfig.combinators"
                    "consfig.apply.meta" "consfig.meta"
                    "consfig.apply.handlers" "consfig.handlers"
                    "consfig.python_hop.payload" "consfig.payload"
                    "consfig.nested.deploys" "consfig.deployment"})

(setv _STORED-MODULES (dfor [module stored] (.items STORED-NAMES) stored module))

(defn stored-name [module]
  "The name the properties defined in MODULE are qualified with: its own,
but for the core modules of `STORED-NAMES`."
  (.get STORED-NAMES module module))

(defn module-named [stored]
  "The module whose properties are qualified with STORED (`stored-name`
backwards)."
  (.get _STORED-MODULES stored stored))

;; While a consfig file is loaded: what it defined so far, name -> file:line.
;; Defining a name twice in one file is a mistake; redefining at the REPL,
;; outside any load, is how one fixes a property and stays allowed.
(setv defining (contextvars.ContextVar "consfig-defining" :default None))

(defn note-definition [what where]
  "Record that WHAT (\"property NAME\", \"host NAME\") is defined at WHERE;
while a consfig is loaded, a second definition is a `PropspecError` naming
both places."
  (setv seen (.get defining))
  (when (is seen None) (return))
  (when (in what seen)
    (raise (PropspecError f"{what} is defined twice: at {(get seen what)} and at {where}"
                          where)))
  (setv (get seen what) where))

(defclass Property []
  "A property: its name, type, parameters and subroutines.  Call it to get a
`Propapp`."

  ;; What messages call it (a fact, consfig.model.fact, is a kind of property).
  (setv kind "property")

  (defn __init__ [self name type lambda-list * [doc None] [desc None]
                  [preprocess None] [hostattrs None] [check None] [apply None]
                  [unapply None] [watch None] [propspec None] [announce True]
                  [opaque-type False] [simulates False] [action None] [invariants #()]
                  [where None] [declared-type None] [sequence False] [inverts False]
                  [children None] [meta None] [trigger None] [fact None] [retractable None]
                  [handler None] [unwatched None]]
    (setv self.name name
          self.type (_type-name type)
          self.signature (inspect.signature lambda-list)
          self.doc doc
          self.desc desc
          self.preprocess preprocess
          self.hostattrs hostattrs
          self.check check
          self.apply apply
          self.unapply unapply
          ;; Parameters -> the watch specs of what it manages (consfig.model.watchspec).
          self.watch watch
          ;; Why it has no :watch, for the people reading the agent's report.
          self.unwatched unwatched
          ;; defproplist and defpropspec: args -> propspec, expanded at preprocess.
          self.propspec propspec
          ;; Combinators such as eseqprops are not announced themselves.
          self.announce announce
          ;; A property that applies its propspec argument elsewhere (another
          ;; host) does not take that propspec's type.
          self.opaque-type opaque-type
          ;; Its :apply and :unapply change nothing in check mode (they ask
          ;; `checking?`), so check mode runs them to learn what would change.
          self.simulates simulates
          ;; Why it is an action by nature (it runs something each time it
          ;; is applied, `cmd.single`, `service.restarted`), so that no
          ;; :check can say it holds; None for a state.
          self.action (when action (_action-reason name action))
          ;; Pairs of functions of the parameters: a condition across them,
          ;; and the message when it does not hold.
          self.invariants (tuple invariants)
          ;; What it declares as a combinator (see DECLARATIONS).
          self.sequence sequence
          self.inverts inverts
          self.children children
          self.meta meta
          self.trigger trigger
          self.fact fact
          self.retractable retractable
          self.handler handler
          self.where where
          ;; defproplist/defpropspec with a TYPE: checked against the expansion.
          self.declared-type (when declared-type (_type-name declared-type))
          self.__signature__ self.signature
          self.__annotations__ (dfor [n p] (.items self.signature.parameters)
                                     :if (annotation-type p.annotation)
                                     n p.annotation))
    (setv #(self._names self._takes-any-keyword) (_parameter-names self.signature)
          self._typed (lfor p (.values self.signature.parameters)
                            :if (annotation-type p.annotation) p)
          self._positional (lfor p (.values self.signature.parameters)
                                 :if (= p.kind inspect.Parameter.POSITIONAL_OR_KEYWORD) p)
          self._rest (next (gfor p (.values self.signature.parameters)
                                 :if (= p.kind inspect.Parameter.VAR_POSITIONAL) p)
                           None)))

  (defn _typed-doc [self]
    ;; What `(help …)` and `(doc …)` show: the typed lambda list first.
    (+ f"({self.short-name} {self.lambda-list})"
       (.join "" (gfor q (self.parameters) :if (get q "type")
                       f"\n  {(get q "name")}: {(. (get q "type") phrase)}"))
       (if self.doc f"\n\n{self.doc}" "")))

  (defn parameters [self]
    "Each parameter as a dict: its name as written in a call (`:mode` for a
keyword parameter, `#* packages` for the rest), its type (or None), and its
default rendered as Hy (or None when it has none)."
    (setv P inspect.Parameter)
    (lfor p (.values self.signature.parameters)
          {"name" (+ (cond (= p.kind P.KEYWORD_ONLY) ":"
                           (= p.kind P.VAR_POSITIONAL) "#* "
                           (= p.kind P.VAR_KEYWORD) "#** "
                           True "")
                     (_keyword-for p.name))
           "type" (annotation-type p.annotation)
           "default" (if (is p.default P.empty) None (_render p p.default))}))

  (defn watch-reason [self]
    "Why the converging agent has nothing to watch for this property (it
re-checks it at the host's interval), or None when it watches something: its
`(:unwatched REASON)`, or its `(:action REASON)`; or, for a property that stands for a propspec
(defproplist, defpropspec), or applies one to another host, what that
means.  A property with neither a :watch nor a reason is a gap in the
library (tests/model/test_watch_reasons.py)."
    (cond self.watch None
          self.unwatched self.unwatched
          self.action f"an action: {self.action}"
          self.propspec "it stands for its propspec, whose properties are watched"
          self.opaque-type (+ "it applies a propspec to another host (a chroot, a container, "
                              "an image), which that host's own agent keeps")
          True None))

  (defn [property] short-name [self]
    "The name a user writes: `file.has-content` for the library's
`consfig.props.file.has-content`, just `web-base` for a site's
`consfig_site_web.web-base` or a combinator."
    (setv parts (.split self.name "."))
    (.join "." (map hy.unmangle (cut parts (if (.startswith self.name "consfig.props.") -2 -1) None))))

  (defn [property] lambda-list [self]
    (_render-lambda-list self.signature))

  (defn __repr__ [self]
    f"<property {self.short-name} {self.lambda-list}>")

  (defn __call__ [self #* args #** kwargs]
    (setv raw (+ (list args)
                 (sum (gfor [k v] (.items kwargs) [(Keyword (_keyword-for k)) v]) [])))
    (self.check-args raw)
    (Propapp self.name raw))

  (defn _split [self raw]
    ;; Positional and keyword arguments, and the keywords in RAW that were
    ;; taken as values (so perhaps misspelt parameter names).
    (setv pos []
          kw {}
          stray []
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
              (when k (.append stray a))
              (+= i 1))))
    #(pos kw stray))

  (defn _bind [self raw]
    ;; The positional and keyword arguments, the stray keywords, and the
    ;; signature's binding of them; a `PropspecError` when they do not fit.
    (setv #(pos kw stray) (self._split raw))
    (try
      #(pos kw stray (.bind self.signature #* pos #** kw))
      (except [e TypeError]
        (raise (self._bind-error e raw stray)))))

  (defn bind [self raw]
    "Split RAW arguments into positional and keyword ones and check them
against the parameters (not their types); return `#(args kwargs)`."
    (setv #(pos kw _ _) (self._bind raw))
    #(pos kw))

  (defn check-args [self raw]
    "Check RAW arguments against the parameters, their types and the
invariants; `PropspecError` naming the parameter, its type and the value."
    (setv #(_ _ stray bound) (self._bind raw))
    (for [p self._typed]
      (when (in p.name bound.arguments)
        (setv value (get bound.arguments p.name)
              problem (_type-problem p value))
        (when problem
          (setv near (self._near-keyword stray))
          (raise (PropspecError (or near f"{self.short-name}: {problem}"))))))
    (when self.invariants
      (.apply-defaults bound)
      (for [[holds message] self.invariants]
        (when (not (holds #* bound.args #** bound.kwargs))
          (raise (PropspecError f"{self.short-name}: {(message #* bound.args #** bound.kwargs)}"))))))

  (defn _near-keyword [self stray]
    ;; ":mdoe" taken as a value, close to the parameter `mode`.
    (setv names (lfor n self._names (_keyword-for n)))
    (for [k stray]
      (setv close (difflib.get-close-matches k.name names 1 0.6))
      (when close
        (return f"unknown keyword :{k.name} for {self.short-name}; did you mean :{(get close 0)}?"))))

  (defn _bind-error [self e raw stray]
    (setv near (self._near-keyword stray))
    (PropspecError
      (cond near near
            (and stray (.startswith (str e) "too many positional"))
            (+ f"unknown keyword :{(. (get stray 0) name)} for {self.short-name}\n"
               f"  it takes {self.lambda-list}")
            True
            (+ f"wrong arguments for {self.kind} {self.short-name}: {e}\n"
               f"  it takes {self.lambda-list}\n"
               f"  it was given {(hy.repr (list raw))}"))))

  (defn render-args [self raw]
    "RAW arguments as Hy source, each in the spelling of its parameter's
type (modes in octal)."
    (setv out []
          i 0
          n (len raw)
          #(pos kw _) (self._split raw)
          positional (lfor p self._positional :if (not-in p.name kw) p)
          seen-pos 0)
    (while (< i n)
      (setv a (get raw i)
            k (when (isinstance a Keyword) (_parameter-for a.name)))
      (cond
        (and k (< (+ i 1) n) (in k kw) (is (get kw k) (get raw (+ i 1))))
        (do (.append out (show a))
            (.append out (_render (.get self.signature.parameters k) (get raw (+ i 1))))
            (+= i 2))
        True
        (do (.append out (_render (if (< seen-pos (len positional))
                                      (get positional seen-pos)
                                      self._rest)
                                  a))
            (+= seen-pos 1)
            (+= i 1))))
    out))

(defn _parameter-for [name]
  ;; `:from` names the parameter `from_`: Python forbids `from` as a name.
  (setv m (hy.mangle name))
  (if (keyword.iskeyword m) (+ m "_") m))

(defn _keyword-for [param]
  (setv name (hy.unmangle param))
  (if (and (.endswith name "_") (keyword.iskeyword (cut name 0 -1)))
      (cut name 0 -1)
      name))

(defn _type-problem [p value]
  ;; What is wrong with VALUE for parameter P, or None.  A parameter's
  ;; default is always acceptable: `#^ file-mode [mode None]` means a mode,
  ;; or none given.
  (setv t (annotation-type p.annotation)
        P inspect.Parameter
        name (_keyword-for p.name))
  (cond
    ;; A binder of a dataspace pattern: its value is checked when bound.
    (isinstance value Binder) None
    (= p.kind P.VAR_POSITIONAL)
    (for [v value]
      (setv problem (if (isinstance v Binder) None (.explain t v)))
      (when problem (return f"each of {name} {problem}")))
    (= p.kind P.VAR_KEYWORD)
    (for [[k v] (.items value)]
      (setv problem (.explain t v))
      (when problem (return f":{(_keyword-for k)} {problem}")))
    (is value p.default) None
    True
    (do (setv problem (.explain t value))
        (when problem
          (return (+ (if (= p.kind P.KEYWORD_ONLY) ":" "") name " " problem))))))

(defn _render [p value]
  (setv t (when p (annotation-type p.annotation)))
  (if (and t (not (and p (is value p.default))))
      (.render t value)
      (show value)))

(defn _action-reason [name reason]
  (when (not (and (isinstance reason str) (.strip reason) (not-in "\n" reason)))
    (raise (PropspecError (+ f"{name}: (:action REASON) takes a one-line reason why it is an "
                             f"action, got {(hy.repr reason)}"))))
  (str reason))

(defn can-check? [prop]
  "Whether PROP can say whether it holds, changing nothing: it has a
`:check`; or it simulates its `:apply` in check mode (the combinators and
the file editors, whose checks come from what they would write or from
their children); or it is a pure declaration (an OS, a fact) with nothing
to apply; or it stands for a propspec (defproplist, defpropspec), whose
properties check.  A property that cannot is declared an action."
  (bool (or prop.check prop.simulates (not prop.apply) prop.propspec)))

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

(defclass _TypedDoc []
  "`Property.__doc__`: the class's docstring on the class, a property's
typed lambda list and docstring on a property.  Made when asked for, not
when each property is defined: rendering the defaults as Hy imports Hy's
printer, which a target that only applies properties never needs."
  (defn __init__ [self class-doc]
    (setv self.class-doc class-doc))
  (defn __get__ [self prop owner]
    (if (is prop None) self.class-doc (._typed-doc prop))))

(setv Property.__doc__ (_TypedDoc Property.__doc__))

(defn _render-lambda-list [sig]
  ;; The lambda list as it is written in a defprop, types and all:
  ;; `[#^ abs-path path * #^ file-mode [mode None]]`.
  (setv P inspect.Parameter
        out []
        star-done False)
  (for [p (.values sig.parameters)]
    (setv name (_keyword-for p.name)
          t (annotation-type p.annotation)
          ann (if t f"#^ {(repr t)} " ""))
    (cond
      (= p.kind P.VAR_POSITIONAL) (do (.append out f"{ann}#* {name}") (setv star-done True))
      (= p.kind P.VAR_KEYWORD) (.append out f"{ann}#** {name}")
      True
      (do (when (and (= p.kind P.KEYWORD_ONLY) (not star-done))
            (.append out "*")
            (setv star-done True))
          (.append out (+ ann (if (is p.default P.empty)
                                  name
                                  f"[{name} {(_render p p.default)}]"))))))
  (+ "[" (.join " " out) "]"))

(defn define-property [name type lambda-list #** kwargs]
  "Make a `Property` and register it under its qualified NAME."
  (setv prop (Property name type lambda-list #** kwargs))
  (note-definition f"property {prop.short-name}" prop.where)
  (setv (get properties name) prop)
  prop)

(defn find-property [name]
  "The property registered under the qualified NAME, importing its module if
need be; `PropspecError` when there is none."
  (when (in name properties)
    (return (get properties name)))
  (setv #(module _ attr) (.rpartition name "."))
  (when module
    (setv qualified (module-named module))
    (try (importlib.import-module qualified)
         (except [e ImportError]
           ;; No such module (or package above it): no such property.  A
           ;; module that is there but whose own imports fail is another
           ;; matter, and the user must learn which import, not that the
           ;; property is unknown.
           (when (not (and (isinstance e ModuleNotFoundError) e.name
                           (or (= qualified e.name) (.startswith qualified (+ e.name ".")))))
             (raise (PropspecError
                      (+ f"property {name}: its module {module} cannot be imported here: {e}. "
                         "Install what it imports where it is applied (for a :python hop, "
                         "in that Python's site-packages), or ship a module of the site's "
                         "with (consfig.python_hop.bundle.ship-modules \"NAME\")"))
                    :from e)))))
  (when (not-in name properties)
    (raise (PropspecError (+ f"unknown property {name}" (did-you-mean name)))))
  (get properties name))

(defn forget-properties-of [modules]
  "Forget the properties defined by MODULES (names), so that importing
those modules again registers their properties anew: a target's kept
Python taking an edited site (`consfig.python_hop.target`)."
  (for [name (list properties)]
    (when (in (get (.rpartition name ".") 0) modules)
      (del (get properties name)))))

(defn did-you-mean [name [candidates None]]
  "\"; did you mean NEAREST?\" for the property name nearest NAME among
CANDIDATES (by default every property defined), or \"\" when none is near."
  (when (is candidates None)
    (setv candidates (set (+ (lfor p (.values properties) p.short-name) (list properties)))))
  (setv close (difflib.get-close-matches name (sorted candidates) 1 0.75))
  (if close f"; did you mean {(get close 0)}?" ""))

(defn call-subroutine [prop which propapp]
  "Call PROP's subroutine WHICH with PROPAPP's arguments.  What the
controller-side subroutines (:preprocess, :hostattrs, a defpropspec's body)
raise is a mistake in the consfig: a `PropspecError` naming the property."
  (setv #(args kwargs) (.bind prop propapp.args))
  (try
    ((getattr prop which) #* args #** kwargs)
    (except [e Exception]
      (when (not-in which #("preprocess" "hostattrs" "propspec"))
        (raise))
      (when (isinstance e ConsfigError)
        ;; A veto (`inapplicable`) or a mistake a property found: named
        ;; by the innermost property and the site's line that applied it.
        (setv inner (or (getattr e "property" None)
                        ;; Re-raised with more said (a chroot's veto).
                        (getattr e.__cause__ "property" None)))
        (if inner
            (setv e.property inner)
            (setv e.property prop.short-name
                  e.message (_naming e.message prop.short-name)))
        (when (is e.where None)
          (setv e.where (site-where propapp)))
        (raise))
      (raise (PropspecError (+ f"{prop.short-name}: its :{which} failed: "
                               (if (isinstance e FailedChange) "" f"{(. (type e) __name__)}: ")
                               (str e))
                            (or (site-location e) (site-where propapp)))
             :from e))))

(defn _naming [message name]
  ;; MESSAGE, about the property NAME, saying which it is.
  (cond (in name message) message
        (in "this property" message) (.replace message "this property" name 1)
        True f"{name}: {message}"))

(defn site-where [propapp]
  "Where in site code PROPAPP was written (file:line), or None when it was
not (it was built by a library, read from data, or typed at a REPL)."
  (setv where (getattr propapp "where" None))
  (when (and where (site-file? (get (.rsplit where ":" 1) 0)))
    where))

(defn _inherit-where [x where]
  ;; The propapps of a defproplist's expansion were written in the library
  ;; that defines it; a message about one of them names the site's line
  ;; that used the defproplist.
  (cond (isinstance x Propapp)
        (do (when (not (site-where x)) (setv x.where where))
            (for [a x.args] (_inherit-where a where)))
        (isinstance x list) (for [a x] (_inherit-where a where))))

(defn _applicable? [x]
  ;; A propapp that is applied: not a record of the dataspace, which is
  ;; data that happens to be spelt as one (consfig.model.dataspace).
  (and (isinstance x Propapp)
       (!= (getattr (.get properties x.name) "kind" None) "assertion")))

(defn propapps-in [args]
  "The propapps among ARGS, looking one level into lists (records of the
dataspace, data spelt as propapps, are not among them)."
  (setv out [])
  (for [a args]
    (cond (_applicable? a) (.append out a)
          (isinstance a list) (.extend out (gfor x a :if (_applicable? x) x))))
  out)

(defn _declared [propapp which]
  ;; What PROPAPP's property declares as WHICH (one of DECLARATIONS) for
  ;; PROPAPP's arguments; None when it declares nothing.
  (setv prop (find-property propapp.name))
  (when (getattr prop which)
    (call-subroutine prop which propapp)))

(defn children [propapp]
  "The propapps that applying PROPAPP applies, in order: what its property
declares as `:children`, by default the propapps among its arguments."
  (setv prop (find-property propapp.name))
  (if prop.children
      (list (call-subroutine prop "children" propapp))
      (propapps-in propapp.args)))

(defn meta-of [propapp]
  "The meta-parameters (a dict by name) PROPAPP puts in force over the
propapps it holds (`with-meta`), or None."
  (_declared propapp "meta"))

(defn trigger-of [propapp]
  "The propapp whose change sets off the rest of PROPAPP (`on-change`), or
None when PROPAPP is no trigger."
  (_declared propapp "trigger"))

(defn fact-of [propapp]
  "The fact application PROPAPP holds its propapps during (`during`), or
None."
  (_declared propapp "fact"))

(defn handler-of [propapp]
  "The name of the handler PROPAPP defines (`handler`), or None."
  (_declared propapp "handler"))

(defn retractable? [propapp]
  "Whether PROPAPP's property declares that unapplying it undoes all it did,
whatever it holds (`unapplied`, `during`)."
  (bool (_declared propapp "retractable")))

(defn sequence? [propapp]
  "Whether PROPAPP is a sequence of the propapps it holds, which unapplying
unapplies one by one: one that can be opened up (`eseqprops`, `desc`)."
  (. (find-property propapp.name) sequence))

(defn inverts? [propapp]
  "Whether applying PROPAPP unapplies what it holds (`unapplied`)."
  (. (find-property propapp.name) inverts))

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
      (default-desc propapp)))

(defn default-desc [propapp]
  "PROPAPP's name and its plain arguments (not the propapps among them), as
a user would write them: what describes a property without a `:desc`."
  (setv prop (find-property propapp.name))
  (.join " " [prop.short-name
              #* (gfor [a r] (zip propapp.args (.render-args prop propapp.args))
                       :if (not (isinstance a Propapp))
                       (if (isinstance a str) a r))]))

;; The defproplist/defpropspec propapps being expanded, outermost first.
(setv _expanding (contextvars.ContextVar "consfig-expanding" :default #()))

(defn [contextlib.contextmanager] expanding-afresh []
  "A context in which no propapp is being expanded: another host's propspec
expanded while this one's is (see `consfig.model.host`) may use the same
properties without seeming to include itself."
  (setv token (.set _expanding #()))
  (try (yield) (finally (.reset _expanding token))))

(defn _expand [prop propapp]
  ;; A propapp that (through others) expands to itself would never end.
  (setv stack (.get _expanding))
  (when (in propapp stack)
    (setv names (lfor p (cut stack (.index stack propapp) None) (. (find-property p.name) short-name)))
    (raise (PropspecError (+ f"{prop.short-name} includes itself: "
                             (.join " -> " [#* names prop.short-name])))))
  (when (> (len stack) 200)
    (raise (PropspecError (+ f"{prop.short-name}: properties nested more than 200 deep: "
                             (.join " -> " (gfor p (cut stack -5 None) p.name)) " -> …"))))
  (setv token (.set _expanding (+ stack #(propapp))))
  (try
    (setv expansion (preprocess-propapp (call-subroutine prop "propspec" propapp)))
    (except [DeferredRead]
      ;; Computed without other hosts' hostattrs (see consfig.model.host).
      (setv expansion ((find-property "consfig.combinators.eseqprops"))))
    (finally (.reset _expanding token)))
  (when (and (= prop.declared-type "posix") (= (propapp-type expansion) "python"))
    (raise (PropspecError
             (+ f"{prop.short-name} is declared :posix but contains :python properties: "
                (.join ", " (gfor p (python-propapps expansion) (. (find-property p.name) short-name)))))))
  expansion)

(defn propapp-watches [propapp]
  "The watch specs of the resources PROPAPP manages (see
`consfig.model.watchspec`), checked; None when its property has no `:watch` (the
agent polls it at the host's interval)."
  (setv prop (find-property propapp.name))
  (when prop.watch
    (check-watch-specs (call-subroutine prop "watch" propapp) prop.short-name)))

(defn free-binders [x]
  "The names of the binders (`?addr`) in X, a propspec value, that nothing
in X binds: a property that declares a `:fact` (a `during`) binds, for its
other arguments, the binders of that fact (the pattern it waits on)."
  (cond (isinstance x Binder) #{x.name}
        (isinstance x Propapp)
        (do (setv prop (find-property x.name))
            (if prop.fact
                (do (setv fact (call-subroutine prop "fact" x))
                    (- (free-binders (lfor a x.args :if (is-not a fact) a)) (_binders fact)))
                (free-binders x.args)))
        (isinstance x #(list tuple)) (.union #{} #* (gfor a x (free-binders a)))
        (isinstance x dict) (free-binders (lfor [k v] (.items x) #(k v)))
        True #{}))

(defn _binders [x]
  ;; Every binder in X, bound or not.
  (cond (isinstance x Binder) #{x.name}
        (isinstance x Propapp) (_binders x.args)
        (isinstance x #(list tuple)) (.union #{} #* (gfor a x (_binders a)))
        (isinstance x dict) (_binders (lfor [k v] (.items x) #(k v)))
        True #{}))

(defn template? [x]
  "Whether X, a propspec value, has a binder that nothing in it binds: a
template, preprocessed once a match of the dataspace binds it
(consfig.model.dataspace)."
  (bool (free-binders x)))

(defn preprocess-propapp [propapp]
  "Run PROPAPP's `:preprocess`, expand defproplist/defpropspec properties into
the propspec they stand for, and do the same for every propapp inside.  A
template (it holds a binder) is left as it is, to be preprocessed when bound."
  (when (template? propapp) (return propapp))
  (setv prop (find-property propapp.name))
  (when prop.preprocess
    (setv propapp (Propapp propapp.name (call-subroutine prop "preprocess" propapp)
                           propapp.where))
    (.bind prop propapp.args))
  (when prop.watch
    ;; A watch on a relative path is a mistake in the consfig: said now,
    ;; where it was written, not by the agent on the target.
    (try (propapp-watches propapp)
         (except [e PropspecError]
           (raise (PropspecError e.message (or e.where (site-where propapp))) :from e))))
  (when prop.propspec
    (setv desc (propapp-desc propapp))
    (setv expansion (_expand prop propapp))
    (when (site-where propapp) (_inherit-where expansion propapp.where))
    (return ((find-property "consfig.combinators.desc") desc expansion)))
  (Propapp propapp.name
           (lfor a propapp.args
                 (cond (isinstance a Propapp) (preprocess-propapp a)
                       (and (isinstance a list) (any (gfor x a (isinstance x Propapp))))
                       (lfor x a (if (isinstance x Propapp) (preprocess-propapp x) x))
                       True a))
           propapp.where))

;; The propapp whose :hostattrs is running: what a declaration of
;; prerequisite data names as the property that needs it.
(setv hostattrs-of (contextvars.ContextVar "consfig-hostattrs-of" :default None))

(defn propapp-hostattrs [propapp]
  "Run PROPAPP's `:hostattrs`; by default, that of each propapp it contains.
A template (it holds a binder) has none: what it will be is not known yet."
  (when (template? propapp) (return))
  (setv prop (find-property propapp.name))
  (if prop.hostattrs
      (do (setv token (.set hostattrs-of propapp))
          (try (_leaving-out-deferred prop propapp)
               (finally (.reset hostattrs-of token))))
      (for [p (propapps-in propapp.args)]
        (propapp-hostattrs p))))

(defn _leaving-out-deferred [prop propapp]
  ;; While a host's hostattrs are computed without other hosts' (see
  ;; consfig.model.host), a property that reads them is left out, with whatever
  ;; it pushed before it read.  push-hostattr replaces a hostattr's list,
  ;; never changes it in place, so a copy of the dict is a snapshot.
  (setv host (.get current-host None)
        saved (when host (dict host.hostattrs)))
  (try
    (call-subroutine prop "hostattrs" propapp)
    (except [DeferredRead]
      (when host (setv host.hostattrs saved)))))

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
the last parameter receives the trailing forms as an unevaluated propspec.

Options: `(:simulates True)`, its :apply asks `checking?` and changes
nothing in check mode; `(:action \"REASON\")`, it is an action by nature
(it runs something each time, as `service.restarted` does), so no :check
can say that it holds: REASON, one line, says why."
  (setv #(doc subs options invariants) (_parse-defprop-body name body)
        module (stored-name _hy_compiler.module.__name__))
  `(do
     (setv ~name (hy.I.consfig/model/property.define-property
                   ~(+ module "." (str name))
                   ~(if (isinstance type Keyword) type.name type)
                   (fn ~params None)
                   :doc ~doc
                   :where ~(definition-where _hy_compiler)
                   :invariants ~(invariants-form params invariants)
                   ~@(sum (gfor [k form] subs [(hy.models.Keyword k) (_subroutine-form params form)]) [])
                   ~@(sum (gfor [k v] options [(hy.models.Keyword k) v]) [])))
     ~(dotted-macro-form name module doc)))

(defn definition-where [compiler [form None]]
  "file:line of FORM (by default the form COMPILER is expanding), for
messages.  A module of consfig's own is placed in the package
(`consfig/props/disk.hy`), wherever its file is and whoever compiles it:
its bytecode is installed, and shipped in bundles and images, and must
carry no path of the machine that compiled it.  Any other file (a site's)
is given relative to the working directory when it is below it."
  (setv filename (or compiler.filename "<input>")
        line (getattr (if (is form None) compiler.this form) "start_line" None)
        parts (.split compiler.module-name "."))
  (cond (and (= (get parts 0) "consfig") (> (len parts) 1) (os.path.isabs filename))
        (setv base (os.path.basename filename)
              filename (.join "/" (+ (if (= (get (os.path.splitext base) 0) (get parts -1))
                                         (cut parts -1)
                                         parts)
                                     [base])))
        (and (os.path.isabs filename) (.startswith filename (+ (os.getcwd) os.sep)))
        (setv filename (os.path.relpath filename)))
  (if line f"{filename}:{line}" filename))

(defn invariants-form [params invariants]
  "The code of a property's INVARIANTS, each `(:invariant CONDITION MESSAGE)`,
both forms seeing the parameters PARAMS: for `defprop`'s expansion."
  `[~@(gfor form invariants
            (do (when (!= (len form) 3)
                  (raise (PropspecError f"(:invariant CONDITION MESSAGE) takes two forms, got {(hy.repr form)}")))
                `#((fn ~params ~(get form 1)) (fn ~params ~(get form 2)))))])

(defn dotted-macro-form [name module [doc None]]
  "The `NAME*` macro a definer makes for the property NAME of MODULE: its
dotted form, whose last parameter takes the trailing forms."
  ;; A call that registers one shared closure, not a `defmacro` each: Hy
  ;; compiles and evaluates a macro's definition as it compiles the module,
  ;; some 40 ms a property, paid again after every edit of a site.
  `(eval-and-compile
     (hy.I.consfig/model/propspec.install-dotted-macro (globals) ~module ~(str name) ~doc)))

(defn _parse-defprop-body [name body]
  (setv body (list body)
        doc None
        subs []
        options []
        invariants [])
  (when (and body (isinstance (get body 0) hy.models.String))
    (setv doc (str (.pop body 0))))
  (for [form body]
    (when (not (and (isinstance form hy.models.Expression) form
                    (isinstance (get form 0) Keyword)))
      (raise (PropspecError f"defprop {name}: expected (:subroutine …) forms, got {(hy.repr form)}")))
    (setv k (. (get form 0) name))
    (cond (in k #(#* SUBROUTINES #* DECLARATIONS)) (.append subs #(k form))
          (= k "invariant") (.append invariants form)
          (in k _OPTIONS) (.append options #(k (get form 1)))
          (= k "unwatched")
          (do (when (not (and (= (len form) 2) (isinstance (get form 1) hy.models.String)
                              (.strip (get form 1))))
                (raise (PropspecError (+ f"defprop {name}: (:unwatched REASON) takes a string "
                                         f"saying why nothing is watched, got {(hy.repr form)}"))))
              (.append options #(k (get form 1))))
          True (raise (PropspecError (+ f"defprop {name}: unknown subroutine :{k}; "
                                        "use :desc :preprocess :hostattrs :check :apply :unapply :watch :invariant, "
                                        "or the options :announce :opaque-type :simulates :action :unwatched")))))
  #(doc subs options invariants))

(export :objects [Propapp Property properties define-property find-property forget-properties-of
                  STORED-NAMES stored-name module-named
                  dotted-macro-form
                  did-you-mean note-definition defining definition-where
                  call-subroutine propapps-in propapp-type python-propapps
                  children meta-of trigger-of fact-of handler-of retractable? sequence? inverts?
                  propapp-desc default-desc propapp-watches can-check? preprocess-propapp propapp-hostattrs hostattrs-of
                  free-binders template?
                  site-where]
        :macros [defprop])
