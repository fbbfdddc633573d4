;; Watch specs (consfig.model.watchspec) and the target's Watcher (consfig.converge.watch),
;; against real inotify on real files.  A Watcher's `wait` may return a key
;; whose resources did not change (the agent's check decides); what these
;; tests pin down is that a change is never missed.

(require consfig *)
(import os
        pathlib
        shutil
        time
        pytest
        consfig *
        consfig.errors [PropspecError]
        consfig.model.property [propapp-watches preprocess-propapp]
        consfig.site.load [load-consfig]
        consfig.converge.watch [Watcher unit-object-path])
(use-props consfig.props [file apt user])

(defn keys-within [w key seconds]
  ;; Wait (bounded) until KEY comes back from the watcher.
  (setv deadline (+ (time.monotonic) seconds)
        seen (set))
  (while (and (not-in key seen) (< (time.monotonic) deadline))
    (.update seen (.wait w (- deadline (time.monotonic)))))
  seen)

(defn drain [w]
  ;; Whatever events are still queued (a write's close after its modify).
  (while (.wait w 0.05)))

(defn test-file-properties-watch-their-paths []
  (assert (= (propapp-watches (file.has-content "/etc/motd" "hi\n")) [["path" "/etc/motd"]])
          "has-content watches its file")
  (assert (= (propapp-watches (apt.installed "nginx")) [["dpkg"]]) "apt watches dpkg")
  (assert (in ["path" "/etc/passwd"] (propapp-watches (user.has-account "bob")))
          "an account watches /etc/passwd"))

(defn test-a-watch-on-a-relative-path-is-refused-at-load-with-file-and-line [tmp-path]
  (setv site (/ tmp-path "relwatch.hy"))
  (.write-text site (+ "(require consfig *)\n(import consfig *)\n"
                       "(defprop watches-badly :posix [p]\n"
                       "  (:watch [(watch-path p)])\n"
                       "  (:apply None))\n"
                       "(defhost relwatch.example {}\n"
                       "  (watches-badly \"etc/motd\"))\n"))
  (with [e (pytest.raises PropspecError)]
    (load-consfig (str site))
    (preprocess-propapp (. (get hosts "relwatch.example") propspec)))
  (assert (in "relative path 'etc/motd'" (str e.value)) f"says what: {e.value}")
  (assert (in "relwatch.hy:7" (str e.value)) f"says where: {e.value}"))

(defn test-watcher-reports-a-file-written-chmodded-and-deleted [tmp-path]
  (setv f (/ tmp-path "motd"))
  (.write-text f "a")
  (with [w (Watcher)]
    (.add w "motd" [(watch-path (str f))])
    (.add w "other" [(watch-path (str (/ tmp-path "other")))])
    (assert (= (.wait w 0.05) (set)) "nothing happened yet")
    (.write-text f "b")
    (assert (in "motd" (keys-within w "motd" 5)) "a write")
    (drain w)
    (os.chmod f 0o600)
    (setv seen (keys-within w "motd" 5))
    (assert (= seen #{"motd"}) f"a chmod, and only its key: {seen}")
    (os.unlink f)
    (assert (in "motd" (keys-within w "motd" 5)) "a deletion")))

(defn test-watcher-reports-an-atomic-replacement [tmp-path]
  (setv f (/ tmp-path "conf"))
  (.write-text f "a")
  (with [w (Watcher)]
    (.add w "conf" [(watch-path (str f))])
    (.write-text (/ tmp-path ".conf.tmp") "b")
    (drain w)
    (os.replace (/ tmp-path ".conf.tmp") f)
    (assert (in "conf" (keys-within w "conf" 5)) "renamed over")))

(defn test-watcher-sees-a-path-whose-directories-do-not-exist-yet [tmp-path]
  (setv f (/ tmp-path "a" "b" "motd"))
  (with [w (Watcher)]
    (.add w "motd" [(watch-path (str f))])
    (os.makedirs (/ tmp-path "a" "b"))
    (drain w)
    (.write-text f "x")
    (assert (in "motd" (keys-within w "motd" 5)) "created below directories made after")))

(defn test-watcher-rearms-a-directory-deleted-and-recreated [tmp-path]
  (setv d (/ tmp-path "d")
        f (/ d "motd"))
  (os.mkdir d)
  (.write-text f "x")
  (with [w (Watcher)]
    (.add w "motd" [(watch-path (str f))])
    (shutil.rmtree d)
    (assert (in "motd" (keys-within w "motd" 5)) "the directory went")
    (os.mkdir d)
    (drain w)
    (.write-text f "y")
    (assert (in "motd" (keys-within w "motd" 5)) "a file in the directory made again")
    (drain w)
    (.write-text f "z")
    (assert (in "motd" (keys-within w "motd" 5)) "and written again")))

(defn test-watcher-reports-every-key-when-the-inotify-queue-overflows [tmp-path]
  (setv a (/ tmp-path "a")
        b (/ tmp-path "b")
        quiet (/ tmp-path "sub" "quiet")
        limit (int (.read-text (pathlib.Path "/proc/sys/fs/inotify/max_queued_events"))))
  (os.mkdir (/ tmp-path "sub"))
  (.write-text a "") (.write-text b "") (.write-text quiet "")
  (with [w (Watcher)]
    (.add w "a" [(watch-path (str a))])
    (.add w "quiet" [(watch-path (str quiet))])
    ;; Alternating, so that the kernel cannot merge them: more events than
    ;; its queue holds, while nobody reads.
    (for [_ (range (+ 1000 (// limit 2)))]
      (os.utime a) (os.utime b))
    (setv seen (.wait w 5))
    (assert (= w.overflows 1) "the queue overflowed")
    (assert (= seen #{"a" "quiet"}) f"every key, untouched ones too: {seen}")
    (drain w)
    (.write-text quiet "x")
    (assert (in "quiet" (keys-within w "quiet" 5)) "still watching afterwards")))

(defn test-watcher-polls-at-the-seconds-asked-and-no-sooner []
  (with [w (Watcher)]
    (.add w "p" [(watch-poll 0.3)])
    (setv start (time.monotonic)
          seen (keys-within w "p" 5)
          took (- (time.monotonic) start))
    (assert (= seen #{"p"}) "the poll came")
    (assert (>= took 0.29) f"not before its time: {took}")))

(defn test-watcher-wait-returns-when-woken []
  (with [w (Watcher)]
    (.wake w)
    (setv start (time.monotonic))
    (assert (= (.wait w 30) (set)) "woken: no key")
    (assert (< (- (time.monotonic) start) 5) "at once")))

(defn test-units-are-named-as-systemd-names-their-objects []
  (assert (= (unit-object-path "nginx.service") "/org/freedesktop/systemd1/unit/nginx_2eservice")
          "a dot")
  (assert (= (unit-object-path "a-b@1.service") "/org/freedesktop/systemd1/unit/a_2db_401_2eservice")
          "a dash and an at"))

(defn test-a-unit-without-a-system-bus-is-polled [monkeypatch]
  (monkeypatch.setenv "DBUS_SYSTEM_BUS_ADDRESS" "unix:path=/nonexistent/bus")
  (with [w (Watcher :unit-poll 0.2)]
    (.add w "u" [(watch-unit "consfig-no-such-unit.service")])
    (assert w._no-bus "no bus: polling")
    (assert (= (.wait w 0.5) (set)) "a unit whose state stays the same drifts nothing")))
