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
        tempfile
        time
        consfig.errors [CommandTimedOut]
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
  "Kill every command this process started that is still running."
  (for [proc (list _running)]
    (_kill-group proc)))

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

  (defn run-script [self script input timeout]
    ;; subprocess.run would kill only the shell on a timeout, and then wait
    ;; forever for a grandchild (`sleep`, say) that still holds the pipes
    ;; open; a session of its own lets the whole group go at once.
    (with [proc (subprocess.Popen ["/bin/sh" "-c" script]
                                  :stdin (if (is input None) subprocess.DEVNULL subprocess.PIPE)
                                  :stdout subprocess.PIPE
                                  :stderr subprocess.PIPE
                                  :start-new-session True)]
      (.add _running proc)
      (try
        (setv #(out err) (.communicate proc input timeout))
        (except [subprocess.TimeoutExpired]
          (_kill-group proc)
          (setv #(out err) (.communicate proc))
          (raise (CommandTimedOut script timeout (bytes->text out) (bytes->text err)
                                  self.where)))
        (except [BaseException]
          (_kill-group proc)
          (raise))
        (finally (.discard _running proc)))
      #(proc.returncode out err)))

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
    (setv #(fd tmp) (tempfile.mkstemp :dir directory :prefix ".consfig-"))
    (try
      (with [f (os.fdopen fd "wb")]
        (.write f content)
        (.flush f)
        (os.fsync (.fileno f)))
      (cond (is-not mode None) (os.chmod tmp mode)
            old (os.chmod tmp (& old.st_mode 0o7777))
            True (os.chmod tmp (& 0o666 (bnot (_umask)))))
      (when (or owner group)
        (import shutil)
        (shutil.chown tmp :user owner :group group))
      (when (and old (not (or owner group))
                 (or (!= old.st_uid (os.getuid)) (!= old.st_gid (os.getgid))))
        (os.chown tmp old.st_uid old.st_gid))
      (os.replace tmp path)
      (except [BaseException]
        (try (os.unlink tmp) (except [FileNotFoundError] None))
        (raise)))))

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
