"The controller's side of a `:python` hop: start the bootstrap through the
chain, send it the host (and the bundle, if it has not got it), and feed the
events it streams back to the sink.

The two sides exchange frames (`consfig.transport.frames`) over the child's stdin and
stdout:

  controller → target   {op hello protocol layers}        the bundle's layers
                        {op apply host data unapply …}    sent at once, no wait;
                                                          data: the manifest of
                                                          the items it needs
  target → controller   {op hello protocol python missing which bytecode it makes,
                         data}                            the layers it lacks, the
                                                          data versions it keeps
  controller → target   {op data items} + content         what it does not keep,
                                                          and every secret
  target → controller   {op need-bundle layers discarded} it lacks layers (or its
                                                          copy was damaged)
                        {op need-data items}              a kept version was damaged
  controller → target   {op bundle hash} + tar.gz payload a layer, only when asked
  target → controller   {op events events [...]}          as they happen
                        {op tick}                         every few seconds
                        {op done changes failures}        or {op error …}

The target runs `consfig/boot.py` (see there), then `consfig.python_hop.target`; the
bundle is made by `consfig.python_hop.bundle`; what data travels, `consfig.data.transit`."

(import ast
        hashlib
        os
        sys
        consfig.python_hop.bundle [cache-directory]
        queue
        threading
        time
        consfig.boot
        consfig.boot [NO-SAFE-CACHE PROTOCOL TOO-OLD]
        consfig.python_hop.bundle [bundle-for bytecode-matches? compiled-archive]
        consfig.data.transit [data-frame items-to-carry kept? sent-events]
        consfig.apply.engine [Outcome]
        consfig.errors [ConnectionFailed ConsfigError LockBusy controller-where indented]
        consfig.apply.events [output-event]
        consfig.transport.frames [HEARTBEAT frame read-frame]
        consfig.apply.noservices [no-services-reason]
        consfig.python_hop.payload [host-payload]
        consfig.options [options->data]
        consfig.model.propspec [propspec->data]
        consfig.util [write-atomically])

