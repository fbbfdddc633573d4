;; The converging agent (consfig.converge.agent) in this process, over a local
;; connection: real files, real inotify, the real deployment lock.  Over a
;; chain, with SIGTERM, see tests/python_hop/test_converge.py.

(require consfig *)
(import io
        os
        pathlib
        threading
        time
        consfig *
        consfig.transport.local [LocalConnection]
        consfig.converge.agent [Agent leaves watches-of]
        consfig.model.host [Host preprocess-host]
        consfig.apply.events [converge-event]
        consfig.apply.lock [lock-request target-lock-held]
        consfig.model.propspec [propspec-digest]
        consfig.deployer.report [PlainConsole Reporter]
        harness [wait-until])
(use-props consfig.props [file service])

(defprop raises-when-flagged :posix [flag path]
  "PATH holds \"ok\\n\"; the check raises while FLAG exists."
  (:watch [(watch-path flag) (watch-path path)])
  (:check (do (when (os.path.exists flag) (raise (RuntimeError "flagged")))
              (and (os.path.exists path) (= (.read-text (pathlib.Path path)) "ok\n"))))
  (:apply (.write-text (pathlib.Path path) "ok\n")))

(defprop fails-first-attempt :posix [attempts path]
  "PATH holds \"ok\\n\"; of the attempts to apply it (counted, one line
each, in ATTEMPTS), the first of every two fails."
  (:watch [(watch-path path)])
  (:check (and (os.path.exists path) (= (.read-text (pathlib.Path path)) "ok\n")))
  (:apply (with [f (open attempts "a")] (.write f "attempt\n"))
          (when (% (len (.splitlines (.read-text (pathlib.Path attempts)))) 2)
            (raise (RuntimeError "the first attempt fails")))
          (.write-text (pathlib.Path path) "ok\n")))

(defn kinds [events what]
  (lfor e events :if (and (= (get e "event") "converge") (= (get e "what") what)) e))

