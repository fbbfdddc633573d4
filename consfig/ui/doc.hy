"Looking a property up where you work, as `ansible-doc` does: `consfig doc
NAME`, `consfig doc --list [PATTERN]`, and `(doc NAME)` at the REPL.

What is shown is read from the property itself, as docs/properties.md is
(`docs/gen_reference.py`): its lambda list, each parameter's type and
default, its docstring, whether it can be unapplied, what the converging
agent watches for it, and an example — the docstring's own, else its
usage with the parameters' names."

(import fnmatch
        importlib
        inspect
        pkgutil
        types
        hy
        consfig.props
        consfig.errors [ConsfigError]
        consfig.model.property [properties did-you-mean propapp-watches])

(defn load-library []
  "Import every module of consfig.props, so that each property is registered."
  (for [m (pkgutil.iter-modules consfig.props.__path__)]
    (importlib.import-module f"consfig.props.{m.name}")))

(defn find-documented [name]
  "The property NAME names: as a consfig writes it (`file.has-content`, a
site's `web-base`) or qualified (`consfig.props.file.has-content`); a
`ConsfigError` saying the nearest name when there is none."
  (load-library)
  (setv name (str name))
  (for [p (.values properties)]
    (when (in name #(p.short-name p.name))
      (return p)))
  (raise (ConsfigError (+ f"no property {name}" (did-you-mean name)
                          "; `consfig doc --list` lists them all"))))

(defn written-name [form]
  "The property name FORM (a model) is written as: Hy reads
`file.has-content` as `(. file has-content)`."
  (if (and (isinstance form hy.models.Expression) form
           (= (get form 0) (hy.models.Symbol ".")))
      (.join "." (gfor part (cut form 1 None) (written-name part)))
      (str form)))

(defn _examples [doc]
  ;; The docstring's examples: lines indented by two spaces after a blank
  ;; line (as docs/gen_reference.py makes Hy blocks of them).
  (setv found [] block [] prev-blank True)
  (for [line (+ (.splitlines (inspect.cleandoc (or doc ""))) [""])]
    (if (and (.startswith line "  ") (or block prev-blank))
        (.append block (cut line 2 None))
        (do (when block
              (.append found (.join "\n" block))
              (setv block []))
            (setv prev-blank (not (.strip line))))))
  (lfor e found :if (.startswith (.lstrip e) "(") e))

(defn _usage [p]
  ;; The property's call with its required parameters' names.
  (setv words (lfor q (.parameters p)
                    :if (and (is (get q "default") None) (not (.startswith (get q "name") "#**")))
                    (.upper (.replace (get q "name") "#* " ""))))
  (+ "(" (.join " " [p.short-name #* words]) ")"))

(defn unapply-text [p]
  "Whether the property P can be unapplied, as a sentence."
  (cond (= p.kind "fact") "a fact: the condition of a `during`, neither applied nor unapplied"
        p.unapply "can be unapplied: `(unapplied …)` undoes it"
        p.propspec "unapplied as its parts are: each must be able to be"
        (not p.apply) "a declaration: unapplying it does nothing"
        True "cannot be unapplied: `(unapplied …)` around it is refused where it is written"))

(defn _watch-text [spec]
  (setv #(kind #* args) spec)
  (cond (= kind "path") f"the path {(get args 0)}"
        (= kind "unit") f"the systemd unit {(get args 0)}"
        (= kind "dpkg") "the dpkg status database"
        (= kind "poll") f"nothing: it is checked every {(get args 0)} s"
        True (str spec)))

(defn watches-text [p example]
  "What the converging agent watches for the property P, shown for EXAMPLE
(a propapp's source, or None)."
  (cond
    (= p.kind "fact") "what the `during` it conditions watches"
    (or p.propspec (not p.announce)) "what its parts watch"
    (not p.watch) "nothing: the agent checks it at each poll (`consfig converge --interval`)"
    True
    (do (setv specs None)
        (when example
          (try
            (setv specs (propapp-watches (_example-propapp example)))
            (except [Exception] (setv specs None))))
        (if specs
            (+ "what it manages; for the example, " (.join "; " (map _watch-text specs)))
            "what it manages, found from its arguments"))))

(defn _example-propapp [source]
  ;; The propapp SOURCE builds, in a module with the library's properties
  ;; in reach.  Building one checks its arguments and touches nothing.
  (setv module (types.ModuleType "consfig_doc_example"))
  (hy.eval '(do (require consfig *) (import consfig *)) :module module)
  (setv head (written-name (get (hy.read source) 0)))
  (when (in "." head)
    (hy.eval `(use-props consfig.props [~(hy.models.Symbol (get (.split head ".") 0))])
             :module module))
  (hy.eval (hy.read source) :module module))

(defn describe [p]
  "The text `consfig doc` shows for the property P."
  (setv examples (_examples p.doc)
        example (if examples (get examples 0) None)
        lines [f"({p.short-name} {p.lambda-list})" ""])
  (for [q (.parameters p)]
    (setv t (get q "type")
          default (get q "default"))
    (.append lines (+ f"  {(get q "name")}"
                      (if t f": {t !r} — {t.phrase}" "")
                      (if (is-not default None) f" (default {default})" ""))))
  (when (.parameters p) (.append lines ""))
  (.append lines (if p.doc (inspect.cleandoc p.doc) "(undocumented)"))
  (.extend lines [""
                  f"Type: {p.type}{(if (= p.type "python") " (needs a Python on the target: a :python hop)" "")}"
                  f"Unapplying: {(unapply-text p)}"
                  f"Watches: {(watches-text p example)}"
                  (if example
                      f"Example:\n  {(.replace example "\n" "\n  ")}"
                      f"Usage: {(_usage p)}")])
  (.join "\n" lines))

(defn summary-line [p]
  "The first sentence of P's docstring, on one line."
  (setv text (.join " " (.split (or p.doc "(undocumented)"))))
  (setv end (.find text ". "))
  (if (>= end 0) (cut text 0 (+ end 1)) text))

(defn listing [[pattern None]]
  "The properties whose name matches PATTERN (a glob such as `file.*`, or
any part of a name), each with its first sentence: one line each."
  (load-library)
  (setv found (sorted (gfor p (.values properties)
                            :if (or (not pattern)
                                    (fnmatch.fnmatchcase p.short-name pattern)
                                    (and (not (any (gfor c "*?[" (in c pattern))))
                                         (in pattern p.short-name)))
                            p)
                      :key (fn [p] p.short-name)))
  (when (not found)
    (raise (ConsfigError f"no property matches {pattern}")))
  (setv width (max (gfor p found (len p.short-name))))
  (.join "\n" (gfor p found (+ (.ljust p.short-name width) "  " (summary-line p)))))

(export :objects [load-library find-documented written-name describe listing summary-line unapply-text
                  watches-text])
