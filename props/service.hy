"Services, through service(8), and keeping them from starting.

A deployment must not start daemons where nothing is meant to run them: in a
chroot being built, in a disk image, in a container's root filesystem.  Inside
`without-starting-services` (and on a host with the `no-services` property)
the properties here and in `systemd` that start, stop or reload services do
nothing, and /usr/sbin/policy-rc.d answers 101 (\"action forbidden\") so that
packages installed meanwhile do not start theirs either."

(eval-when-compile (require consfig.model.property [defprop]))
(import consfig.model.watchspec [watch-path watch-unit])
(import contextlib
        contextvars
        consfig.apply.actions [NO-CHANGE run run-ok? run-script read-remote-file
                               write-remote-file remote-exists?]
        consfig.model.context [connection]
        consfig.apply.engine [apply-sequence checking? inform]
        consfig.errors [FailedChange]
        consfig.apply.noservices [POLICY-RC-D FORBID-ALL no-services-reason]
        consfig.model.host [push-hostattr get-hostattr]
        consfig.types *)

(setv service-name (matching "service-name"
                             "a service name (letters, digits, _ . @ : and -, not starting with -)"
                             r"[A-Za-z0-9_][A-Za-z0-9_.@:-]*"))

(setv POLICY-RC-D-CONTENT FORBID-ALL)

(setv _no-services (contextvars.ContextVar "consfig-no-services" :default False))

(defn _no-services-where []
  ;; Where services are not started, for messages: "here", or what a hop
  ;; into an unbooted system said ("in a chroot").
  (if (or (.get _no-services) (get-hostattr "no-services"))
      "here"
      (no-services-reason (connection))))

(defn no-services-where []
  "Where services are not started now, for messages: \"in a chroot\" (what
a hop into an unbooted system said), \"here\", or None when they are
started.  Where they are not, the running kernel is not the target system's
own either: properties that act on it (sysctl, kernel modules, swap) say so
and leave it alone."
  (_no-services-where))

