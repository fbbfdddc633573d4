"Assertions: the typed records hosts publish in the site's dataspace, and
the patterns that match them.

  (defassertion web-backend [#^ hostname host #^ ip-address addr #^ port port]
    \"A web server that takes requests for the site.\")

`web-backend` is then a record type.  Applied to every field,
`(web-backend \"web1.example.org\" \"10.0.0.5\" 8080)`, it is a record: a
`Propapp` of the type, so it prints as Hy, reads back, travels as JSON, and
its fields are checked against their types where it is written.  Applied to
some fields, with binders (`?addr`), the wildcard (`_`), literals and
nested patterns, it is a pattern: `(web-backend :addr ?addr :port 8080)`;
fields left out match anything.  Fields are typed like a `defprop`'s
parameters; a field may have another record type, and its pattern nests.

What publishes a record (`dataspace.asserted`) and what reacts to it
(`dataspace.observed`) are in consfig.props.dataspace; how records travel
through etcd in consfig.apply.dataspace; docs/dataspace.md."

(import json
        os
        consfig.errors [PropspecError]
        consfig.model.property [Propapp Property find-property note-definition properties
                                definition-where defining site-where stored-name]
        consfig.types [Type Binder Wildcard annotation-type show]
        consfig.model.propspec [propspec->data data->propspec]
        consfig.util [keyword-name sha256-hex])

(defclass AssertionType [Property]
  "A record type of the dataspace: a name and typed fields.  Its
applications are records (every field given, no binder) and patterns."
  (setv kind "assertion")

  (defn __init__ [self name lambda-list * [doc None] [where None]]
    (.__init__ (super) name "posix" lambda-list :doc doc :where where
               :hostattrs _refuse-as-property :announce False)
    (setv self.fields (lfor p (.values self.signature.parameters) p.name)
          self.record (Type (hy.unmangle (get (.split name ".") -1))
                            f"a {self.short-name} record or pattern"
                            (fn [v] (and (isinstance v Propapp) (= v.name name))))))

  (defn [property] lambda-list [self]
    ;; Its fields as `defassertion` wrote them: every field may be left
    ;; out of a pattern, which is not a default worth showing.
    (+ "[" (.join " " (gfor p (.values self.signature.parameters)
                            f"#^ {(repr (annotation-type p.annotation))} {(hy.unmangle p.name)}"))
       "]"))

  (defn __repr__ [self]
    f"<assertion {self.short-name} {self.lambda-list}>"))

(defn _refuse-as-property [#* _ #** __]
  (raise (PropspecError "a record of the dataspace is not a property: publish it with "
                        "(dataspace.asserted RECORD) or match it with (dataspace.observed PATTERN)")))

(defn field-type [t]
  "The parameter type of a field annotated T: T itself, or the type of the
records of T when T is an `AssertionType` (a nested record)."
  (cond (isinstance t AssertionType) t.record
        (isinstance t Type) t
        True (raise (PropspecError f"{(show t)} is not a parameter type"))))

(defn define-assertion [name lambda-list #** kwargs]
  "Make an `AssertionType` and register it, as a property is, under NAME."
  (setv a (AssertionType name lambda-list #** kwargs))
  (note-definition f"assertion {a.short-name}" a.where)
  (setv (get properties name) a)
  a)

(defn assertion-type? [x]
  (isinstance x AssertionType))

(defn _type-of [propapp]
  (setv t (.get properties propapp.name))
  (when (isinstance t AssertionType) t))

(defn fields-of [propapp]
  "The fields of the record or pattern PROPAPP: field name -> value, the
wildcard for a field left out."
  (setv t (_type-of propapp)
        #(args kwargs) (.bind t propapp.args)
        bound (.bind t.signature #* args #** kwargs))
  (.apply-defaults bound)
  (dict bound.arguments))

(defn pattern-variables [x]
  "The binders and wildcards in X, a propspec value, at any depth."
  (cond (isinstance x #(Binder Wildcard)) [x]
        (isinstance x Propapp) (sum (gfor a x.args (pattern-variables a)) [])
        (isinstance x #(list tuple)) (sum (gfor a x (pattern-variables a)) [])
        (isinstance x dict) (sum (gfor [k v] (.items x) (+ (pattern-variables k) (pattern-variables v))) [])
        True []))

(defn binder-names [x]
  "The names of the binders in X, in order of appearance, each once."
  (setv out [])
  (for [v (pattern-variables x)]
    (when (and (isinstance v Binder) (not-in v.name out))
      (.append out v.name)))
  out)

(defn record? [x]
  "Whether X is a record: an application of a record type that gives every
field (nested records too) and holds no binder or wildcard."
  (and (isinstance x Propapp)
       (is-not (_type-of x) None)
       (not (pattern-variables x))
       (all (gfor v (.values (fields-of x))
                  (or (not (isinstance v Propapp)) (record? v))))))

(setv record (Type "record" "a record of the dataspace, every field given (see defassertion)"
                   record?)
      pattern (Type "pattern"
                    "a pattern of the dataspace: a record type applied to binders (?x), _ and values"
                    (fn [v] (and (isinstance v Propapp) (is-not (_type-of v) None)))))

(defn canonical [rec]
  "REC, a record, with its fields positional and in order, nested records too:
the one spelling that is stored and compared."
  (setv t (_type-of rec)
        fs (fields-of rec))
  (Propapp rec.name (lfor f t.fields (do (setv v (get fs f))
                                         (if (isinstance v Propapp) (canonical v) v)))))

(defn match-record [pat rec [bindings None]]
  "The bindings (binder name -> value) under which the pattern PAT matches
the record REC, or None when it does not.  A binder met twice must see equal
values."
  (setv bindings (if (is bindings None) {} bindings))
  (when (!= pat.name rec.name) (return None))
  (setv rf (fields-of rec))
  (for [[f p] (.items (fields-of pat))]
    (setv v (get rf f))
    (cond (isinstance p Wildcard) None
          (isinstance p Binder)
          (if (in p.name bindings)
              (when (!= (get bindings p.name) v) (return None))
              (setv (get bindings p.name) v))
          (isinstance p Propapp)
          (when (or (not (isinstance v Propapp)) (is (match-record p v bindings) None))
            (return None))
          (!= p v) (return None)))
  bindings)

(defn substitute [x bindings]
  "X, a propspec value, with each binder replaced by its value in BINDINGS;
every propapp rebuilt and so checked against its property's types."
  (cond (isinstance x Binder) (get bindings x.name)
        (isinstance x Propapp)
        (do (setv args (lfor a x.args (substitute a bindings))
                  prop (find-property x.name))
            (.check-args prop args)
            (Propapp x.name args x.where))
        (isinstance x list) (lfor a x (substitute a bindings))
        (isinstance x tuple) (tuple (gfor a x (substitute a bindings)))
        (isinstance x dict) (dfor [k v] (.items x) (substitute k bindings) (substitute v bindings))
        True x))

(defn check-pattern [pat]
  "Refuse what PAT, a pattern, cannot be: a record type applied to values
of the fields' types, binders, `_` and nested patterns of the fields' own
record types.  (Building the application checked the values already; this
says where a binder is a whole nested record, which is allowed, and names
the pattern otherwise.)"
  (when (not (pattern.accepts pat))
    (raise (PropspecError f"{(show pat)} is not a pattern: {(pattern.explain pat)}"
                          (site-where pat))))
  (for [v (.values (fields-of pat))]
    (when (isinstance v Propapp) (check-pattern v)))
  pat)

(defn record->json [rec]
  "The text stored for the record REC: JSON of its canonical form."
  (json.dumps (propspec->data (canonical rec)) :sort-keys True :separators #("," ":")
              :ensure-ascii False))

(defn json->record [text]
  "The record TEXT stores, checked: its type known here, every field of its
type, nested records too.  A `PropspecError` saying what is wrong otherwise."
  (setv data (try (json.loads text)
                  (except [e ValueError]
                    (raise (PropspecError f"not JSON: {e}")))))
  (when (not (and (isinstance data dict) (isinstance (.get data "propapp") str)))
    (raise (PropspecError "not a record")))
  (setv t (.get properties (get data "propapp")))
  (when (not (isinstance t AssertionType))
    (raise (PropspecError f"{(get data "propapp")} is not a record type this site defines")))
  (setv rec (data->propspec data))
  (when (not (record? rec))
    (raise (PropspecError f"{(show rec)} is not a whole record")))
  rec)

(defn record-digest [rec]
  "A short name for REC, the same on every host: what its key ends with."
  (cut (sha256-hex (.encode (record->json rec) "utf-8")) 0 20))

(setv site-dataspaces {})

(defn _config-problem [c]
  (setv eps (.get c "endpoints"))
  (cond (not (and (isinstance eps list) eps
                  (all (gfor e eps (and (isinstance e str)
                                        (or (.startswith e "http://") (.startswith e "https://"))
                                        (not (any (gfor ch e (.isspace ch)))))))))
        ":endpoints must be a non-empty list of etcd URLs, [\"http://127.0.0.1:2379\"]"
        (not (and (isinstance (.get c "prefix") str) (.startswith (get c "prefix") "/")
                  (> (len (.strip (get c "prefix") "/")) 0)
                  (not (any (gfor ch (get c "prefix") (or (.isspace ch) (< (ord ch) 32)))))))
        ":prefix must be the site's key prefix, an absolute path such as \"/consfig/example\""
        (not (all (gfor k #("ttl" "push-ttl")
                        (or (not-in k c) (and (isinstance (get c k) int) (not (isinstance (get c k) bool))
                                              (<= 3 (get c k) 86400))))))
        ":ttl and :push-ttl are whole numbers of seconds, from 3 to 86400"
        (- (set c) #{"endpoints" "prefix" "ttl" "push-ttl" "ca" "cert" "key" "user" "password"
                     "password-file" "timeout"})
        f"unknown option(s) {(.join " " (gfor k (sorted (- (set c) #{"endpoints" "prefix" "ttl" "push-ttl" "ca" "cert" "key" "user" "password" "password-file" "timeout"})) f":{k}"))}"))

(defn dataspace-config [options [where None]]
  "OPTIONS (a dict, keyword or string keys) as a dataspace's configuration,
checked: `PropspecError` saying what is wrong."
  (setv c (dfor [k v] (.items (or options {})) (or (keyword-name k) (str k)) v)
        c {"ttl" 10 "push-ttl" 3600 #** c}
        problem (_config-problem c))
  (when problem (raise (PropspecError f"defdataspace: {problem}" where)))
  (setv (get c "prefix") (.rstrip (get c "prefix") "/"))
  c)

(defn name-dataspace [site-file where options]
  "Name the dataspace of the site read from SITE-FILE (what `defdataspace` does)."
  (note-definition "dataspace" where)
  (setv (get site-dataspaces site-file) (dataspace-config options where)))

(defn site-names-dataspace? []
  "While a consfig file is loaded: whether it named its dataspace so far;
None outside a load (at a REPL), where it cannot be told."
  (setv seen (.get defining))
  (when (is-not seen None) (in "dataspace" seen)))

(defmacro defdataspace [_hy_compiler options]
  "Name the site's dataspace, once, before the hosts that use it:

  (defdataspace {:endpoints [\"http://10.0.0.1:2379\"] :prefix \"/consfig/example\"})

Options: :endpoints (etcd's client URLs), :prefix (the site's keys), :ttl
(seconds a dead agent's records outlive it, 10), :push-ttl (seconds a
push's records last with no agent to renew them, 3600), :ca :cert :key
(TLS, paths on the hosts), :password-file (etcd's authentication: the
host's password, a path on the host; :user, by default the hostname).  In
the paths, {hostname} is the host's name."
  (setv f _hy_compiler.filename
        site (when (and f (os.path.isfile f)) (os.path.abspath f)))
  `(hy.I.consfig/model/dataspace.name-dataspace
     ~site ~(definition-where _hy_compiler) ~options))

(defn _parse-fields [name params]
  ;; Every field typed: `#^ TYPE NAME`, nothing else; #(TYPE NAME) each.
  (setv out [])
  (for [p params]
    (cond (and (isinstance p hy.models.Expression) (= (len p) 3)
               (= (get p 0) (hy.models.Symbol "annotate"))
               (isinstance (get p 1) hy.models.Symbol))
          (.append out #((get p 2) (get p 1)))
          True
          (raise (PropspecError (+ f"defassertion {name}: each field is `#^ TYPE NAME`, "
                                   f"not {(if (isinstance p hy.models.Symbol) (str p) (hy.repr p))}")))))
  (when (not out)
    (raise (PropspecError f"defassertion {name}: a record type needs at least one field")))
  out)

(defmacro defassertion [_hy_compiler name params #* body]
  "Define the record type NAME of the dataspace, with typed fields:

  (defassertion web-backend [#^ hostname host #^ ip-address addr #^ port port]
    \"A web server that takes requests for the site.\")

is equivalent to binding `web-backend` to an `AssertionType` registered
as `MODULE.web-backend`.  A field's type is a parameter type or another
record type."
  (setv fields (_parse-fields name params)
        doc (when (and body (isinstance (get body 0) hy.models.String)) (str (get body 0))))
  (when (> (len body) (if doc 1 0))
    (raise (PropspecError f"defassertion {name}: only a docstring may follow the fields")))
  `(setv ~name (hy.I.consfig/model/dataspace.define-assertion
                 ~(+ (stored-name _hy_compiler.module.__name__) "." (str name))
                 (fn [~@(sum (gfor [t f] fields
                                   [`(annotate [~f hy.I.consfig/types.wildcard]
                                               (hy.I.consfig/model/dataspace.field-type ~t))])
                             [])]
                   None)
                 :doc ~doc
                 :where ~(definition-where _hy_compiler))))

(export :objects [AssertionType define-assertion assertion-type? field-type fields-of
                  pattern-variables binder-names record? record pattern canonical match-record substitute
                  check-pattern record->json json->record record-digest site-dataspaces
                  dataspace-config name-dataspace site-names-dataspace?]
        :macros [defassertion defdataspace])