(defclass Running []
  ;; An agent in a thread of its own, its events in EVENTS.
  (defn __init__ [self propspec lock-dir #** kw]
    (setv self.events []
          host (preprocess-host (Host "converge-test.local" propspec))
          self.agent (Agent host (LocalConnection) self.events.append (str lock-dir) #** kw)
          self.thread (threading.Thread :target self.agent.run :daemon True))
    (.start self.thread)
    (wait-until (fn [] (kinds self.events "watching")) 30 "the agent to watch")
    None)
  (defn __enter__ [self] self)
  (defn __exit__ [self #* _]
    (.stop self.agent)
    (.join self.thread 30)
    (assert (not (.is-alive self.thread)) "the agent stopped when told")))

(defn repaired [r desc-part [n 1]]
  (wait-until (fn [] (>= (len (lfor e (kinds r.events "repaired") :if (in desc-part (get e "desc")) e)) n))
              10 f"{desc-part} repaired"))

(defn replace [path text]
  (setv tmp (.with-name path (+ "~" path.name)))
  (.write-text tmp text)
  (os.replace tmp path))

(defn no-temporaries [d]
  (lfor p (.iterdir d) :if (.startswith p.name ".") p.name))

(defn test-leaves-are-the-propapps-holding-no-other-and-unapplied-ones-are-kept-unapplied []
  (setv a (file.has-content "/tmp/a" "a")
        b (file.contains-lines "/tmp/b" "b")
        found (leaves (preprocess-propapp (eseqprops a (unapplied b)))))
  (assert (= (lfor [p u _] found #(p u)) [#(a False) #(b True)]) f"two leaves: {found}"))

(defn test-an-on-change-is-kept-whole-and-actions-without-check-are-not-kept []
  (setv conf (file.has-content "/tmp/conf" "x")
        trigger (on-change conf (service.restarted "nginx"))
        found (leaves (preprocess-propapp (eseqprops trigger (service.restarted "ssh")
                                                     (with-unapply (file.has-content "/tmp/b" "b")
                                                                   (hy.models.Keyword "unapply")
                                                                   (file.does-not-exist "/tmp/b"))))))
  (assert (= (lfor [p _ _] found p) [trigger (file.has-content "/tmp/b" "b")])
          f"the on-change whole, no bare restart, no unapply branch: {found}")
  (assert (= (watches-of trigger) [["path" "/tmp/conf"]]) "the on-change watches its propapp's file"))

(defprop bell-rung :posix [path]
  "A line is added to PATH each time."
  (:action "ringing is an event, not a state")
  (:apply (with [f (open path "a")] (.write f "ring\n"))))

(defn test-the-agent-says-at-start-which-actions-it-cannot-keep [tmp-path]
  (setv f (/ tmp-path "motd")
        bell (str (/ tmp-path "bell")))
  (.write-text f "hello\n")
  (with [r (Running (eseqprops (file.has-content (str f) "hello\n") (bell-rung bell)) tmp-path)]
    (setv [said] (kinds r.events "not-kept")
          text (.join " " (get said "propapps")))
    (assert (in "ringing is an event, not a state" text) f"the action and why: {said}")
    (assert (not-in "motd" text) f"only what it cannot keep: {said}")
    (assert (< (.index r.events said) (.index r.events (get (kinds r.events "watching") 0)))
            "said as it starts")
    (setv out (io.StringIO))
    ((Reporter :console (PlainConsole out)) said)
    (assert (in "not-kept: actions" (.getvalue out)) (.getvalue out))
    (assert (in "ringing is an event" (.getvalue out)) (.getvalue out)))
  (assert (not (os.path.exists bell)) "the agent never rang it"))

(defn test-with-meta-reaches-the-agent []
  (setv a (file.has-content "/tmp/a" "a")
        found (leaves (preprocess-propapp (eseqprops (with-meta {:noop True :poll 30 :limit 0.5 :burst 2} a)))))
  (setv [[p _ meta]] found)
  (assert (= p a) f"the leaf inside with-meta: {found}")
  (assert (= (get meta "poll") 30) f"its meta-parameters: {meta}"))

(defn test-a-noop-meta-parameter-reports-drift-and-repairs-nothing [tmp-path]
  (setv f (/ tmp-path "motd")
        g (/ tmp-path "other"))
  (.write-text f "hello\n")
  (.write-text g "other\n")
  (with [r (Running (eseqprops (with-meta {:noop True} (file.has-content (str f) "hello\n"))
                               (file.has-content (str g) "other\n"))
                    tmp-path)]
    (replace f "edited\n")
    (wait-until (fn [] (kinds r.events "drift")) 10 "the drift reported")
    (replace g "edited\n")
    (repaired r "other")
    (assert (= (.read-text f) "edited\n") "the :noop one not repaired")
    (assert (get (get (kinds r.events "drift") 0) "noop") "said to be noop")))

(defn test-agent-repairs-a-file-edited-chmodded-and-deleted [tmp-path]
  (setv f (/ tmp-path "motd"))
  (.write-text f "hello\n")
  (os.chmod f 0o640)
  (with [r (Running (eseqprops (file.has-content (str f) "hello\n") (file.has-mode (str f) 0o640))
                    tmp-path)]
    (.write-text f "edited\n")
    (repaired r "has content")
    (assert (= (.read-text f) "hello\n") "content put back")
    (os.chmod f 0o600)
    (repaired r "has mode")
    (os.unlink f)
    (repaired r "has content" 2)
    (wait-until (fn [] (and (.exists f) (= (& (. (os.stat f) st-mode) 0o777) 0o640))) 10
                "the file made again with its mode")
    (setv drift (get (kinds r.events "drift") 0))
    (assert (in "+hello" (get drift "diff")) f"the drift has its diff: {drift}"))
  (assert (= (no-temporaries tmp-path) []) "no temporary file left"))

(defn test-agent-in-noop-reports-drift-and-repairs-nothing [tmp-path]
  (setv f (/ tmp-path "motd"))
  (.write-text f "hello\n")
  (with [r (Running (file.has-content (str f) "hello\n") tmp-path :noop True)]
    ;; Replaced whole: a truncated file seen between two writes would be a
    ;; drift of its own.
    (replace f "edited\n")
    (setv drift (get (wait-until (fn [] (kinds r.events "drift")) 10 "a drift") 0))
    (assert (get drift "noop") "said to be noop")
    (assert (in "-edited" (get drift "diff")) f"with its diff: {drift}")
    (replace f "edited again\n")
    (wait-until (fn [] (= (len (kinds r.events "drift")) 2)) 10 "the changed drift reported")
    (os.utime f)
    (assert (not (try (wait-until (fn [] (> (len (kinds r.events "drift")) 2)) 2 "no repeat")
                      (except [AssertionError] False)))
            "the same drift is not reported again"))
  (assert (= (.read-text f) "edited again\n") "nothing repaired")
  (assert (not (kinds r.events "repaired")) "no repair reported"))

(defn test-agent-reports-a-property-that-raises-and-goes-on [tmp-path]
  (setv flag (/ tmp-path "flag")
        f (/ tmp-path "f")
        g (/ tmp-path "g"))
  (.write-text f "ok\n")
  (.write-text g "g\n")
  (with [r (Running (eseqprops (raises-when-flagged (str flag) (str f))
                               (file.has-content (str g) "g\n"))
                    tmp-path)]
    (.write-text flag "")
    (setv failed (get (wait-until (fn [] (kinds r.events "failed")) 10 "a failure") 0))
    (assert (in "flagged" (get failed "message")) f"its reason: {failed}")
    (.write-text g "edited\n")
    (repaired r "has content")
    (.unlink flag)
    (.write-text f "bad\n")
    (repaired r "raises-when-flagged")
    (assert (= (.read-text f) "ok\n") "repaired at its next event")))

(defn test-agent-repairs-under-retry-and-reports-the-failed-attempt [tmp-path]
  (setv f (/ tmp-path "f")
        attempts (/ tmp-path "attempts"))
  (.write-text f "ok\n")
  (with [r (Running (with-meta {:retry 2 :delay 0.1} (fails-first-attempt (str attempts) (str f)))
                    tmp-path)]
    (.write-text f "edited\n")
    (repaired r "fails-first-attempt")
    (assert (= (.read-text f) "ok\n") "repaired at the second attempt")
    (assert (= (len (.splitlines (.read-text attempts))) 2) "two attempts, no more")
    (assert (not (kinds r.events "failed")) f"no failure reported: {r.events}")
    (setv notes (lfor e r.events :if (= (.get e "attempt") 1) e))
    (assert (and notes (in "the first attempt fails" (get notes 0 "text")))
            f"the failed attempt reported: {r.events}")))

(defn test-agent-keeps-a-file-whose-directory-is-deleted-and-recreated [tmp-path]
  (setv d (/ tmp-path "d")
        f (/ d "motd"))
  (os.mkdir d)
  (.write-text f "hello\n")
  (with [r (Running (eseqprops (file.directory-exists (str d))
                               (file.has-content (str f) "hello\n"))
                    tmp-path)]
    (import shutil)
    (shutil.rmtree d)
    (wait-until (fn [] (and (.exists f) (= (.read-text f) "hello\n"))) 10 "the directory and file back")
    (.write-text f "edited\n")
    (wait-until (fn [] (= (.read-text f) "hello\n")) 10 "the file watched in its new directory"))
  (assert (= (no-temporaries d) []) "no temporary file left"))

(defn test-agent-waits-for-a-push-then-checks-everything-again [tmp-path]
  (setv f (/ tmp-path "motd")
        lock-dir (/ tmp-path "cache"))
  (os.mkdir lock-dir)
  (.write-text f "hello\n")
  (with [r (Running (file.has-content (str f) "hello\n") lock-dir)]
    (with [_ (target-lock-held (str lock-dir) {"wait" 5 "holder" "a push from the test"})]
      (.write-text f "edited by the push\n")
      ;; The agent learns of the push from the lock's holder, and waits
      ;; for it to end: a bounded wait for something that must not happen.
      (assert (not (try (wait-until (fn [] (kinds r.events "repaired")) 2 "no repair")
                        (except [AssertionError] False)))
              "no repair while the push holds the lock")
      (assert (= (.read-text f) "edited by the push\n") "the push's file untouched"))
    (wait-until (fn [] (kinds r.events "rescan")) 10 "a rescan after the push")
    (repaired r "has content")
    (assert (= (.read-text f) "hello\n") "repaired once the push is done")))

(defn test-agent-stops-rather-than-undo-a-push-of-another-propspec [tmp-path]
  ;; A `consfig converge` session knows only the propspec it was started
  ;; with: after a push of another one it stopped nothing and undid the push.
  (setv f (/ tmp-path "motd")
        lock-dir (/ tmp-path "cache"))
  (os.mkdir lock-dir)
  (.write-text f "hello\n")
  (setv pushed (preprocess-host (Host "converge-test.local"
                                      (file.has-content (str f) "the push's content\n"))))
  (with [r (Running (file.has-content (str f) "hello\n") lock-dir)]
    (with [_ (target-lock-held (str lock-dir)
                               (lock-request "converge-test.local"
                                             (propspec-digest pushed.propspec)))]
      (.write-text f "the push's content\n"))
    (wait-until (fn [] (not (.is-alive r.thread))) 10 "the agent to stop")
    (assert r.agent.superseded "it says it was superseded")
    (assert (kinds r.events "superseded") f"and reports it: {r.events}")
    (assert (not (kinds r.events "repaired")) f"nothing repaired: {r.events}")
    (assert (= (.read-text f) "the push's content\n") "the push's file untouched")))

(defn test-agent-goes-on-after-a-push-of-its-own-propspec [tmp-path]
  (setv f (/ tmp-path "motd")
        lock-dir (/ tmp-path "cache")
        propspec (file.has-content (str f) "hello\n"))
  (os.mkdir lock-dir)
  (.write-text f "hello\n")
  (with [r (Running propspec lock-dir)]
    (with [_ (target-lock-held (str lock-dir)
                               (lock-request "converge-test.local"
                                             (propspec-digest r.agent.host.propspec)))]
      (replace f "edited\n"))
    (wait-until (fn [] (kinds r.events "rescan")) 10 "a rescan after the push")
    (repaired r "has content")
    (assert (not r.agent.superseded) "the same propspec does not supersede it")))

(defn test-agent-whose-image-a-push-replaces-stops-without-undoing-the-push [tmp-path]
  (setv f (/ tmp-path "motd")
        img (/ tmp-path "image.pyz")
        lock-dir (/ tmp-path "cache"))
  (os.mkdir lock-dir)
  (.write-text f "hello\n")
  (.write-text img "the old image")
  (with [r (Running (file.has-content (str f) "hello\n") lock-dir :image (str img))]
    (with [_ (target-lock-held (str lock-dir) {"wait" 5 "holder" "a push from the test"})]
      (.write-text f "the push's new content\n")
      (replace img "the new image"))
    (wait-until (fn [] (not (.is-alive r.thread))) 10 "the agent to stop")
    (assert r.agent.replaced "it says its image was replaced")
    (assert (kinds r.events "replaced") f"and reports it: {r.events}")
    (assert (not (or (kinds r.events "drift") (kinds r.events "rescan"))) f"nothing checked: {r.events}")
    (assert (= (.read-text f) "the push's new content\n") "the push's file untouched")))

(defn test-agent-keeps-running-when-its-image-is-rewritten-the-same-or-deleted [tmp-path]
  (setv f (/ tmp-path "motd")
        img (/ tmp-path "image.pyz"))
  (.write-text f "hello\n")
  (.write-text img "the image")
  (with [r (Running (file.has-content (str f) "hello\n") tmp-path :image (str img))]
    (replace img "the image")
    (.write-text f "edited\n")
    (repaired r "has content")
    (assert (not r.agent.replaced) "the same image is not a new one")
    (.unlink img)
    (.write-text f "edited\n")
    (repaired r "has content" 2)
    (assert (not r.agent.replaced) "no image is not a new one")))

(defn test-agent-rescans-when-the-inotify-queue-overflows [tmp-path]
  (setv f (/ tmp-path "motd")
        noise (/ tmp-path "noise")
        lock-dir (/ tmp-path "cache")
        limit (int (.read-text (pathlib.Path "/proc/sys/fs/inotify/max_queued_events"))))
  (os.mkdir lock-dir)
  (.write-text f "hello\n")
  (.write-text noise "")
  (with [r (Running (eseqprops (file.has-content (str f) "hello\n")
                               (file.has-mode (str noise) 0o644))
                    lock-dir)]
    ;; While the agent waits for the lock (a push), its queue overflows.
    (with [_ (target-lock-held (str lock-dir) {"wait" 5 "holder" "a push from the test"})]
      (os.chmod noise 0o600)
      (for [_ (range (* 2 limit))]
        (os.utime noise) (os.utime f))
      (.write-text f "edited while events were lost\n"))
    (wait-until (fn [] (kinds r.events "rescan")) 10 "a rescan")
    (wait-until (fn [] (= (.read-text f) "hello\n")) 10 "the file repaired after the overflow")
    (wait-until (fn [] (= (& (. (os.stat noise) st-mode) 0o777) 0o644)) 10 "the mode repaired"))
  (assert (= (no-temporaries tmp-path) []) "no temporary file left"))

(defn test-two-agents-fighting-are-limited-and-the-fight-is-reported-once [tmp-path]
  (setv f (/ tmp-path "motd")
        a (/ tmp-path "a")
        b (/ tmp-path "b"))
  (os.mkdir a) (os.mkdir b)
  (.write-text f "one\n")
  (with [one (Running (file.has-content (str f) "one\n") a :limit 2 :burst 3)
         two (Running (file.has-content (str f) "two\n") b :limit 2 :burst 3)]
    (.write-text f "neither\n")
    ;; The one that repairs faster than its limit is held back, and says
    ;; so; the other then only answers it.
    (wait-until (fn [] (or (kinds one.events "fight") (kinds two.events "fight"))) 20
                "an agent to report the fight")
    (setv start (time.monotonic)
          before (+ (len (kinds one.events "repaired")) (len (kinds two.events "repaired"))))
    (wait-until (fn [] (> (- (time.monotonic) start) 3)) 5 "three seconds of fighting")
    (setv after (+ (len (kinds one.events "repaired")) (len (kinds two.events "repaired")))
          rate (/ (- after before) (- (time.monotonic) start))))
  (assert (<= rate (+ (* 2 2) 1)) f"each agent at most its limit, 2 a second: {rate :.1f} together")
  (for [r [one two]]
    (assert (<= (len (kinds r.events "fight")) 1) "the fight reported once, not per repair")))

(defn test-the-report-shows-the-agents-events-one-line-each []
  (setv out (io.StringIO)
        r (Reporter :console (PlainConsole out) :diff True))
  (for [e [(converge-event "drift" "/etc/motd has content" :explanation "/etc/motd would change"
                           :diff "-x\n+y\n")
           (converge-event "fight" "/etc/motd has content" :limit 1 :burst 5 #** {"retry-in" 0.5})
           (converge-event "failed" "p" :message "RuntimeError: boom")
           (converge-event "stopped" :repairs 2 :failures 1)]]
    (r {"host" "web1" "depth" 0 "time" 0 #** e}))
  (setv text (.getvalue out))
  (assert (in "drift: /etc/motd has content (/etc/motd would change)" text) text)
  (assert (in "web1 ::   +y" text) f"the diff under it: {text}")
  (assert (in "fight: /etc/motd has content: repaired 5 times in a row" text) text)
  (assert (in "RuntimeError: boom" text) f"a failure's message: {text}")
  (assert (in "stopped: 2 repairs, 1 failures" text) text))

(defn test-the-agent-keeps-its-bundles-layers-recently-used [tmp-path]
  ;; Another deployment prunes layers unused for a day: the agent's must stay.
  (setv layer (/ tmp-path "layer"))
  (os.mkdir layer)
  (os.utime layer #(0 0))
  (with [r (Running (file.has-content (str (/ tmp-path "f")) "x\n") tmp-path :layers [(str layer)])]
    (wait-until (fn [] (> (. (os.stat layer) st-mtime) 0)) 10 "the layer marked used"))
  None)
