;; consfig.ui.cli's and consfig.ui.command's parts, called in this process: the parser's exit codes,
;; reading a chain and a propspec from the command line, and `guarded`.
;; (tests/ui/ runs the installed command end to end.)

(import argparse
        pytest
        hy.models [Keyword]
        consfig.ui.cli [main read-chain read-propspecs]
        consfig.ui.command [EX-USAGE Parser guarded output-options output-sink]
        consfig.errors [ConsfigError]
        consfig.deployer.report [JsonSink Reporter])

(defn test-a-usage-error-exits-64-not-argparses-2 [capsys]
  (with [e (pytest.raises SystemExit)]
    (main ["deploy"]))
  (assert (= e.value.code EX-USAGE 64) f"exit {e.value.code}: 2 means changes made")
  (assert (in "usage:" (. (capsys.readouterr) err)) "the usage is shown"))

(defn test-read-chain-reads-hy-and-checks-the-hops []
  (assert (= (read-chain "[[:ssh :user \"root\"] :python]")
             [[(Keyword "ssh") (Keyword "user") "root"] (Keyword "python")])
          "the chain as data"))

(defn test-read-chain-refuses-an-empty-chain-saying-what-to-give []
  (with [e (pytest.raises ConsfigError)]
    (read-chain "  "))
  (assert (in "--via :local" (str e.value)) (str e.value)))

(defn test-read-chain-refuses-what-is-not-hy-naming-the-text []
  (with [e (pytest.raises ConsfigError)]
    (read-chain "[:ssh"))
  (assert (in "cannot read '[:ssh'" (str e.value)) (str e.value)))

(defn test-read-chain-refuses-an-unknown-hop-with-the-option-named []
  (with [e (pytest.raises ConsfigError)]
    (read-chain ":shh"))
  (assert (and (in "--via" (str e.value)) (in ":ssh" (str e.value))) (str e.value)))

(defn test-read-propspecs-of-several-forms-applies-them-in-order []
  (setv p (read-propspecs "(consfig.props.cmd.single \"true\") (consfig.props.cmd.single \"false\")"
                          {}))
  (assert (= p.name "consfig.combinators.eseqprops") f"in order: {p}")
  (assert (= (lfor a p.args (get a.args 0)) ["true" "false"]) f"both, in order: {p}"))

(defn test-read-propspecs-refuses-an-empty-propspec []
  (with [(pytest.raises ConsfigError)]
    (read-propspecs "   " {})))

(defn test-guarded-turns-a-consfig-error-into-status-1-and-a-message [capsys]
  (defn failing [args] (raise (ConsfigError "no such host: x")))
  (assert (= (guarded (argparse.Namespace :verbose 0) failing) 1) "status 1")
  (assert (in "no such host: x" (. (capsys.readouterr) err)) "the message, on stderr"))

(defn test-guarded-turns-an-interrupt-into-status-130 [capsys]
  (defn interrupted [args] (raise KeyboardInterrupt))
  (assert (= (guarded (argparse.Namespace) interrupted) 130) "status 130"))

(defn test-guarded-returns-the-commands-status []
  (assert (= (guarded (argparse.Namespace) (fn [args] 2)) 2) "the command's own status"))

(defn test-the-output-options-choose-json-lines-or-a-report []
  (setv p (Parser))
  (output-options p)
  (assert (isinstance (output-sink (.parse-args p ["--json"])) JsonSink) "--json")
  (setv r (output-sink (.parse-args p ["-vv" "--check"])))
  (assert (isinstance r Reporter) "a report by default")
  (.close r))
