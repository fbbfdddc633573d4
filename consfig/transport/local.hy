"The connection to the machine consfig runs on (the `:local` hop is
`consfig.connections.local`).

It is the first link of every chain, and the connection a target uses after a
`:python` hop, so it is the hot path: files are read and written with system
calls rather than by running `cat`."

(import errno
        grp
        os
        os.path
        pwd
        signal
        stat
        subprocess
        threading
        time
        consfig.errors [AbortedChange CommandTimedOut SymlinkNotFollowed]
        consfig.transport.frames [OUTPUT-LIMIT OutputBuffer]
        consfig.transport.hop [Connection STALE-MINUTES check-path]
        consfig.transport.safepath [walk chmod-node make-directories remove-tree]
        consfig.util [bytes->text write-atomically])

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
(defclass _Running []
  "The children still running, each the leader of a process group of its
own; a set that also tells the reaper (below) what to kill if this process
dies without a chance to do it itself."
  (defn __init__ [self]
    (setv self.procs (set)
          self.reaper None
          self.lock (threading.Lock)))

  (defn add [self proc]
    (.add self.procs proc)
    (self._tell f"+{proc.pid}\n"))

  (defn discard [self proc]
    (when (in proc self.procs)
      (.discard self.procs proc)
      (self._tell f"-{proc.pid}\n")))

  (defn __iter__ [self] (iter (list self.procs)))

  (defn _tell [self line]
    ;; A KILL gives this process no last word, so a tiny shell of its own
    ;; session holds the other end of a pipe: when the pipe closes — this
    ;; process ended, however — it kills every group still listed.  One per
    ;; process, started with the first command.
    (with [self.lock]
      (when (is self.reaper None)
        (setv self.reaper (subprocess.Popen ["/bin/sh" "-c" _REAPER]
                                            :stdin subprocess.PIPE
                                            :stdout subprocess.DEVNULL
                                            :stderr subprocess.DEVNULL
                                            :start-new-session True)))
      (try (os.write (.fileno self.reaper.stdin) (.encode line))
           (except [OSError] None)))
    None))

(setv _REAPER (.join "\n" [
  "trap '' HUP INT TERM PIPE"
  "groups=' '"
  "while IFS= read -r line; do"
  "  case $line in"
  "    +*) groups=\"$groups${line#+} \" ;;"
  "    -*) x=${line#-}"
  "        case $groups in *\" $x \"*) groups=\"${groups%% $x *} ${groups#* $x }\" ;; esac ;;"
  "  esac"
  "done"
  ;; dash's kill takes no "--": a group is "-PGID" right after the signal.
  "for g in $groups; do kill -KILL \"-$g\" 2>/dev/null; done"]))

