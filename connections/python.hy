"The `:python` hop: apply the host in a Python on the target.

At the end of the chain so far (`[[:ssh …] :sudo :python]`), it starts
`python3 -E -S -c BOOTSTRAP` through the upstream connection, sends it the
code it needs (once: the target caches it) and the preprocessed host, and
feeds the events the target streams back to the controller's sink.  Hops
after it (`[:ssh :python :sudo]`) are established on the target, which
starts a further Python through them.  See `consfig.python_hop.controller` for the
controller's side of the protocol and docs/python-hop.md for the whole story.

  :interpreter   the Python to run, a name looked up in PATH or a path
                 (default \"python3\"); it must be 3.9 or later
  :install       if true, install python3 with the target's package manager
                 first, when there is none
  :timeout       seconds the target may stay silent before the deployment is
                 given up (default 60; it says something every 5 s)
  :modules       more modules to ship, besides those defining the properties"

(import sys
        consfig.transport.local [LocalConnection]
        consfig.errors [CommandFailed ConnectionFailed]
        consfig.transport.frames [OUTPUT-LIMIT]
        consfig.transport.hop [Connection Hop Script BOOLEAN SECONDS STRING STRINGS]
        consfig.python_hop.controller [apply-remotely])

;; Tried in order; the first package manager present installs Python.
(setv _INSTALL-SCRIPT "
if command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  # Waits for dpkg's lock as every apt-get consfig runs does (props/apt.hy).
  lock='DPkg::Lock::Timeout=300'
  apt-get -o \"$lock\" install -y -q python3 ||
    { apt-get -o \"$lock\" update -q && apt-get -o \"$lock\" install -y -q python3; }
elif command -v dnf >/dev/null 2>&1; then dnf install -y python3
elif command -v yum >/dev/null 2>&1; then yum install -y python3
elif command -v zypper >/dev/null 2>&1; then zypper --non-interactive install python3
elif command -v apk >/dev/null 2>&1; then apk add --no-cache python3
elif command -v pacman >/dev/null 2>&1; then pacman -S --noconfirm --needed python
else
  echo 'no package manager consfig knows (apt-get dnf yum zypper apk pacman)' >&2; exit 3
fi")

(defn install-python [upstream interpreter]
  "Install python3 over the POSIX connection UPSTREAM unless INTERPRETER is there."
  (when (not (. (.run upstream ["command" "-v" interpreter] :check False) ok?))
    (try
      (.run upstream (Script _INSTALL-SCRIPT) :timeout 1800)
      (except [e CommandFailed]
        (raise (ConnectionFailed
                 (+ f"could not install python3 on the target ({upstream.where}) for the :python hop\n"
                    (str e)))
               :from e)))))

(defclass PythonConnection [Connection]
  "The end of a chain whose target runs a Python of consfig's own.  Nothing
starts until `apply-remotely`: the host is sent along with the start, so
that a deployment costs one exchange of messages, not several."
  (setv python? True
        hop-name "python")

  (defn __init__ [self upstream rest * [interpreter None] [timeout 60]
                  [modules #()]]
    (.__init__ (super) upstream)
    (setv self.rest rest
          self.interpreter interpreter
          self.timeout timeout
          self.modules (tuple modules)
          ;; A `consfig.python_hop.controller.Keeper` when the chain is kept between
          ;; deployments (`consfig.python_hop.keep`): the target's Python stays.
          self.keeper None))

  (defn program [self]
    "The interpreter to start on the target."
    ;; `[:local :python]` without :interpreter: the controller's own Python
    ;; is the one sure to be recent enough, and starts faster than a
    ;; `python3` that may be a wrapper script (pyenv's shims take 0.3 s).
    (if (and (is self.interpreter None)
             (is (type self.upstream) LocalConnection)
             (is self.upstream.upstream None))
        sys.executable
        (or self.interpreter "python3")))

  (defn describe [self]
    (if self.interpreter f"python({self.interpreter})" "python"))

  (defn apply-remotely? [self] True)

  (defn apply-remotely [self host sink options * [lock None]]
    "Apply the preprocessed HOST on the target as OPTIONS (`RunOptions`)
say, feeding its events to SINK; return the `Outcome`.  LOCK: a
`consfig.apply.lock.lock-request`, for the target's Python to take the
deployment lock itself."
    (apply-remotely self host sink options :lock lock))

  (defn close [self]
    (when self.keeper
      (.close self.keeper)))

  ;; A property applied through this connection directly (not by the
  ;; target) acts through the chain before it.
  (defn run-script [self script input timeout * [limit OUTPUT-LIMIT]]
    (.run-script self.upstream script input timeout :limit limit))

  (defn start-process [self argv]
    (.start-process self.upstream argv)))

(defn establish [upstream rest * [interpreter None] [install False]
                 [timeout 60] [modules None]]
  (when install
    (install-python upstream (or interpreter "python3")))
  (PythonConnection upstream rest :interpreter interpreter :timeout timeout
                    :modules (or modules #())))

(setv HOP (Hop "python" {"interpreter" STRING "install" BOOLEAN "timeout" SECONDS
                         "modules" STRINGS}
               establish :takes-rest True))

(export :objects [PythonConnection install-python HOP])