(defn _minify [source]
  ;; The parse tree drops comments and layout; docstrings go too.  What is
  ;; left is the same program, about a third of the size, to pass as `-c`.
  (setv tree (ast.parse source))
  (for [node (ast.walk tree)]
    (when (and (isinstance node #(ast.Module ast.FunctionDef))
               node.body
               (isinstance (get node.body 0) ast.Expr)
               (isinstance (. (get node.body 0) value) ast.Constant)
               (isinstance (. (get node.body 0) value value) str))
      (setv node.body (or (cut node.body 1 None) [(ast.Pass)]))))
  ;; ast.unparse indents by four spaces and writes no multi-line literal.
  (.join "\n" (gfor line (.splitlines (ast.unparse tree))
                    :setv code (.lstrip line " ")
                    (+ (* " " (// (- (len line) (len code)) 4)) code))))

(setv _bootstrap None)

(defn bootstrap []
  "The source the target's Python runs first: `consfig/boot.py`, minified."
  (global _bootstrap)
  (when (is _bootstrap None)
    (with [f (open consfig.boot.__file__ :encoding "utf-8")]
      (setv _bootstrap (_minified-cached (.read f)))))
  _bootstrap)

(defn bootstrap-command [interpreter]
  "The command that starts the target's side with INTERPRETER: the
bootstrap, told which module serves once the bundle is in place."
  [interpreter "-E" "-S" "-c" (bootstrap) "consfig.python_hop.target"])

(defn _minified-cached [source]
  ;; Minifying costs 20 ms of every controller's start-up: the result is
  ;; kept in the controller's cache, named by the hash of the source and of
  ;; the Python whose ast.unparse wrote it.
  (setv digest (.hexdigest (hashlib.sha256 (.encode (+ sys.version "\0" source)))))
  (try (setv directory (os.path.join (os.path.dirname (cache-directory)) "boot"))
       (except [ConsfigError] (return (_minify source))))
  (setv path (os.path.join directory f"{(cut digest 32)}.py"))
  (try
    (with [f (open path :encoding "utf-8")] (return (.read f)))
    (except [OSError] None))
  (setv text (_minify source))
  (try
    (os.makedirs directory 0o700 :exist-ok True)
    (write-atomically path (.encode text "utf-8") :mode 0o600)
    (except [OSError] None))
  text)

;; The target's frames are a few MiB at most (events are bounded there);
;; anything much larger is not a frame of ours.
(setv FRAME-LIMIT (* 64 1024 1024))

;; Counters, for tests and the benchmark: what this controller sent (code:
;; how many times, how many layers), and how many frames it received.
(setv stats {"sessions" 0 "bundles-sent" 0 "layers-sent" 0 "bundle-bytes" 0 "bytes-sent" 0
             "data-items-sent" 0 "frames-received" 0})

(defclass Session []
  "The controller's end of a conversation with a target: frames in and out
on threads of their own, so that every wait here has a timeout."
  (defn __init__ [self process]
    (setv self.process process
          self.last-heard (time.monotonic)
          self.inbox (queue.SimpleQueue)
          self.outbox (queue.SimpleQueue)
          self.stderr-tail (bytearray))
    (setv self.threads (lfor [target name] [[self._read "reader"] [self._write "writer"]
                                            [self._drain "stderr"]]
                             (threading.Thread :target target :daemon True
                                               :name f"consfig-{name}")))
    (for [t self.threads] (.start t)))

  (defn _heard [self]
    (setv self.last-heard (time.monotonic)))

  (defn _read [self]
    (try
      (while True
        (setv m (read-frame self.process.stdout :progress self._heard :limit FRAME-LIMIT))
        (self._heard)
        (+= (get stats "frames-received") 1)
        (.put self.inbox m)
        (when (is m None) (return)))
      (except [Exception]
        (.put self.inbox None))))

  (defn _write [self]
    (try
      (while True
        (setv data (.get self.outbox))
        (when (is data None) (break))
        (.write self.process.stdin data)
        (.flush self.process.stdin)
        (+= (get stats "bytes-sent") (len data)))
      ;; The far end is gone (a dead SSH connection says so with EOFError
      ;; or paramiko's own errors): the reader sees the end of its output
      ;; and that is reported.
      (except [Exception] None))
    ;; The far end may be gone already, and a channel says so with errors
    ;; of its own.
    (try (.close self.process.stdin) (except [Exception] None)))

  (defn _drain [self]
    (setv stream self.process.stderr
          read (getattr stream "read1" stream.read))
    (try
      (while True
        (setv chunk (read 65536))
        (when (not chunk) (return))
        (.extend self.stderr-tail chunk)
        (del (cut self.stderr-tail 0 (max 0 (- (len self.stderr-tail) 16384)))))
      (except [Exception] None)))

  (defn usable? [self silence]
    "Whether this session, kept between deployments, may serve another:
its process runs, nothing it said was end of file, and it said something
(a tick at least) within SILENCE seconds.  Drops what it said meanwhile."
    (try (while True
           (when (is (.get-nowait self.inbox) None)
             (.put self.inbox None)
             (return False)))
         (except [queue.Empty] None))
    (and (is (.wait self.process 0) None)
         (< (- (time.monotonic) self.last-heard) silence)))

  (defn send [self msg [payload b""]]
    (.put self.outbox (frame msg payload)))

  (defn receive [self timeout]
    "The next message; None at end of file; `queue.Empty` once nothing at
all, not even part of a message, has come for TIMEOUT s."
    (self._heard)
    (while True
      (try (return (.get self.inbox :timeout (max 0.01 (- (+ self.last-heard timeout)
                                                          (time.monotonic)))))
           (except [queue.Empty]
             (when (>= (- (time.monotonic) self.last-heard) timeout)
               (raise))))))

  (defn stderr-text [self [wait 1]]
    "What the target wrote on its standard error (the last 16 KiB), once it
has exited or WAIT seconds have passed."
    (setv deadline (+ (time.monotonic) wait))
    (while (and (is (.wait self.process 0) None) (< (time.monotonic) deadline))
      (time.sleep 0.02))
    ;; Give the stderr thread a moment to catch the last words.
    (.join (get self.threads 2) 0.5)
    (.strip (.decode (bytes self.stderr-tail) "utf-8" "replace")))

  (defn abandon [self]
    "End a session found dead: kill it without waiting for it to finish."
    (.put self.outbox None)
    (.kill self.process))

  (defn close [self]
    "Close the target's stdin and give it a few seconds to finish, then kill it."
    (.put self.outbox None)
    (when (is (.wait self.process 5) None)
      (.kill self.process)
      (.wait self.process 5))
    ;; A target that has finished exits without waiting for the end of its
    ;; input; the writer may still be closing it.  Let it, rather than leave
    ;; it to die with the interpreter, noisily.
    (.join (get self.threads 1) 5)))

(defn _no-python [hostname where interpreter code stderr]
  (setv found (cond (= code TOO-OLD) (or stderr "a Python older than 3.9")
                    (in code #(126 127 None)) f"{interpreter} was not found, or cannot run"
                    True (+ f"{interpreter} exited with code {code} before it could start"
                            (if stderr f":\n{(indented stderr)}" ""))))
  (when (= code NO-SAFE-CACHE)
    (return (ConnectionFailed
              (+ f"{hostname}: the Python on the target ({where}) has no safe place to cache "
                 f"consfig's code:\n{(indented stderr)}\n"
                 "  Make $XDG_CACHE_HOME or ~/.cache a directory of the target user's that no one "
                 "else can write to."))))
  (ConnectionFailed
    (+ f"{hostname}: no usable Python on the target ({where}): {found}\n"
       (if (and stderr (in code #(126 127))) f"{(indented stderr)}\n" "")
       "  consfig needs Python 3.9 or later there: install it, name it with "
       "[:python :interpreter \"/path/to/python3\"], or use [:python :install True].")))

(defn _start [upstream interpreter name where]
  ;; The target's Python, running the bootstrap, in a session.
  (try
    (setv process (.start-process upstream (bootstrap-command interpreter)))
    (except [e OSError]
      (.explain-start-failure upstream)
      (raise (_no-python name where interpreter None (str e)) :from e)))
  (+= (get stats "sessions") 1)
  (Session process))

(defn _send-host [session bundle host chain settings]
  ;; All at once: the target reads the apply message once it is ready.
  ;; The payload holds the host and its data's manifest (as an image does);
  ;; SETTINGS: the run's options (`options->data`), command-timeout,
  ;; where, no-services, and whether to persist or take the lock.
  (.send session {"op" "hello" "protocol" PROTOCOL "layers" bundle.hashes})
  (.send session {"op" "apply"
                  #** (host-payload host)
                  "chain" (lfor [n kw] chain [n (propspec->data kw)])
                  #** settings}))

(defn _send-data [session items sink name]
  ;; The content of ITEMS, in one frame; each item sent is an event, so
  ;; that what a deployment uploads can be counted.
  (setv #(msg payload) (data-frame items))
  (.send session msg payload)
  (+= (get stats "data-items-sent") (len items))
  (for [e (sent-events items name)] (sink e)))

(defn _check-hello [hello session interpreter name where upstream]
  (when (is hello None)
    (setv code (.wait session.process 2))
    ;; A hop before may know better why nothing started (sudo refused).
    (.explain-start-failure upstream)
    (raise (_no-python name where interpreter code (.stderr-text session))))
  (when (!= (.get hello "protocol") PROTOCOL)
    (raise (ConnectionFailed (+ f"{name}: the target ({where}) speaks consfig protocol "
                                f"{(.get hello "protocol")}, this controller {PROTOCOL}")))))

(defn _send-layers [session bundle names hello note]
  ;; Each compiled, when the target's Python makes this one's bytecode.
  ;; Sending the libraries takes a moment, once: say so.
  (setv same (bytecode-matches? hello))
  (for [name names]
    (setv layer (.layer bundle name)
          library? (!= name (get bundle.hashes -1)))
    (when library?
      (note (+ "sending consfig's libraries to the target, once"
               (if same
                   ""
                   (+ f" (its Python, {(.join "." (map str (.get hello "python" [])))}, "
                      "compiles them as it first imports them)")))))
    (setv data (or (and same (compiled-archive layer note)) (.archive layer)))
    (.send session {"op" "bundle" "hash" name} data)
    (+= (get stats "layers-sent") 1)
    (+= (get stats "bundle-bytes") (len data))))

(defn _ended [session name where]
  ;; The target's output ended before `done`: why, as well as we can tell.
  (setv code (.wait session.process 2)
        lost (getattr session.process "lost" None))
  (when lost
    (return (ConnectionFailed f"{name}: {lost}; the deployment did not finish")))
  (ConnectionFailed
    (+ f"{name}: the Python on the target ({where}) ended before the deployment finished"
       (if (is code None) "" f" (exit code {code})")
       (let [err (.stderr-text session)] (if err f":\n{(indented err)}" "")))))

(defn _receive [session timeout name where stage]
  (try (.receive session timeout)
       (except [queue.Empty]
         (raise (ConnectionFailed
                  (+ f"{name}: no word from the Python on the target ({where}) for {timeout} s"
                     (if (= stage "start") " while starting it" "")
                     "; gave up (the connection may have dropped)"))))))

(defn _tell [sink name text [stream "note"]]
  ;; An event of this controller's own, about the host NAME.
  (sink {#** (output-event text stream) "host" name "depth" 0}))

(defn _frame-summary [m]
  ;; -vvv: the conversation with the target, a line a frame received.
  (setv op (get m "op"))
  (+ f"← {op}"
     (cond (= op "events") f" ×{(len (get m "events"))}"
           (= op "done") f" changes {(get m "changes")} failures {(get m "failures")}"
           (= op "hello") f" protocol {(.get m "protocol")} missing {(len (.get m "missing" []))} layers"
           True "")))

(defn _converse [session bundle hello items sink name where timeout verbosity]
  ;; Answer the target until it is done: the bundle when it asks (once),
  ;; data it found damaged in its cache (ITEMS: all it may ask for), its
  ;; events to SINK.  The `Outcome`, or an error.
  (setv note (fn [text] (_tell sink name text "progress"))
        sent (set)
        wait timeout)
  (while True
    (setv m (_receive session wait name where "apply")
          wait timeout)
    (when (is m None) (raise (_ended session name where)))
    (setv op (get m "op"))
    (when (>= verbosity 3)
      (_tell sink name (_frame-summary m) "wire"))
    (cond
      (= op "need-bundle")
      (do (setv names (.get m "layers" []))
          (when (& sent (set names))
            (raise (ConnectionFailed f"{name}: the target ({where}) asked for the same code twice")))
          (when (.get m "discarded")
            (note (+ f"consfig's cached code on the target was damaged ({(get m "discarded")}); "
                     "discarded it and sent it again")))
          (_send-layers session bundle names hello note)
          (+= (get stats "bundles-sent") 1)
          (.update sent names)
          ;; Until it has imported consfig, a target that compiles it
          ;; (a slow machine, another Python) cannot say it is alive.
          (setv wait (max timeout 300)))
      (= op "need-data")
      (do (setv wanted (sfor [i1 i2] (get m "items") #(i1 i2)))
          (_send-data session (lfor i items :if (in #(i.iden1 i.iden2) wanted) i) sink name))
      (= op "events") (for [e (get m "events")]
                        (when (.get e "where")
                          (setv (get e "where") (controller-where (get e "where"))))
                        (sink e))
      (= op "done") (return (Outcome name (get m "changes") (get m "failures")
                                     :drift (.get m "drift" 0)))
      (= op "error")
      (raise ((if (.get m "expected") LockBusy ConsfigError)
               (+ f"{name}: on the target ({where}): {(get m "message")}"
                  (if (and verbosity (get m "traceback"))
                      (+ "\n" (indented (get m "traceback")))
                      "")))))))

(defclass KeptSessionLost [ConnectionFailed]
  "A session kept from an earlier deployment (see `consfig.python_hop.keep`) turned
out to have ended before this deployment's host reached it: nothing was
applied, and a fresh chain may be tried.")

(defclass Keeper []
  "Where a kept chain's `:python` hop keeps its session between
deployments: the session and the names of the layers its Python runs
(None, None when there is none)."
  (defn __init__ [self]
    (setv self.session None
          self.layers None))
  (defn close [self]
    "End the kept session, if any: its Python ends, and all it started."
    (when self.session
      (.close self.session)
      (setv self.session None
            self.layers None))))

(defn _hello-skipping-ticks [session timeout name where]
  ;; A kept session's Python ticks while idle: a tick may come first.
  (while True
    (setv m (_receive session timeout name where "start"))
    (when (or (is m None) (!= (get m "op") "tick"))
      (return m))))

(defn _kept-hello [session timeout heartbeat name where]
  ;; A kept Python answers at once, and ticks every HEARTBEAT seconds while
  ;; idle: silence for three of them means its connection died without a
  ;; sign (a network gone, a host suspended), and a fresh chain may be
  ;; tried rather than waiting out TIMEOUT.
  (setv limit (min timeout (* 3 heartbeat)))
  (try (_hello-skipping-ticks session limit name where)
       (except [e ConnectionFailed]
         (raise (KeptSessionLost f"{name}: the kept session has not answered for {limit} s"
                                 where)
                :from e))))

(defn apply-remotely [hop host sink options * [lock None]]
  "Apply the preprocessed HOST in a Python started through the `:python`
HOP's upstream, as OPTIONS (a `consfig.options.RunOptions`) say, passing
each event to SINK as it arrives, and return an `Outcome`; with its CHECK,
change nothing and report what would change.  From HOP
(`consfig.connections.python.PythonConnection`): the interpreter to start
(its `program`), the hops after it (REST, established on the target
first), its TIMEOUT (how many seconds the target may stay silent before the
deployment is given up), the MODULES to ship, and its KEEPER; the chain's
`:command-timeout` stops a command the target runs that gives none.

With a `Keeper`, the Python is left running afterwards, serving the next
deployment made through it: one it kept is used when it is still there and
runs the same bundle.  When that one turns out to have ended before it got
the host, `KeptSessionLost` is raised.  LOCK (a `consfig.apply.lock.lock-request`):
the target's Python takes the deployment lock itself, for this apply.
With the options' CONVERGE (`consfig.options.ConvergeSettings`), the
target's Python stays, keeping the host converged, until its input ends."
  (setv upstream hop.upstream
        interpreter (.program hop)
        timeout hop.timeout
        keeper hop.keeper
        verbosity options.verbosity
        where hop.where
        name host.hostname
        bundle (bundle-for host.propspec hop.modules)
        items (items-to-carry host)
        had (and keeper keeper.session)
        alive (and had (.usable? keeper.session (* 3 HEARTBEAT))))
  (when (and had (not alive))
    ;; The chain it ran over is likely gone with it.
    (.close keeper)
    (raise (KeptSessionLost f"{name}: the kept session has ended" where)))
  ;; The kept Python takes a new site layer (the consfig was edited) in
  ;; place of its old one; other libraries need another Python.
  (setv reused (and alive (= (cut keeper.layers 0 -1) bundle.libraries)))
  (when (and keeper (not reused))
    (.close keeper))
  (setv session (if reused
                    keeper.session
                    (try (_start upstream interpreter name where)
                         (except [e ConnectionFailed]
                           (if had
                               (raise (KeptSessionLost (str e) where) :from e)
                               (raise)))))
        kept False
        lost False)
  (when keeper
    (setv keeper.session None))
  (try
    (_send-host session bundle host hop.rest
                {"options" (options->data options)
                 "command-timeout" (.chain-command-timeout upstream)
                 ;; For the target's messages: where its commands run.
                 "where" where
                 ;; Reached through a chroot (say), the target's Python is
                 ;; where no service may start, as the hops before it know.
                 "no-services" (no-services-reason upstream)
                 #** (if keeper {"persist" True} {})
                 #** (if lock {"lock" lock} {})})
    (when (>= verbosity 3)
      (_tell sink name (+ f"→ hello (layers {(.join " " bundle.hashes)}), apply {name}"
                          (if reused " (kept session)" "")) "wire"))
    (setv hello (if reused
                    (try (_kept-hello session timeout HEARTBEAT name where)
                         (except [KeptSessionLost]
                           (setv lost True)
                           (raise)))
                    (_hello-skipping-ticks session timeout name where)))
    (when (and reused (is hello None))
      (raise (KeptSessionLost f"{name}: the kept session ended before this deployment" where)))
    (_check-hello hello session interpreter name where upstream)
    (when (>= verbosity 3)
      (_tell sink name (_frame-summary hello) "wire"))
    (when items
      (_send-data session (lfor i items :if (not (kept? i (.get hello "data"))) i) sink name))
    (setv outcome (_converse session bundle hello items sink name where timeout verbosity)
          outcome.check options.check
          kept (bool keeper))
    outcome
    (finally
      (cond kept (setv keeper.session session
                       keeper.layers bundle.hashes)
            lost (.abandon session)
            True (.close session)))))

(export :objects [bootstrap bootstrap-command apply-remotely Session Keeper KeptSessionLost stats])
