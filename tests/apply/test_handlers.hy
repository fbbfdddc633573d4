;; Handlers (consfig.apply.handlers), applied for real over :local: notified ones
;; run once at the end, and a failed deployment leaves them owed, on the
;; target, for the next one.

(require consfig *)
(import consfig *
        consfig.apply.handlers [handler-definitions]
        json
        os
        pathlib
        pytest)
(use-props consfig.props [file])

;; What `ran` did, in order.
(setv log [])

(defprop ran :posix [name * [fail False]]
  "Log NAME; always a change.  FAIL: fail instead."
  (:desc name)
  (:apply (.append log name)
          (when fail (raise (FailedChange f"{name} broke")))
          :changed))

(defprop holds :posix [name]
  "Holds already: never changes anything."
  (:desc name)
  (:check True)
  (:apply (.append log name)))

(setv HOSTNAME f"handlers-{(os.getpid)}.consfig.invalid")

(defn pending-file []
  (pathlib.Path (state-directory) "handlers" f"{HOSTNAME}.json"))

(defn [(pytest.fixture :autouse True)] fresh-state []
  (.clear log)
  (.unlink (pending-file) :missing-ok True)
  (yield)
  (.unlink (pending-file) :missing-ok True))

(defn deploy-props [events propspec * [check False]]
  (deploy-these* [:local] (make-host HOSTNAME None None (eseqprops)) propspec
                 :sink events :check check))

(defn test-a-notified-handler-runs-once-at-the-end [events]
  (setv outcome (deploy-props events (propapp (eseqprops
                  (notifies "restart" (ran "conf a"))
                  (handler "restart" (ran "restart"))
                  (notifies "restart" (ran "conf b"))
                  (ran "last")))))
  (assert (= log ["conf a" "conf b" "last" "restart"]) log)
  (assert (= (events.status-of "handler restart") "changed") (events.ends))
  (assert (= outcome.status "changed") outcome)
  (assert (not (.exists (pending-file))) "a handler that ran is no longer pending"))

(defn test-handlers-run-in-the-order-they-were-first-notified [events]
  (deploy-props events (propapp (eseqprops
                         (handler "a" (ran "handler a"))
                         (handler "b" (ran "handler b"))
                         (notifies "b" (ran "conf 1"))
                         (notifies ["a" "b"] (ran "conf 2")))))
  (assert (= log ["conf 1" "conf 2" "handler b" "handler a"]) log))

(defn test-a-notifies-whose-properties-change-nothing-notifies-nothing [events]
  (setv outcome (deploy-props events (propapp (eseqprops
                  (notifies "restart" (holds "conf"))
                  (handler "restart" (ran "restart"))))))
  (assert (= log []) log)
  (assert (= outcome.status "no-change") (events.ends))
  (assert (not (.exists (pending-file))) "nothing was owed"))

(defn test-flush-handlers-runs-them-where-it-is-written-and-again-when-notified-after [events]
  (deploy-props events (propapp (eseqprops
                         (handler "restart" (ran "restart"))
                         (notifies "restart" (ran "conf a"))
                         (flush-handlers)
                         (ran "middle")
                         (notifies "restart" (ran "conf b")))))
  (assert (= log ["conf a" "restart" "middle" "conf b" "restart"]) log))

(defn test-a-failed-run-keeps-the-handler-owed-and-the-next-run-with-no-change-runs-it [events tmp-path]
  (setv conf (str (/ tmp-path "nginx.conf"))
        spec (fn [fail]
               (propapp (seqprops
                          (notifies "restart-nginx" (file.has-content conf "worker_processes 2;\n"))
                          (ran "unrelated" :fail fail)
                          (handler "restart-nginx" (ran "restart nginx"))))))
  (setv first (deploy-props events (spec True)))
  (assert (= first.status "failed") first)
  (assert (not-in "restart nginx" log) "a failed deployment runs no handler")
  (assert (= (get (json.loads (.read-text (pending-file))) "pending") ["restart-nginx"])
          "the notification is on the target")
  (assert (= (& (. (os.stat (pending-file)) st-mode) 0o777) 0o600) "only its owner reads it")
  (.clear log)
  (.clear events.events)
  (setv second (deploy-props events (spec False)))
  (assert (= (events.status-of (+ conf " has content")) "ok") "nothing else changed")
  (assert (= log ["unrelated" "restart nginx"]) log)
  (assert (= second.status "changed") second)
  (assert (not (.exists (pending-file))) "a handler that ran is no longer owed")
  (.clear log)
  (deploy-props events (spec False))
  (assert (= log ["unrelated"]) "it runs once, not at every deployment"))

(defn test-a-handler-that-fails-stays-owed [events]
  (setv outcome (deploy-props events (propapp (eseqprops
                  (notifies "restart" (ran "conf"))
                  (handler "restart" (ran "restart" :fail True))))))
  (assert (= outcome.status "failed") outcome)
  (assert (= (events.status-of "handler restart") "failed") (events.ends))
  (assert (= (get (json.loads (.read-text (pending-file))) "pending") ["restart"])
          "still owed"))

