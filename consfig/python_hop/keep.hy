"Kept chains: a deployment made from the REPL leaves its chain open.

Deploying a host from the REPL, then again after an edit, should not pay
each time for the SSH handshake, sudo and the start of a Python on the
target.  So a deployment asked to persist (`deploy*`'s `:persist`, which
the REPL turns on, and `consfig deploy` never does) keeps its established
chain afterwards, as OpenSSH's ControlPersist keeps a master connection:
the SSH connection, and the target's Python, which waits for the next host
instead of exiting.  The next deployment over the same chain to the same
host finds it and sends just the host (and the data and bundle the target
lacks, as always); the target takes the deployment lock for each apply.

Chains with a `:python` hop are kept, and POSIX chains of `:ssh` and
user hops (`[[:ssh] :sudo]`): over those, each deployment still starts the
lock's holder through the chain, but skips the SSH handshake.  A kept
chain is closed

- after `IDLE-LIMIT` seconds (5 minutes) without a deployment, or the
  number of seconds `:persist` gives, by a timer thread;
- when it has died (sshd restarted, the target's Python killed): the
  target's Python says something every few seconds (`consfig.python_hop.target`'s
  tick, the keepalive), so a chain silent for three of them is dead, and
  paramiko's keepalive finds a dead SSH connection.  A deployment that
  finds its kept chain dead, before anything was applied, establishes a
  fresh one, once, and reports nothing of it; so does one whose kept
  Python does not answer its hello within three ticks (a connection that
  died without a sign);
- by `(disconnect)`, all of them, or `(disconnect host)`, those to HOST;
- when the Python running the REPL exits.

Closing one ends the target's Python and everything it started, as the
end of any deployment does."

(import atexit
        threading
        time
        consfig.transport.chain [chain->data close-chain hop-spec]
        consfig.errors [ConsfigError]
        consfig.transport.frames [HEARTBEAT]
        consfig.model.host [find-host])

(setv IDLE-LIMIT 300)

;; Whether `deploy*` keeps chains when not told: the REPL sets it.
(setv persist-by-default False)

(setv _kept {}
      _changed (threading.Condition)
      _watcher None)

(defclass _Kept []
  (defn __init__ [self key conns idle]
    (setv self.key key
          self.conns conns
          self.idle idle
          self.expires (+ (time.monotonic) idle)))
  (defn [property] hostname [self] (get self.key 1))
  (defn alive? [self] (chain-alive? self.conns)))

(defn chain-alive? [conns]
  "Whether the kept chain CONNS still lives, as far as can be told without
asking the target: its SSH connections are up (paramiko's keepalive finds
a dead one), and its `:python` hop's Python, if any, is running and has
ticked lately."
  (setv keeper (. (get conns -1) keeper))
  (and (all (gfor c conns (.alive? c)))
       (or (not (.apply-remotely? (get conns -1)))
           (and keeper keeper.session (.usable? keeper.session (* 3 HEARTBEAT))))))

(defn idle-limit [persist]
  "The seconds a deployment's chain is kept for, given `deploy*`'s PERSIST
(None: as the REPL says; True: `IDLE-LIMIT`; a number: that many), or None:
not kept."
  (cond (is persist None) (when persist-by-default IDLE-LIMIT)
        (is persist True) IDLE-LIMIT
        (not persist) None
        True persist))

(defn keepable? [chain]
  "Whether the parsed CHAIN may be kept: it has a `:python` hop, or it is
`:ssh` hops and then users (`:sudo`, `:su`, `:as`)."
  (setv names (lfor [name _] chain name))
  (or (in "python" names)
      (and names (= (get names 0) "ssh")
           (all (gfor n names (or (= n "ssh") (. (hop-spec n) user-hop)))))))

(defn chain-key [chain hostname]
  "What a kept chain is found by: the parsed CHAIN and the HOSTNAME."
  #((hy.repr (chain->data chain)) hostname))

(defn take-kept [key]
  "The established connections kept under KEY, now the caller's (put them
back with `keep-chain`), or None when there are none that still live."
  (with [_changed]
    (setv kept (.pop _kept key None)))
  (cond (is kept None) None
        (.alive? kept) kept.conns
        True (do (close-chain kept.conns) None)))

(defn keep-chain [key conns idle]
  "Keep the established CONNS under KEY for IDLE seconds after now."
  (global _watcher)
  (with [_changed]
    (setv old (.get _kept key))
    (setv (get _kept key) (_Kept key conns idle))
    (when (is _watcher None)
      (setv _watcher (threading.Thread :target _watch :daemon True :name "consfig-kept"))
      (.start _watcher))
    (.notify _changed))
  ;; Two deployments of one host at once each established a chain.
  (when old (close-chain old.conns)))

(defn _watch []
  ;; The timer: close what has been idle too long, or has died.
  (while True
    (with [_changed]
      (setv now (time.monotonic)
            due (lfor k (.values _kept) :if (or (<= k.expires now) (not (.alive? k))) k))
      (for [k due] (del (get _kept k.key)))
      (setv wait (min #(5 #* (gfor k (.values _kept) (- k.expires now))))))
    (for [k due] (close-chain k.conns))
    (when (not due)
      (with [_changed] (.wait _changed (max wait 0.05))))))

(defn _hostname-of [host]
  (when (hasattr host "hostname") (return host.hostname))
  (try (. (find-host host) hostname)
       (except [ConsfigError] (str host))))

(defn disconnect [[host None]]
  "Close the chains kept by deployments made from the REPL (those to HOST,
a host or hostname, if given): the target's Python ends, and the SSH
connection.  Return how many were closed."
  (setv name (when (is-not host None) (_hostname-of host)))
  (with [_changed]
    (setv closing (lfor k (list (.values _kept)) :if (or (is name None) (= k.hostname name)) k))
    (for [k closing] (del (get _kept k.key))))
  (for [k closing] (close-chain k.conns))
  (len closing))

(defn kept-chains []
  "The chains kept now, as `#(hostname chain seconds-left)`."
  (setv now (time.monotonic))
  (with [_changed]
    (lfor k (.values _kept) #(k.hostname (get k.key 0) (round (- k.expires now))))))

(atexit.register disconnect)

(export :objects [disconnect kept-chains IDLE-LIMIT])
