"The target's side of a `:python` hop: the serve loop.

The bootstrap (`consfig/boot.py`) calls `serve` once the bundle is on
`sys.path`.  It waits for the `apply` message, applies the host over a
`LocalConnection` that holds commands to the chain's :command-timeout (or
over the hops after `:python`, ending in a further Python), and streams the engine's events back in frames from a writer
thread that also sends a tick while nothing else happens.  If the
controller goes away (end of input), everything started here is killed and
the process exits at once.

Nothing here imports fabric, paramiko or rich: none of them is on a target."

(import contextlib
        os
        queue
        signal
        sys
        threading
        time
        traceback
        consfig.boot [write-manifest file-sizes MANIFEST PROTOCOL data-inventory check-layers
                      unpack]
        consfig.python_hop.bundle [prune-bundles running-from]
        consfig.transport.local [LocalConnection kill-running]
        consfig.errors [ConsfigError]
        consfig.apply.lock [target-lock-held]
        consfig.transport.frames [HEARTBEAT OUTPUT-LIMIT bounded frame read-frame]
        consfig.transport.chain [with-chain]
        consfig.apply.engine [apply-host]
        consfig.model.propspec [data->propspec]
        json
        importlib
        importlib.util
        consfig.model.property [forget-properties-of]
        consfig.data.transit [receive-data]
        consfig.python_hop.payload [host-on-target]
        consfig.options [data->options]
        dataclasses [replace]
        site)

;; How long an event may wait for others to share its frame.
(setv COALESCE 0.02)
(setv FRAME-BUDGET (* 1024 1024))
(setv _finished (threading.Event))

(defn _die [[code 1]]
  ;; The controller is gone: whatever we started must go too, now.
  (when (not (.is-set _finished))
    (kill-running)
    (os._exit code)))