(setv _running (_Running))

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

  (defn read-file [self path * [follow False] [limit None]]
    (check-path path)
    (with [dirfd (_walked path follow)]
      (try
        (setv fd (os.open dirfd.name (| os.O_RDONLY os.O_NOFOLLOW os.O_NONBLOCK os.O_CLOEXEC)
                          :dir_fd dirfd.fd))
        (except [e OSError]
          (raise (cond (= e.errno errno.ELOOP) (SymlinkNotFollowed path)
                       (= e.errno errno.ENOENT) (FileNotFoundError errno.ENOENT
                                                                   f"no such file: {path}" path)
                       True e))))
      (with [f (os.fdopen fd "rb")]
        (setv st (os.fstat fd))
        (cond (stat.S_ISDIR st.st_mode) (raise (IsADirectoryError errno.EISDIR
                                                                  "is a directory" path))
              (not (stat.S_ISREG st.st_mode)) (raise (OSError errno.EINVAL
                                                              "not a regular file" path)))
        (.read f (if (is limit None) -1 limit)))))

  (defn exists? [self path]
    (check-path path)
    (os.path.lexists path))

  (defn write-file [self path content * [mode None] [owner None] [group None] [follow False]]
    (check-path path)
    (with [dirfd (_walked path follow)]
      (setv d dirfd.fd
            name dirfd.name
            old (try (os.stat name :dir_fd d :follow_symlinks False)
                     (except [FileNotFoundError] None)))
      ;; A symlink (or anything else) there is replaced: only a regular
      ;; file's mode and owner are kept.
      (when (and old (not (stat.S_ISREG old.st_mode)))
        (setv old None))
      (_remove-stale-temporaries d)
      (defn prepare [fd]
        (cond (is-not mode None) (os.fchmod fd mode)
              old (os.fchmod fd (& old.st_mode 0o7777))
              True (os.fchmod fd (& 0o666 (bnot (_umask)))))
        ;; As over a POSIX hop: the old file's owner and group are kept, but
        ;; for what OWNER and GROUP (names, or numbers as text) say.
        (when (and old (or (!= old.st_uid (os.getuid)) (!= old.st_gid (os.getgid))))
          (os.fchown fd old.st_uid old.st_gid))
        (when (or owner group)
          (os.fchown fd (_uid owner) (_gid group))))
      (write-atomically name content :dir-fd d :prepare prepare)))

  (defn set-mode [self path mode * [follow False]]
    (check-path path)
    (with [dirfd (_walked path follow)]
      (try (chmod-node dirfd.fd dirfd.name path mode)
           (except [SymlinkNotFollowed]
             (raise (AbortedChange (str (SymlinkNotFollowed path self.where))))))))

  (defn set-owner [self path owner group * [follow False]]
    (check-path path)
    (with [dirfd (_walked path follow)]
      ;; Not following, a symlink there is itself given the owner (chown -h).
      (os.chown dirfd.name (_uid owner) (_gid group) :dir_fd dirfd.fd :follow_symlinks False)))

  (defn remove [self paths * [recursive False] [timeout None]]
    (for [p paths] (check-path p))
    ;; As over a POSIX hop, every path is walked before anything is removed.
    (setv walked [])
    (try
      (for [p paths]
        (try (.append walked #(p (_walked p False)))
             (except [FileNotFoundError] None)))
      (for [#(p d) walked]
        (try (os.unlink d.name :dir_fd d.fd)
             (except [FileNotFoundError] None)
             (except [IsADirectoryError]
               (when (not recursive)
                 (raise (IsADirectoryError errno.EISDIR
                                           "is a directory, and is removed only with everything in it"
                                           p)))
               (try (remove-tree d.fd d.name p)
                    (except [FileNotFoundError] None)))))
      (finally
        (for [#(_ d) walked] (.__exit__ d)))))

  (defn make-directory [self path * [timeout None]]
    (check-path path)
    (make-directories path))

  (defn make-symlink [self target path * [timeout None]]
    (check-path path)
    (check-path target)
    (with [d (_walked path False)]
      ;; Made under a new name and renamed over PATH: `ln -sfT`, atomically.
      (setv tmp (_new-symlink target d.fd))
      (try
        (os.rename tmp d.name :src_dir_fd d.fd :dst_dir_fd d.fd)
        (except [BaseException]
          (try (os.unlink tmp :dir_fd d.fd) (except [FileNotFoundError] None))
          (raise))))))

(defclass _walked []
  ;; `with [d (_walked path follow)]`: d.fd, the directory holding PATH's
  ;; last component, found by the safe walk, closed at the end; d.name, that
  ;; component.  The walk's own errors say which path they are about.
  (defn __init__ [self path follow]
    (try (setv #(self.fd self.name) (walk path :follow follow))
         (except [e FileNotFoundError]
           (raise (FileNotFoundError errno.ENOENT
                                     f"cannot write or read {path}: directory {(os.path.dirname path)} does not exist"
                                     path)))))
  (defn __enter__ [self] self)
  (defn __exit__ [self #* _] (os.close self.fd)))

(defn _new-symlink [target dirfd]
  ;; A symlink to TARGET under a new temporary name in DIRFD, which it returns.
  (for [_ (range 100)]
    (setv name (+ ".consfig-" (.hex (os.urandom 4))))
    (try (os.symlink target name :dir_fd dirfd)
         (return name)
         (except [FileExistsError] None)))
  (raise (FileExistsError errno.EEXIST "no free temporary name" ".consfig-XXXXXXXX")))

(defn _uid [x]
  (cond (is x None) -1
        (.isdigit (str x)) (int x)
        True (. (pwd.getpwnam x) pw_uid)))

(defn _gid [x]
  (cond (is x None) -1
        (.isdigit (str x)) (int x)
        True (. (grp.getgrnam x) gr_gid)))

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

(defn _remove-stale-temporaries [dirfd]
  ;; What `Connection.write-script` does for a POSIX hop: a temporary of
  ;; ours that nothing has written to for STALE-MINUTES was left by a write
  ;; that was killed.
  (setv limit (- (time.time) (* 60 STALE-MINUTES))
        uid (os.getuid)
        listing (os.open "." (| os.O_RDONLY os.O_DIRECTORY os.O_CLOEXEC) :dir_fd dirfd))
  (try
    (for [name (os.listdir listing)]
      (when (and (.startswith name ".consfig-") (= (len name) 17))
        (try
          (setv st (os.stat name :dir_fd dirfd :follow_symlinks False))
          (when (and (stat.S-ISREG st.st-mode) (= st.st-uid uid) (< st.st-mtime limit))
            (os.unlink name :dir_fd dirfd))
          (except [OSError] None))))
    (finally (os.close listing))))

(defn _umask []
  ;; The only way to read the umask is to set it; put it straight back.
  (setv m (os.umask 0o22))
  (os.umask m)
  m)

(export :objects [LocalConnection LocalProcess kill-running])
