;; The deploy macros, and deployments as properties (a host deploying others).

(require consfig *)
(import os
        sys)
(.insert sys.path 0 (os.path.dirname __file__))
(.insert sys.path 0 (os.path.join (os.path.dirname __file__) ".." "props"))
(import consfig *
        pytest
        tempfile
        deployment-testprops [log logged debian-only]
        proptest [LOCAL apply-twice checks-clean])
(use-props consfig.props [file])

(defhost outer.example {:deploy :local}
  (logged "outer-1")
  (deploys* :local inner.example.org (logged "additional"))
  (logged "outer-2"))

(defhost inner.example.org {:deploy :local}
  (logged "inner"))

(defhost vetoed.example {:deploy :local}
  (debian-only))

(defn [(pytest.fixture :autouse True)] reset []
  (.clear log))

(defn test-deploy-macro-takes-a-bare-keyword-chain-and-a-dotted-hostname [events]
  (deploy :local inner.example.org :sink events)
  (assert (= log [#("inner" "inner.example.org" [])]) log))

(defn test-deploy-these-macro-applies-only-its-propspec [events]
  (deploy-these :local inner (logged "just-this"))
  (assert (= log [#("just-this" "inner.example.org" [])]) log))

(defn test-deploy-macro-applies-additional-properties-after-the-host []
  (deploy [:local] inner (logged "extra"))
  (assert (= (lfor e log (get e 0)) ["inner" "extra"]) log))

(defn test-deploys-applies-another-host-within-the-deployment [events]
  (setv outcome (deploy* [:local] outer :sink events))
  (assert (= log [#("outer-1" "outer.example" [])
                  #("inner" "inner.example.org" ["outer.example"])
                  #("additional" "inner.example.org" ["outer.example"])
                  #("outer-2" "outer.example" [])])
          log)
  (assert (= (events.status-of "Deployed inner.example.org") "changed") (events.ends))
  (setv depths (dfor e events.events :if (= (get e "event") "end") (get e "desc") (get e "depth")))
  (assert (= (get depths "inner") (+ 1 (get depths "Deployed inner.example.org"))) depths)
  (assert (= outcome.status "changed") outcome))

(setv CLEAN-DIR (tempfile.mkdtemp :prefix "consfig-deploys-"))

;; A host whose properties can say whether they hold (`logged` cannot).
(defhost clean.example.org {:deploy :local}
  (file.has-content (os.path.join CLEAN-DIR "host") "h\n"))

(defn test-deploys-and-deploys-these-once-applied-check-clean []
  (setv spec (props (deploys :local clean.example.org)
                    (deploys-these :local clean.example.org
                                   (file.has-content (os.path.join CLEAN-DIR "these") "t\n"))))
  (try
    (apply-twice LOCAL spec)
    (checks-clean LOCAL spec)
    None
    (finally
      (for [f ["host" "these"]]
        (when (os.path.exists (os.path.join CLEAN-DIR f)) (os.unlink (os.path.join CLEAN-DIR f)))))))

(defn test-deploys-is-data-carrying-the-other-hosts-propspec []
  (setv p (preprocess-propapp (propapp (deploys :local inner.example.org))))
  (setv back (read-propspec (propspec->string p)))
  (assert (= back p) (propspec->string p))
  (assert (= (get (get p.args 1) "hostname") "inner.example.org") p))

(defn test-deploys-vetoed-host-stops-before-anything-applies [events]
  (with [e (pytest.raises InapplicableProperty)]
    (deploy-these* [:local] outer (propapp (deploys :local vetoed.example)) :sink events))
  (assert (= log []) log))

(defn test-deploys-unknown-host-is-an-error-before-anything-applies [events]
  (with [e (pytest.raises ConsfigError)]
    (deploy-these* [:local] outer (propapp (deploys :local nosuch.example)) :sink events))
  (assert (in "unknown host nosuch.example" (str e.value)) (str e.value))
  (assert (= log []) log))

(defn test-deploys-over-a-python-hop-nests-the-remote-events [events]
  (deploy-these* [:local] outer (propapp (deploys [:local :python] inner.example.org)) :sink events)
  (assert (= (events.status-of "inner") "changed") (events.ends))
  (setv depths (dfor e events.events :if (= (get e "event") "end") (get e "desc") (get e "depth")))
  (assert (= (get depths "inner") 1) depths))

(defn test-deploy-macro-takes-the-runs-options-as-one-record [events]
  (setv outcome (deploy :local inner.example.org :options (RunOptions :check True) :sink events))
  (assert (= log []) f"a check applies nothing: {log}")
  (assert outcome.check outcome))

(defn test-deploy-refuses-options-given-twice-before-anything-applies [events]
  (with [e (pytest.raises RunOptionError)]
    (deploy* [:local] inner :options (RunOptions) :unapply True :sink events))
  (assert (in ":unapply given with OPTIONS" (str e.value)) (str e.value))
  (assert (= log []) log))

(defn test-a-check-reaches-a-python-hops-target-as-run-options [events]
  (setv outcome (deploy-these* [:local :python] inner (propapp (logged "remote"))
                               :options (RunOptions :check True) :sink events))
  (assert (= (events.status-of "remote") "cannot-check") (events.ends))
  (assert outcome.check outcome))

(defn test-a-nested-deployment-over-a-python-hop-runs-at-the-deployments-verbosity [events]
  ;; At -vvv a :python hop shows its frames: the nested one's too.
  (deploy-these* [:local] outer (propapp (deploys [:local :python] inner.example.org))
                 :sink events :verbosity 3)
  (setv wire (lfor e events.events :if (= (.get e "stream") "wire") (get e "text")))
  (assert (any (gfor t wire (.startswith t "→ hello"))) wire))
