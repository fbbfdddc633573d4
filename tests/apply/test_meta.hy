;; Meta-parameters (consfig.apply.meta): `with-meta` checked when it is built,
;; printed and read back as data, and applied for real over :local --
;; retries counted in a real file, :noop on real files, :reverse kept in
;; consfig's state directory.

(require consfig *)
(import consfig *
        consfig.apply.events [first-report?]
        consfig.model.propspec [propspec->data data->propspec]
        json
        os
        pathlib
        pytest
        sys
        time)
(use-props consfig.props [file cmd])
;; proptest, the property tests' helpers, for `checks-clean`.
(.insert sys.path 0 (str (/ (. (pathlib.Path __file__) parent parent) "props")))
(import proptest [checks-clean])

(defprop fails-until :posix [#^ abs-path counter #^ integer failures]
  "Count each attempt in the file COUNTER; the first FAILURES attempts fail."
  (:desc f"fails {failures} times")
  (:apply
    (run-script "n=$(cat \"$1\" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > \"$1\"
[ $n -gt \"$2\" ] || { echo \"attempt $n refused\" >&2; exit 3; }" counter (str failures))
    :changed))

(defn attempts [counter]
  (int (.read-text (pathlib.Path counter))))

(setv HOSTNAME f"meta-{(os.getpid)}.consfig.invalid")

(defn reverse-file []
  (pathlib.Path (state-directory) "reverse" f"{HOSTNAME}.json"))

(defn [(pytest.fixture :autouse True)] fresh-state []
  (.unlink (reverse-file) :missing-ok True)
  (yield)
  (.unlink (reverse-file) :missing-ok True))

(defn deploy-props [events propspec * [check False]]
  (deploy-these* [:local] (make-host HOSTNAME None None (eseqprops)) propspec
                 :sink events :check check))

(defn deploy-host [events propspec * [check False]]
  "Deploy a host whose whole propspec is PROPSPEC (so :reverse is kept)."
  (deploy* [:local] (make-host HOSTNAME None None propspec) :sink events :check check))

(defn notes [events]
  (lfor e events.events :if (= (.get e "stream") "note") (get e "text")))

(defn refusal [thunk]
  (try (thunk)
       (except [e PropspecError] (return (str e))))
  (assert False "it was accepted"))

;; Checked where it is written

(defn test-with-meta-prints-and-reads-back-equal []
  (setv p (with-meta {:retry 3 :delay 0.5 :noop False} (file.has-content "/tmp/x" "hi\n")))
  (assert (= (read-propspec (propspec->string p)) p) (propspec->string p))
  (assert (= (data->propspec (propspec->data p)) p) (propspec->data p))
  (assert (= (json.loads (json.dumps (propspec->data p))) (propspec->data p))
          "its data is JSON"))

(defn test-with-meta-refuses-an-unknown-meta-parameter-naming-the-nearest []
  (setv m (refusal (fn [] (with-meta {:retyr 3} (file.has-content "/tmp/x" "")))))
  (assert (in ":retyr" m) m)
  (assert (in "did you mean :retry?" m) m))

(defn test-with-meta-refuses-a-negative-retry []
  (assert (in ":retry must be" (refusal (fn [] (with-meta {:retry -1} (file.has-content "/tmp/x" "")))))))

(defn test-with-meta-refuses-a-delay-that-is-not-a-number []
  (setv m (refusal (fn [] (with-meta {:retry 1 :delay "5"} (file.has-content "/tmp/x" "")))))
  (assert (in ":delay must be" m) m))

(defn test-with-meta-refuses-burst-without-limit []
  (assert (in ":burst needs :limit" (refusal (fn [] (with-meta {:burst 5} (file.has-content "/tmp/x" "")))))))

(defn test-with-meta-refuses-a-non-boolean-noop []
  (assert (in ":noop must be True or False"
              (refusal (fn [] (with-meta {:noop 1} (file.has-content "/tmp/x" "")))))))

(defn test-with-meta-refuses-reverse-around-a-property-without-unapply []
  (setv m (refusal (fn [] (with-meta {:reverse True} (cmd.single "true")))))
  (assert (in "cmd.single has no :unapply" m) m))

(defn test-with-meta-refuses-reverse-around-a-proplist-that-holds-one-without-unapply []
  (defproplist touch-and-run [path]
    (file.has-content path "")
    (cmd.single "true"))
  (setv host (make-host HOSTNAME None None (propapp (with-meta {:reverse True} (touch-and-run "/tmp/x")))))
  (with [e (pytest.raises PropspecError)]
    (deploy* [:local] host :sink (fn [e] None)))
  (assert (in "cmd.single has no :unapply" (str e.value)) (str e.value)))

(defn test-with-meta-names-the-file-and-line-of-a-mistake []
  (with [e (pytest.raises PropspecError)]
    (propapp (with-meta {:retry "many"} (file.has-content "/tmp/x" ""))))
  (assert (in "test_meta.hy:" (str e.value)) (str e.value)))

(defn test-reading-back-from-data-checks-the-meta-parameters-again []
  (setv data (propspec->data (with-meta {:retry 2} (file.has-content "/tmp/x" ""))))
  (setv (get data "args" 0 "dict" 0 1) -2)
  (with [e (pytest.raises PropspecError)]
    (data->propspec data))
  (assert (in ":retry must be" (str e.value)) (str e.value)))

;; :retry and :delay

(defn test-retry-applies-again-until-a-property-succeeds [events tmp-path]
  (setv counter (str (/ tmp-path "count")))
  (setv outcome (deploy-props events (with-meta {:retry 3 :delay 0.01} (fails-until counter 2))))
  (assert (= (attempts counter) 3) "two failed attempts, then one that succeeded")
  (assert (= outcome.status "changed") (events.ends))
  (assert (= outcome.failures 0) "a failure that was retried away is not counted"))

(defn test-each-failed-attempt-is-an-event-that-says-which-and-why [events tmp-path]
  (setv counter (str (/ tmp-path "count")))
  (deploy-props events (with-meta {:retry 3 :delay 0.01} (fails-until counter 2)))
  (setv retries (lfor e events.events :if (in "attempt" e) e))
  (assert (= (lfor e retries #((get e "attempt") (get e "attempts"))) [#(1 4) #(2 4)]) retries)
  (assert (in "attempt 1 refused" (get (get retries 0) "message")) (get retries 0))
  (assert (in "attempt 1 of 4 failed" (get (get retries 0) "text")) (get retries 0)))

(defn test-a-property-that-always-fails-is-reported-failed-once-after-its-retries [events tmp-path]
  (setv counter (str (/ tmp-path "count")))
  (setv outcome (deploy-props events (with-meta {:retry 2} (fails-until counter 100))))
  (assert (= (attempts counter) 3) "the first attempt and two retries")
  (assert (= outcome.failures 1) (events.ends))
  (assert (= (len (lfor e events.events :if (first-report? e) e)) 1) (events.ends))
  (assert (in "attempt 3 refused" (get (lfor e events.events :if (first-report? e) e) 0 "message"))
          "the last attempt's failure is the one reported"))

(defn test-delay-waits-between-attempts [events tmp-path]
  (setv counter (str (/ tmp-path "count"))
        started (time.monotonic))
  (deploy-props events (with-meta {:retry 2 :delay 0.2} (fails-until counter 2)))
  (assert (>= (- (time.monotonic) started) 0.4) "two pauses of 0.2 s"))

(defn test-an-inner-with-meta-wins-over-an-outer-one [events tmp-path]
  (setv counter (str (/ tmp-path "count")))
  (setv outcome (deploy-props events (with-meta {:retry 5}
                                       (with-meta {:retry 1} (fails-until counter 3)))))
  (assert (= (attempts counter) 2) "the inner :retry 1 holds")
  (assert (= outcome.status "failed") (events.ends)))

(setv aborted [])

(defprop aborts :posix []
  "Refuses before changing anything, every time."
  (:desc "aborts")
  (:apply (.append aborted 1)
          (raise (AbortedChange "refused: nothing to gain from trying again"))))

(defn test-retry-is-not-used-for-a-change-that-was-refused [events]
  (.clear aborted)
  (setv outcome (deploy-props events (with-meta {:retry 3} (aborts))))
  (assert (= outcome.status "failed") (events.ends))
  (assert (= (len aborted) 1) "an aborted change is not tried again"))

;; :noop

(defn test-noop-reports-drift-with-a-diff-and-changes-nothing [events tmp-path]
  (setv path (/ tmp-path "motd"))
  (.write-text path "old\n")
  (setv outcome (deploy-props events (with-meta {:noop True} (file.has-content (str path) "new\n"))))
  (assert (= (.read-text path) "old\n") "nothing was changed")
  (assert (= (events.status-of f"{path} has content") "would-change") (events.ends))
  (assert (any (gfor e events.events (and (= (get e "event") "diff") (in "+new" (get e "text")))))
          "the drift is shown as a diff"))

(defn test-noop-drift-is-counted-as-drift-not-as-changes [events tmp-path]
  (setv path (/ tmp-path "motd"))
  (setv outcome (deploy-props events (propapp (eseqprops
                  (with-meta {:noop True} (file.has-content (str path) "new\n"))
                  (file.has-content (str (/ tmp-path "other")) "x\n")))))
  (assert (= #(outcome.changes outcome.drift) #(1 1)) #(outcome.changes outcome.drift))
  (assert (= (get (events.summary) "drift") 1) (events.summary)))

(defn test-noop-notifies-no-handler [events tmp-path]
  (setv path (/ tmp-path "conf")
        restarts (/ tmp-path "restarts"))
  (deploy-props events (propapp (eseqprops
    (with-meta {:noop True}
      (notifies "restart" (file.has-content (str path) "new\n")))
    (handler "restart" (file.has-content (str restarts) "restarted\n")))))
  (assert (not (.exists restarts)) "the handler did not run")
  (assert (not (.exists (pathlib.Path (state-directory) "handlers" f"{HOSTNAME}.json")))
          "nor is it owed"))

;; :reverse

(defn test-a-property-under-reverse-is-unapplied-once-it-leaves-the-propspec [events tmp-path]
  (setv path (/ tmp-path "managed"))
  (setv spec (propapp (eseqprops (with-meta {:reverse True} (file.exists-with-content (str path) "x\n")))))
  (deploy-host events spec)
  (assert (.exists path) "applied")
  (assert (.exists (reverse-file)) "recorded on the target")
  ;; The record kept, the whole host (removed-unapplied too) checks clean.
  (checks-clean [:local] spec :hostname HOSTNAME :whole-host True)
  (.clear events.events)
  (setv outcome (deploy-host events (propapp (eseqprops))))
  (assert (not (.exists path)) "unapplied once it left the propspec")
  (assert (= outcome.status "changed") (events.ends))
  (assert (not (.exists (reverse-file))) "forgotten once unapplied"))

(defn test-a-property-still-under-reverse-is-left-applied [events tmp-path]
  (setv path (/ tmp-path "managed")
        spec (propapp (with-meta {:reverse True} (file.exists-with-content (str path) "x\n"))))
  (deploy-host events spec)
  (setv outcome (deploy-host events spec))
  (assert (.exists path) "still wanted")
  (assert (= outcome.status "no-change") (events.ends)))

(defn test-deploy-these-leaves-what-reverse-recorded-alone [events tmp-path]
  (setv path (/ tmp-path "managed"))
  (deploy-host events (propapp (with-meta {:reverse True} (file.exists-with-content (str path) "x\n"))))
  (deploy-props events (propapp (file.has-content (str (/ tmp-path "other")) "y\n")))
  (assert (.exists path) "a deploy-these applies just some properties: nothing left the propspec")
  (assert (.exists (reverse-file)) "still recorded"))

(defn test-a-reverse-property-applied-by-deploy-these-is-unapplied-by-the-next-whole-deployment [events tmp-path]
  (setv path (/ tmp-path "temporary"))
  (deploy-props events (propapp (with-meta {:reverse True} (file.exists-with-content (str path) "x\n"))))
  (assert (.exists path) "applied by deploy-these")
  (deploy-host events (propapp (eseqprops)))
  (assert (not (.exists path)) "the host's own propspec does not have it"))

(defn test-a-failing-unapply-stays-recorded-and-is-tried-next-time [events tmp-path]
  (setv d (/ tmp-path "d")
        path (/ d "managed"))
  (.mkdir d)
  (deploy-host events (propapp (with-meta {:reverse True} (file.exists-with-content (str path) "x\n"))))
  ;; A directory the root user may not remove a file from: immutable is
  ;; not to be had everywhere, so the file becomes a non-empty directory.
  (.unlink path)
  (.mkdir path)
  (.write-text (/ path "inside") "")
  (setv outcome (deploy-host events (propapp (eseqprops))))
  (assert (= outcome.status "failed") (events.ends))
  (assert (.exists (reverse-file)) "still recorded after a failed unapply")
  (.unlink (/ path "inside"))
  (.rmdir path)
  (.write-text path "x\n")
  (.clear events.events)
  (setv outcome (deploy-host events (propapp (eseqprops))))
  (assert (not (.exists path)) "unapplied by the next deployment")
  (assert (not (.exists (reverse-file))) "then forgotten"))

(defn test-check-mode-shows-what-would-be-unapplied-and-keeps-the-record [events tmp-path]
  (setv path (/ tmp-path "managed"))
  (deploy-host events (propapp (with-meta {:reverse True} (file.exists-with-content (str path) "x\n"))))
  (.clear events.events)
  (setv outcome (deploy-host events (propapp (eseqprops)) :check True))
  (assert (.exists path) "a check changes nothing")
  (assert (.exists (reverse-file)) "a check forgets nothing")
  (assert (= outcome.status "changed") (events.ends)))

(defn test-a-property-no-longer-under-reverse-stays-applied-and-is-forgotten [events tmp-path]
  (setv path (/ tmp-path "managed"))
  (deploy-host events (propapp (with-meta {:reverse True} (file.exists-with-content (str path) "x\n"))))
  (deploy-host events (propapp (file.exists-with-content (str path) "x\n")))
  (assert (.exists path) "still in the propspec")
  (assert (not (.exists (reverse-file))) "forgotten: removing it later leaves it be")
  (deploy-host events (propapp (eseqprops)))
  (assert (.exists path) "no longer reversible"))

(defn test-a-record-that-is-not-consfigs-fails-the-deployment-and-is-kept [events tmp-path]
  (.mkdir (. (reverse-file) parent) :parents True :exist-ok True)
  (.write-text (reverse-file) "{\"applied\": 3}")
  (setv outcome (deploy-host events (propapp (eseqprops))))
  (assert (= outcome.status "failed") (events.ends))
  (setv [failure] (lfor e events.events :if (first-report? e) e))
  (assert (in (str (reverse-file)) (get failure "message")) failure)
  (assert (= (.read-text (reverse-file)) "{\"applied\": 3}") "left for a person to look at"))

(defn test-with-meta-refuses-a-key-that-is-no-name []
  (assert (in "unknown meta-parameter 1" (refusal (fn [] (with-meta {1 2} (file.has-content "/tmp/x" "")))))))

(defn test-an-edited-proplist-under-reverse-unapplies-only-what-it-no-longer-holds [events tmp-path]
  (setv a (/ tmp-path "a")
        b (/ tmp-path "b"))
  (defproplist two-files []
    (file.exists-with-content (str a) "a\n")
    (file.exists-with-content (str b) "b\n"))
  (defproplist one-file []
    (file.exists-with-content (str a) "a\n"))
  (deploy-host events (propapp (with-meta {:reverse True} (two-files))))
  (assert (and (.exists a) (.exists b)) "both applied")
  (setv outcome (deploy-host events (propapp (with-meta {:reverse True} (one-file)))))
  (assert (.exists a) "still held: kept")
  (assert (not (.exists b)) "no longer held: unapplied")
  (assert (= outcome.failures 0) (events.ends))
  (deploy-host events (propapp (eseqprops)))
  (assert (not (.exists a)) "then removed altogether: unapplied")
  (assert (not (.exists (reverse-file))) "and nothing left recorded"))

;; Shown

(defn test-check-mode-shows-the-meta-parameters-after-the-description [events tmp-path]
  (setv path (/ tmp-path "motd"))
  (deploy-props events (with-meta {:retry 3 :delay 5} (file.has-content (str path) "x\n")) :check True)
  (assert (= (events.status-of f"{path} has content (retry 3, delay 5 s)") "would-change")
          (events.ends)))

;; For the agent

(defn test-effective-meta-gives-each-leaf-the-meta-parameters-around-it []
  (setv a (file.has-content "/tmp/a" "")
        b (file.has-content "/tmp/b" "")
        c (file.has-content "/tmp/c" ""))
  (setv found (effective-meta (propapp (eseqprops
                (with-meta {:retry 3 :poll 60}
                  (eseqprops a (with-meta {:retry 1 :noop True} b)))
                c))))
  (assert (= found [[a {"retry" 3 "poll" 60}]
                    [b {"retry" 1 "poll" 60 "noop" True}]
                    [c {}]])
          found))

(defclass Clock []
  (defn __init__ [self] (setv self.now 100.0))
  (defn __call__ [self] self.now))

(defn test-repair-limit-allows-a-burst-then-refuses []
  (setv clock (Clock)
        limit (RepairLimit 1 3 :clock clock))
  (assert (= (lfor _ (range 4) (.allow limit)) [True True True False]) "three at once, not four"))

(defn test-repair-limit-allows-again-at-its-rate []
  (setv clock (Clock)
        limit (RepairLimit 2 1 :clock clock))
  (assert (.allow limit) "the first")
  (assert (not (.allow limit)) "none left")
  (assert (= (.next-allowed limit) 100.5) (.next-allowed limit))
  (setv clock.now 100.5)
  (assert (.allow limit) "one token after half a second at 2/s"))

(defn test-repair-limit-refuses-a-burst-below-one []
  (with [(pytest.raises ValueError)]
    (RepairLimit 1 0)))
