;; The helpers properties call: argv and scripts are never confused.

(import consfig.apply.actions [Script run run-script run-ok? output]
        consfig.transport.local [LocalConnection]
        consfig.model.context [applying]
        consfig.errors [CommandFailed]
        consfig.transport.hop [command->script]
        consfig.model.host [Host])

(defn on-local [thunk]
  (with [(applying (Host "test.example" None) (LocalConnection))]
    (thunk)))

(defn test-a-one-element-argv-is-quoted-not-run-as-a-script [tmp-path]
  (setv marker (str (/ tmp-path "pwned")))
  (setv r (on-local (fn [] (run [f"a file; touch {marker}"] :check False))))
  (assert (= r.exit-code 127) f"no program of that name: {r.exit-code}")
  (assert (not (.exists (/ tmp-path "pwned"))) "the text after ; did not run"))

(defn test-a-lone-string-argument-is-a-program [tmp-path]
  (setv marker (str (/ tmp-path "pwned")))
  (assert (not (on-local (fn [] (run-ok? f"true; touch {marker}")))) "not a script")
  (assert (not (.exists (/ tmp-path "pwned"))) "nothing ran"))

(defn test-argv-elements-are-quoted-whatever-their-number []
  (assert (= (command->script ["a b"]) "'a b'") "one element")
  (assert (= (command->script ["printf" "%s" "$(x)"]) "printf %s '$(x)'") "several"))

(defn test-a-plain-string-is-not-a-command []
  (try (command->script "ls -l")
       (except [e TypeError] (assert (in "argv" (str e)) (str e)))
       (else (assert False "a string must be refused"))))

(defn test-run-script-passes-values-as-positional-parameters [tmp-path]
  (setv hostile "a b'c\"d$(touch pwned)`x`*")
  (assert (= (on-local (fn [] (output (Script "printf '%s|%s' \"$1\" \"$2\"" hostile "2"))))
             (+ hostile "|2"))
          "the script sees the arguments as they are"))

(defn test-run-script-runs-shell-code []
  (setv r (on-local (fn [] (run-script "echo out; exit 3" :check False))))
  (assert (= #(r.exit-code r.stdout) #(3 "out\n")) f"ran as shell code: {r !r}"))

(defn test-a-failing-script-names-its-code-and-arguments []
  (try (on-local (fn [] (run-script "exit 4" "arg one")))
       (except [e CommandFailed]
         (assert (in "exit 4" e.command) e.command)
         (assert (in "'arg one'" e.command) e.command))
       (else (assert False "exit 4 must fail"))))