(setv _CONTAINER "
if command -v systemd-detect-virt >/dev/null 2>&1 &&
   v=$(systemd-detect-virt --container 2>/dev/null) && [ -n \"$v\" ] && [ \"$v\" != none ]; then
  echo \"$v\"; exit 0
fi
if [ -s /run/systemd/container ]; then head -n 1 /run/systemd/container; exit 0; fi
if [ -r /proc/1/environ ]; then tr '\\000' '\\n' </proc/1/environ | sed -n 's/^container=//p' | head -n 1; fi
exit 0")

(defn container-kind []
  "The kind of container the target runs in (\"systemd-nspawn\", \"docker\",
\"lxc\", …), as systemd-detect-virt --container, /run/systemd/container or
the `container=` of PID 1's environment tell; None on a system with a kernel
of its own."
  (setv kind (.strip (or (. (run "sh" "-c" _CONTAINER :check False :timeout 60) stdout) "")))
  (or (get (+ (.splitlines kind) [""]) 0) None))

(defn kernel-left-alone-where []
  "Where the running kernel is not the target system's own, for messages:
as `no-services-where` says (a chroot), or \"in a container (KIND)\", whose
kernel is the machine's; None when it is the system's own.  Properties that
act on the whole kernel (swap, kernel-wide sysctls, kernel modules, the
clock) say so there and leave it alone."
  (or (no-services-where)
      (let [kind (container-kind)]
        (when kind f"in a container ({kind}): its kernel is the machine's"))))

(defn no-services? []
  "Whether services must not be started, stopped or reloaded now: inside
`without-starting-services`, on a host with the `no-services` property, or
over a connection that says so (the connattr `no-services` of a hop of its
chain, as the `:chroot` hop sets)."
  (is-not (_no-services-where) None))

(defn skip-for-no-services [what]
  "Say that WHAT is not done because services are not to be touched, and
return `:no-change`."
  (inform f"not {what}: services are not started {(or (_no-services-where) "here")}")
  NO-CHANGE)

(defn [contextlib.contextmanager] services-prevented []
  "A context in which no service starts on the current connection's target:
policy-rc.d forbids every action and `no-services?` is true.  On the way
out, whatever policy-rc.d was there before comes back — also when the body
failed — unless something inside replaced ours with a file of its own.  In
check mode, nothing starts anyway: policy-rc.d is left alone."
  (when (checking?)
    (setv token (.set _no-services True))
    (try (yield) (finally (.reset _no-services token)))
    (return))
  (setv had-policy (remote-exists? POLICY-RC-D)
        backup None)
  (when had-policy
    ;; A copy, not a move: there is never a moment without a policy.
    (setv backup (.strip (. (run "mktemp" "/usr/sbin/.policy-rc.d.consfig-XXXXXXXX") stdout)))
    (run "cp" "-p" "--" POLICY-RC-D backup))
  (write-remote-file POLICY-RC-D POLICY-RC-D-CONTENT :mode 0o755)
  (setv token (.set _no-services True))
  (try
    (yield)
    (finally
      (.reset _no-services token)
      (if (= (read-remote-file POLICY-RC-D) POLICY-RC-D-CONTENT)
          (if backup
              (run "mv" "-f" "--" backup POLICY-RC-D)
              (run "rm" "-f" "--" POLICY-RC-D))
          (when backup
            (run "rm" "-f" "--" backup))))))

(defprop without-starting-services :posix [#^ propspec #* propapps]
  "Apply PROPAPPS (in order, stopping at the first failure) without starting
any service: for chroots and images.  Service properties do nothing inside,
and /usr/sbin/policy-rc.d forbids package scripts to start daemons for the
duration.  Debian and derivatives."
  (:unwatched "it holds other properties, which are watched for themselves")
  (:announce False)
  (:simulates True)
  (:apply (with [(services-prevented)] (apply-sequence propapps)))
  (:unapply (with [(services-prevented)] (apply-sequence propapps :unapply True))))

(defprop no-services :posix []
  "The host never starts services: its service properties do nothing, and
/usr/sbin/policy-rc.d forbids package scripts to start daemons.  For a chroot
or an image that is never booted as it is.  This owns policy-rc.d outright."
  (:watch [(watch-path POLICY-RC-D)])
  (:desc "Starting services disabled")
  (:hostattrs (push-hostattr "no-services" True))
  (:check (= (read-remote-file POLICY-RC-D) POLICY-RC-D-CONTENT))
  (:apply (write-remote-file POLICY-RC-D POLICY-RC-D-CONTENT :mode 0o755))
  (:unapply (run "rm" "-f" "--" POLICY-RC-D)))

(defn _service [name action]
  (run "service" name action :timeout 300))

(defprop running :posix [#^ service-name service]
  "SERVICE is running, as service(8) sees it: started unless its status
says it is running already."
  (:watch [(watch-unit (if (in "." service) service f"{service}.service"))])
  (:desc f"Service {service} running")
  ;; Where services are not started, nothing would be done: it holds.
  (:check (if (no-services?)
              (= (skip-for-no-services f"starting {service}") NO-CHANGE)
              (run-ok? "service" service "status" :timeout 120)))
  (:apply
    (if (no-services?)
        (skip-for-no-services f"starting {service}")
        (_service service "start"))))

(defprop restarted :posix [#^ service-name service]
  "Restart SERVICE with service(8); always a change (use it after `on-change`)."
  (:action "restarting is an event, not a state a service is in")
  (:desc f"Service {service} restarted")
  (:apply
    (if (no-services?)
        (skip-for-no-services f"restarting {service}")
        (_service service "restart"))))

(defprop reloaded :posix [#^ service-name service]
  "Reload SERVICE's configuration with service(8); always a change."
  (:action "reloading is an event, not a state a service is in")
  (:desc f"Service {service} reloaded")
  (:apply
    (if (no-services?)
        (skip-for-no-services f"reloading {service}")
        (_service service "reload"))))

(defn reload-if-running [service]
  "Make SERVICE reread its configuration if it is running, through systemd
where it runs, else through invoke-rc.d; nothing where services are not to
be touched (see `no-services?`), or when SERVICE is not running."
  (if (no-services?)
      (skip-for-no-services f"reloading {service}")
      (run-script (+ "if [ -d /run/systemd/system ]; then "
                     "exec systemctl try-reload-or-restart -- \"$1.service\"; fi\n"
                     "if service \"$1\" status >/dev/null 2>&1; then exec invoke-rc.d \"$1\" reload; fi")
                  service :timeout 300)))

(defn tested-or-undone [test undo what]
  "Run TEST, an argv that tests a configuration (`nginx -t`), after a
change to it; when the test fails, call UNDO (unless None), which puts the
configuration back as it was, and fail with what the test said about WHAT."
  (setv r (run #* test :check False :timeout 120))
  (when (not r.ok?)
    (when undo (undo))
    (raise (FailedChange (+ f"{what} fails `{(.join " " test)}`"
                            (if undo "; put back as it was" "; nothing reloaded")
                            ":\n" (.strip (+ r.stdout r.stderr)))))))

(export :objects [POLICY-RC-D no-services? no-services-where container-kind kernel-left-alone-where skip-for-no-services services-prevented
                  reload-if-running tested-or-undone
                  without-starting-services no-services running restarted
                  reloaded])
