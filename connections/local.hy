"The `:local` hop: the machine consfig runs on.

It is the first link of every chain, and the connection a target uses after a
`:python` hop, so it is the hot path: files are read and written with system
calls rather than by running `cat`."

(import glob
        os
        os.path
        signal
        stat
        subprocess
        threading
        time
        consfig.errors [CommandTimedOut]
        consfig.frames [OUTPUT-LIMIT OutputBuffer]
        consfig.hop [Connection Hop STALE-MINUTES check-path]
        consfig.util [bytes->text])

(defn _kill-group [proc [grace 1]]
  ;; TERM first: sudo passes TERM on to the command it runs as root, but a
  ;; KILL only ends sudo itself, which a controller not running as root
  ;; could not then reach.  What is still there after GRACE seconds is killed.
  (try (os.killpg proc.pid signal.SIGTERM)
       (except [ProcessLookupError] (return)))
  (try (.wait proc grace)
       (except [subprocess.TimeoutExpired] None))
  (try (os.killpg proc.pid signal.SIGKILL)
       (except [#(ProcessLookupError PermissionError)] None)))

;; Children still running, each the leader of a process group of its own.  A
;; target whose controller has gone away kills them all before it exits
;; (`kill-running`), so that a dropped deployment leaves nothing behind.
(setv _running (set))

(defn kill-running []
  "Kill every command this process started that is still running: those
in `_running`, and any other child leading a process group of its own (one
being started when the end came, before it was recorded)."
  (for [proc (list _running)]
    (_kill-group proc))
  (for [pid (_children)]
    (try (os.killpg pid signal.SIGKILL)
         (except [OSError] None))))

(defn _children []
  ;; From /proc, where there is one; elsewhere `_running` has to do.
  (setv me (os.getpid) found [])
  (for [entry (try (os.listdir "/proc") (except [OSError] []))]
    (when (.isdigit entry)
      (try
        (with [f (open f"/proc/{entry}/stat" "rb")]
          (setv fields (.split (get (.rsplit (.read f) b")" 1) 1))))
        (when (and (= (int (get fields 1)) me) (= (int (get fields 2)) (int entry)))
          (.append found (int entry)))
        (except [#(OSError ValueError IndexError)] None))))
  found)

(defclass LocalProcess []
  "A process started by `start-process`: see `Connection.start-process`."
  (defn __init__ [self argv]
    (setv self.popen (subprocess.Popen argv
                                       :stdin subprocess.PIPE
                                       :stdout subprocess.PIPE
                                       :stderr subprocess.PIPE
                                       :start-new-session True)
          self.stdin self.popen.stdin
          self.stdout self.popen.stdout
          self.stderr self.popen.stderr)
    (.add _running self.popen))

  (defn wait [self [timeout None]]
    (try
      (setv code (.wait self.popen timeout))
      (.discard _running self.popen)
      code
      (except [subprocess.TimeoutExpired] None)))

  (defn kill [self]
    (_kill-group self.popen)
    (.discard _running self.popen)))

(defclass LocalConnection [Connection]
  "Run commands as subprocesses and touch files directly, on this machine."
  (setv python? True
        hop-name "local")

  (defn run-script [self script input timeout * [limit OUTPUT-LIMIT]]
    ;; subprocess.run would kill only the shell on a timeout, and then wait
    ;; forever for a grandchild (`sleep`, say) that still holds the pipes
    ;; open; a session of its own lets the whole group go at once.  The
    ;; output is read as it comes, into bounded buffers, by threads of its
    ;; own, as communicate would, but without keeping all of it.
    (with [proc (subprocess.Popen ["/bin/sh" "-c" script]
                                  :stdin (if (is input None) subprocess.DEVNULL subprocess.PIPE)
                                  :stdout subprocess.PIPE
                                  :stderr subprocess.PIPE
                                  :start-new-session True)]
      (.add _running proc)
      (setv out (OutputBuffer limit)
            err (OutputBuffer limit)
            threads [(_pump (fn [] (_drain proc.stdout out)))
                     (_pump (fn [] (_drain proc.stderr err)))
                     #* (if (is input None) [] [(_pump (fn [] (_feed proc.stdin input)))])]
            deadline (when timeout (+ (time.monotonic) timeout)))
      (try
        (_await threads proc deadline script timeout)
        (except [subprocess.TimeoutExpired]
          (_kill-group proc)
          (for [t threads] (.join t 5))
          (raise (CommandTimedOut script timeout (bytes->text (.getvalue out))
                                  (bytes->text (.getvalue err)) self.where)))
        (except [BaseException]
          (_kill-group proc)
          (raise))
        (finally (.discard _running proc)))
      #(proc.returncode (.getvalue out) (.getvalue err))))

  (defn start-process [self argv]
    (LocalProcess argv))

  (defn read-file [self path]
    (check-path path)
    (with [f (open path "rb")] (.read f)))

  (defn exists? [self path]
    (check-path path)
    (os.path.lexists path))

  (defn write-file [self path content * [mode None] [owner None] [group None]]
    (check-path path)
    (setv directory (or (os.path.dirname path) ".")
          old (try (os.stat path) (except [FileNotFoundError] None)))
    (when (not (os.path.isdir directory))
      (raise (FileNotFoundError f"cannot write {path}: directory {directory} does not exist")))
    (_remove-stale-temporaries directory)
    ;; Imported here: a deployment that finds every file as it should be
    ;; writes none, and tempfile brings shutil, bz2, lzma and random.
    (import tempfile)
    (setv #(fd tmp) (tempfile.mkstemp :dir directory :prefix ".consfig-"))
    (try
      (with [f (os.fdopen fd "wb")]
        (.write f content)
        (.flush f)
        (os.fsync (.fileno f)))
      (cond (is-not mode None) (os.chmod tmp mode)
            old (os.chmod tmp (& old.st_mode 0o7777))
            True (os.chmod tmp (& 0o666 (bnot (_umask)))))
      ;; As over a POSIX hop: the old file's owner and group are kept, but
      ;; for what OWNER and GROUP (names, or numbers as text) say.
      (when (and old (or (!= old.st_uid (os.getuid)) (!= old.st_gid (os.getgid))))
        (os.chown tmp old.st_uid old.st_gid))
      (when (or owner group)
        (import shutil)
        (shutil.chown tmp :user (_id-or-name owner) :group (_id-or-name group)))
      (os.replace tmp path)
      (except [BaseException]
        (try (os.unlink tmp) (except [FileNotFoundError] None))
        (raise)))))

(defn _id-or-name [x]
  (if (and (isinstance x str) (.isdigit x)) (int x) x))

(defn _await [threads proc deadline script timeout]
  ;; Wait in short slices: a signal handler (the target's Python told to
  ;; end) runs only between them, and must not wait for the command.
  (while (or (any (gfor t threads (.is-alive t))) (is (.poll proc) None))
    (setv left (when deadline (- deadline (time.monotonic))))
    (when (and (is-not left None) (<= left 0))
      (raise (subprocess.TimeoutExpired script timeout)))
    (setv alive (lfor t threads :if (.is-alive t) t))
    (if alive
        (.join (get alive 0) (min 0.2 (or left 0.2)))
        (try (.wait proc (min 0.2 (or left 0.2)))
             (except [subprocess.TimeoutExpired] None)))))

(defn _pump [target]
  (setv t (threading.Thread :target target :daemon True))
  (.start t)
  t)

(defn _drain [stream buffer]
  (while (setx data (.read1 stream 65536))
    (.add buffer data)))

(defn _feed [stream data]
  ;; A command that exits without reading all its input closes the pipe.
  (try (.write stream data)
       (except [#(BrokenPipeError OSError)] None))
  (try (.close stream)
       (except [#(BrokenPipeError OSError)] None)))

(defn _remove-stale-temporaries [directory]
  ;; What `Connection.write-script` does for a POSIX hop: a temporary of
  ;; ours that nothing has written to for STALE-MINUTES was left by a write
  ;; that was killed.
  (setv limit (- (time.time) (* 60 STALE-MINUTES))
        uid (os.getuid))
  (for [path (glob.glob (os.path.join (glob.escape directory) ".consfig-????????"))]
    (try
      (setv st (os.lstat path))
      (when (and (stat.S-ISREG st.st-mode) (= st.st-uid uid) (< st.st-mtime limit))
        (os.unlink path))
      (except [OSError] None))))

(defn _umask []
  ;; The only way to read the umask is to set it; put it straight back.
  (setv m (os.umask 0o22))
  (os.umask m)
  m)

(defn establish [upstream]
  (LocalConnection))

(setv HOP (Hop "local" {} establish))

(export :objects [LocalConnection LocalProcess kill-running HOP])
