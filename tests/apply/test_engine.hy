;; The engine's failure accounting, one behaviour per test: every failure —
;; in any subroutine, in announced and unannounced properties, through every
;; combinator — gets a line of its own naming the property, is counted once,
;; and makes the deployment fail.

(require consfig *)
(import consfig *
        consfig.apply.events [first-report?]
        pytest)
(use-props consfig.props [cmd file])

(setv applied [])

(defn [(pytest.fixture :autouse True)] reset []
  (.clear applied))

(defprop works :posix [name]
  "NAME gets applied (recorded in `applied`)."
  (:desc name)
  (:apply (.append applied name)))

(defprop fails-in :posix [which]
  "A property whose subroutine WHICH fails (a FailedChange)."
  (:desc (if (= which "desc") (raise (FailedChange "desc broke")) f"fails in {which}"))
  ;; Applied already only where unapplying is what is tested.
  (:check (if (= which "check") (raise (FailedChange "check broke")) (= which "unapply")))
  (:apply (when (= which "apply") (raise (FailedChange "apply broke"))))
  (:unapply (when (= which "unapply") (raise (FailedChange "unapply broke")))))

(defprop buggy-desc :posix []
  "A site property with a bug in its :desc."
  (:desc (no-such-function))  ; noqa: the bug
  (:apply (.append applied "buggy-desc")))

(defprop unannounced-failing :posix []
  "An unannounced property whose own :apply fails."
  (:announce False)
  (:apply (raise (FailedChange "no announcement, still a failure"))))

(defprop hostattrs-bug :posix []
  "A property with a bug in its :hostattrs."
  (:hostattrs (push-hostattr "x" (undefined-helper)))  ; noqa: the bug
  (:apply (.append applied "hostattrs-bug")))

(defprop preprocess-fails :posix [x]
  "A property whose :preprocess refuses its argument."
  (:preprocess (raise (FailedChange f"cannot use {x}")))
  (:apply (.append applied "preprocess-fails")))

(defhost engine.example {:deploy :local}
  "A host for applying test propspecs.")

(defn apply [events propspec]
  (deploy-these* [:local] engine propspec :sink events))

(defn failures [events]
  "The failed end events that report a failure first, in order."
  (lfor e events.events :if (first-report? e) e))

(defn messages [events]
  (lfor e (failures events) (get e "message")))

