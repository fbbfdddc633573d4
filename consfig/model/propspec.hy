"Propspecs: walking unevaluated propspecs into code, dotted propapps, and
propspecs as data (printed as Hy, read back, sent as JSON).

An unevaluated propspec is a body of forms such as

  (file.has-content \"/etc/motd\" \"hi\\n\")
  (chroot.os-bootstrapped* {} \"/srv/chroot/sid\" (os.debian-unstable :amd64))

The walker turns each form into a call of `apply-form`, which looks the head
up at run time: a property gets its arguments Lisp-style, keywords and all;
anything else is an ordinary function call.  A head ending in `*` is the
dotted form: the trailing arguments become the property's last argument,
wrapped in `eseqprops`.  Because the lookup happens at run time, a consfig
need not `require` a property module to use its dotted forms, and an unknown
property or a wrong argument is reported with the file and line of the form."

(import base64
        hashlib
        json
        hy.errors
        builtins
        inspect
        hy.models [Expression Keyword List Symbol String]
        consfig.errors [PropspecError]
        consfig.types [Binder DecimalSpelt Wildcard wildcard]
        consfig.model.property [Property Propapp find-property did-you-mean definition-where
                                module-named stored-name])

;; Forms whose arguments may hold propapps and are otherwise ordinary code.
(setv _WALK-INTO #{"if" "when" "unless" "cond" "do"})
(setv _DEPLOYS #{"deploys" "deploys-these"})

(defn dotted->name [form]
  "The name a symbol form stands for: `file.has-content` reads as the form
`(. file has-content)`; return \"file.has-content\", or None for anything
that is not a plain (possibly dotted) name."
  (cond (isinstance form Symbol) (str form)
        (and (isinstance form Expression)
             (>= (len form) 3)
             (= (get form 0) (Symbol "."))
             (all (gfor x (cut form 1 None) (isinstance x Symbol)))
             (!= (get form 1) (Symbol "None")))
        (.join "." (map str (cut form 1 None)))
        True None))

(defn dotted-head? [name]
  (and (.endswith name "*") (.strip name "*")))

(defn _macro? [compiler name]
  (setv m (hy.mangle name))
  (or (.startswith name "hy.R.")
      (in (.join "." (map hy.mangle (.split name "."))) (getattr compiler.module "_hy_macros" {}))
      (in m (getattr compiler.module "_hy_macros" {}))
      (in m (getattr builtins "_hy_macros" {}))
      (in m (or compiler.extra-macros {}))
      (any (gfor s compiler.local-state-stack (in m (.get s "macros" {}))))))

(defn _unpack? [form]
  (and (isinstance form Expression) form
       (in (get form 0) [(Symbol "unpack-iterable") (Symbol "unpack-mapping")])))

(defn _where [compiler form]
  (definition-where compiler form))

(defn _pattern-symbol [form]
  ;; `?addr` and `_` as an argument of a walked form: a binder and the
  ;; wildcard of a dataspace pattern (consfig.model.dataspace), as data.
  (setv name (str form))
  (cond (= name "_") `hy.I.consfig/types.wildcard
        (and (.startswith name "?") (> (len name) 1))
        `(hy.I.consfig/types.Binder ~(cut name 1 None))))

(defn walk-form [form compiler]
  "Code that builds what FORM, a form of an unevaluated propspec, stands for."
  (cond
    (and (isinstance form Symbol) (_pattern-symbol form))
    (_pattern-symbol form)
    (and (isinstance form Expression) form (dotted->name (get form 0)))
    (_walk-expression form compiler)
    (isinstance form List)
    (.replace (List (lfor x form (walk-form x compiler))) form)
    True form))

(defn walk-body [forms compiler]
  (lfor f forms (walk-form f compiler)))

(defn _walk-expression [form compiler]
  (setv head (dotted->name (get form 0))
        args (cut form 1 None))
  (cond
    (in head #("quote" "quasiquote")) form
    (dotted-head? head) (_apply-form-code form compiler (cut head 0 -1) True)
    (in head _WALK-INTO)
    (.replace (Expression [(get form 0) #* (walk-body args compiler)]) form)
    (_macro? compiler head) form
    (any (map _unpack? args)) form
    True (_apply-form-code form compiler head False)))

(defn _hostname-arg [name i arg]
  ;; `(deploys* :ssh web.example.com …)`: a dotted host symbol names a host.
  (setv dotted (dotted->name arg))
  (if (and (= i 1)
           (in (get (.split name ".") -1) _DEPLOYS)
           dotted
           (in "." dotted))
      (String dotted)
      arg))

(defclass LiteralKeyword []
  "A keyword written as an argument of a walked form.  It passes to a
property as the keyword itself (Lisp-style); to an ordinary function, as a
keyword-argument marker.  A keyword that is a *value* (`:daily` held in a
variable) stays a value either way."
  (setv __slots__ #("keyword"))
  (defn __init__ [self name]
    (setv self.keyword (Keyword name))))

(defn _walk-args [args compiler]
  (for [[k v] (zip args (cut args 1 None))]
    (check-mode-spelling k v (_where compiler v)))
  (lfor a args
        (cond (isinstance a Keyword) `(hy.I.consfig/model/propspec.LiteralKeyword ~a.name)
              ;; Marked, for a `file-mode` parameter to refuse (see
              ;; `consfig.types.DecimalSpelt`); `apply-form` unmarks it.
              (_octal-spelt? a) `(hy.I.consfig/types.DecimalSpelt ~a)
              True (walk-form a compiler))))

(defn _octal-spelt? [value]
  ;; VALUE, a literal as read, is an integer model spanning just its
  ;; decimal digits, three or four octal ones: `644`, or `0755`, which
  ;; reads as 755 too (one leading zero still spells decimal).  Only the
  ;; spelling can tell it from a right one (0o644 is 420, whose digits are
  ;; octal too).
  (when (not (and (isinstance value hy.models.Integer)
                  (is-not (getattr value "start_column" None) None)))
    (return False))
  ;; A model prints as its repr: the digits are those of the int.
  (setv digits (str (int value))
        width (- value.end-column value.start-column -1))
  (and (<= (len digits) width (+ (len digits) 1))
       (<= 3 (len digits) 4)
       (all (gfor c digits (in c "01234567")))))

(defn _unmarked [args]
  (lfor a args (if (isinstance a DecimalSpelt) (int a) a)))

(defn check-mode-spelling [key value where]
  "Refuse `:mode 644`: a mode written as a decimal literal of octal digits,
which Python reads as 644 (0o1204), the classic slip for 0o644: KEY a
keyword ending in `mode`, VALUE an integer model spelt so.  (Given to a
parameter of another name, or positionally, such a literal is refused by
the `file-mode` type: `consfig.types.DecimalSpelt`.)"
  (when (and (isinstance key Keyword) (.endswith key.name "mode") (_octal-spelt? value))
    (setv digits (str (int value)))
    (raise (PropspecError (+ f":{key.name} {digits} is the decimal number {digits} "
                             f"(mode {(oct (int value))}), seldom what is meant: write "
                             f"the octal mode with 0o (0o{digits})")
                          where))))

(defn _apply-form-code [form compiler name dotted]
  (setv args (_walk-args (lfor [i a] (enumerate (cut form 1 None)) (_hostname-arg name i a))
                         compiler))
  (.replace
    `(hy.I.consfig/model/propspec.apply-form
       (fn [] ~(if dotted (hy.read name) (get form 0))) ~name ~(_where compiler form) ~dotted
       [~@args])
    form))

(defn dotted-expansion [compiler module name args]
  "The expansion of a `NAME*` macro defined by defprop & co. in MODULE."
  (setv this (or compiler.this (Expression [])))
  `(hy.I.consfig/model/propspec.apply-form
     (fn [] (hy.I ~(module-named module))) ~(+ module "." name) ~(_where compiler this) True
     [~@(_walk-args args compiler)]
     ~name))

(defn install-dotted-macro [namespace module name [doc None]]
  "Register in NAMESPACE (a module's globals) the macro `NAME*`, the dotted
form of the property NAME of MODULE: its last parameter takes the trailing
forms as a propspec."
  (defn dotted [_hy_compiler #* args]
    (dotted-expansion _hy_compiler module name args))
  (setv star (hy.mangle (+ name "*"))
        dotted.__name__ star
        dotted.__qualname__ star
        dotted.__module__ module
        dotted.__doc__ (+ f"The dotted form of {name}: its last parameter takes the trailing forms
as a propspec.  `(help {name})` shows its parameters and their types."
                          (if doc f"\n\n{doc}" "")))
  (setv (get (.setdefault namespace "_hy_macros" {}) star) dotted)
  None)

(defn _unknown-message [name e head]
  (setv first-part (get (.split name ".") 0)
        near (_near-name name head))
  (+ f"unknown property or function {name} ({e})"
     near
     (if (and (isinstance e NameError) (in "." name))
         (+ f"\n  did you forget (use-props consfig.props [{first-part}])"
            f" or (import … :as {first-part})?")
         "")))

(defn _near-name [name head]
  ;; `file.symlinkd`: the properties of module `file`, as the consfig sees it.
  (setv #(module-part _ last) (.rpartition name "."))
  (setv candidates (set (gfor p (.values hy.I.consfig/model/property.properties) p.short-name)))
  (when module-part
    (try
      (setv module (hy.eval (hy.read module-part) (. head __globals__)))
      (.update candidates (gfor [k v] (.items (vars module)) :if (isinstance v Property)
                                (+ module-part "." (hy.unmangle k))))
      (except [Exception] None)))
  (did-you-mean name candidates))

(defn apply-form [head name where dotted args [attr None]]
  "Evaluate one walked form: call the property or function HEAD returns."
  (try
    (setv f (head))
    (when attr (setv f (getattr f (hy.mangle attr))))
    (except [e [NameError AttributeError]]
      (raise (PropspecError (_unknown-message name e head) where))))
  (try
    (setv made (cond (isinstance f Property)
                     (do (setv args (lfor a args (if (isinstance a LiteralKeyword) a.keyword a)))
                         (if dotted (dotted-propapp f args) (f #* args)))
                     dotted (raise (PropspecError f"{name}* is a dotted propapp, but {name} is not a property"))
                     True (_call-with-keywords f (_unmarked args))))
    (when (isinstance made Propapp)
      (setv made.args (tuple (_unmarked made.args)))
      (when (is made.where None)
        (setv made.where where)))
    made
    (except [e PropspecError]
      (when (is e.where None) (setv e.where where))
      (raise))))

(defn _call-with-keywords [f args]
  (setv pos [] kw {} i 0)
  (while (< i (len args))
    (setv a (get args i))
    (if (isinstance a LiteralKeyword)
        (do (when (= (+ i 1) (len args))
              (raise (PropspecError f"keyword {(hy.repr a.keyword)} needs a value")))
            (setv (get kw (hy.mangle a.keyword.name)) (get args (+ i 1)))
            (+= i 2))
        (do (.append pos a) (+= i 1))))
  (f #* pos #** kw))

(defn _combined-of [combinator propapps]
  (combinator #* (gfor p propapps :if (is-not p None) p)))

(defn eseqprops-of [propapps]
  "An `eseqprops` of PROPAPPS, leaving out None (from a false `when`)."
  (_combined-of (find-property "consfig.combinators.eseqprops") propapps))

(defn seqprops-of [propapps]
  "A `seqprops` of PROPAPPS, leaving out None: a defhost's body.  A call,
not an expansion of its own: Hy walks every macro's expansion again at each
enclosing form, and a site's compile time is the author's wait after each
edit."
  (_combined-of (find-property "consfig.combinators.seqprops") propapps))

(defn dotted-propapp [prop args]
  "Apply PROP dotted: its last positional parameter receives an `eseqprops`
of the arguments from there on."
  (setv n (len (lfor p (.values prop.signature.parameters)
                     :if (= p.kind inspect.Parameter.POSITIONAL_OR_KEYWORD) p)))
  (when (= n 0)
    (raise (PropspecError f"{prop.short-name} takes no positional parameter, so it has no dotted form")))
  (setv lead (cut args 0 (- n 1)))
  (when (< (len lead) (- n 1))
    (raise (PropspecError (+ f"{prop.short-name}*: too few arguments before the propspec\n"
                             f"  it takes {prop.lambda-list}"))))
  (prop #* lead (eseqprops-of (cut args (- n 1) None))))

;; Propspecs as data

(defn propspec->string [propspec]
  "PROPSPEC printed as Hy; `read-propspec` reads it back to an equal value."
  (hy.repr propspec))

(defn propspec->tree [propspec [indent "  "]]
  "PROPSPEC printed as Hy for people: one propapp per line, the propapps
inside another indented under it.  It reads back equal, as
`propspec->string`'s one line does."
  (.join "\n" (_tree-lines propspec "" indent)))

(defn _tree-lines [propapp pad indent]
  ;; The head line holds the name and the plain arguments before the first
  ;; propapp; each later argument gets a line (or a subtree) of its own.
  (setv args (list propapp.args)
        first (next (gfor [i a] (enumerate args) :if (isinstance a Propapp) i) None))
  (when (is first None)
    (return [(+ pad (hy.repr propapp))]))
  (setv lines [(+ pad "(" (.join " " [propapp.name #* (map hy.repr (cut args first))]))])
  (for [a (cut args first None)]
    (.extend lines (if (isinstance a Propapp)
                       (_tree-lines a (+ pad indent) indent)
                       [(+ pad indent (hy.repr a))])))
  (setv (get lines -1) (+ (get lines -1) ")"))
  lines)

(defn _resolve [name namespace]
  ;; A name as a user writes it: `file.has-content`, `eseqprops`,
  ;; `mysite.web-base`, or fully qualified.
  (setv candidates [])
  (when namespace
    (setv parts (.split name ".")
          root (get parts 0))
    (when (in (hy.mangle root) namespace)
      (setv obj (get namespace (hy.mangle root)))
      (try
        (for [p (cut parts 1 None)] (setv obj (getattr obj (hy.mangle p))))
        (when (isinstance obj Property) (return obj))
        (except [AttributeError] None))))
  (for [qualified [name f"consfig.props.{name}" f"consfig.combinators.{name}"
                   f"consfig.meta.{name}"]]
    (try (return (find-property qualified))
         (except [PropspecError] None)))
  (raise (PropspecError (+ f"unknown property {name}" (did-you-mean name)))))

(defn form->propspec [form [namespace None]]
  "The propspec a Hy FORM (as read, or quasiquoted) stands for.  Heads are
resolved as qualified names, or through NAMESPACE (a module's globals)."
  (cond
    (isinstance form Expression)
    (do (when (not (and form (dotted->name (get form 0))))
          (raise (PropspecError f"not a propapp: {(hy.repr form)}")))
        (setv head (dotted->name (get form 0))
              args (lfor a (cut form 1 None)
                         (if (_octal-spelt? a) (DecimalSpelt a) (form->propspec a namespace)))
              where (_form-where form))
        (for [[k v] (zip (cut form 1 None) (cut form 2 None))]
          (check-mode-spelling k v (_form-where v)))
        (try
          (setv made (if (dotted-head? head)
                         (dotted-propapp (_resolve (cut head 0 -1) namespace) args)
                         ((_resolve head namespace) #* args)))
          (when (isinstance made Propapp)
            (setv made.args (tuple (_unmarked made.args))))
          made
          (except [e PropspecError]
            (when (is e.where None) (setv e.where where))
            (raise))))
    (isinstance form Keyword) form
    (isinstance form Symbol)
    (cond (= form (Symbol "None")) None
          (= form (Symbol "True")) True
          (= form (Symbol "False")) False
          (= form (Symbol "_")) wildcard
          (and (.startswith form "?") (> (len form) 1)) (Binder (cut (str form) 1 None))
          True (raise (PropspecError f"a propspec holds data, not the symbol {form}"
                                     (_form-where form))))
    (isinstance form hy.models.String) (str form)
    (isinstance form hy.models.Bytes) (bytes form)
    (isinstance form hy.models.Integer) (int form)
    (isinstance form hy.models.Float) (float form)
    (isinstance form hy.models.Complex) (complex form)
    (isinstance form hy.models.FString)
    (raise (PropspecError "an f-string is code, not data, in a propspec" (_form-where form)))
    (isinstance form List) (lfor x form (form->propspec x namespace))
    (isinstance form hy.models.Tuple) (tuple (gfor x form (form->propspec x namespace)))
    (isinstance form hy.models.Dict)
    (dfor [k v] (zip (cut form 0 None 2) (cut form 1 None 2))
          (form->propspec k namespace) (form->propspec v namespace))
    (isinstance form hy.models.Object)
    (raise (PropspecError f"not propspec data: {(hy.repr form)}" (_form-where form)))
    True form))

(defn _form-where [form]
  (setv line (getattr form "start_line" None))
  (when line f"line {line}"))

(defn read-propspec-forms [text]
  "The forms of the Hy TEXT, or a `PropspecError` a person can act on."
  (try
    (list (hy.read-many text))
    (except [e hy.errors.HySyntaxError]
      (raise (PropspecError (+ "cannot read the propspec: "
                               (if (.startswith (str e.msg) "Premature end of input")
                                   "a parenthesis is never closed"
                                   (str e.msg))))))))

(defn read-propspec [text [namespace None]]
  "Read a propspec printed as Hy (or written by a user on the command line)."
  (setv forms (read-propspec-forms text))
  (when (!= (len forms) 1)
    (raise (PropspecError f"expected one propspec form, found {(len forms)}")))
  (form->propspec (get forms 0) namespace))

(defn ->propspec [x [namespace None]]
  "Coerce what a defpropspec body returned to a propspec."
  (cond (isinstance x Propapp) x
        (is x None) (eseqprops-of [])
        (isinstance x Expression) (form->propspec x namespace)
        (isinstance x #(list tuple)) (eseqprops-of (lfor p x (->propspec p namespace)))
        True (raise (PropspecError f"a defpropspec returned {(hy.repr x)}, not a propspec"))))

(defn propspec-digest [propspec]
  "A SHA-256 (hex) of PROPSPEC as data: the same for equal propspecs, on the
controller and on a target that read it back."
  (.hexdigest (hashlib.sha256 (.encode (json.dumps (propspec->data propspec) :sort-keys True
                                                   :separators #("," ":"))
                                       "utf-8"))))

(defn propspec->data [x]
  "PROPSPEC as JSON-compatible data: lists, string-keyed dicts, strings,
numbers, booleans and None, with propapps, keywords, tuples, bytes and dicts
tagged so that `data->propspec` restores them exactly."
  (cond
    (isinstance x Propapp) {"propapp" x.name "args" (lfor a x.args (propspec->data a))}
    (isinstance x Keyword) {"keyword" x.name}
    (isinstance x Binder) {"binder" x.name}
    (isinstance x Wildcard) {"wildcard" True}
    (isinstance x bool) x
    (isinstance x #(str int float)) x
    (is x None) x
    (isinstance x list) (lfor a x (propspec->data a))
    (isinstance x tuple) {"tuple" (lfor a x (propspec->data a))}
    (isinstance x bytes) {"bytes" (.decode (base64.b64encode x) "ascii")}
    (isinstance x dict) {"dict" (lfor [k v] (.items x) [(propspec->data k) (propspec->data v)])}
    True (raise (PropspecError f"{(hy.repr x)} ({(. (type x) __name__)}) cannot be part of a propspec"))))

(defn _checked-propapp [name args]
  ;; A propspec arriving over the wire or from an image is checked as one
  ;; built in a consfig is, before anything is applied.
  (.check-args (find-property name) args)
  (Propapp name args))

(defn data->propspec [x]
  "The inverse of `propspec->data`."
  (cond
    (isinstance x list) (lfor a x (data->propspec a))
    (isinstance x dict)
    (cond (in "propapp" x) (_checked-propapp (get x "propapp") (lfor a (get x "args") (data->propspec a)))
          (in "keyword" x) (Keyword (get x "keyword"))
          (and (in "binder" x) (isinstance (get x "binder") str)) (Binder (get x "binder"))
          (in "wildcard" x) wildcard
          (in "tuple" x) (tuple (gfor a (get x "tuple") (data->propspec a)))
          (in "bytes" x) (base64.b64decode (get x "bytes"))
          (in "dict" x) (dfor [k v] (get x "dict") (data->propspec k) (data->propspec v))
          True (raise (PropspecError f"malformed propspec data: {x !r}")))
    True x))

;; Macros

(defn _parse-list-body [kind name body]
  ;; Docstring, then (:desc …) and (:invariant …), then the propspec forms.
  (setv body (list body) doc None desc None invariants [])
  (when (and body (isinstance (get body 0) String) (> (len body) 1))
    (setv doc (str (.pop body 0))))
  (while (and body (isinstance (get body 0) Expression) (get body 0)
              (isinstance (get (get body 0) 0) Keyword))
    (setv form (.pop body 0)
          k (. (get form 0) name))
    (cond (= k "desc") (setv desc form)
          (= k "invariant") (.append invariants form)
          True (raise (PropspecError f"{kind} {name}: only (:desc …) and (:invariant …) may precede the propspec, not :{k}"))))
  #(doc desc invariants body))

(defn _propspec-property-code [compiler kind name args propspec-code]
  ;; ARGS: an optional property type (`:posix`), the parameters, the body.
  (setv args (list args)
        type None)
  (when (and args (isinstance (get args 0) Keyword))
    (setv type (.pop args 0)))
  (when (not (and args (isinstance (get args 0) List)))
    (raise (PropspecError f"{kind} {name}: expected [parameters] after the name{(if type " and type" "")}")))
  (setv params (.pop args 0)
        #(doc desc invariants forms) (_parse-list-body kind name args)
        module (stored-name compiler.module.__name__))
  `(do
     (setv ~name (hy.I.consfig/model/property.define-property
                   ~(+ module "." (str name)) "posix" (fn ~params None)
                   :doc ~doc
                   :where ~(hy.I.consfig/model/property.definition-where compiler)
                   :declared-type ~(when type type.name)
                   :invariants ~(hy.I.consfig/model/property.invariants-form params invariants)
                   ~@(if desc [':desc `(fn ~params ~@(cut desc 1 None))] [])
                   :propspec (fn ~params ~(propspec-code forms))))
     ~(hy.I.consfig/model/property.dotted-macro-form name module doc)))

(defmacro defproplist [_hy_compiler name #* args]
  "Define property NAME as a list of other properties, applied in order and
stopping at the first failure (an implicit `eseqprops`).  An optional
property type (`:posix` or `:python`) may precede the parameters; `:posix`
is checked against the properties the list expands to:

  (defproplist web-base :posix [#^ line site]
    \"Base web server.\"
    (apt.installed \"nginx\")
    (file.has-content f\"/var/www/{site}/index.html\" \"hello\\n\"))"
  (_propspec-property-code _hy_compiler "defproplist" name args
    (fn [forms]
      `(hy.I.consfig/model/propspec.eseqprops-of [~@(walk-body forms _hy_compiler)]))))

(defmacro defpropspec [_hy_compiler name #* args]
  "Define property NAME whose body is code returning a propspec, such as a
quasiquoted form; an optional property type may precede the parameters:

  (defpropspec motd :posix [#^ (list-of line) lines]
    `(eseqprops ~@(lfor l lines `(file.contains-lines \"/etc/motd\" ~l))))"
  (_propspec-property-code _hy_compiler "defpropspec" name args
    (fn [forms]
      `(hy.I.consfig/model/propspec.->propspec (do ~@forms) (globals)))))

(defmacro props [_hy_compiler #* forms]
  "Build a propspec from an unevaluated one inside ordinary code:
`(props seqprops (a) (b))`, or `(props (a) (b))` for an `eseqprops`."
  (if (and forms (dotted->name (get forms 0)))
      (walk-form (.replace (Expression forms) (get forms 0)) _hy_compiler)
      `(hy.I.consfig/model/propspec.eseqprops-of [~@(walk-body forms _hy_compiler)])))

(defmacro propapp [_hy_compiler form]
  "Build one propapp from an unevaluated propapp FORM (keywords, dotted
forms and all)."
  (walk-form form _hy_compiler))

(defmacro use-props [package names]
  "Import and require each property module of PACKAGE under its short name:
`(use-props consfig.props [file apt])` makes `file.has-content` and its dotted
macro `file.has-content*` available."
  (setv package (dotted->name package))
  `(do ~@(gfor n names
               `(do (import ~(hy.read (+ package "." (str n))) :as ~n)
                    (require ~(hy.read (+ package "." (str n))) :as ~n)))))

(export :objects [propspec-digest seqprops-of dotted->name walk-form walk-body apply-form dotted-expansion
                  install-dotted-macro dotted-propapp
                  eseqprops-of propspec->string propspec->tree read-propspec
                  read-propspec-forms form->propspec
                  ->propspec propspec->data data->propspec]
        :macros [defproplist defpropspec props propapp use-props])
