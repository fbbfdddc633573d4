;; Properties: typed parameters, invariants, and mistakes in a consfig caught
;; on the controller with the file and line where they were made.

(require consfig *
         consfig.types [defparamtype])
(import consfig *
        consfig.types *
        consfig.site.load [load-consfig]
        inspect
        json
        typing
        pytest)

(defprop typed-content :posix [#^ abs-path path #^ string content
                               * #^ file-mode [mode None] #^ boolean [secret False]]
  "PATH has CONTENT."
  (:apply None))

(defprop owned :posix [#^ abs-path path * #^ (optional user-name) [user None]
                       #^ (optional group-name) [group None]]
  "PATH is owned by USER and/or GROUP."
  (:invariant (or user group) "needs :user or :group")
  (:apply None))

(defn consfig-error [tmp-path text]
  "The one-line error loading TEXT as a consfig gives."
  (setv f (/ tmp-path "site.hy"))
  (.write-text f (+ "(require consfig *)\n(import consfig *)\n(use-props consfig.props [file apt user systemd])\n" text))
  (try (load-consfig (str f))
       (except [e ConsfigError] (return (str e))))
  (assert False "the consfig loaded without error"))

(defn test-wrong-type-names-file-line-property-parameter-type-and-value [tmp-path]
  (setv msg (consfig-error tmp-path "\n(defhost h.example {}\n  (file.has-content \"/etc/x\" \"y\\n\" :mode \"0640\"))\n"))
  (assert (.endswith msg "site.hy:6: file.has-content: :mode must be a file mode (an integer such as 0o640), not \"0640\"")
          msg))

(defn test-relative-path-is-refused-at-load [tmp-path]
  (setv msg (consfig-error tmp-path "(file.has-content \"relative/path\" \"x\")"))
  (assert (in "site.hy:4: file.has-content: path must be an absolute path" msg) msg))

(defn test-integer-package-is-refused-at-load [tmp-path]
  (setv msg (consfig-error tmp-path "(apt.installed 42)"))
  (assert (in "site.hy:4: apt.installed: each of packages must be a package name" msg) msg))

(defn test-user-name-with-space-is-refused-at-load [tmp-path]
  (setv msg (consfig-error tmp-path "(user.has-account \"bad user\")"))
  (assert (in "site.hy:4: user.has-account: username must be a user name" msg) msg))

(defn test-empty-service-name-is-refused-at-load [tmp-path]
  (setv msg (consfig-error tmp-path "(systemd.enabled \"\")"))
  (assert (in "site.hy:4: systemd.enabled: service must be" msg) msg))

(defn test-accepted-arguments-build-the-propapp []
  (assert (= (. (typed-content "/x" "y" :mode 0o640) args) #("/x" "y" (hy.models.Keyword "mode") 0o640))
          "typed arguments kept as given"))

(defn test-default-is-accepted-whatever-the-type []
  (assert (typed-content "/x" "y" :mode None) "None is the default of :mode"))

(defn test-invariant-holds []
  (assert (owned "/x" :user "root") "a user is enough"))

(defn test-invariant-violated-is-refused []
  (with [e (pytest.raises PropspecError)] (owned "/x"))
  (assert (= (str e.value) "owned: needs :user or :group") (str e.value)))

(defn test-misspelt-keyword-suggests-the-parameter [tmp-path]
  (setv msg (consfig-error tmp-path "(file.has-content \"/etc/x\" \"y\" :mdoe 0o640)"))
  (assert (.endswith msg "unknown keyword :mdoe for file.has-content; did you mean :mode?") msg))

(defn test-unknown-keyword-is-not-too-many-positional-arguments []
  (with [e (pytest.raises PropspecError)] (typed-content "/x" "y" :colour 1))
  (assert (.startswith (str e.value) "unknown keyword :colour for") (str e.value)))

(defn test-unknown-property-suggests-the-nearest [tmp-path]
  (setv msg (consfig-error tmp-path "(defhost h.example {} (file.symlinkd :from \"/a\" :to \"/b\"))"))
  (assert (in "did you mean file.symlinked?" msg) msg))

(defn test-mode-prints-in-octal-in-the-printed-propspec []
  (assert (in ":mode 0o640" (propspec->string (typed-content "/x" "y" :mode 0o640)))
          (propspec->string (typed-content "/x" "y" :mode 0o640))))

(defn test-mode-prints-in-octal-in-the-default-description []
  (assert (in ":mode 0o640" (propapp-desc (typed-content "/x" "y" :mode 0o640)))
          (propapp-desc (typed-content "/x" "y" :mode 0o640))))

(defn test-printed-octal-mode-reads-back-equal []
  (setv p (typed-content "/x" "y" :mode 0o640))
  (assert (= (read-propspec (propspec->string p)) p) "re-read"))

(defn test-signature-shows-types []
  (assert (= (str (inspect.signature typed-content))
             "(path: abs-path, content: string, *, mode: file-mode = None, secret: boolean = False)")
          (str (inspect.signature typed-content))))

(defn test-type-hints-are-the-types []
  (assert (is (get (typing.get-type-hints typed-content) "mode") file-mode) "type hint"))

(defn test-lambda-list-and-doc-show-types []
  (assert (in "#^ file-mode [mode None]" typed-content.lambda-list) typed-content.lambda-list)
  (assert (in "#^ abs-path path" typed-content.__doc__) typed-content.__doc__))

(defn test-propapp-prints-as-hy-alone-and-inside-data []
  (setv p (typed-content "/etc/x" "y" :mode 0o640)
        written f"({p.name} \"/etc/x\" \"y\" :mode 0o640)")
  (for [shown [(repr p) (str p) (hy.repr p)]]
    (assert (= shown written) shown))
  (assert (= (hy.repr [p {"k" p}]) f"[{written} {{\"k\" {written}}}]") (hy.repr [p {"k" p}])))

(defn test-property-class-keeps-its-own-docstring []
  (assert (.startswith Property.__doc__ "A property: its name") Property.__doc__))

(defn test-help-shows-each-parameter-with-its-type []
  (import pydoc)
  (setv text (pydoc.render-doc typed-content :renderer pydoc.plaintext))
  (assert (in ":mode: a file mode (an integer such as 0o640)" text) text)
  (assert (in "path: an absolute path" text) text))

(defn test-wrong-typed-propspec-from-data-is-refused []
  (setv data (json.loads (json.dumps (propspec->data (typed-content "/x" "y" :mode 0o640)))))
  (setv (get data "args" 3) "0640")
  (with [e (pytest.raises PropspecError)] (data->propspec data))
  (assert (in ":mode must be a file mode" (str e.value)) (str e.value)))

(defn test-wrong-typed-printed-propspec-is-refused []
  (with [e (pytest.raises PropspecError)]
    (read-propspec "(file.has-content \"/x\" \"y\" :mode \"0640\")"))
  (assert (in ":mode must be a file mode" (str e.value)) (str e.value)))

(defn test-unbalanced-propspec-text-is-one-clear-error []
  (with [e (pytest.raises PropspecError)] (read-propspec "(file.has-content \"/x\" \"y\""))
  (assert (= (str e.value) "cannot read the propspec: a parenthesis is never closed") (str e.value)))

(defn test-site-type-and-property-using-it-work-from-a-consfig [tmp-path]
  (setv f (/ tmp-path "typed_site.hy"))
  (.write-text f (+ "(require consfig * consfig.types [defparamtype])\n(import consfig * consfig.types *)\n"
                    "(defparamtype port (int-range 1 65535) \"a TCP port\")\n"
                    "(defprop listens :posix [#^ port number] (:apply None))\n"
                    "(setv ok (listens 22))\n"
                    "(listens 0)\n"))
  (with [e (pytest.raises ConsfigError)] (load-consfig (str f)))
  (assert (.endswith (str e.value) "typed_site.hy:6: listens: number must be a TCP port, not 0") (str e.value)))

(defn test-property-defined-twice-in-a-consfig-names-both-places [tmp-path]
  (setv msg (consfig-error tmp-path "(defprop twice :posix [] (:apply None))\n\n(defprop twice :posix [] (:apply None))"))
  (assert (in "property twice is defined twice: at" msg) msg)
  (assert (and (in "site.hy:4" msg) (in "site.hy:6" msg)) msg))

(defn test-redefining-outside-a-consfig-load-is-allowed []
  (defprop redefined :posix [] (:apply None))
  (defprop redefined :posix [] (:apply None))
  (assert (callable redefined) "second definition replaced the first"))

(defprop bell-rung :posix []
  "A bell is rung."
  (:action "rings the bell each time it is applied")
  (:apply None))

(defn test-an-action-says-why-it-has-no-check []
  (assert (= bell-rung.action "rings the bell each time it is applied") bell-rung.action)
  (assert (not (can-check? bell-rung)) "an action cannot say whether it holds")
  (assert (is typed-content.action None) "a property is no action unless declared one"))

(defn test-an-action-without-a-one-line-reason-is-refused [tmp-path]
  (setv msg (consfig-error tmp-path "(defprop rung :posix [] (:action \"two\nlines\") (:apply None))\n"))
  (assert (in "(:action REASON) takes a one-line reason" msg) msg))
