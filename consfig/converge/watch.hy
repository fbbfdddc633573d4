"The target's side of watching: one `Watcher` for all a host's watch specs.

  (setv w (Watcher))
  (.add w \"motd\" [[\"path\" \"/etc/motd\"]])
  (.add w \"nginx\" [[\"unit\" \"nginx.service\"] [\"poll\" 60]])
  (.wait w 30)          ; => #{\"motd\"} once /etc/motd changes, #{} after 30 s
  (.close w)

`wait` blocks in one poll(2) over every descriptor (inotify, the system bus,
a pipe that `wake` writes to), so an idle agent costs nothing, and returns
the keys whose resources may have changed: a key may come back when nothing
that matters changed (its property's `:check` decides), never the other way.

Paths use inotify (`inotify_simple`).  A path is watched through its parent
directory, which sees it created, deleted, renamed over (an atomic write),
written and chmod-ed; a directory is watched itself too, for its entries.
When the parent does not exist (yet, or any more), the nearest existing
ancestor is watched instead, and every event on the way to the path
re-arms it.  An overflowing inotify queue drifts every key: the agent
re-checks them all.  Units use systemd's PropertiesChanged signals over the
system bus (`jeepney`); without a bus, or when it goes away, each unit's
`systemctl is-active` and `is-enabled` are polled.  dpkg's database is a path
(`/var/lib/dpkg/status`, renamed into place by dpkg).  The site's dataspace
is one etcd watch on its records, from the revision of a snapshot (see
`_Dataspace`).

This module, inotify_simple and jeepney are imported by the agent alone: a
deployment never imports them."

(import os
        inotify_simple [flags INotify]
        select
        subprocess
        threading
        time
        importlib
        consfig.apply.dataspace [Dataspace DataspaceUnavailable View publish-view withdraw-view])

(setv DPKG-STATUS "/var/lib/dpkg/status")
;; How often a unit is polled when there is no system bus.
(setv UNIT-POLL 5)

(defn preload []
  "Import now what watching may import later: a long-running agent must not
depend on its bundle's files staying in the cache."
  (for [m ["jeepney" "jeepney.io.blocking" "jeepney.bus_messages"]]
    (importlib.import-module m)))

(defn _mask []
  (setv f flags)
  (| f.CREATE f.DELETE f.MOVED_FROM f.MOVED_TO f.MODIFY f.ATTRIB f.CLOSE_WRITE
     f.DELETE_SELF f.MOVE_SELF f.ONLYDIR))

(defn unit-object-path [unit]
  "The object path of UNIT on systemd's bus: bytes other than letters and
digits as `_xx`."
  (+ "/org/freedesktop/systemd1/unit/"
     (.join "" (gfor b (.encode unit "utf-8")
                     (if (or (<= 48 b 57) (<= 65 b 90) (<= 97 b 122))
                         (chr b)
                         (+ "_" (format b "02x")))))))

(defclass _Paths []
  "The inotify side: each watched path, armed through the watch descriptor
of the directory nearest to it that exists."
  (defn __init__ [self]
    (setv self.inotify (INotify)
          ;; path -> keys
          self.keys {}
          ;; path -> [#(wd name)]: what it is armed on; name None: anything.
          self.armed {}
          ;; wd -> {name -> set of paths}, name None for any event.
          self.deps {}
          ;; wd -> the directory it watches
          self.dirs {}
          ;; How many times the kernel's queue overflowed.
          self.overflows 0))

  (defn fileno [self] (.fileno self.inotify))

  (defn add [self path key]
    (.add (.setdefault self.keys path (set)) key)
    (when (not-in path self.armed)
      (self._arm path)))

  (defn _watch [self directory]
    (try (.add-watch self.inotify directory (_mask))
         (except [OSError] None)))

  (defn _depend [self path wd name]
    (.add (.setdefault (.setdefault self.deps wd {}) name (set)) path)
    (.append (get self.armed path) #(wd name)))

  (defn _arm [self path]
    (setv (get self.armed path) [])
    ;; The path itself, when it is a directory: its entries.
    (when (and (os.path.isdir path) (not (os.path.islink path)))
      (setv wd (self._watch path))
      (when (is-not wd None)
        (setv (get self.dirs wd) path)
        (self._depend path wd None)))
    ;; The nearest existing ancestor, by the name of the next step down.
    (setv child path
          parent (os.path.dirname path))
    (while True
      (setv wd (self._watch parent))
      (when (is-not wd None)
        (setv (get self.dirs wd) parent)
        (self._depend path wd (os.path.basename child))
        (break))
      (when (= parent "/") (break))
      (setv child parent
            parent (os.path.dirname parent))))

  (defn _disarm [self path]
    (for [[wd name] (.pop self.armed path [])]
      (setv by-name (.get self.deps wd {}))
      (.discard (.get by-name name (set)) path)
      (when (not (.get by-name name)) (.pop by-name name None))
      (when (not by-name)
        (.pop self.deps wd None)
        (.pop self.dirs wd None)
        (try (.rm-watch self.inotify wd) (except [OSError] None)))))

  (defn _rearm [self paths]
    (for [p paths]
      (self._disarm p)
      (self._arm p)))

  (defn read [self]
    "The keys whose paths had events, re-arming those paths."
    (setv f flags
          touched (set)
          gone (set))
    (for [e (.read self.inotify :timeout 0)]
      (cond
        (& e.mask f.Q_OVERFLOW)
        (do (+= self.overflows 1)
            (return (self.everything)))
        (& e.mask (| f.IGNORED f.DELETE_SELF f.MOVE_SELF))
        (do (.add gone e.wd)
            (for [ps (.values (.get self.deps e.wd {}))] (.update touched ps)))
        True
        (do (setv by-name (.get self.deps e.wd {}))
            (.update touched (.get by-name None #()))
            (when e.name (.update touched (.get by-name e.name #()))))))
    (for [wd gone]
      ;; The kernel dropped (or will drop) these: forget them without
      ;; rm_watch, which would fail or, worse, hit a reused number.
      (.pop self.dirs wd None)
      (for [ps (.values (.pop self.deps wd {}))]
        (for [p ps]
          (setv (get self.armed p) (lfor d (.get self.armed p []) :if (!= (get d 0) wd) d)))))
    ;; Every touched path is re-armed: the file may now be a directory, its
    ;; directory may have come back.
    (self._rearm touched)
    (sfor p touched k (get self.keys p) k))

  (defn everything [self]
    "Every key, after re-arming every path: the queue overflowed, events
were lost."
    (self._rearm (list self.keys))
    (sfor ks (.values self.keys) k ks k))

  (defn close [self]
    (.close self.inotify)))

(defclass _Bus []
  "systemd's unit signals over the system bus."
  (defn __init__ [self]
    (import jeepney [DBusAddress MatchRule new-method-call]
            jeepney.io.blocking [open-dbus-connection])  ; lazy: 5 ms or more, for unit watches alone
    (setv self.conn (open-dbus-connection :bus "SYSTEM")
          ;; object path -> unit
          self.paths {})
    (setv manager (DBusAddress "/org/freedesktop/systemd1"
                               :bus-name "org.freedesktop.systemd1"
                               :interface "org.freedesktop.systemd1.Manager"))
    ;; systemd sends its signals only once someone has subscribed.
    (.send-and-get-reply self.conn (new-method-call manager "Subscribe") :timeout 5)
    (setv self._MatchRule MatchRule))

  (defn fileno [self] (.fileno self.conn.sock))

  (defn add [self unit]
    (import jeepney.bus-messages [message-bus])  ; lazy: 5 ms or more, for unit watches alone
    (setv path (unit-object-path unit))
    (when (not-in path self.paths)
      (setv rule (self._MatchRule :type "signal" :sender "org.freedesktop.systemd1"
                                  :interface "org.freedesktop.DBus.Properties"
                                  :member "PropertiesChanged" :path path))
      (.send-and-get-reply self.conn (.AddMatch message-bus rule) :timeout 5))
    (setv (get self.paths path) unit))

  (defn read [self]
    "The units that signalled a change; OSError when the bus went away."
    (setv units (set))
    (while True
      (try (setv msg (.receive self.conn :timeout 0))
           (except [TimeoutError] (break)))
      (setv unit (.get self.paths (.get msg.header.fields 1)))
      (when unit (.add units unit)))
    units)

  (defn close [self]
    (try (.close self.conn) (except [Exception] None))))

(defn unit-state [unit]
  "UNIT's state as `systemctl` tells it: active and enabled, or why not."
  (lfor verb ["is-active" "is-enabled"]
        (try (.strip (. (subprocess.run ["systemctl" verb "--" unit] :capture-output True
                                        :text True :timeout 10 :stdin subprocess.DEVNULL)
                        stdout))
             (except [#(OSError subprocess.SubprocessError)] "unknown"))))

(defclass _Dataspace []
  ;; One etcd watch on every host's records, started from the revision of a
  ;; snapshot, so that no change falls between the two: each start fires
  ;; every key (whoever evaluates them reads at that revision or later),
  ;; then each change fires the keys whose scope it concerns.  Losing the
  ;; dataspace fires them too (they fail, saying why, and retract nothing);
  ;; so does finding it again, after a fresh start.  Whether it is there is
  ;; learnt from the agent's lease keep-alive (`state`): an idle agent sends
  ;; nothing else.  The snapshot and the events keep a `View`, which the
  ;; facts over the dataspace read in this process, while it is live.
  (defn __init__ [self config hostname wake]
    (setv self.ds (Dataspace config hostname)
          self.view (View)
          self.hostname hostname
          self.wake wake
          self.scopes {}
          self.fired (set)
          self.lock (threading.Lock)
          self.cancel None
          self.endpoint None
          self.down None
          self.restarting False
          self.closed False)
    (publish-view (self.ds.hosts-prefix) self.view))

  (defn add [self key scope]
    (.add (.setdefault self.scopes key (set)) scope)
    (when (and (is self.cancel None) (is self.down None))
      (self.start)))

  (defn _fire [self keys]
    (with [self.lock] (.update self.fired keys))
    (self.wake))

  (defn _event [self event]
    (setv mine (.startswith (get (get event "kv") "key") (self.ds.host-prefix self.hostname)))
    (.apply self.view event)
    (self._fire (lfor [key scopes] (.items self.scopes)
                      :if (or (in "all" scopes) (and mine (in "self" scopes)))
                      key)))

  (defn start [self [quiet-if-down False]]
    ;; QUIET-IF-DOWN: a start that fails fires nothing (one of a series
    ;; retrying, whose first said it).
    (when self.cancel
      (try (self.cancel) (except [Exception] None))
      (setv self.cancel None))
    (.invalidate self.view)
    (try
      (setv #(revision kvs) (self.ds.range (self.ds.hosts-prefix)))
      (.reset self.view revision kvs)
      (setv self.cancel (self.ds.watch (self.ds.hosts-prefix) (+ revision 1) self._event
                                       :on-end self._watch-ended)
            self.endpoint self.ds.endpoint
            self.down None)
      (except [e DataspaceUnavailable]
        (.invalidate self.view)
        (setv self.down (str e))))
    (when (and self.closed self.cancel)
      ;; Closed while this start ran in its thread (`_restart`).
      (self.close))
    (when (not (and quiet-if-down self.down))
      (self._fire (list self.scopes))))

  (defn _watch-ended [self]
    ;; The watch's stream ended on its own: its member went away, or
    ;; restarted between two keep-alives.  The view is stale from now; the
    ;; facts read etcd until the watch is started afresh, at once, then
    ;; again while the member is coming back, or when the lease keeper
    ;; finds another.
    (.invalidate self.view)
    (self._fire (list self.scopes))
    (self._restart :retry True))

  (defn _restart [self [endpoint None] [retry False]]
    ;; Start afresh, from ENDPOINT when given (the member the lease keeper
    ;; reached), in a thread of its own: the keeper that tells of it must
    ;; get back to the lease, which a member that hangs on the way would
    ;; let run out.  RETRY: again after 0.2, 0.4, … (at most 5) s until a
    ;; start holds, quietly after the first.  One restart at a time.
    (with [self.lock]
      (when (or self.restarting self.closed) (return))
      (setv self.restarting True))
    (when endpoint (.prefer self.ds endpoint))
    (defn run []
      (try
        (self.start)
        (setv delay 0.2)
        (while (and retry self.down (not self.closed))
          (time.sleep delay)
          (setv delay (min 5 (* 2 delay)))
          (self.start :quiet-if-down True))
        (finally (with [self.lock] (setv self.restarting False)))))
    (.start (threading.Thread :target run :daemon True :name "consfig-dataspace-restart")))

  (defn state [self why [endpoint None]]
    ;; From the lease keeper: WHY None, the dataspace answered through the
    ;; member ENDPOINT (when it is another than the watch's, that one may
    ;; be gone, and its watch with it: the watch is started afresh);
    ;; otherwise why it did not.
    (cond (is-not why None)
          (when (is self.down None)
            ;; Read from etcd again, and fail as that does, until the
            ;; watch is started afresh.
            (.invalidate self.view)
            (setv self.down why)
            (self._fire (list self.scopes)))
          (or self.down (!= (or endpoint self.ds.endpoint) self.endpoint))
          (self._restart endpoint)))

  (defn take [self]
    (with [self.lock]
      (setv keys (set self.fired))
      (.clear self.fired))
    keys)

  (defn close [self]
    (setv self.closed True)
    (.invalidate self.view)
    (withdraw-view (self.ds.hosts-prefix) self.view)
    (when self.cancel
      (try (self.cancel) (except [Exception] None))
      (setv self.cancel None))))

(defclass Watcher []
  "Watches resources for keys (see the module's docstring).  DATASPACE,
#(CONFIG HOSTNAME), is the site's dataspace and the host watching it, for
[\"dataspace\" …] specs."
  (defn __init__ [self * [unit-poll UNIT-POLL] [dataspace None]]
    (setv self._dataspace-of dataspace
          self._dataspace None
          self._paths None
          self._bus None
          self._no-bus False
          self.unit-poll unit-poll
          ;; unit -> keys; unit -> last state seen by polling
          self._units {}
          self._unit-states {}
          self._next-unit-poll None
          ;; key -> #(seconds next-due)
          self._polls {}
          #(self._wake-r self._wake-w) (os.pipe))
    (os.set-blocking self._wake-r False)
    (os.set-blocking self._wake-w False))

  (defn add [self key specs]
    "Watch the resources of SPECS (watch specs, see `consfig.model.watchspec`) for
KEY."
    (for [spec specs]
      (setv kind (get spec 0))
      (cond
        (= kind "path") (self._add-path (get spec 1) key)
        (= kind "dpkg") (self._add-path DPKG-STATUS key)
        (= kind "unit") (self._add-unit (get spec 1) key)
        (= kind "poll") (self._add-poll key (get spec 1))
        (= kind "dataspace") (self._add-dataspace key (get spec 1))
        True (raise (ValueError f"unknown watch spec {spec !r}")))))

  (defn _add-dataspace [self key scope]
    (when (is self._dataspace None)
      (when (is self._dataspace-of None)
        (raise (ValueError "a dataspace watch, but this host names no dataspace")))
      (setv self._dataspace (_Dataspace #* self._dataspace-of self.wake)))
    (.add self._dataspace key scope))

  (defn [property] dataspace [self]
    "The `_Dataspace` watched (its `ds` the `Dataspace`), or None."
    self._dataspace)

  (defn _add-path [self path key]
    (when (is self._paths None)
      (setv self._paths (_Paths)))
    (.add self._paths (os.path.normpath path) key))

  (defn _add-poll [self key seconds]
    (setv known (.get self._polls key))
    (when (or (not known) (< seconds (get known 0)))
      (setv (get self._polls key) #(seconds (+ (time.monotonic) seconds)))))

  (defn _add-unit [self unit key]
    (.add (.setdefault self._units unit (set)) key)
    (when (and (is self._bus None) (not self._no-bus))
      (try (setv self._bus (_Bus))
           (except [Exception]
             (setv self._no-bus True))))
    (if self._bus
        (try (.add self._bus unit)
             (except [Exception] (self._lose-bus)))
        (self._poll-unit-later unit)))

  (defn _poll-unit-later [self unit]
    (when (not-in unit self._unit-states)
      (setv (get self._unit-states unit) (unit-state unit)))
    (when (is self._next-unit-poll None)
      (setv self._next-unit-poll (+ (time.monotonic) self.unit-poll))))

  (defn _lose-bus [self]
    ;; The bus went away: poll every unit from now on, and tell the agent
    ;; to look at them all, since signals may have been missed.
    (when self._bus (.close self._bus))
    (setv self._bus None
          self._no-bus True)
    (for [u self._units] (self._poll-unit-later u))
    (sfor ks (.values self._units) k ks k))

  (defn [property] overflows [self]
    "How many times events were lost (the inotify queue overflowed): each
time, `wait` returned every key."
    (if self._paths self._paths.overflows 0))

  (defn wake [self]
    "Make a `wait` in progress (or the next one) return at once: safe from a
signal handler or another thread."
    (try (os.write self._wake-w b"x") (except [BlockingIOError] None)))

  (defn wake-fd [self]
    "The descriptor (non-blocking) a byte written to wakes a `wait`, as
`wake` does: for `signal.set_wakeup_fd`."
    self._wake-w)

  (defn _timeout [self timeout now]
    (setv deadlines (+ (lfor [_ due] (.values self._polls) due)
                       (if (is-not self._next-unit-poll None) [self._next-unit-poll] [])))
    (setv t (if (is timeout None) None timeout))
    (for [d deadlines]
      (setv left (max 0 (- d now))
            t (if (is t None) left (min t left))))
    t)

  (defn wait [self [timeout None]]
    "Block until a watched resource may have changed, at most TIMEOUT seconds
(None: until one does); return the set of keys concerned (empty on
timeout or `wake`)."
    (setv p (select.poll))
    (.register p self._wake-r select.POLLIN)
    (when self._paths (.register p (.fileno self._paths) select.POLLIN))
    (when self._bus (.register p (.fileno self._bus) select.POLLIN))
    (setv t (self._timeout timeout (time.monotonic)))
    (try (setv ready (sfor [fd _] (.poll p (if (is t None) None (int (* 1000 (+ t 0.0005))))) fd))
         (except [InterruptedError] (setv ready (set))))
    (setv keys (set))
    (when (in self._wake-r ready)
      (try (while (os.read self._wake-r 4096))
           (except [BlockingIOError] None)))
    (when (and self._paths (in (.fileno self._paths) ready))
      (.update keys (.read self._paths)))
    (when (and self._bus (in (.fileno self._bus) ready))
      (try (for [u (.read self._bus)] (.update keys (get self._units u)))
           (except [Exception] (.update keys (self._lose-bus)))))
    (when self._dataspace (.update keys (.take self._dataspace)))
    (.update keys (self._due (time.monotonic)))
    keys)

  (defn _due [self now]
    (setv keys (set))
    (for [[key [seconds due]] (list (.items self._polls))]
      (when (>= now due)
        (.add keys key)
        (setv (get self._polls key) #(seconds (+ now seconds)))))
    (when (and (is-not self._next-unit-poll None) (>= now self._next-unit-poll))
      (for [[unit before] (list (.items self._unit-states))]
        (setv now-state (unit-state unit))
        (when (!= now-state before)
          (setv (get self._unit-states unit) now-state)
          (.update keys (get self._units unit))))
      (setv self._next-unit-poll (+ (time.monotonic) self.unit-poll)))
    keys)

  (defn close [self]
    "Release every descriptor."
    (when self._paths (.close self._paths) (setv self._paths None))
    (when self._bus (.close self._bus) (setv self._bus None))
    (when self._dataspace (.close self._dataspace))
    (for [fd [self._wake-r self._wake-w]]
      (try (os.close fd) (except [OSError] None))))

  (defn __enter__ [self] self)
  (defn __exit__ [self #* _] (.close self)))

(export :objects [Watcher DPKG-STATUS unit-object-path unit-state preload])