(defn test-a-failing-desc-gets-a-failed-line-under-the-property-name [events]
  (setv outcome (apply events (eseqprops (fails-in "desc"))))
  (assert (= (events.ends) [#("fails-in desc" "failed")]) (events.ends))
  (assert (= (messages events) ["desc broke"]) (messages events))
  (assert (= outcome.failures 1) outcome.failures)
  (assert (= (.exit-code outcome) 1) "a failure is exit 1"))

(defn test-a-failing-check-is-a-failure-of-that-property [events]
  (setv outcome (apply events (eseqprops (fails-in "check"))))
  (assert (= (events.ends) [#("fails in check" "failed")]) (events.ends))
  (assert (= (messages events) ["check broke"]) (messages events))
  (assert (= outcome.status "failed") outcome))

(defn test-a-failing-apply-is-a-failure-of-that-property [events]
  (setv outcome (apply events (eseqprops (fails-in "apply"))))
  (assert (= (messages events) ["apply broke"]) (messages events))
  (assert (= outcome.status "failed") outcome))

(defn test-a-failing-unapply-is-a-failure-of-that-property [events]
  (setv outcome (apply events (unapplied (fails-in "unapply"))))
  (assert (= (messages events) ["unapply broke"]) (messages events))
  (assert (= outcome.status "failed") outcome))

(defn test-a-bug-in-site-code-names-the-file-and-line [events]
  (apply events (seqprops (buggy-desc)))
  (setv [failure] (failures events))
  (assert (= (get failure "desc") "buggy-desc") failure)
  (assert (= (get failure "property") "buggy-desc") failure)
  (assert (.startswith (get failure "message") "NameError:") failure)
  (assert (.startswith (get failure "where") "test_engine.hy:") failure)
  (assert (in "Traceback" (get failure "traceback")) "the traceback is kept for -v"))

(defn test-a-failure-of-the-property-itself-has-no-traceback [events]
  (apply events (eseqprops (fails-in "apply")))
  (setv [failure] (failures events))
  (assert (not-in "traceback" failure) failure)
  (assert (not-in "where" failure) failure))

(defn test-seqprops-carries-on-after-a-failing-desc [events]
  (setv outcome (apply events (seqprops (buggy-desc) (works "after"))))
  (assert (= applied ["after"]) applied)
  (assert (= outcome.failures 1) outcome.failures)
  (assert (= outcome.status "failed") "the other property's change does not hide the failure"))

(defn test-an-unannounced-property-that-fails-gets-its-own-line [events]
  (setv outcome (apply events (seqprops (unannounced-failing) (works "after"))))
  (assert (= (events.ends) [#("unannounced-failing" "failed") #("after" "changed")])
          (events.ends))
  (assert (= (messages events) ["no announcement, still a failure"]) (messages events))
  (assert (= outcome.status "failed") outcome))

(defn test-with-flagfile-that-cannot-make-its-flag-fails [events]
  (setv outcome (apply events (with-flagfile "/proc/no/such/flag" (works "a"))))
  (assert (= applied ["a"]) applied)
  (assert (= outcome.status "failed") "changes were made, but the flag could not be")
  (setv [failure] (failures events))
  (assert (.startswith (get failure "desc") "with-flagfile /proc/no/such/flag") failure)
  (assert (in "mkdir" (get failure "message")) failure))

(defn test-a-failure-inside-desc-is-shown-once-and-counted-once [events]
  (setv outcome (apply events (desc "outer" (eseqprops (works "a") (fails-in "apply")
                                                        (works "b")))))
  (assert (= (events.ends) [#("a" "changed") #("fails in apply" "failed")
                            #("b" "skipped") #("outer" "failed")])
          (events.ends))
  (assert (= (messages events) ["apply broke"]) (messages events))
  (assert (= outcome.failures 1) outcome.failures))

(defn test-a-failing-desc-inside-a-dotted-desc-still-gets-its-line [events]
  (apply events (props seqprops (desc* "group" (fails-in "desc") (works "sibling"))))
  (assert (= (events.ends) [#("fails-in desc" "failed") #("sibling" "skipped")
                            #("group" "failed")])
          (events.ends)))

(defn test-nested-seqprops-carries-on-and-fails-its-eseqprops [events]
  (setv outcome (apply events (eseqprops (seqprops (fails-in "apply") (works "a"))
                                         (works "b"))))
  (assert (= applied ["a"]) "the inner seqprops carried on, the outer eseqprops stopped")
  (assert (= (events.status-of "b") "skipped") (events.ends))
  (assert (= outcome.failures 1) outcome.failures))

(defn test-nested-eseqprops-failure-lets-outer-seqprops-carry-on [events]
  (setv outcome (apply events (seqprops (eseqprops (fails-in "apply") (works "a"))
                                        (works "b"))))
  (assert (= applied ["b"]) applied)
  (assert (= outcome.failures 1) outcome.failures))

(defn test-silent-seqprops-still-reports-a-failure [events]
  (setv outcome (apply events (silent-seqprops (works "a") (fails-in "apply") (works "b"))))
  (assert (= applied ["a" "b"]) applied)
  (assert (= (messages events) ["apply broke"]) (messages events))
  (assert (= outcome.status "failed") outcome))

(defn test-on-change-failing-consequent-is-counted [events]
  (setv outcome (apply events (on-change (works "conf") (fails-in "apply"))))
  (assert (= (messages events) ["apply broke"]) (messages events))
  (assert (= (events.status-of "conf") "failed") "the on-change line ends failed")
  (assert (= outcome.failures 1) outcome.failures))

(defn test-on-change-failing-antecedent-runs-no-consequent [events]
  (setv outcome (apply events (on-change (fails-in "apply") (works "restart"))))
  (assert (= applied []) applied)
  (assert (= (messages events) ["apply broke"]) (messages events))
  (assert (= outcome.status "failed") outcome))

(defn test-eseqprops-until-ends-quietly-but-still-counts-the-failure [events]
  (setv outcome (apply events (props eseqprops
                                (eseqprops-until :failed-change (fails-in "apply") (works "a"))
                                (works "after"))))
  (assert (= applied ["after"]) applied)
  (assert (= outcome.failures 1) outcome.failures))

(defn test-summary-event-counts-every-failure [events]
  (apply events (seqprops (fails-in "apply") (buggy-desc) (unannounced-failing) (works "a")))
  (setv summary (events.summary))
  (assert (= (get summary "failures") 3) summary)
  (assert (= (get summary "status") "failed") summary))

(defn test-a-failing-hostattrs-is-a-consfig-error-before-anything-applies [events]
  (with [e (pytest.raises PropspecError)]
    (apply events (eseqprops (works "first") (hostattrs-bug))))
  (assert (= applied []) "nothing was applied")
  (setv text (str e.value))
  (assert (in "hostattrs-bug: its :hostattrs failed: NameError" text) text)
  (assert (in "engine.example: test_engine.hy:" text) "names the host, then file:line"))

(defn test-a-failing-preprocess-is-a-consfig-error-before-anything-applies [events]
  (with [e (pytest.raises PropspecError)]
    (apply events (eseqprops (works "first") (preprocess-fails "x"))))
  (assert (= applied []) "nothing was applied")
  (assert (in "preprocess-fails: its :preprocess failed: cannot use x" (str e.value))
          (str e.value)))

(defhost nested-failing.example {:deploy :local}
  (file.has-content "/proc/no/such/dir/file" "x\n"))

(defhost nested-local.example {:deploy :local}
  (fails-in "apply"))

(defn test-a-failing-nested-deployment-fails-the-outer-one [events]
  (setv outcome (apply events (propapp (deploys [:local :python] nested-failing.example))))
  (assert (= outcome.failures 1) (events.ends))
  (assert (= (events.status-of "Deployed nested-failing.example") "failed") (events.ends)))

(defn test-a-failing-local-nested-deployment-fails-the-outer-one [events]
  (setv outcome (apply events (propapp (deploys :local nested-local.example))))
  (assert (= outcome.failures 1) (events.ends))
  (assert (= (messages events) ["apply broke"]) (messages events)))

(defn test-a-failed-commands-reason-ends-with-its-last-lines [events]
  (apply events (eseqprops (cmd.single "sh" "-c" "seq 1 100; exit 3")))
  (setv [failure] (failures events)
        lines (.splitlines (get failure "message")))
  (assert (in "exit code 3" (get lines 0)) lines)
  (assert (in "80 earlier lines not shown" (get lines 1)) lines)
  (assert (= (.strip (get lines -1)) "100") lines)
  (assert (< (len lines) 25) "not the whole output"))

(defn test-commands-are-reported-as-they-run [events]
  (apply events (eseqprops (cmd.single "echo" "it's here")))
  (setv runs (lfor e events.events :if (= (.get e "stream") "run") (get e "text")))
  (assert (= runs ["$ echo 'it'\"'\"'s here'"]) runs))
