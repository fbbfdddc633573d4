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
- Each `during` block's fact is watched too (`kept`): when it fires, the
  block is evaluated again (`consfig.apply.combinators.during-reevaluated`),
  and the properties inside are kept only while every `during` around them
  holds.
- One agent keeps a host (`keeping`): a second one refuses to start.  An
  agent's repair, or a check, is no push to another agent.
- Checks and failures are limited, repeats counted, wake-ups coalesced;
  events are bounded (`bounded`), and the log (`EventLog`) is opened
  safely and survives a full disk.
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
        errno
        fcntl
        hashlib
        json
        os
        signal
        stat
        sys
        threading
        time
        consfig.model.context [applying]
        consfig.apply.engine [CANNOT-CHECK NO-CHANGE Reported Run apply-deployment current-run]
        consfig.options [RunOptions]
        consfig.apply.meta [effective-meta]
        consfig.errors [ConsfigError]
        consfig.apply.events [converge-event]
        consfig.apply.lock [agent-holder holder-says read-holder target-lock-held]
        consfig.transport.safepath [walk]
        consfig.apply.meta [RepairLimit]
        consfig.apply.combinators [during-facts during-reevaluated]
        consfig.model.fact [fact-holds?]
        consfig.model.property [children fact-of find-property inverts? propapp-desc propapps-in
                                propapp-watches template? trigger-of]
        consfig.apply.dataspace [Dataspace keep-leases]
        consfig.model.propspec [propspec-digest]
        consfig.model.watchspec [arming]
        consfig.converge.watch [Watcher UNIT-POLL]
        consfig.util [state-directory])

;; Seconds between checks of a property that watches nothing.
(setv INTERVAL 300)
;; Repairs of one propapp: BURST in a row, then LIMIT a second.
(setv LIMIT 1.0
      BURST 5)
;; Watch events are read at most this often (a second) past a burst of
;; WAKE-BURST, coalesced in between: files churned in a watched directory
;; cost the agent a bounded number of wake-ups.
(setv WAKE-RATE 50
      WAKE-BURST 20)
;; A report repeated (the same failure of one propapp) is told once; the
;; repeats are counted and told, as one event, when it changes, or after
;; this many seconds.
(setv REPEAT-WINDOW 60)
;; A fight is over once nothing has been held back for this many seconds
;; (or, if longer, as long as its bucket takes to fill up again): a fight
;; that pauses while the other side is slow (a loaded machine) is the same
;; fight, and is not reported again.
(setv FIGHT-QUIET 10)
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

