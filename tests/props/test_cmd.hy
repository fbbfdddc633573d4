;; cmd.single

(require consfig *)
(import os
        proptest [LOCAL apply-twice deploy-propspec])
(use-props consfig.props [cmd])

(defn slurp [p] (with [f (open p)] (.read f)))

(defn test-single-always-changes [tmp-path]
  (setv out (str (/ tmp-path "out")))
  (for [_ (range 2)]
    (setv #(o _) (deploy-propspec LOCAL (cmd.single "sh" "-c" "echo x >> \"$1\"" "sh" out)))
    (assert (= o.status "changed") "a command is a change"))
  (assert (= (slurp out) "x\nx\n") "ran twice"))

(defn test-single-env-input-cwd [tmp-path]
  (setv d (/ tmp-path "dir with space"))
  (os.mkdir d)
  (deploy-propspec LOCAL (cmd.script "cat > \"$NAME\"" :env {"NAME" "it's $(here)"}
                                     :input "from stdin\n" :cwd (str d)))
  (assert (= (slurp (/ d "it's $(here)")) "from stdin\n") "env, input and cwd"))

(defn test-single-creates-makes-it-idempotent [tmp-path]
  (setv marker (str (/ tmp-path "-made; $(x)")))
  (apply-twice LOCAL (cmd.single "touch" "--" marker :creates marker))
  (assert (os.path.exists marker) "created"))

(defn test-single-creates-relative-to-cwd [tmp-path]
  (apply-twice LOCAL (cmd.single "touch" "made" :cwd (str tmp-path) :creates "made"))
  (assert (os.path.exists (/ tmp-path "made")) "relative to cwd"))

(defn test-single-failure-is-reported [tmp-path]
  (setv #(o events) (deploy-propspec LOCAL (cmd.script "echo oops >&2; exit 3") :check False))
  (assert (= o.status "failed") "failed")
  (assert (any (gfor e events (in "oops" (.get e "message" "")))) "with its output"))

(defn test-single-runs-one-argument-as-a-program-not-a-script [tmp-path]
  (setv marker (/ tmp-path "pwned")
        #(o events) (deploy-propspec LOCAL (cmd.single f"{tmp-path}/a file; touch {marker}")
                                     :check False))
  (assert (= o.status "failed") "there is no such program")
  (assert (not (os.path.exists marker)) "the text after ; did not run")
  (assert (any (gfor e events (in "not found" (.get e "message" "")))) "the whole path was the program"))

(defn test-single-runs-a-lone-path-that-exists [tmp-path]
  (setv prog (/ tmp-path "it's a $(prog)")
        out (/ tmp-path "out"))
  (with [f (open prog "w")] (.write f f"#!/bin/sh\necho ran > '{out}'\n"))
  (os.chmod prog 0o755)
  (deploy-propspec LOCAL (cmd.single (str prog)))
  (assert (= (slurp out) "ran\n") "the lone argument is the program run"))

(defn test-script-takes-values-as-positional-arguments [tmp-path]
  (setv out (str (/ tmp-path "$(touch pwned); x")))
  (deploy-propspec LOCAL (cmd.script "printf '%s\\n' \"$2\" > \"$1\"" out "a b; $(c)"))
  (assert (= (slurp out) "a b; $(c)\n") "arguments arrive as they are")
  (assert (not (os.path.exists "pwned")) "nothing in them ran"))

(defn consfig-error [tmp-path text]
  "The error loading TEXT as a consfig gives."
  (import consfig.errors [ConsfigError] consfig.site.load [load-consfig])
  (setv f (/ tmp-path "site.hy"))
  (.write-text f (+ "(require consfig *)\n(import consfig *)\n(use-props consfig.props [cmd])\n" text))
  (try (load-consfig (str f))
       (except [e ConsfigError] (return (str e))))
  (assert False "the consfig loaded without error"))

(defn test-single-with-a-command-line-in-one-string-is-refused-at-load [tmp-path]
  (setv msg (consfig-error tmp-path "\n(defhost h.example {}\n  (cmd.single \"apt-get update\"))\n"))
  (assert (in "site.hy:6: cmd.single" msg) msg)
  (assert (in "(cmd.single \"apt-get\" \"update\")" msg) msg)
  (assert (in "cmd.script" msg) msg))

(defn test-single-refuses-shell-code-in-its-program-name [tmp-path]
  (setv msg (consfig-error tmp-path "(cmd.single \"ls -l | wc -l\")\n"))
  (assert (in "site.hy:4: cmd.single" msg) msg)
  (assert (in "(cmd.script \"ls -l | wc -l\")" msg) msg))

(defn test-single-refuses-a-command-line-whose-arguments-hold-a-path [tmp-path]
  (setv msg (consfig-error tmp-path "(cmd.single \"touch /tmp/x\")\n"))
  (assert (in "site.hy:4: cmd.single" msg) msg)
  (assert (in "(cmd.single \"touch\" \"/tmp/x\")" msg) msg))

(defn test-single-takes-a-program-path-with-spaces []
  (assert (cmd.single "/opt/My Tools/run it" "--flag") "a path names the program, spaces and all"))
