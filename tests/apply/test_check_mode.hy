;; Check mode: every :check runs, nothing changes, and each property says
;; whether it holds, would change, or cannot be checked.

(require consfig *)
(import consfig *
        pytest)

(setv log [])
(setv state #{})

(defn [(pytest.fixture :autouse True)] reset []
  (.clear log)
  (.clear state))

(defprop kept :posix [name]
  "NAME is in `state`; its check says what differs."
  (:desc name)
  (:check (if (in name state) True (Drift f"{name} is missing" :diff "-\n+x\n" :path "/f")))
  (:apply (.append log #("apply" name)) (.add state name))
  (:unapply (.append log #("unapply" name)) (.discard state name)))

(defprop unchecked :posix [name]
  "A property with no :check: check mode cannot know."
  (:desc name)
  (:apply (.append log #("apply" name))))

(defprop simulated :posix [name]
  "A property whose :apply asks `checking?` and changes nothing then."
  (:desc name)
  (:simulates True)
  (:apply (if (checking?) :would-change (.append log #("apply" name)))))

(defhost checkmode.example {:deploy :local}
  "A host for checking test propspecs.")

(defn check [events propspec]
  (deploy-these* [:local] checkmode propspec :sink events :check True))

(defn test-a-holding-property-is-ok-and-a-missing-one-would-change [events]
  (.add state "a")
  (setv outcome (check events (eseqprops (kept "a") (kept "b"))))
  (assert (= (events.ends) [#("a" "ok") #("b" "would-change")]) (events.ends))
  (assert (= log []) "nothing applied")
  (assert (= (.exit-code outcome True) 2) "2 under --detailed-exitcode"))

(defn test-nothing-would-change-exits-0 [events]
  (.add state "a")
  (setv outcome (check events (eseqprops (kept "a"))))
  (assert (= (.exit-code outcome True) 0) outcome)
  (assert (get (events.summary) "check") (events.summary)))

(defn test-a-drift-explains-itself-with-a-note-and-a-diff [events]
  (check events (eseqprops (kept "b")))
  (setv notes (lfor e events.events :if (= (get e "event") "output") (get e "text"))
        diffs (lfor e events.events :if (= (get e "event") "diff") e))
  (assert (= notes ["b is missing"]) notes)
  (assert (= (lfor d diffs #((get d "path") (get d "text"))) [#("/f" "-\n+x\n")]) diffs))

(defn test-a-property-without-check-cannot-be-checked-and-is-not-applied [events]
  (setv outcome (check events (eseqprops (unchecked "cmd"))))
  (assert (= (events.ends) [#("cmd" "cannot-check")]) (events.ends))
  (assert (= log []) "its :apply did not run")
  (assert (= (.exit-code outcome True) 2) "it would run"))

(defn test-a-simulating-property-is-run-and-changes-nothing [events]
  (check events (eseqprops (simulated "s")))
  (assert (= (events.ends) [#("s" "would-change")]) (events.ends))
  (assert (= log []) log))

(defn test-on-change-consequents-would-run-when-the-antecedent-would-change [events]
  (check events (on-change (kept "conf") (unchecked "restart")))
  (assert (= (events.ends) [#("restart" "cannot-check") #("conf" "would-change")]) (events.ends))
  (assert (= log []) log))

(defn test-on-change-consequents-do-not-run-when-the-antecedent-holds [events]
  (.add state "conf")
  (check events (on-change (kept "conf") (unchecked "restart")))
  (assert (= (events.ends) [#("conf" "ok")]) (events.ends)))

(defn test-unapplied-inverts-the-check [events]
  (.add state "a")
  (check events (unapplied (kept "a")))
  (assert (= (events.status-of "Unapplied: a") "would-change") (events.ends))
  (assert (= state #{"a"}) "still applied"))

(defn test-with-flagfile-answers-from-its-flag [events tmp-path]
  (setv flag (/ tmp-path "flag"))
  (check events (with-flagfile (str flag) (unchecked "once")))
  (assert (= log []) log)
  (assert (not (.exists flag)) "no flag made")
  (assert (= (. (events.summary) ["changes"]) 1) (events.summary))
  (.touch flag)
  (setv outcome (check events (with-flagfile (str flag) (unchecked "once"))))
  (assert (= outcome.status "no-change") outcome))

(defn test-a-failing-check-fails-in-check-mode-too [events]
  (defprop broken-check :posix []
    (:check (raise (FailedChange "cannot tell")))
    (:apply None))
  (setv outcome (check events (eseqprops (broken-check))))
  (assert (= (.exit-code outcome True) 1) outcome))

(defn test-the-deploy-macros-take-check-as-an-option [events]
  (.add state "a")
  (setv outcome (deploy-these :local checkmode :check True :sink events (kept "a") (kept "b")))
  (assert (= (events.ends) [#("a" "ok") #("b" "would-change")]) (events.ends))
  (assert (= log []) "nothing applied"))

(defn test-a-file-whose-content-and-mode-both-differ-shows-both [events tmp-path]
  (import os)
  (setv f (/ tmp-path "conf"))
  (.write-text f "old\n")
  (os.chmod f 0o600)
  (check events (hy.I.consfig/props/file.has-content (str f) "new\n" :mode 0o644))
  (setv said (str events.events))
  (assert (in "would change" said) said)
  (assert (in "mode 600 → 644" said) said)
  (assert (= (.read-text f) "old\n") "nothing changed"))
