;; Propspecs as data and the walker that builds them.

(require consfig *)
(import consfig *
        consfig.types [line list-of]
        json
        pytest
        types
        hy.models [Keyword])
(use-props consfig.props [file cmd os])
;; Required under a short name so that its dotted macros work as macros.
(require consfig.apply.combinators :as c)

(setv hostile ["quote \" and 'single'" "new\nline" "tab\there" "unicode ☃ λ"
               "$(rm -rf /) `ls` *glob?" "-leading-dash" "back\\slash" ""])

(defn roundtrip-print [p]
  (read-propspec (propspec->string p)))

(defn roundtrip-json [p]
  (data->propspec (json.loads (json.dumps (propspec->data p)))))

(defn nested-hostile []
  (props eseqprops
    (file.has-content (+ "/" (get hostile 0)) (get hostile 1) :mode 0o600)
    (seqprops #* (gfor h hostile (file.contains-lines "/tmp/x" h)))
    (unapplied (os.debian-stable "bookworm" :amd64))
    (cmd.single "echo" "hi" :env {"A" "1" "B" (get hostile 4)} :input (get hostile 3))
    (on-change (file.directory-exists (+ "/" (get hostile 5)))
               (cmd.single (get hostile 6)))))

(defn test-propspec-prints-as-hy-and-rereads-equal []
  (setv p (nested-hostile))
  (assert (= (roundtrip-print p) p) (propspec->string p)))

(defn test-propspec-json-round-trip-keeps-keywords-and-nesting []
  (setv p (nested-hostile))
  (assert (= (roundtrip-json p) p) "JSON round trip")
  (assert (= (roundtrip-json [1 #(2 3) {"k" :v} b"\x00\xff" None True 1.5])
             [1 #(2 3) {"k" :v} b"\x00\xff" None True 1.5])
          "non-propapp values"))

(defn test-printed-propspec-uses-qualified-names []
  (assert (= (propspec->string (file.has-content "/etc/motd" "hi\n"))
             "(consfig.props.file.has-content \"/etc/motd\" \"hi\\n\")")
          "printed form"))

(defn test-keyword-naming-a-parameter-is-a-keyword-argument []
  (setv p (propapp (file.has-content "/x" "y" :mode 0o644))
        prop (find-property p.name))
  (assert (= (.bind prop p.args) #(["/x" "y"] {"mode" 0o644})) "mode bound by keyword"))

(defn test-keyword-not-naming-a-parameter-is-a-value []
  (setv p (propapp (os.debian-stable "bookworm" :amd64)))
  (assert (= p.args #("bookworm" (Keyword "amd64"))) "keyword kept as the arch value"))

(defn test-python-keyword-arguments-build-the-same-propapp []
  (assert (= (file.has-content "/x" "y" :mode 0o644)
             (propapp (file.has-content "/x" "y" :mode 0o644)))
          "Python call and walked form agree"))

(defn test-wrong-arity-names-property-and-parameters []
  (with [e (pytest.raises PropspecError)]
    (file.has-content "/only-a-path"))
  (setv msg (str e.value))
  (assert (in "file.has-content" msg) msg)
  (assert (in "#^ abs-path path #^ content content * #^ file-mode [mode None] #^ boolean [secret False] #^ boolean [follow False]]" msg) msg))

(defn test-walked-form-error-names-file-and-line []
  (with [e (pytest.raises PropspecError)]
    (props (file.directory-exists "/a")
           (file.has-content "/too-few")))
  (assert (.startswith (str e.value) "tests/model/test_propspec.hy:") (str e.value)))

(defn test-unknown-property-is-reported-with-its-name []
  (with [e (pytest.raises PropspecError)]
    (propapp (file.no-such-property "/a")))
  (assert (in "file.no-such-property" (str e.value)) (str e.value)))

(defn test-dotted-form-wraps-trailing-forms-in-eseqprops []
  (setv p (propapp (desc* "two things" (file.directory-exists "/a") (file.directory-exists "/b"))))
  (assert (= p (desc "two things" (eseqprops (file.directory-exists "/a")
                                             (file.directory-exists "/b"))))
          (propspec->string p)))

(defn test-dotted-macro-works-when-required []
  (setv p (c.desc* "one" (file.directory-exists "/a")))
  (assert (= p (desc "one" (eseqprops (file.directory-exists "/a")))) (propspec->string p)))

(defn test-dotted-form-of-a-non-property-is-an-error []
  (with [e (pytest.raises PropspecError)]
    (props (str* "x")))
  (assert (in "not a property" (str e.value)) (str e.value)))

(defn test-false-when-drops-propapp []
  (setv p (props (file.directory-exists "/a")
                 (when False (file.directory-exists "/b"))))
  (assert (= p (eseqprops (file.directory-exists "/a"))) (propspec->string p)))

(defn test-props-with-combinator []
  (assert (= (props seqprops (file.directory-exists "/a"))
             (seqprops (file.directory-exists "/a")))
          "props seqprops"))

(defn test-ordinary-calls-inside-a-propspec-keep-keyword-arguments []
  (setv p (propapp (file.has-content (.join "," ["/a" "b"]) (str :object "x"))))
  (assert (= p.args #("/a,b" "x")) (propspec->string p)))

(defproplist pair [a b]
  "Two directories."
  (file.directory-exists a)
  (file.directory-exists b))

(defpropspec many [paths]
  "One directory per path, from a quasiquoted propspec."
  `(eseqprops ~@(lfor p paths `(file.directory-exists ~p))))

(defn test-defproplist-expands-to-described-eseqprops-at-preprocess []
  (setv p (preprocess-propapp (pair "/a" "/b")))
  (assert (= p (desc "pair /a /b"
                     (eseqprops (file.directory-exists "/a") (file.directory-exists "/b"))))
          (propspec->string p)))

(defn test-defpropspec-resolves-short-names-in-quasiquote []
  (setv p (preprocess-propapp (many ["/x" "/y"])))
  (assert (= (get p.args 1)
             (eseqprops (file.directory-exists "/x") (file.directory-exists "/y")))
          (propspec->string p)))

(defn test-read-propspec-resolves-short-names-through-a-namespace []
  (assert (= (read-propspec "(file.has-content \"/a\" \"b\" :mode 0o644)" (globals))
             (file.has-content "/a" "b" :mode 0o644))
          "short name resolved")
  (assert (= (read-propspec "(eseqprops (file.directory-exists \"/a\"))")
             (eseqprops (file.directory-exists "/a")))
          "bare combinator name and consfig.props prefix"))

(defn test-read-propspec-rejects-code []
  (with [e (pytest.raises PropspecError)]
    (read-propspec "(file.directory-exists some-variable)"))
  (assert (in "some-variable" (str e.value)) (str e.value)))

(defn schedule-path [name schedule]
  (+ "/etc/cron." (. schedule name) "/" name))

(defn test-keyword-values-passed-to-functions-stay-values []
  (setv schedule :daily)
  (setv p (propapp (file.has-content (schedule-path "job" schedule) "x")))
  (assert (= (get p.args 0) "/etc/cron.daily/job") (propspec->string p)))

(defn test-keyword-values-passed-to-properties-stay-values []
  (setv arch :arm64)
  (assert (= (. (propapp (os.debian-stable "trixie" arch)) args)
             #("trixie" (Keyword "arm64")))
          "arch from a variable"))

(defproplist loops-a [] (loops-b))
(defproplist loops-b [] (loops-a))
(defpropspec loops-itself [] `(loops-itself))

(defn preprocess [p]
  (preprocess-host (Host "cycle.example" p)))

(defn test-defproplist-including-itself-names-the-cycle []
  (with [e (pytest.raises PropspecError)] (preprocess (loops-a)))
  (assert (in "loops-a includes itself: loops-a -> loops-b -> loops-a" (str e.value)) (str e.value)))

(defn test-self-recursive-defpropspec-names-the-cycle []
  (with [e (pytest.raises PropspecError)] (preprocess (loops-itself)))
  (assert (in "loops-itself includes itself: loops-itself -> loops-itself" (str e.value)) (str e.value)))

(defproplist typed-list :posix [#^ (list-of line) lines]
  (file.contains-lines "/tmp/x" #* lines))

(defn test-defproplist-accepts-a-type-before-the-parameters []
  (assert (preprocess (typed-list ["a"])) "a :posix proplist of :posix properties"))

(defproplist python-inside :posix []
  (python-prop))
(defprop python-prop :python [] (:apply None))

(defn test-declared-posix-proplist-with-a-python-property-is-refused []
  (with [e (pytest.raises PropspecError)] (preprocess (python-inside)))
  (assert (in "python-inside is declared :posix but contains :python properties: python-prop" (str e.value))
          (str e.value)))

(defpropspec typed-motd :posix [#^ (list-of line) lines]
  `(eseqprops ~@(lfor l lines `(file.contains-lines "/tmp/motd" ~l))))

(defn test-defpropspec-accepts-a-type-and-checks-its-parameters []
  (assert (preprocess (typed-motd ["hi"])) "typed defpropspec expands")
  (with [e (pytest.raises PropspecError)] (typed-motd ["two\nlines"]))
  (assert (in "typed-motd: lines (element 0) must be one line of text" (str e.value)) (str e.value)))
(defn test-propspec-tree-puts-one-propapp-per-line-and-reads-back-equal []
  (setv p (propapp (eseqprops (file.has-content "/a" "x\n")
                              (desc "group" (file.directory-exists "/b"))))
        tree (propspec->tree p))
  (assert (= (len (.splitlines tree)) 4) tree)
  (assert (.startswith (get (.splitlines tree) 3) "    (consfig.props.file.directory-exists") tree)
  (assert (= (read-propspec tree) p) tree))

(defn test-a-decimal-mode-that-looks-octal-is-refused-where-a-propspec-is-read []
  (with [e (pytest.raises PropspecError)]
    (read-propspec "(consfig.props.file.has-content \"/x\" \"y\\n\" :mode 644)"))
  (assert (in "(0o644)" (str e.value)) (str e.value))
  (assert (in "line 1" (str e.value)) (str e.value)))

(defn test-a-decimal-mode-that-looks-octal-is-refused-when-a-consfig-is-compiled []
  (with [e (pytest.raises Exception)]
    (hy.eval (hy.read "(do (require consfig *) (use-props consfig.props [file])
                           (props (file.has-content \"/x\" \"y\\n\" :mode 755)))")
             {} :module (types.ModuleType "consfig_site_modetest")))
  (assert (in "(0o755)" (str e.value)) (str e.value)))

(defn test-an-octal-or-computed-mode-is-accepted []
  (for [text ["(consfig.props.file.has-content \"/x\" \"y\\n\" :mode 0o644)"
              "(consfig.props.file.has-content \"/x\" \"y\\n\" :mode 493)"]]
    (assert (read-propspec text) text)))

(defn test-a-decimal-mode-that-looks-octal-is-refused-positionally-where-a-propspec-is-read []
  (with [e (pytest.raises PropspecError)]
    (read-propspec "(consfig.props.file.has-mode \"/x\" 644)"))
  (assert (in "0o644" (str e.value)) (str e.value))
  (assert (in "line 1" (str e.value)) (str e.value)))

(defn test-a-decimal-mode-that-looks-octal-is-refused-positionally-when-a-consfig-is-compiled []
  (with [e (pytest.raises PropspecError)]
    (hy.eval (hy.read "(do (require consfig *) (use-props consfig.props [file])
                           (props (file.has-mode \"/x\" 0644)))")
             {} :module (types.ModuleType "consfig_site_positional_modetest")))
  (assert (in "0o644" (str e.value)) (str e.value))
  (assert (in ":2:" (str e.value)) (str e.value)))

(defn test-an-octal-looking-decimal-is-an-integer-where-no-mode-is-taken []
  (setv p (read-propspec "(consfig.props.file.has-mode \"/x\" 0o644)"))
  (assert (= (get p.args 1) 0o644) p.args)
  (setv q (hy.eval (hy.read "(do (require consfig *) (use-props consfig.props [apt])
                                 (props (apt.lock-timeout 600)))")
                   {} :module (types.ModuleType "consfig_site_decimal_arg")))
  (setv timeout (get (. (get q.args 0) args) 0))
  (assert (is (type timeout) int) (hy.repr q))
  (assert (= (get (. (read-propspec "(consfig.props.apt.lock-timeout 600)") args) 0) 600)))
