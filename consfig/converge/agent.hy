"The converging agent, on the target: apply once, then keep the host so.

Once the host has been applied, the agent registers what each leaf propapp
of its propspec watches (its `:watch`, see `consfig.model.watchspec`; a poll at
the host's interval when it has none) with one `consfig.converge.watch.Watcher`, and
waits.  When a resource may have changed, it checks just the propapps that
watch it; one that drifted is reported (a `converge` event: what differs,
its diff) and re-applied under the deployment lock, so that a push and a
repair never run at once.  Everything it does is an event of the engine's,
streamed to the controller like a deployment's (`consfig converge HOST`) and
appended to a log that `consfig converge HOST --follow` reads.

- A property that raises is reported; it is checked again at its next event.
- Repairs of one propapp are rate-limited (`consfig.apply.meta.RepairLimit`, by
  its `:limit` and `:burst`): when something
  keeps undoing it, the fight is reported once and repairs back off.
- SIGTERM (or the controller going away) ends the agent once the repair in
  progress, if any, is done: a write is never cut short.
- A push deployment takes the same lock: the agent waits for it, then checks
  every propapp again (it learns of the push from the lock's holder file).
- An agent run from an image (`IMAGE`) watches it: when the file is
  replaced by another image (a push of a changed propspec installs it), the
  agent reports it and stops, without checking anything against the old
  propspec, and says so in `replaced`: the image then runs the new one.

The meta-parameters of `with-meta` (consfig.apply.meta) that concern it, `:noop`,
`:limit`, `:burst` and `:poll`, are read in one place: `leaves`.  A leaf is
checked and repaired under all of its meta-parameters, so a repair that
fails is retried by the engine as in a deployment (`:retry`, `:delay`), each
failed attempt a note among the repair's events."

(import contextlib
        hashlib
        json
        os
        signal
        threading
        time
        consfig.model.context [applying]
        consfig.apply.engine [CANNOT-CHECK NO-CHANGE Reported Run apply-deployment current-run
                              effective-meta]
        consfig.errors [ConsfigError]
        consfig.apply.events [converge-event]
        consfig.apply.lock [holder-digest read-holder target-lock-held]
        consfig.apply.meta [RepairLimit]
        consfig.model.property [children find-property inverts? propapp-desc propapps-in
                                propapp-watches trigger-of]
        consfig.model.propspec [propspec-digest]
        consfig.converge.watch [Watcher UNIT-POLL]
        consfig.util [state-directory])

;; Seconds between checks of a property that watches nothing.
(setv INTERVAL 300)
;; Repairs of one propapp: BURST in a row, then LIMIT a second.
(setv LIMIT 1.0
      BURST 5)
;; The event log is rotated (one old file kept) past this size.
(setv LOG-LIMIT (* 1024 1024))
(setv _PUSH "push")
(setv _IMAGE "image")
;; How often the agent marks its bundle's layers used (seconds).
(setv KEEP-FRESH 3600)

(defn _metas [propspec]
  ;; The meta-parameters of each leaf propapp (`with-meta`), by identity.
  (dfor [p meta] (effective-meta propspec) (id p) meta))

(defn _kept? [propapp]
  ;; Whether the agent can tell that PROPAPP drifted: it has a :check, or
  ;; simulates its :apply in check mode.  A command with neither
  ;; (`cmd.single`) would otherwise run at every poll.
  (setv prop (find-property propapp.name))
  (bool (or prop.check prop.simulates)))

(defn leaves [propspec]
  "The propapps of PROPSPEC the agent keeps, in order, as `#(propapp unapply
meta)`: those that hold no other propapp, UNAPPLY when an `unapplied`
encloses it (an odd number of them), META its meta-parameters.  An
`on-change` is kept whole, so that the repair of its propapp runs its
handlers; a `with-unapply`'s propapps after `:unapply` are not kept, nor a
property that cannot say whether it holds (no :check, see `_kept?`), nor
what a deployment of another host inside (`deploys`, a chroot) applies."
  (setv metas (_metas propspec)
        out [])
  (defn walk [p unapply]
    (setv prop (find-property p.name))
    (when prop.opaque-type (return))
    (setv trigger (trigger-of p))
    (cond (inverts? p) (for [q (children p)] (walk q (not unapply)))
          trigger (.append out #(p unapply (.get metas (id trigger) {})))
          (propapps-in p.args) (for [q (children p)] (walk q unapply))
          (_kept? p) (.append out #(p unapply (.get metas (id p) {})))))
  (walk propspec False)
  out)

(defn watches-of [propapp]
  "What to watch for PROPAPP: its property's `:watch`; for an `on-change`,
what its first propapp's leaves watch; None when something in it watches
nothing (it is polled)."
  (setv trigger (trigger-of propapp))
  (if trigger
      (do (setv specs [])
          (for [[p _ _] (leaves trigger)]
            (setv more (watches-of p))
            (when (is more None) (return None))
            (.extend specs more))
          specs)
      (propapp-watches propapp)))

(defclass _Leaf []
  (defn __init__ [self key propapp unapply meta interval limit burst]
    (setv self.key key
          self.propapp propapp
          self.unapply unapply
          ;; Those the engine reads (:retry, :delay) hold for its repairs.
          self.meta meta
          self.noop (bool (.get meta "noop" False))
          self.limit (RepairLimit (.get meta "limit" limit) (.get meta "burst" burst))
          self.fighting False
          ;; When a repair was last held back by the limit.
          self.held None
          ;; The drift last reported, while it lasts: #(explanation diff).
          self.reported None
          self.desc (try (propapp-desc propapp)
                         (except [Exception] (. (find-property propapp.name) short-name)))
          self.specs (or (watches-of propapp) [["poll" interval]]))
    (when (and (.get meta "poll") (not-in "poll" (gfor s self.specs (get s 0))))
      (.append self.specs ["poll" (get meta "poll")]))))

(defclass EventLog []
  "Appends each event, as a line of JSON stamped with the time, to PATH
(mode 0600, in a directory only its owner reads): what `consfig converge
--follow` reads.  Past `LOG-LIMIT` bytes the file becomes PATH.1."
  (defn __init__ [self path]
    (setv self.path path
          self.lock (threading.Lock))
    (os.makedirs (os.path.dirname path) 0o700 :exist-ok True))
  (defn __call__ [self event]
    (setv line (.encode (+ (json.dumps {"time" (round (time.time) 3) #** event}
                                       :ensure-ascii False :default str)
                           "\n")))
    (with [self.lock]
      (try
        (when (> (+ (os.path.getsize self.path) (len line)) LOG-LIMIT)
          (os.replace self.path (+ self.path ".1")))
        (except [OSError] None))
      (setv fd (os.open self.path (| os.O-WRONLY os.O-APPEND os.O-CREAT) 0o600))
      (try (os.write fd line) (finally (os.close fd))))))

(defn _digest [path]
  ;; The SHA-256 of the file at PATH; None when it cannot be read.
  (try
    (setv h (hashlib.sha256))
    (with [f (open path "rb")]
      (for [block (iter (fn [] (.read f 65536)) b"")]
        (.update h block)))
    (.hexdigest h)
    (except [OSError] None)))

(defn log-path [hostname [directory None]]
  "The agent's event log for HOSTNAME: converge/HOSTNAME.jsonl in consfig's
state directory (/var/lib/consfig for root)."
  (when (or (not hostname) (in "/" hostname) (.startswith hostname "."))
    (raise (ConsfigError f"{hostname !r} cannot name an event log")))
  (os.path.join (or directory (state-directory)) "converge" f"{hostname}.jsonl"))

(defclass Agent []
  "Keeps HOST (preprocessed, on the target) converged through CONNECTION,
sending events to SINK.  LOCK-DIR: the cache directory whose deployment
lock it takes for each repair.  NOOP: report drift, repair nothing.
INTERVAL: seconds between checks of a property that watches nothing.
LIMIT, BURST: the `RepairLimit` of a propapp whose meta-parameters say none."
  (defn __init__ [self host connection sink lock-dir * [noop False] [interval INTERVAL]
                  [unit-poll None] [limit LIMIT] [burst BURST] [layers #()] [image None]]
    (setv self.host host
          self.connection connection
          self.sink sink
          self.lock-dir lock-dir
          self.noop noop
          self.stopping (threading.Event)
          self.holder f"the converging agent of {host.hostname} (pid {(os.getpid)})"
          self.watcher (Watcher :unit-poll (or unit-poll UNIT-POLL))
          self.leaves (lfor [i [p unapply meta]] (enumerate (leaves host.propspec))
                            (_Leaf i p unapply meta interval limit burst))
          ;; key -> when a repair held back by its limit may go
          self.deferred {}
          self.repairs 0
          self.failures 0
          ;; The bundle's layers it runs from, kept recently used: another
          ;; deployment prunes layers unused for a day, and a property may
          ;; still import from them.
          self.layers layers
          self.touched 0
          ;; The image it runs from, and its digest when it started.
          self.image image
          self.image-digest (when image (_digest image))
          self.replaced False
          ;; A push of another propspec for this host: the agent stops
          ;; rather than undo it (see `_after-push`).
          self.digest (propspec-digest host.propspec)
          self.superseded False))

  (defn _image-replaced? [self]
    ;; A file that is gone, or the same, is not a new image.
    (setv now (when self.image (_digest self.image)))
    (when (and now (!= now self.image-digest))
      (setv self.replaced True)
      (self._report "replaced" :why f"{self.image} was replaced: the agent runs the new one")
      (.stop self))
    self.replaced)

  (defn _touch-layers [self now]
    (when (and self.layers (> (- now self.touched) KEEP-FRESH))
      (setv self.touched now)
      (for [d self.layers]
        (try (os.utime d) (except [OSError] None)))))

  (defn stop [self]
    "End the agent: now when it waits, after the repair in progress when it
repairs.  Safe from a signal handler, and once it has ended (its image
replaced, say)."
    (when (not (.is-set self.stopping))
      (.set self.stopping)
      (.wake self.watcher)))

  (defn _report [self what [desc None] #** details]
    (self.sink {"host" self.host.hostname "depth" 0 "time" (round (time.time) 3)
                #** (converge-event what desc #** details)}))

  (defn _run [self sink check thunk]
    ;; THUNK in a run of the engine's of its own, events to SINK.
    (setv token (.set current-run (Run sink check)))
    (try (thunk) (finally (.reset current-run token))))

  (defn _apply [self leaf sink check]
    ;; Under the leaf's meta-parameters, as in a deployment: a repair that
    ;; fails is retried by the engine (`:retry`, `:delay`).
    (self._run sink check (fn [] (apply-deployment leaf.propapp leaf.unapply :meta leaf.meta))))

  (defn register [self]
    "Watch every leaf's resources, and the lock's holder (pushes)."
    (for [leaf self.leaves]
      (.add self.watcher leaf.key leaf.specs))
    (.add self.watcher _PUSH [["path" (os.path.join self.lock-dir "deploy.holder")]])
    (when self.image
      (.add self.watcher _IMAGE [["path" self.image]]))
    (self._report "watching" :properties (len self.leaves)
                  :watches (sum (gfor l self.leaves (len l.specs))) :noop (or self.noop None)
                  :pid (os.getpid)))

  (defn converge-one [self leaf]
    "Check LEAF; report a drift and, unless in noop, repair it."
    (setv seen [])
    (try
      (setv result (self._apply leaf (fn [e] (.append seen e)) True))
      (except [r Reported]
        (self._failed leaf seen r)
        (return)))
    (when (= result NO-CHANGE)
      (setv leaf.reported None)
      (return))
    (setv notes (lfor e seen :if (and (= (get e "event") "output") (= (.get e "stream") "note"))
                      (get e "text"))
          diffs (lfor e seen :if (= (get e "event") "diff") (get e "text")))
    (setv drift #((.join "; " notes) (.join "" diffs))
          noop (or self.noop leaf.noop))
    ;; In noop, a drift stays: said once, and again when it changes.
    (when (and noop (= drift leaf.reported)) (return))
    (setv leaf.reported drift)
    (self._report "drift" leaf.desc
                  :explanation (or (get drift 0) (when (= result CANNOT-CHECK) "it has no :check")
                                   None)
                  :diff (or (get drift 1) None)
                  :noop (or (when noop True) None))
    (when noop (return))
    (setv now (time.monotonic)
          wait (if (.allow leaf.limit) 0 (max 0.001 (- (.next-allowed leaf.limit) now))))
    ;; A fight is over once no repair has been held back for as long as the
    ;; bucket takes to fill up again.
    (when (and leaf.fighting leaf.held
               (> (- now leaf.held) (/ leaf.limit.burst leaf.limit.limit)))
      (setv leaf.fighting False))
    (when (> wait 0)
      (setv leaf.held now)
      (when (not leaf.fighting)
        (setv leaf.fighting True)
        (self._report "fight" leaf.desc :limit leaf.limit.limit :burst leaf.limit.burst
                      #** {"retry-in" (round wait 3)}))
      (setv (get self.deferred leaf.key) (+ (time.monotonic) wait))
      (return))
    (self.repair leaf))

  (defn [contextlib.contextmanager] _locked [self]
    (with [_ (target-lock-held self.lock-dir {"wait" (* 10 365 86400) "holder" self.holder}
                               :stopping self.stopping.is-set)]
      (yield)))

  (defn repair [self leaf]
    "Re-apply LEAF under the deployment lock."
    (try
      (with [_ (self._locked)]
        (setv result (self._apply leaf self.sink False)))
      (except [r Reported]
        (self._failed leaf [] r)
        (return))
      (except [ConsfigError]
        ;; Told to stop while a push held the lock.
        (return)))
    (when (!= result NO-CHANGE)
      (+= self.repairs 1)
      (self._report "repaired" leaf.desc)))

  (defn _failed [self leaf seen r]
    ;; The failed end event (its message, its traceback) goes on as it is.
    (for [e seen]
      (when (= (.get e "status") "failed") (self.sink e)))
    (+= self.failures 1)
    (self._report "failed" leaf.desc :message (str r.cause)))

  (defn _after-push [self]
    ;; Someone else took the lock: wait until they are done, then check
    ;; everything again.
    (setv holder (read-holder self.lock-dir))
    (when (and holder (!= holder self.holder))
      (try (with [_ (self._locked)] None)
           (except [ConsfigError] (return #())))
      ;; The push may have installed a new image: nothing is checked
      ;; against the old propspec then, lest it undo the push.
      (when (self._image-replaced?) (return #()))
      ;; A push of the host's whole propspec that differs from ours: the
      ;; host is to be what was pushed, and this agent knows only its own
      ;; propspec.  It stops, rather than undo the push.
      (setv pushed (holder-digest holder))
      (when (and pushed (!= pushed self.digest))
        (setv self.superseded True)
        (self._report "superseded"
                      :why (+ f"{holder} deployed another propspec of {self.host.hostname}; "
                              "the agent stops rather than undo it: start it again "
                              "(consfig converge, or install the new image) to keep the new one"))
        (.stop self)
        (return #()))
      (self._report "rescan" :why f"after a deployment by {holder}")
      (return (range (len self.leaves))))
    #())

  (defn step [self [timeout None]]
    "Wait for a change (at most TIMEOUT seconds) and converge what changed."
    (setv now (time.monotonic))
    (self._touch-layers now)
    (when self.layers
      (setv timeout (if (is timeout None) KEEP-FRESH (min timeout KEEP-FRESH))))
    (setv due (when self.deferred (max 0 (- (min (.values self.deferred)) now)))
          timeout (if (is due None) timeout (if (is timeout None) due (min due timeout)))
          overflows self.watcher.overflows
          keys (.wait self.watcher timeout))
    (when (.is-set self.stopping) (return))
    (when (> self.watcher.overflows overflows)
      (self._report "rescan" :why "events were lost (the inotify queue overflowed)"))
    (setv now (time.monotonic))
    (for [[k when] (list (.items self.deferred))]
      (when (<= when now)
        (.add keys k)
        (del (get self.deferred k))))
    (when (and (in _IMAGE keys) (self._image-replaced?))
      (return))
    (.discard keys _IMAGE)
    (when (in _PUSH keys)
      (.discard keys _PUSH)
      (.update keys (self._after-push)))
    (when (or self.replaced self.superseded) (return))
    (for [k (sorted keys)]
      (when (.is-set self.stopping) (break))
      ;; Held back by its limit: its time will come.
      (when (not-in k self.deferred)
        (self.converge-one (get self.leaves k)))))

  (defn run [self]
    "Watch and converge until `stop`."
    (with [_ (applying self.host self.connection)]
      (try
        (self.register)
        (while (not (.is-set self.stopping))
          (self.step))
        (finally
          (.close self.watcher)
          (self._report "stopped" :repairs self.repairs :failures self.failures))))))

(defn [contextlib.contextmanager] stopped-by-signals [agent]
  "While the body runs, SIGTERM, SIGINT and SIGHUP stop AGENT (after the
repair in progress) rather than the process."
  (setv old (dfor s [signal.SIGTERM signal.SIGINT signal.SIGHUP]
                  s (signal.signal s (fn [#* _] (.stop agent)))))
  (try (yield)
       (finally (for [[s h] (.items old)] (signal.signal s h)))))

(defn tee [#* sinks]
  "A sink that passes each event to every one of SINKS."
  (fn [event] (for [s sinks] (s event))))

(defn converge-after [host connection sink lock-dir settings * [layers #()]]
  "Run the agent for HOST, applied just now through CONNECTION, until it is
told to stop; SETTINGS (from the controller, or an image's options):
noop, interval, unit-poll, limit, burst, log (a directory for the event log, or None for
consfig's state directory), image (the image it runs from: it stops when that
is replaced, `Agent.replaced` true).  LAYERS: the directories of the bundle it runs
from, kept recently used."
  (setv log (EventLog (log-path host.hostname (.get settings "log")))
        agent (Agent host connection (tee sink log) lock-dir
                     :noop (.get settings "noop" False)
                     :interval (.get settings "interval" INTERVAL)
                     :unit-poll (.get settings "unit-poll")
                     :limit (.get settings "limit" LIMIT)
                     :burst (.get settings "burst" BURST)
                     :layers layers
                     :image (.get settings "image")))
  (with [_ (stopped-by-signals agent)]
    (.run agent))
  agent)

(export :objects [Agent EventLog leaves watches-of log-path converge-after stopped-by-signals
                  tee INTERVAL LIMIT BURST])