(defn test-a-handler-owed-but-no-longer-defined-stays-owed-and-says-so [events]
  (deploy-props events (propapp (seqprops (notifies "old" (ran "conf"))
                                          (ran "x" :fail True)
                                          (handler "old" (ran "old")))))
  (.clear events.events)
  (setv outcome (deploy-props events (propapp (eseqprops (handler "new" (ran "new"))))))
  (setv notes (lfor e events.events :if (= (get e "event") "output") (get e "text")))
  (assert (any (gfor n notes (in "\"old\" is owed from an earlier deployment" n))) notes)
  (assert (= (get (json.loads (.read-text (pending-file))) "pending") ["old"]) "kept")
  (assert (!= outcome.status "failed") outcome))

(defn test-check-mode-shows-the-handlers-that-would-run-and-records-nothing [events]
  (setv outcome (deploy-props events (propapp (eseqprops
                                                (notifies "restart" (ran "conf"))
                                                (handler "restart" (ran "restart"))))
                              :check True))
  (assert (= log []) "nothing was applied")
  (assert (in #("handler restart" "would-change") (events.ends)) (events.ends))
  (assert (not (.exists (pending-file))) "a check writes nothing on the target")
  (assert (= outcome.status "changed") outcome))

(defn test-check-mode-shows-a-handler-owed-from-an-earlier-run [events]
  (deploy-props events (propapp (seqprops (notifies "restart" (ran "conf"))
                                          (ran "x" :fail True)
                                          (handler "restart" (ran "restart")))))
  (.clear events.events)
  (.clear log)
  (deploy-props events (propapp (eseqprops (handler "restart" (ran "restart")))) :check True)
  (assert (in #("handler restart" "would-change") (events.ends)) (events.ends))
  (assert (= log []) log))

(defn test-notifying-an-undefined-handler-is-refused-at-load-with-its-line [events]
  (with [e (pytest.raises PropspecError)]
    (deploy-props events (propapp (eseqprops (notifies "restrat" (ran "conf"))
                                             (handler "restart" (ran "restart"))))))
  (assert (in "no handler of that name (it defines \"restart\")" (str e.value)) (str e.value))
  (assert (in "test_handlers.hy:" (str e.value)) (str e.value))
  (assert (= log []) "nothing was applied"))

(defn test-a-handler-defined-twice-is-refused-at-load [events]
  (with [e (pytest.raises PropspecError)]
    (deploy-props events (propapp (eseqprops (handler "restart" (ran "a"))
                                             (handler "restart" (ran "b"))))))
  (assert (in "defined 2 times" (str e.value)) (str e.value)))

(defn test-hostile-handler-names-are-refused-where-written []
  (for [bad ["two\nlines" "" "nul\x00" 42]]
    (with [e (pytest.raises PropspecError)]
      (handler bad (ran "x")))
    (with [e (pytest.raises PropspecError)]
      (notifies bad (ran "x")))))

(defn test-a-name-with-quotes-and-dollars-is-just-a-name [events]
  (setv name "restart $(touch /tmp/pwned) \"nginx\"")
  (deploy-props events (propapp (eseqprops (notifies name (ran "conf"))
                                           (handler name (ran "restart")))))
  (assert (= log ["conf" "restart"]) log)
  (assert (not (os.path.exists "/tmp/pwned")) "nothing ran it"))

(defn test-a-corrupt-file-of-pending-handlers-is-a-failure-that-says-what-to-do [events]
  (.mkdir (. (pending-file) parent) :parents True :exist-ok True)
  (.write-text (pending-file) "not json")
  (setv outcome (deploy-props events (propapp (eseqprops (notifies "restart" (ran "conf"))
                                                         (handler "restart" (ran "restart"))))))
  (assert (= outcome.status "failed") outcome)
  (setv messages (lfor e events.events :if (.get e "message") (get e "message")))
  (assert (any (gfor m messages (in "is not a list of pending handlers" m))) messages))

(defn test-handlers-print-readably-and-read-back-equal []
  (for [p [(notifies "restart-nginx" (file.has-content "/etc/motd" "hi\n"))
           (notifies ["a" "b"] (file.has-content "/etc/motd" "hi\n"))
           (handler "restart-nginx" (file.has-content "/etc/motd" "hi\n"))
           (flush-handlers)]]
    (setv text (propspec->string p))
    (assert (= (read-propspec text) p) text)
    (assert (= (data->propspec (json.loads (json.dumps (propspec->data p)))) p) text)))

(defn test-handlers-of-a-nested-host-are-its-own []
  (setv inner (make-host "inner.consfig.invalid" None None
                         (propapp (eseqprops (handler "h" (ran "inner h"))))))
  (setv outer (propapp (eseqprops (handler "h" (ran "outer h"))
                                  (deploys [:local] inner))))
  (assert (= (list (handler-definitions outer)) ["h"]) "the nested host's are not the outer's"))

(defn test-a-nested-deployment-runs-its-handlers-at-its-own-end [events]
  (setv inner-name f"inner-{HOSTNAME}"
        inner (make-host inner-name None None
                         (propapp (eseqprops (notifies "h" (ran "inner conf"))
                                             (handler "h" (ran "inner handler"))))))
  (try
    (deploy-props events (propapp (eseqprops (deploys [:local] inner)
                                             (ran "outer after"))))
    (assert (= log ["inner conf" "inner handler" "outer after"]) log)
    (finally
      (.unlink (pathlib.Path (state-directory) "handlers" f"{inner-name}.json") :missing-ok True))))