(defn kept [propspec [unkept None]]
  "What the agent keeps of PROPSPEC: `#(leaves blocks)`.  LEAVES as `leaves`
gives them, each with a fourth element: the index in BLOCKS of the
innermost `during` that holds it, or None.  BLOCKS: the `during` blocks
(`consfig.apply.combinators.during-facts`), outermost first, each
`#(block parent)`, PARENT the index of the `during` that holds it, or None.
A `during` inside an `unapplied` is kept unapplied whatever its fact, so it
is no block: its properties are leaves kept unapplied.  A property that
cannot say whether it holds (an action) is added to the list UNKEPT, when
given."
  (setv metas (_metas propspec)
        found (dfor b (during-facts propspec) (id (get b "during")) b)
        out []
        blocks [])
  (defn walk [p unapply block]
    (setv prop (find-property p.name))
    (when prop.opaque-type (return))
    (setv trigger (trigger-of p)
          fact (fact-of p))
    (cond (and fact (not unapply) (in (id p) found))
          (do (.append blocks #((get found (id p)) block))
              (setv here (- (len blocks) 1))
              ;; A template (a facet of the dataspace, its binders bound
              ;; by each match) is kept by evaluating its block again.
              (for [q (children p) :if (and (is-not q fact) (not (template? q)))]
                (walk q unapply here)))
          (inverts? p) (for [q (children p)] (walk q (not unapply) block))
          trigger (.append out #(p unapply (.get metas (id trigger) {}) block))
          (propapps-in p.args) (for [q (children p) :if (is-not q fact)] (walk q unapply block))
          (_kept? p) (.append out #(p unapply (.get metas (id p) {}) block))
          (is-not unkept None) (.append unkept p)))
  (walk propspec False None)
  #(out blocks))

(defn leaves [propspec [unkept None]]
  "The propapps of PROPSPEC the agent keeps, in order, as `#(propapp unapply
meta)`: those that hold no other propapp, UNAPPLY when an `unapplied`
encloses it (an odd number of them), META its meta-parameters.  An
`on-change` is kept whole, so that the repair of its propapp runs its
handlers; a `with-unapply`'s propapps after `:unapply` are not kept, nor a
property that cannot say whether it holds (no :check, see `_kept?`): those
are added to the list UNKEPT, when given; nor what a deployment of another
host inside (`deploys`, a chroot) applies.  The properties of a `during` are
among them: see `kept`."
  (lfor [p unapply meta _] (get (kept propspec unkept) 0) #(p unapply meta)))

(defn _unkept-desc [propapp]
  ;; A propapp the agent does not keep, and why, for the operator.
  (setv prop (find-property propapp.name)
        desc (try (propapp-desc propapp) (except [Exception] prop.short-name)))
  (+ desc " (" (or prop.action "it has no :check") ")"))

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
  (defn __init__ [self key propapp unapply meta interval limit burst [block None]]
    (setv self.key key
          ;; The innermost `during` holding it (a `_Block`), or None.
          self.block block
          self.propapp propapp
          self.unapply unapply
          ;; Those the engine reads (:retry, :delay) hold for its repairs.
          self.meta meta
          self.noop (bool (.get meta "noop" False))
          self.limit (RepairLimit (.get meta "limit" limit) (.get meta "burst" burst))
          ;; Checks too, twice as many: a repair is seen again by its own
          ;; watch.
          self.checks (RepairLimit (* 2 self.limit.limit) (* 2 self.limit.burst))
          ;; The failure last reported, how many times since, and when it
          ;; was said.
          self.said None
          self.repeats 0
          self.said-at 0
          self.fighting False
          ;; When a repair was last held back by the limit.
          self.held None
          ;; The drift last reported, while it lasts: #(explanation diff).
          self.reported None
          self.desc (try (propapp-desc propapp)
                         (except [Exception] (. (find-property propapp.name) short-name)))
          self.interval interval
          ;; Asked on the target when the agent arms its watches (`arm`).
          self.specs None))

  (defn arm [self]
    ;; What to watch, asked on the target (`consfig.model.watchspec.arming`),
    ;; plus a poll its meta-parameters ask for.
    (setv self.specs (or (watches-of self.propapp) [["poll" self.interval]]))
    (when (and (.get self.meta "poll") (not-in "poll" (gfor s self.specs (get s 0))))
      (.append self.specs ["poll" (get self.meta "poll")]))))

(defclass _Block []
  ;; A `during` block: its fact watched, its properties kept while it holds.
  (defn __init__ [self key block parent interval limit burst]
    (setv self.key key
          self.propapp (get block "during")
          self.fact (get block "fact")
          ;; The `during` that holds it (a `_Block`), or None.
          self.parent parent
          ;; Whether its fact held when last asked: None, not known.
          self.holds None
          ;; Re-evaluations are limited as repairs are: a fact that flaps
          ;; is evaluated again once a token comes, in its last state.
          self.limit (RepairLimit limit burst)
          self.said None
          self.repeats 0
          self.said-at 0
          self.fighting False
          self.held None
          self.desc (try (propapp-desc self.propapp)
                         (except [Exception] "during"))
          self.specs (or (get block "watch") [["poll" interval]]))))

(defn _kept-now? [block]
  ;; Whether the properties inside BLOCK (a `_Block`, or None) are to be
  ;; kept: every `during` around them holds.
  (while block
    (when (not block.holds) (return False))
    (setv block block.parent))
  True)

(defn _within? [block outer]
  (while block
    (setv block block.parent)
    (when (is block outer) (return True)))
  False)

(defn _refused [path why]
  (ConsfigError f"the converging agent's {path}: {why}; refused (docs/converge.md)"))

(defn _private-dir [path]
  ;; Make the directory PATH (mode 0700) and those above it if need be, by
  ;; the safe walk (consfig.transport.safepath): no symlink another user
  ;; planted is followed.  PATH itself must be ours.
  (setv path (os.path.abspath path)
        parts (lfor c (.split path "/") :if c c))
  (for [i (range 1 (+ (len parts) 1))]
    (setv #(dirfd name) (walk (+ "/" (.join "/" (cut parts 0 i)))))
    (try (os.mkdir name 0o700 :dir-fd dirfd)
         (except [#(FileExistsError PermissionError)] None)
         (finally (os.close dirfd))))
  (setv #(dirfd name) (walk path))
  (try
    (setv fd (try (os.open name (| os.O-PATH os.O-NOFOLLOW os.O-CLOEXEC) :dir-fd dirfd)
                  (finally (os.close dirfd)))
          st (os.fstat fd))
    (os.close fd)
    (except [FileNotFoundError] (raise (_refused path "it cannot be made"))))
  (cond (not (stat.S-ISDIR st.st-mode)) (raise (_refused path "it is not a directory"))
        (!= st.st-uid (os.geteuid))
        (raise (_refused path f"the directory belongs to uid {st.st-uid}, not to us")))
  path)

(defn _open-private [path flags]
  ;; PATH opened by the safe walk with O_NOFOLLOW: a symlink at its end is
  ;; refused, and so is a file that is not ours, or not a regular file.
  (setv #(dirfd name) (walk path))
  (try
    (setv fd (os.open name (| flags os.O-NOFOLLOW os.O-CLOEXEC os.O-NONBLOCK) 0o600
                      :dir-fd dirfd))
    (except [e OSError]
      (raise (if (= e.errno errno.ELOOP) (_refused path "it is a symbolic link") e)))
    (finally (os.close dirfd)))
  (setv st (os.fstat fd))
  (when (or (!= st.st-uid (os.geteuid)) (not (stat.S-ISREG st.st-mode)))
    (os.close fd)
    (raise (_refused path (if (stat.S-ISREG st.st-mode)
                              f"it belongs to uid {st.st-uid}, not to us"
                              "it is not a regular file"))))
  fd)

(defn keeper-path [hostname]
  "The file the converging agent of HOSTNAME holds locked while it runs:
converge/HOSTNAME.agent in consfig's state directory."
  (os.path.join (os.path.dirname (log-path hostname)) f"{hostname}.agent"))

;; The hosts this process's agent keeps (`keeping`).
(setv _keeping #{})

(defn [contextlib.contextmanager] keeping [hostname * [alongside False]]
  "While the body runs, this process's agent keeps HOSTNAME: it holds the
flock(2) of `keeper-path`, which says who it is and since when.  When
another process holds it, a `ConsfigError` says which (its pid, since
when), and that --alongside runs one beside it.  ALONGSIDE: run anyway,
holding nothing.  Re-entered in one process, it holds what it holds."
  (if (or alongside (in hostname _keeping))
      (yield)
      (do
        (setv path (keeper-path hostname))
        (_private-dir (os.path.dirname path))
        (setv fd (_open-private path (| os.O-RDWR os.O-CREAT)))
        (try
          (try (fcntl.flock fd (| fcntl.LOCK-EX fcntl.LOCK-NB))
               (except [BlockingIOError]
                 (setv who (.strip (.decode (os.pread fd 4096 0) "utf-8" "replace")))
                 (raise (ConsfigError
                          (+ f"another converging agent keeps {hostname} here ({(or who "who, it does not say")}): "
                             "two would rescan each other; stop it first (or its service: "
                             "systemctl stop consfig-converge), or run this one with --alongside")))))
          (os.ftruncate fd 0)
          (os.pwrite fd (.encode f"pid {(os.getpid)}, since {(time.strftime "%Y-%m-%d %H:%M:%S %Z")}\n")
                     0)
          (.add _keeping hostname)
          (try (yield)
               (finally (.discard _keeping hostname)))
          (finally (os.close fd))))))

(defn _open-at [dirfd name path flags]
  ;; NAME in DIRFD (what the safe walk gave for PATH), opened with
  ;; O_NOFOLLOW: a symlink there is refused, and so is a file that is not
  ;; ours, or not a regular file.
  (setv fd (try (os.open name (| flags os.O-NOFOLLOW os.O-CLOEXEC os.O-NONBLOCK) 0o600
                         :dir-fd dirfd)
                (except [e OSError]
                  (raise (if (= e.errno errno.ELOOP) (_refused path "it is a symbolic link") e))))
        st (os.fstat fd))
  (when (or (!= st.st-uid (os.geteuid)) (not (stat.S-ISREG st.st-mode)))
    (os.close fd)
    (raise (_refused path (if (stat.S-ISREG st.st-mode)
                              f"it belongs to uid {st.st-uid}, not to us"
                              "it is not a regular file"))))
  fd)

(defn _open-private [path flags]
  (setv #(dirfd name) (walk path))
  (try (_open-at dirfd name path flags)
       (finally (os.close dirfd))))

;; No string in an event the agent sends or logs is longer than this
;; (characters): a drift's diff is bounded where it is made (`consfig.props.file`),
;; and this holds for whatever else an event may carry.
(setv FIELD-LIMIT 65536)

(defn bounded [event]
  "EVENT with every string longer than `FIELD-LIMIT` cut there, saying how
much was left out."
  (if (any (gfor v (.values event) (and (isinstance v str) (> (len v) FIELD-LIMIT))))
      (dfor [k v] (.items event)
            k (if (and (isinstance v str) (> (len v) FIELD-LIMIT))
                  (+ (cut v 0 FIELD-LIMIT) f"\n… ({(- (len v) FIELD-LIMIT)} more characters not shown)")
                  v))
      event))

(defn _stderr [text]
  (try (print text :file sys.stderr :flush True)
       (except [Exception] None)))

(defclass EventLog []
  "Appends each event, as a line of JSON stamped with the time, to PATH
(mode 0600, in a directory only its owner reads): what `consfig converge
--follow` reads.  Past `LOG-LIMIT` bytes the file becomes PATH.1.  The
file is opened by the safe walk with O_NOFOLLOW, and must be ours: a
symlink a user planted in the log's directory is refused, at the start
(`ConsfigError`) as at each event.  When a line cannot be written (a full
disk), the event is lost, not the agent: COMPLAIN (a function of a text)
is told once, and the log resumes, saying how many events it lost, as soon
as a line can be written again."
  (defn __init__ [self path [complain None]]
    (setv self.path (os.path.abspath path)
          self.lock (threading.Lock)
          self.complain (or complain _stderr)
          ;; While lines are lost: how many, and why.
          self.lost 0
          self.why None)
    (_private-dir (os.path.dirname self.path))
    (os.close (_open-private self.path (| os.O-WRONLY os.O-APPEND os.O-CREAT))))

  (defn _line [self event]
    (.encode (+ (json.dumps {"time" (round (time.time) 3) #** (bounded event)}
                            :ensure-ascii False :default str)
                "\n")
             "utf-8" "surrogateescape"))

  (defn _append [self data]
    ;; DATA appended whole, or not at all: a line cut short by a full disk
    ;; is taken back, so that every line of the log stays an event.
    (setv #(dirfd name) (walk self.path))
    (try
      (try (when (> (+ (. (os.stat name :dir-fd dirfd :follow-symlinks False) st-size) (len data))
                    LOG-LIMIT)
             (os.replace name (+ name ".1") :src-dir-fd dirfd :dst-dir-fd dirfd))
           (except [FileNotFoundError] None))
      (setv fd (_open-at dirfd name self.path (| os.O-WRONLY os.O-APPEND os.O-CREAT)))
      (finally (os.close dirfd)))
    (try
      (setv size (. (os.fstat fd) st-size))
      (try
        (setv written (os.write fd data))
        (when (< written (len data))
          (raise (OSError errno.ENOSPC f"{(os.strerror errno.ENOSPC)} (a line was cut short)")))
        (except [OSError]
          (try (os.ftruncate fd size) (except [OSError] None))
          (raise)))
      (finally (os.close fd))))

  (defn __call__ [self event]
    (setv line (self._line event))
    (with [self.lock]
      (try
        (when self.why
          (self._append (self._line (converge-event "log-resumed" :lost self.lost :why self.why)))
          (self.complain f"consfig converge: its log {self.path} is written again ({self.lost} events lost)")
          (setv self.lost 0
                self.why None))
        (self._append line)
        (except [e #(OSError ConsfigError)]
          (when (is self.why None)
            (self.complain (+ f"consfig converge: its log {self.path} cannot be written ({e}); "
                              "the agent goes on without it, and writes it again once it can")))
          (setv self.why (str e))
          (+= self.lost 1))))))

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
          self.holder (agent-holder host.hostname)
          self.dataspace (next (iter (.get host.hostattrs "dataspace" [])) None)
          self.watcher (Watcher :unit-poll (or unit-poll UNIT-POLL)
                                :dataspace (when self.dataspace
                                             #(self.dataspace host.hostname)))
          ;; The actions it cannot keep, said when it starts.
          self.unkept []
          #(found blocks) (kept host.propspec self.unkept)
          self.blocks [])
    ;; Keys: 0… the leaves, then the blocks.
    (for [[j [b parent]] (enumerate blocks)]
      (.append self.blocks (_Block (+ (len found) j) b
                                   (if (is parent None) None (get self.blocks parent))
                                   interval limit burst)))
    (setv self.leaves (lfor [i [p unapply meta block]] (enumerate found)
                            (_Leaf i p unapply meta interval limit burst
                                   (if (is block None) None (get self.blocks block))))
          ;; key -> when a check or repair held back by its limit may go
          self.deferred {}
          self.wakes (RepairLimit WAKE-RATE WAKE-BURST)
          self.repairs 0
          self.failures 0
          ;; The bundle's layers it runs from, kept recently used: another
          ;; deployment prunes layers unused for a day, and a property may
          ;; still import from them.
          self.layers layers
          ;; None: never yet (the monotonic clock may read less than
          ;; KEEP-FRESH soon after boot).
          self.touched None
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
    (when (and self.layers (or (is self.touched None) (> (- now self.touched) KEEP-FRESH)))
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
    (setv token (.set current-run (Run sink (RunOptions :check check))))
    (try (thunk) (finally (.reset current-run token))))

  (defn _apply [self leaf sink check]
    ;; Under the leaf's meta-parameters, as in a deployment: a repair that
    ;; fails is retried by the engine (`:retry`, `:delay`).
    (self._run sink check (fn [] (apply-deployment leaf.propapp leaf.unapply :meta leaf.meta))))

  (defn register [self]
    "Watch every leaf's resources, and the lock's holder (pushes)."
    (with [_ (arming)]
      (for [leaf self.leaves]
        (.arm leaf)))
    (for [leaf self.leaves]
      (.add self.watcher leaf.key leaf.specs))
    (for [block self.blocks]
      (.add self.watcher block.key block.specs))
    (.add self.watcher _PUSH [["path" (os.path.join self.lock-dir "deploy.holder")]])
    (when self.image
      (.add self.watcher _IMAGE [["path" self.image]]))
    (when self.unkept
      (self._report "not-kept" :propapps (lfor p self.unkept (_unkept-desc p))
                    :why (+ "actions, which no check can say hold, are applied by deployments only: "
                            (.join "; " (gfor p self.unkept (_unkept-desc p))))))
    (self._report "watching" :properties (len self.leaves)
                  :watches (sum (gfor l [#* self.leaves #* self.blocks] (len l.specs)))
                  :during (or (len self.blocks) None)
                  :noop (or self.noop None)
                  :pid (os.getpid))
    ;; Whether each fact holds is learnt by evaluating its block again: the
    ;; fact may have changed since the first pass asked it, before the
    ;; watches were armed.  Said only when that changes something.
    (for [block self.blocks]
      (when (.is-set self.stopping) (break))
      (when (_kept-now? block.parent)
        (self.reevaluate block))))

  (defn _holds [self block]
    ;; Whether BLOCK's fact holds now; None when asking it failed.
    (try (self._run (fn [_] None) True (fn [] (fact-holds? block.fact)))
         (except [Exception] None)))

  (defn _decided [self block decisions]
    ;; Whether BLOCK's fact held when its evaluation asked it (DECISIONS, as
    ;; `during-reevaluated` fills them): what was applied or retracted, said
    ;; so even if the fact changed since.  Asked now when it was not asked
    ;; then (a failure came first).
    (for [[fact holds] decisions]
      (when (= fact block.fact)
        (return holds)))
    (self._holds block))

  (defn reevaluate [self block]
    "Evaluate the `during` BLOCK again, as a deployment does
(`consfig.apply.combinators.during-reevaluated`): its properties applied
while its fact holds, retracted when it does not.  Its events are passed on
when that changed something, or failed; the blocks inside it follow its
fate, and the properties inside are kept only while it holds."
    (setv seen []
          was block.holds
          failed None
          decisions [])
    (try
      (with [_ (if self.noop (contextlib.nullcontext) (self._locked))]
        (setv result (self._run (fn [e] (.append seen e)) self.noop
                                (fn [] (during-reevaluated block.propapp :decisions decisions)))))
      (except [r Reported]
        (setv failed r
              result None))
      (except [ConsfigError]
        ;; Told to stop while a push held the lock.
        (return)))
    (setv block.holds (self._decided block decisions))
    (for [b self.blocks :if (_within? b block)]
      (setv b.holds (when (_kept-now? b.parent) (self._decided b decisions))))
    (when (or (and failed (!= #("failed" (str failed.cause)) block.said))
              (!= result NO-CHANGE) (!= was block.holds))
      (for [e seen] (self.sink e)))
    (cond failed (do (+= self.failures 1)
                     (when (not (self._repeated? block #("failed" (str failed.cause))))
                       (self._report "failed" block.desc :message (str failed.cause))))
          (or (!= result NO-CHANGE) (and (is-not was None) (!= was block.holds)))
          (self._report (if block.holds "applied" "retracted") block.desc
                        :noop (or (when self.noop True) None))))

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
    (when (not (self._held-back? leaf))
      (self.repair leaf)))

  (defn _held-back? [self item [bucket None]]
    ;; Whether ITEM (a leaf, a block) has used up its limit (BUCKET, its
    ;; repair limit by default): it is then put off until its next token.
    ;; A fight (repairs held back) is reported once.
    (setv now (time.monotonic)
          limit (or bucket item.limit)
          wait (if (.allow limit) 0 (max 0.001 (- (.next-allowed limit) now))))
    (when (<= wait 0) (return False))
    (setv (get self.deferred item.key) (+ (time.monotonic) wait))
    (when (is-not limit item.limit) (return True))
    ;; A fight is over once nothing has been held back for FIGHT-QUIET
    ;; seconds, or as long as the bucket takes to fill up again.
    (when (and item.fighting item.held
               (> (- now item.held) (max FIGHT-QUIET (/ item.limit.burst item.limit.limit))))
      (setv item.fighting False))
    (setv item.held now)
    (when (not item.fighting)
      (setv item.fighting True)
      (self._report "fight" item.desc :limit item.limit.limit :burst item.limit.burst
                    :flaps (or (isinstance item _Block) None)
                    #** {"retry-in" (round wait 3)}))
    True)

  (defn _repeated? [self item said]
    ;; Whether SAID (what a failure report of ITEM says) repeats the last
    ;; one, said less than REPEAT-WINDOW ago: then it is counted, not said.
    ;; Otherwise the repeats of the last one are told first.
    (setv now (time.monotonic))
    (when (and (= said item.said) (< (- now item.said-at) REPEAT-WINDOW))
      (+= item.repeats 1)
      (return True))
    (self._flush-repeats item)
    (setv item.said said
          item.said-at now)
    False)

  (defn _flush-repeats [self item]
    (when item.repeats
      (self._report "repeated" item.desc :of "failed" :count item.repeats
                    :message (get item.said 1))
      (setv item.repeats 0
            item.said-at (time.monotonic))))

  (defn [contextlib.contextmanager] _locked [self]
    ;; Waiting for a push is said, once a wait, with who holds the lock: a
    ;; repair that does not come has a reason the admin can see.
    (with [_ (target-lock-held self.lock-dir {"wait" (* 10 365 86400) "holder" self.holder}
                               :stopping self.stopping.is-set
                               :say (fn [text] (self._report "waiting" :why text)))]
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
    ;; The failed end event (its message, its traceback) goes on as it is,
    ;; unless it says what it said last time.
    (+= self.failures 1)
    (when (self._repeated? leaf #("failed" (str r.cause))) (return))
    (for [e seen]
      (when (= (.get e "status") "failed") (self.sink e)))
    (self._report "failed" leaf.desc :message (str r.cause)))

  (defn _after-push [self]
    ;; Someone else took the lock.  A check changes nothing, and another
    ;; agent's repair (of another host, or of this one beside us) changes
    ;; one property, whose watches tell us if it is ours: neither is a
    ;; push, lest two agents rescan each other for ever.  After a push, wait
    ;; until it is done, then check everything again.
    (setv holder (read-holder self.lock-dir)
          says (holder-says holder))
    (when (or (not holder) (= holder self.holder) (in (get says "what") #("check" "agent")))
      (return #()))
    (try (with [_ (self._locked)] None)
         (except [ConsfigError] (return #())))
    ;; The push may have installed a new image: nothing is checked
    ;; against the old propspec then, lest it undo the push.
    (when (self._image-replaced?) (return #()))
    ;; A push of this host's whole propspec that differs from ours: the
    ;; host is to be what was pushed, and this agent knows only its own
    ;; propspec.  It stops, rather than undo the push.  Another host's
    ;; push is no reason.
    (setv pushed (get says "digest"))
    (when (and pushed (!= pushed self.digest)
               (in (get says "host") #(None self.host.hostname)))
      (setv self.superseded True)
      (self._report "superseded"
                    :why (+ f"{holder} deployed another propspec of {self.host.hostname}; "
                            "the agent stops rather than undo it: start it again "
                            "(consfig converge, or install the new image) to keep the new one"))
      (.stop self)
      (return #()))
    (self._report "rescan" :why f"after a deployment by {holder}")
    (range (+ (len self.leaves) (len self.blocks))))

  (defn step [self [timeout None]]
    "Wait for a change (at most TIMEOUT seconds) and converge what changed."
    (setv now (time.monotonic))
    (self._touch-layers now)
    (when self.layers
      (setv timeout (if (is timeout None) KEEP-FRESH (min timeout KEEP-FRESH))))
    ;; Past a burst of wake-ups, the events of a while are read at once.
    (when (not (.allow self.wakes))
      (.wait self.stopping (max 0 (- (.next-allowed self.wakes) now)))
      (setv now (time.monotonic)))
    (setv pending (+ (list (.values self.deferred))
                     (lfor i [#* self.leaves #* self.blocks] :if i.repeats
                           (+ i.said-at REPEAT-WINDOW)))
          due (when pending (max 0 (- (min pending) now)))
          timeout (if (is due None) timeout (if (is timeout None) due (min due timeout)))
          overflows self.watcher.overflows
          keys (.wait self.watcher timeout))
    (when (.is-set self.stopping) (return))
    (setv now (time.monotonic))
    (for [i [#* self.leaves #* self.blocks]]
      (when (and i.repeats (>= (- now i.said-at) REPEAT-WINDOW))
        (self._flush-repeats i)))
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
    (setv n (len self.leaves))
    ;; The blocks first, outermost first: whether their properties are
    ;; kept follows.
    (for [k (sorted keys)]
      (when (.is-set self.stopping) (break))
      (when (and (>= k n) (not-in k self.deferred))
        (setv block (get self.blocks (- k n)))
        (when (and (_kept-now? block.parent) (not (self._held-back? block)))
          (self.reevaluate block))))
    (for [k (sorted keys)]
      (when (.is-set self.stopping) (break))
      ;; Held back by its limit: its time will come.  Inside a `during`
      ;; that does not hold: retracted, not kept.
      (when (and (< k n) (not-in k self.deferred)
                 (_kept-now? (. (get self.leaves k) block))
                 (not (self._held-back? (get self.leaves k) (. (get self.leaves k) checks))))
        (self.converge-one (get self.leaves k)))))

  (defn _keep-lease [self]
    ;; The host's records in the dataspace live as long as this agent: its
    ;; lease is renewed every third of the site's :ttl, and that renewal
    ;; tells the dataspace's watch whether etcd is there.
    ;; The keeper's client is not the watch's (that one is made when the
    ;; watches are registered, after this): the watch is told which member
    ;; the keeper reached, and moves when that is another than its own.
    (setv said [None]
          ds (if self.watcher.dataspace self.watcher.dataspace.ds (Dataspace self.dataspace self.host.hostname)))
    (defn on-state [why]
      (when self.watcher.dataspace (.state self.watcher.dataspace why ds.endpoint))
      (when (!= why (get said 0))
        (setv (get said 0) why)
        (self._report "dataspace" :message (or why "dataspace available"))))
    (keep-leases ds self.host.hostname on-state))

  (defn run [self]
    "Watch and converge until `stop`."
    (with [_ (applying self.host self.connection)]
      (setv release (when self.dataspace (self._keep-lease)))
      (try
        (self.register)
        (while (not (.is-set self.stopping))
          (self.step))
        (finally
          (when release (release))
          (.close self.watcher)
          (self._report "stopped" :repairs self.repairs :failures self.failures))))))

(defn [contextlib.contextmanager] stopped-by-signals [agent]
  "While the body runs, SIGTERM, SIGINT and SIGHUP stop AGENT (after the
repair in progress) rather than the process.  The kernel gives a signal sent
to the process to any of its threads that takes it (etcd's watch, the
lease's keeper, the hop's reader), and Python runs the handler in the main
thread only once that one wakes: so each signal also wakes the agent's wait
(`signal.set_wakeup_fd`), or an idle agent would sleep on in poll(2) until
its interval, its dataspace lease renewed all the while (a container's
shutdown waited for the SIGKILL)."
  ;; A descriptor of its own, closed only once it is no longer the wakeup
  ;; one: the watcher closes its own when the agent ends, and a signal then
  ;; must not write into whatever file reuses the number.
  (setv fd (os.dup (.wake-fd agent.watcher))
        old-fd (signal.set-wakeup-fd fd :warn-on-full-buffer False)
        old (dfor s [signal.SIGTERM signal.SIGINT signal.SIGHUP]
                  s (signal.signal s (fn [#* _] (.stop agent)))))
  (try (yield)
       (finally (for [[s h] (.items old)] (signal.signal s h))
                (signal.set-wakeup-fd old-fd)
                (os.close fd))))

(defn tee [#* sinks]
  "A sink that passes each event, `bounded`, to every one of SINKS."
  (fn [event] (setv event (bounded event)) (for [s sinks] (s event))))

(defn converge-after [host connection sink lock-dir settings * [layers #()]]
  "Run the agent for HOST, applied just now through CONNECTION, until it is
told to stop, as SETTINGS (`consfig.options.ConvergeSettings`, from the
controller or an image's options) say; their IMAGE is the image it runs
from: it stops when that is replaced, `Agent.replaced` true.  LAYERS: the
directories of the bundle it runs from, kept recently used."
  (setv log (EventLog (log-path host.hostname settings.log)
                      (fn [text]
                        ;; On the agent's standard error (a service's
                        ;; journal), and to the controller.
                        (_stderr text)
                        (sink {"host" host.hostname "depth" 0 "time" (round (time.time) 3)
                               #** (converge-event "log" :message text)})))
        agent (Agent host connection (tee sink log) lock-dir
                     :noop settings.noop
                     :interval (or settings.interval INTERVAL)
                     :unit-poll settings.unit-poll
                     :limit (or settings.limit LIMIT)
                     :burst (or settings.burst BURST)
                     :layers layers
                     :image settings.image))
  (with [_ (keeping host.hostname :alongside settings.alongside)
         _ (stopped-by-signals agent)]
    (.run agent))
  agent)

(export :objects [Agent EventLog leaves kept keeping keeper-path bounded FIELD-LIMIT watches-of log-path converge-after stopped-by-signals
                  tee INTERVAL LIMIT BURST])
