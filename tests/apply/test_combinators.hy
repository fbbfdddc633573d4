;; Combinators, one behaviour per test, applied for real over :local.

(require consfig *)
(import consfig *
        pytest)
(use-props consfig.props [os file])

;; What `noted` did, in order, and which names are currently "applied".
(setv log [])
(setv state #{})

(defn _maybe-fail [fail]
  (cond (= fail "failed") (raise (FailedChange "it broke"))
        (= fail "connection") (raise (ConnectionFailed "ssh:h: the SSH connection was lost"))
        (= fail "aborted") (raise (AbortedChange "it gave up"))
        (= fail "bug") (raise (KeyError "oops"))))

(defprop noted :posix [name * [fail None]]
  "NAME is applied: recorded in `state`; each apply/unapply is logged."
  (:desc name)
  (:check (in name state))
  (:apply (.append log #("apply" name)) (_maybe-fail fail) (.add state name))
  (:unapply (.append log #("unapply" name)) (_maybe-fail fail) (.discard state name)))

(defhost combinators.example {:deploy :local}
  "A host for applying test propspecs.")

(defn [(pytest.fixture :autouse True)] reset []
  (.clear log)
  (.clear state))

(defn apply [events propspec]
  (deploy-these* [:local] combinators propspec :sink events))

(defn test-eseqprops-stops-at-first-failure [events]
  (setv outcome (apply events (eseqprops (noted "a") (noted "b" :fail "failed") (noted "c"))))
  (assert (= log [#("apply" "a") #("apply" "b")]) log)
  (assert (= (events.ends) [#("a" "changed") #("b" "failed") #("c" "skipped")]) (events.ends))
  (assert (= outcome.status "failed") outcome))

(defn test-seqprops-skips-failure-and-carries-on [events]
  (setv outcome (apply events (seqprops (noted "a") (noted "b" :fail "failed") (noted "c"))))
  (assert (= log [#("apply" "a") #("apply" "b") #("apply" "c")]) log)
  (assert (= (events.status-of "c") "changed") (events.ends))
  (assert (= outcome.failures 1) outcome.failures))

(defn test-failure-message-is-reported-once-at-the-innermost-property [events]
  (apply events (desc "outer" (eseqprops (noted "inner" :fail "failed"))))
  (setv failed (lfor e events.events :if (and (= (get e "event") "end") (= (get e "status") "failed")) e))
  (assert (= (lfor e failed (get e "desc")) ["inner" "outer"]) failed)
  (assert (= (.get (get failed 0) "message") "it broke") failed)
  (assert (not-in "message" (get failed 1)) failed))

(defn test-eseqprops-until-ends-sequence-without-failing [events]
  (apply events (props eseqprops
                  (eseqprops-until :aborted-change
                    (noted "a") (noted "b" :fail "aborted") (noted "c"))
                  (noted "after")))
  (assert (= log [#("apply" "a") #("apply" "b") #("apply" "after")]) log)
  (assert (= (events.status-of "b") "failed") "the failure itself is still reported"))

(defn test-eseqprops-until-other-failures-still-fail [events]
  (apply events (props eseqprops
                  (eseqprops-until :aborted-change (noted "b" :fail "failed"))
                  (noted "after")))
  (assert (= log [#("apply" "b")]) log))

(defn test-eseqprops-until-rejects-unknown-condition [events]
  (with [e (pytest.raises PropspecError)]
    (apply events (propapp (eseqprops-until :no-such-condition (noted "a")))))
  (assert (in "unknown condition" (str e.value)) (str e.value)))

(defn test-silent-seqprops-applies-without-announcing [events]
  (apply events (silent-seqprops (noted "a") (noted "b")))
  (assert (= log [#("apply" "a") #("apply" "b")]) log)
  (assert (= (events.ends) []) (events.ends)))

(defn test-unapplied-swaps-apply-and-unapply [events]
  (.add state "a")
  (apply events (unapplied (noted "a")))
  (assert (= log [#("unapply" "a")]) log)
  (assert (= (events.status-of "Unapplied: a") "changed") (events.ends)))

(defn test-unapplied-negates-check [events]
  (apply events (unapplied (noted "a")))
  (assert (= log []) log)
  (assert (= (events.status-of "Unapplied: a") "ok") (events.ends)))

(defn test-unapply-runs-in-reverse-order [events]
  (.update state ["a" "b" "c"])
  (apply events (unapplied (eseqprops (noted "a") (noted "b") (noted "c"))))
  (assert (= log [#("unapply" "c") #("unapply" "b") #("unapply" "a")]) log))

(defn test-reapplied-unapplies-then-applies [events]
  (.add state "a")
  (setv outcome (apply events (reapplied (noted "a"))))
  (assert (= log [#("unapply" "a") #("apply" "a")]) log)
  (assert (= outcome.status "changed") outcome))

(defn test-with-unapply-applies-what-follows-the-marker-when-unapplied [events]
  (apply events (unapplied (with-unapply (noted "a") :unapply (noted "z"))))
  (assert (= log [#("apply" "z")]) log))

(defn test-with-unapply-applies-what-precedes-the-marker [events]
  (apply events (with-unapply (noted "a") :unapply (noted "z")))
  (assert (= log [#("apply" "a")]) log))

(defn test-on-change-applies-its-actions-after-a-change [events]
  (apply events (on-change (noted "conf") (noted "restart")))
  (assert (= log [#("apply" "conf") #("apply" "restart")]) log))

(defn test-on-change-does-nothing-without-a-change [events]
  (.add state "conf")
  (apply events (on-change (noted "conf") (noted "restart")))
  (assert (= log []) log))

(defn test-on-change-also-fires-on-unapply [events]
  (.add state "conf")
  (apply events (unapplied (on-change (noted "conf") (noted "restart"))))
  (assert (= log [#("unapply" "conf") #("apply" "restart")]) log))

(defn test-on-apply-change-does-not-fire-on-unapply [events]
  (.add state "conf")
  (apply events (unapplied (on-apply-change (noted "conf") (noted "restart"))))
  (assert (= log [#("unapply" "conf")]) log))

(defn test-desc-announces-under-its-own-description [events]
  (apply events (desc "Nice name" (noted "a")))
  (assert (= (events.ends) [#("Nice name" "changed")]) (events.ends)))

(defn test-with-flagfile-applies-once [events tmp-path]
  (setv flag (str (/ tmp-path "flags" "done")))
  (apply events (with-flagfile flag (noted "a")))
  (.clear state)
  (apply events (with-flagfile flag (noted "a")))
  (assert (= log [#("apply" "a")]) log)
  (assert (.exists (/ tmp-path "flags" "done")) "flagfile created"))

(defn test-with-flagfile-unapply-removes-flag [events tmp-path]
  (setv flag (str (/ tmp-path "done")))
  (apply events (with-flagfile flag (noted "a")))
  (apply events (unapplied (with-flagfile flag (noted "a"))))
  (assert (= log [#("apply" "a") #("unapply" "a")]) log)
  (assert (not (.exists (/ tmp-path "done"))) "flagfile removed"))

(defn test-with-requirements-applies-requirements-first-last-to-first [events]
  (apply events (with-requirements (noted "main") (noted "r1") (noted "r2")))
  (assert (= log [#("apply" "r2") #("apply" "r1") #("apply" "main")]) log))

(defn test-a-property-raising-a-bug-fails-with-a-traceback [events]
  (setv outcome (apply events (seqprops (noted "a" :fail "bug") (noted "b"))))
  (setv failed (get (lfor e events.events :if (= (.get e "status") "failed") e) 0))
  (assert (= (get failed "message") "KeyError: 'oops'") failed)
  (assert (in "Traceback" (get failed "traceback")) failed)
  (assert (= (events.status-of "b") "changed") "the sequence carried on")
  (assert (= outcome.status "failed") outcome))

(defn test-summary-event-and-exit-codes [events]
  (setv first (apply events (eseqprops (noted "a"))))
  (assert (= (get (events.summary) "status") "changed") (events.summary))
  (assert (= #((.exit-code first) (.exit-code first True)) #(0 2)) "changed")
  (setv second (apply events (eseqprops (noted "a"))))
  (assert (= second.status "no-change") second)
  (assert (= #((.exit-code second) (.exit-code second True)) #(0 0)) "no change")
  (setv third (apply events (eseqprops (noted "x" :fail "failed"))))
  (assert (= #((.exit-code third) (.exit-code third True)) #(1 1)) "failure"))

(defprop declared :posix [name]
  "A declaration only: hostattrs, nothing to apply."
  (:hostattrs (push-hostattr "declared" name)))

(defn test-unapplying-a-declaration-changes-nothing [events]
  (setv outcome (apply events (unapplied (eseqprops (declared "x") (noted "a")))))
  (assert (= outcome.status "no-change") (events.ends)))

(defn test-unapplying-a-sequence-holding-a-property-without-unapply-fails-clearly [events]
  ;; Written directly under `unapplied`, it is refused where it is written
  ;; (below); inside a sequence, when the sequence is unapplied.
  (apply events (unapplied (eseqprops (hy.I.consfig/props/file.has-content "/tmp/x" "y"))))
  (setv e (get (lfor e events.events :if (= (.get e "status") "failed") :if (= (get e "event") "end") e)
               0))
  (assert (in "cannot be unapplied" (get e "message")) e))

(defn test-a-lost-connection-ends-even-seqprops-with-one-message [events]
  (setv outcome (apply events (seqprops (noted "a") (noted "b" :fail "connection")
                                        (noted "c") (noted "d"))))
  (assert (= log [#("apply" "a") #("apply" "b")]) log)
  (assert (= (events.ends) [#("a" "changed") #("b" "failed") #("c" "skipped") #("d" "skipped")])
          (events.ends))
  (setv messages (lfor e events.events :if (.get e "message") (get e "message")))
  (assert (= messages ["ssh:h: the SSH connection was lost"]) messages)
  (assert (= outcome.status "failed") outcome))

(defn test-on-change-after-a-sequence-is-announced-by-what-it-watches [events]
  (apply events (on-change (eseqprops (noted "conf") (noted "unit")) (noted "restart")))
  (assert (= (events.ends) [#("conf" "changed") #("unit" "changed") #("restart" "changed")
                            #("after a change to: conf; unit" "changed")])
          (events.ends)))

(defprop no-way-back :posix []
  "Applies; has no :unapply."
  (:apply :changed))

(defn test-unapplied-around-a-property-without-unapply-is-refused-where-written []
  (with [e (pytest.raises PropspecError)]
    (unapplied (no-way-back)))
  (assert (in "no-way-back cannot be unapplied" (str e.value)) (str e.value)))

(defn test-unapplied-around-a-declaration-or-a-sequence-is-accepted []
  (assert (propapp (unapplied (os.debian-stable "bookworm" :amd64)))
          "a declaration has nothing to undo")
  (assert (propapp (unapplied (eseqprops (file.has-content "/x" "y\n"))))
          "a sequence can be unapplied"))