(defclass _Writer []
  "Sends frames to the controller from a thread of its own, so that the
engine never waits on the connection, events that come within COALESCE
seconds of each other go out in one frame, and a tick goes out when
nothing has happened for a while."
  (defn __init__ [self stream]
    (setv self.stream stream
          self.queue (queue.SimpleQueue)
          self.thread (threading.Thread :target self._loop :daemon True :name "consfig-writer"))
    (.start self.thread))

  (defn event [self event] (.put self.queue event))
  (defn message [self msg] (.put self.queue #(msg)))

  (defn close [self]
    (.put self.queue None)
    (.join self.thread 60))

  (defn _next-items [self]
    ;; Whatever is ready, or a tick after HEARTBEAT seconds of nothing.  An
    ;; event waits up to COALESCE seconds for those that follow it: quick
    ;; properties (a file checked or written in a millisecond) would
    ;; otherwise cost a frame each, and packets on every hop back.  A
    ;; message (`done`) or the end goes at once.
    (try (setv items [(.get self.queue :timeout HEARTBEAT)])
         (except [queue.Empty] (return [#({"op" "tick"})])))
    (setv deadline (+ (time.monotonic) COALESCE))
    (while (isinstance (get items -1) dict)
      (setv left (- deadline (time.monotonic)))
      (try (.append items (if (> left 0)
                              (.get self.queue :timeout left)
                              (.get-nowait self.queue)))
           (except [queue.Empty] (break))))
    items)

  (defn _frames [self items]
    ;; Events in order, as few frames as will each stay under FRAME-BUDGET
    ;; bytes; a message other than events in a frame of its own.  Each
    ;; event's text is bounded first, so that a command that printed 100 MB
    ;; costs the controller no more than one that printed 64 KiB.
    (setv events [] size 0)
    (for [i items]
      (cond (is i None) None
            (isinstance i tuple)
            (do (when events (yield (frame {"op" "events" "events" events})))
                (setv events [] size 0)
                (yield (frame (get i 0))))
            True
            (do (setv event (dfor [k v] (.items i) k (if (isinstance v str) (bounded v) v))
                      n (sum (gfor v (.values event) :if (isinstance v str) (len v))))
                (when (and events (> (+ size n) FRAME-BUDGET))
                  (yield (frame {"op" "events" "events" events}))
                  (setv events [] size 0))
                (.append events event)
                (+= size n))))
    (when events (yield (frame {"op" "events" "events" events}))))

  (defn _loop [self]
    (while True
      (setv items (self._next-items))
      (try
        (for [f (self._frames items)]
          (.write self.stream f))
        (.flush self.stream)
        (except [OSError] (_die)))
      (when (in None items) (return)))))

(defn _watch-controller [stream [converging False]]
  ;; The controller says nothing more once it has sent what to apply; end of
  ;; file on stdin means it, or the connection, has gone away.  A
  ;; converging agent is stopped as by SIGTERM: after its repair in progress.
  (while (is-not (read-frame stream) None))
  (if converging
      (os.kill (os.getpid) signal.SIGTERM)
      (_die)))

(defn _next [op stream pending]
  ;; The next message OP, from those the bootstrap read first or the stream.
  (for [m (list pending)]
    (when (= (get m "op") op)
      (.remove pending m)
      (return m)))
  (while True
    (setv m (read-frame stream))
    (when (is m None) (_die 3))
    (when (= (get m "op") op) (return m))
    (.append pending m)))

(defn _cache-root [layer-dirs]
  ;; The user's consfig cache: CACHE/bundles/HASH -> CACHE.
  (os.path.dirname (os.path.dirname (get layer-dirs 0))))

(defclass _TargetConnection [LocalConnection]
  "The target's own connection: a `LocalConnection` whose commands are
stopped after COMMAND-TIMEOUT seconds (the chain's :command-timeout) when
they give no timeout of their own."
  (defn __init__ [self command-timeout [where None]]
    (.__init__ (super))
    (setv self.command-timeout command-timeout
          self.chain-where where))

  (defn [property] where [self]
    ;; What the controller calls this place (`ssh:root@db1 > sudo > python`),
    ;; not "local", which is true only from here.
    (or self.chain-where (.describe self)))

  (defn run-script [self script input timeout * [limit OUTPUT-LIMIT]]
    (.run-script (super) script input (or timeout self.command-timeout) :limit limit)))

(defn _here [msg]
  ;; The connection properties act through here.
  (setv here (_TargetConnection (.get msg "command-timeout") (.get msg "where")))
  ;; Started inside a chroot (say), this Python runs in a system where no
  ;; service may start, as the hops before it knew.
  (when (.get msg "no-services")
    (setv (get here.connattrs "no-services") (get msg "no-services")))
  here)

(defn _apply-here [host msg options sink]
  (setv here (_here msg)
        chain (lfor [name kwargs] (.get msg "chain" []) #(name (data->propspec kwargs))))
  (when (not chain)
    (return (apply-host host here sink options)))
  ;; Hops after :python (sudo, su, …) lead to a further Python, started
  ;; from this bundle as the hop's user sees it.  This one keeps the host
  ;; converged, when asked to: that one applies once.
  (when (!= (get (get chain -1) 0) "python")
    (.append chain #("python" {"interpreter" sys.executable})))
  (with [conns (with-chain chain here)]
    (.apply-remotely (get conns -1) host sink (replace options :converge None))))

(defn _error-message [e]
  {"op" "error"
   "type" (. (type e) __name__)
   "message" (if (isinstance e ConsfigError) (str e) f"{(. (type e) __name__)}: {e}")
   "traceback" (when (not (getattr e "expected" False)) (traceback.format-exc))
   "expected" (getattr e "expected" False)})

(defn tidy-cache [layer-dirs new]
  "After a run from the layers in LAYER-DIRS (NEW: those unpacked for this
run): add the bytecode made meanwhile to each one's manifest, so that it too
is checked next time (and not removed as unknown); a new layer makes the
older ones candidates for pruning."
  (for [d layer-dirs]
    (try
      (with [f (open (os.path.join d MANIFEST))]
        (setv known (json.load f)))
      (when (!= known (file-sizes d))
        (write-manifest d))
      (except [#(OSError ValueError)] None)))
  (when new
    (try (prune-bundles (os.path.dirname (get layer-dirs 0)) layer-dirs)
         (except [OSError] None))))

(defn _agent []
  ;; The converging agent runs for days: what it needs is imported now,
  ;; while the bundle it came in is certainly in the cache.  By name, as
  ;; properties are: it applies through the engine, as this module does,
  ;; and is no part of serving a deployment.
  (setv converge (importlib.import-module "consfig.converge.agent"))
  (.preload (importlib.import-module "consfig.converge.watch"))
  converge)

(defn _apply-one [msg next-data writer layer-dirs [started None]]
  ;; One apply message: take its data, apply its host, send `done` (or
  ;; `error`).  STARTED runs once the data is in, when the input is free
  ;; for whoever watches it, told whether the host is to be kept converged.
  (try
    ;; None from a controller that sent none: refused, never read as "apply".
    (setv options (data->options (.get msg "options"))
          agent (when options.converge (_agent)))
    (setv entries (receive-data msg next-data writer.message
                                (os.path.join (_cache-root layer-dirs) "data")))
    (when started (started (is-not options.converge None)))
    (setv host (host-on-target msg :entries entries))
    ;; A second agent for a host is refused before it applies anything.
    (with [_ (if agent
                 (agent.keeping host.hostname :alongside options.converge.alongside)
                 (contextlib.nullcontext))]
      (setv outcome (with [_ (target-lock-held (_cache-root layer-dirs) (.get msg "lock")
                                               :say (fn [text]
                                                      (writer.event {"event" "output" "stream" "note"
                                                                     "text" text "host" host.hostname
                                                                     "depth" 0})))]
                      (_apply-here host msg options writer.event)))
      (when agent
        ;; `consfig converge`: keep the host converged until told to stop.
        (agent.converge-after host (_here msg) writer.event (_cache-root layer-dirs) options.converge
                        :layers layer-dirs)))
    (.message writer {"op" "done" "changes" outcome.changes "failures" outcome.failures
                      "drift" outcome.drift})
    (except [e Exception]
      (.message writer (_error-message e)))))

(defn _hello [layer-dirs missing]
  ;; What the bootstrap says first, said again for each apply of a kept
  ;; session: the data versions kept here change as data arrives.
  {"op" "hello" "protocol" PROTOCOL "python" (list (cut sys.version-info 3))
   "executable" sys.executable "missing" missing "tag" sys.implementation.cache-tag
   "magic" (.hex importlib.util.MAGIC-NUMBER)
   "data" (data-inventory (_cache-root layer-dirs) (os.geteuid))})

(defn _read-into [stream frames]
  ;; A kept session reads its input all the time: end of file, whether it
  ;; comes while applying or while idle, means the controller is gone.
  (while True
    (setv m (read-frame stream))
    (when (is m None) (_die))
    (.put frames m)))

(defn _serve-kept [msg in pending writer layer-dirs new]
  ;; Apply MSG, then every further host the controller sends (a hello and
  ;; an apply each), until it closes the input.  The writer's ticks go on
  ;; between applies: they are the controller's keepalive.
  (setv frames (queue.SimpleQueue)
        held (list pending))
  (.start (threading.Thread :target _read-into :args #(in frames) :daemon True
                            :name "consfig-reader"))
  (defn next-op [op]
    (for [m (list held)]
      (when (= (get m "op") op)
        (.remove held m)
        (return m)))
    (while True
      (setv m (.get frames))
      (when (= (get m "op") op) (return m))
      (.append held m)))
  (setv first True)
  (while True
    (_apply-one msg (fn [] (next-op "data")) writer layer-dirs)
    (when first
      (tidy-cache layer-dirs new)
      (setv first False))
    (setv hello (next-op "hello")
          names (.get hello "layers" [])
          running (lfor d layer-dirs (os.path.basename d)))
    (when (!= (cut names 0 -1) (cut running 0 -1))
      ;; The controller starts another Python for other libraries; say so
      ;; rather than apply with these.
      (.message writer {"op" "error" "type" "ConsfigError" "traceback" ""
                        "message" f"this Python runs layers {running}, not {names}"})
      (.close writer)
      (os._exit 0))
    (if (= (get names -1) (get running -1))
        (.message writer (_hello layer-dirs []))
        (setv layer-dirs (_take-site layer-dirs (get names -1) writer next-op)))
    (setv msg (next-op "apply"))))

(defn _take-site [layer-dirs name writer next-op]
  ;; The site was edited: take its new layer NAME in place of the old one,
  ;; fetched if this target lacks it, and forget the modules the old one
  ;; defined, so that they are imported anew.  The libraries stay loaded:
  ;; that is what makes the author's loop fast.
  (setv bundles (os.path.dirname (get layer-dirs 0))
        old (get layer-dirs -1)
        #(missing damaged) (check-layers bundles [name] (os.geteuid)))
  (.message writer (_hello layer-dirs missing))
  (when missing
    (.message writer {"op" "need-bundle" "layers" missing "discarded" (or damaged None)})
    (setv m (next-op "bundle"))
    (unpack (get m "_payload") (os.path.join bundles name)))
  (setv stale (lfor [module-name module] (list (.items sys.modules))
                    :if (.startswith (or (getattr module "__file__" None) "") (+ old os.sep))
                    module-name))
  (for [module-name stale]
    (del (get sys.modules module-name)))
  (forget-properties-of stale)
  (setv new-dirs [#* (cut layer-dirs 0 -1) (os.path.join bundles name)]
        (get sys.path (.index sys.path old)) (get new-dirs -1))
  (importlib.invalidate-caches)
  (running-from new-dirs)
  (tidy-cache new-dirs (if missing [(get new-dirs -1)] []))
  new-dirs)

(defn serve [in out pending layer-dirs new]
  "The target's main loop, called by the bootstrap once the bundle's layers
are in LAYER-DIRS (NEW: those just unpacked): apply the host the controller
sends, reading frames from IN (PENDING: those the bootstrap read already),
and stream the events back to OUT.  An apply message marked `persist`
(a kept chain's, see `consfig.python_hop.keep`) keeps this Python serving further
ones until the controller closes its input."
  (running-from layer-dirs)
  ;; After the bundle, so that nothing installed on the target shadows it,
  ;; but there for :python properties that use the target's own libraries.
  (.extend sys.path (gfor p (.getsitepackages site) :if (os.path.isdir p) p))
  (setv msg (_next "apply" in pending)
        writer (_Writer out))
  (for [s [signal.SIGTERM signal.SIGHUP]]
    (signal.signal s (fn [#* _] (_die))))
  (when (.get msg "persist")
    (_serve-kept msg in pending writer layer-dirs new))
  ;; Before the watcher takes over the input: the data comes on it.
  (_apply-one msg (fn [] (_next "data" in pending)) writer layer-dirs
              (fn [converging]
                (.start (threading.Thread :target _watch-controller
                                          :args #(in converging)
                                          :daemon True
                                          :name "consfig-watcher"))))
  (.set _finished)
  (.close writer)
  (tidy-cache layer-dirs new)
  ;; Not a normal exit: that would wait for the thread still reading stdin
  ;; (and then fail to take its lock), which is both slow and noisy.
  (.flush sys.stderr)
  (os._exit 0))

(export :objects [serve tidy-cache HEARTBEAT])
