"systemd units, through systemctl(1).

Enabling, disabling and masking are changes to unit files and links, which
systemctl makes itself when no systemd runs (in a chroot, in an image being
built), so those properties work there too.  Starting, stopping and
reloading need a running service manager: where there is none, or where
services are not to be started (`service.without-starting-services`), they
say so and do nothing.

With `:user-instance True` a property acts on the user's own service manager
(`systemctl --user`) of the user the connection runs as.

Unit files and drop-ins written here are checked with `systemd-analyze
verify` before they replace what was there, and the manager rereads its
configuration afterwards, where one runs.  Lingering is recorded in
/var/lib/systemd/linger, through loginctl where a manager runs."

(eval-when-compile (require consfig.property [defprop]))
(import consfig.watchspec [watch-path watch-unit watch-poll])
(import posixpath
        consfig.actions [NO-CHANGE Script run run-ok? run-walked output remote-exists?
                         write-remote-file]
        consfig.engine [Drift WOULD-CHANGE checking? inform]
        consfig.errors [FailedChange]
        consfig.props.file [read-bytes content->bytes update-file]
        consfig.props.service [no-services? skip-for-no-services]
        consfig.props.user [passwd-entry]
        consfig.types *)

(defn _unit-watches [service user-instance * [enablement False]]
  ;; A user's manager is on that user's bus, which the agent does not
  ;; watch: polled.  Enabling adds links below /etc/systemd/system, some in
  ;; its *.wants directories: the directory, and a slow poll for the rest.
  (setv unit (if (in "." service) service f"{service}.service"))
  (cond user-instance [(watch-poll 60)]
        enablement [(watch-unit unit) (watch-path "/etc/systemd/system") (watch-poll 300)]
        True [(watch-unit unit)]))

(setv unit-name (matching "unit-name"
                          "a systemd unit name (letters, digits, _ . @ : \\ and -, not starting with -)"
                          r"[A-Za-z0-9_\\][A-Za-z0-9_.@:\\-]*"))

(setv _USER-RUNTIME "XDG_RUNTIME_DIR=\"${XDG_RUNTIME_DIR:-/run/user/$(id -u)}\"")

(defn _systemctl [user-instance args]
  ;; The user's instance is found through XDG_RUNTIME_DIR, which a
  ;; non-login shell may not have.
  (if user-instance
      (Script (+ _USER-RUNTIME " exec systemctl --user \"$@\"") #* args)
      ["systemctl" #* args]))

(defn systemctl [user-instance #* args [check True]]
  "Run systemctl with ARGS, for the user's instance when USER-INSTANCE."
  (run (_systemctl user-instance args) :check check :timeout 300))

(defn manager-running? [[user-instance False]]
  "Whether a systemd service manager runs for the target (the user's own
one when USER-INSTANCE), as sd_booted(3) tells."
  (if user-instance
      (run-ok? (Script (+ _USER-RUNTIME "; test -S \"$XDG_RUNTIME_DIR/systemd/private\"")))
      (run-ok? "test" "-d" "/run/systemd/system")))

(defn _runtime-action [user-instance what #* args]
  ;; Starting, stopping and reloading: only where a manager runs and
  ;; services may be touched.
  (cond (no-services?) (skip-for-no-services what)
        (not (manager-running? user-instance))
        (do (inform f"not {what}: no systemd service manager is running here")
            NO-CHANGE)
        True (do (systemctl user-instance #* args) None)))

(defn unit-file-state [unit [user-instance False]]
  "What `systemctl is-enabled` says of UNIT: \"enabled\", \"disabled\",
\"static\", \"masked\", … and \"not-found\" when there is no such unit."
  (setv r (systemctl user-instance "is-enabled" "--" unit :check False)
        state (.strip r.stdout))
  (or (get (+ (.splitlines state) [""]) 0)
      ;; Older systemctl prints nothing on stdout for a missing unit.
      (if (in "No such file" r.stderr) "not-found" "")))

(defn _active-state [unit user-instance]
  ;; What `systemctl is-active` says: "active", "inactive", "failed", …
  (.strip (. (systemctl user-instance "is-active" "--" unit :check False) stdout)))

(setv _NOT-ENABLED #("disabled" "static" "generated" "transient" "indirect"
                     "not-found" "bad"))

(defprop daemon-reloaded :posix [* #^ boolean [user-instance False]]
  "The service manager has reread its unit files (always attempted, where
one runs)."
  (:desc "systemd configuration reloaded")
  (:apply (_runtime-action user-instance "reloading systemd" "daemon-reload")))

(defprop started :posix [#^ unit-name service * #^ boolean [user-instance False]]
  "The unit SERVICE is active."
  (:watch (_unit-watches service user-instance))
  (:desc f"systemd service {service} started")
  (:check (and (not (no-services?))
               (let [state (_active-state service user-instance)]
                 (or (= state "active") (Drift f"{service}: {state} → active")))))
  (:apply (_runtime-action user-instance f"starting {service}" "start" "--" service)))

(defprop stopped :posix [#^ unit-name service * #^ boolean [user-instance False]]
  "The unit SERVICE is not active."
  (:watch (_unit-watches service user-instance))
  (:desc f"systemd service {service} stopped")
  (:check (or (not (manager-running? user-instance))
              (!= (_active-state service user-instance) "active")
              (Drift f"{service}: active → inactive")))
  (:apply (_runtime-action user-instance f"stopping {service}" "stop" "--" service)))

(defprop restarted :posix [#^ unit-name service * #^ boolean [user-instance False]]
  "Restart the unit SERVICE; always a change (use it after `on-change`)."
  (:desc f"systemd service {service} restarted")
  (:apply (_runtime-action user-instance f"restarting {service}" "restart" "--" service)))

(defprop reloaded :posix [#^ unit-name service * #^ boolean [user-instance False]]
  "Make the unit SERVICE reload its configuration; always a change."
  (:desc f"systemd service {service} reloaded")
  (:apply (_runtime-action user-instance f"reloading {service}" "reload" "--" service)))

(defprop enabled :posix [#^ unit-name service * #^ boolean [user-instance False]]
  "The unit SERVICE is enabled: it starts at boot (or when the user's
manager starts).  Works without a running systemd.  Unapplying disables it."
  (:watch (_unit-watches service user-instance :enablement True))
  (:desc f"systemd service {service} enabled")
  (:check (or (run-ok? (_systemctl user-instance ["is-enabled" "--quiet" "--" service]))
              (Drift f"{service}: {(unit-file-state service user-instance)} → enabled")))
  (:apply (systemctl user-instance "enable" "--" service))
  (:unapply (systemctl user-instance "disable" "--" service)))

(defprop disabled :posix [#^ unit-name service * #^ boolean [user-instance False]]
  "The unit SERVICE is not enabled (a masked, static or missing unit counts
as disabled).  Works without a running systemd.  Unapplying enables it."
  (:watch (_unit-watches service user-instance :enablement True))
  (:desc f"systemd service {service} disabled")
  (:check (setv state (unit-file-state service user-instance))
          (or (in state _NOT-ENABLED)
              (.startswith state "linked")
              (.startswith state "masked")
              (Drift f"{service}: {state} → disabled")))
  (:apply (systemctl user-instance "disable" "--" service))
  (:unapply (systemctl user-instance "enable" "--" service)))

(defprop masked :posix [#^ unit-name service * #^ boolean [user-instance False]]
  "The unit SERVICE is masked: linked to /dev/null, so that nothing can
start it.  Works without a running systemd.  Unapplying unmasks it."
  (:watch (_unit-watches service user-instance :enablement True))
  (:desc f"systemd service {service} masked")
  (:check (setv state (unit-file-state service user-instance))
          (or (.startswith state "masked") (Drift f"{service}: {state} → masked")))
  (:apply (systemctl user-instance "mask" "--" service))
  (:unapply (systemctl user-instance "unmask" "--" service)))

(setv unit-file-name (matching "unit-file-name"
                               (+ "a unit file name: a unit name with its type "
                                  "(\"foo.service\", \"foo@.service\", \"backup.timer\")")
                               (+ r"[A-Za-z0-9_\\][A-Za-z0-9_.@:\\-]*"
                                  r"\.(service|socket|device|mount|automount|swap|target"
                                  r"|path|timer|slice|scope)"))
      drop-in-name (matching "drop-in-name"
                             "a drop-in name (letters, digits, _ . @ and -, not starting with . or -)"
                             r"[A-Za-z0-9_][A-Za-z0-9_.@-]*"))

(setv UNIT-DIRECTORY "/etc/systemd/system")

(defn unit-path [name]
  "Where the unit file NAME of the system's manager is written."
  (posixpath.join UNIT-DIRECTORY name))

(defn drop-in-path [unit name]
  "Where the drop-in NAME (\".conf\" added unless it is there) of UNIT is written."
  (posixpath.join UNIT-DIRECTORY (+ unit ".d")
                  (if (.endswith name ".conf") name (+ name ".conf"))))

;; In a directory of its own, which systemd-analyze puts first in the search
;; path: the new text is verified with whatever else the unit has (its other
;; drop-ins, its unit file), and a file of the same name there hides the one
;; it would replace.
(setv _VERIFY "
command -v systemd-analyze >/dev/null 2>&1 || { echo 'systemd-analyze is not installed (package systemd)' >&2; exit 69; }
dir=$1; shift
SYSTEMD_UNIT_PATH=\"$dir:\" exec systemd-analyze verify --man=no -- \"$@\" 2>&1
")

(defn verify-unit-text [unit relative text]
  "Check with `systemd-analyze verify` that UNIT loads cleanly with TEXT as
its file RELATIVE to /etc/systemd/system (the unit file itself, or one of its
drop-ins); a failure carrying systemd's complaints when it does not.  A
warning about TEXT itself (an unknown key, a value it cannot parse) is a
failure too: systemd would ignore that setting."
  (setv tmp (.strip (output "mktemp" "-d" "-t" "consfig-unit.XXXXXXXX" :timeout 60))
        staged (posixpath.join tmp relative)
        shown (unit-path relative))
  (try
    (when (in "/" relative)
      (run "mkdir" "--" (posixpath.dirname staged) :timeout 60))
    (write-remote-file staged (content->bytes text) :mode 0o644)
    (setv r (run (Script _VERIFY tmp (if (in "/" relative) unit staged))
                 :check False :timeout 120)
          said (.strip (+ r.stdout r.stderr))
          about-it (lfor l (.splitlines said) :if (.startswith l (+ staged ":")) l))
    (when (= r.exit-code 69)
      (raise (FailedChange (+ f"cannot verify {shown}: systemd-analyze is not installed here; "
                              "install systemd first (apt.installed \"systemd\")"))))
    (when (or (not r.ok?) about-it)
      (raise (FailedChange (+ f"{shown} would be invalid; left unchanged:\n"
                              (.replace said staged shown)))))
    (finally (run "rm" "-rf" "--" tmp :timeout 60))))

(defn _reload-manager []
  (_runtime-action False "reloading systemd" "daemon-reload"))

(defn _write-verified [path unit relative text]
  ;; NO-CHANGE, WOULD-CHANGE (check mode: a diff, nothing verified, nothing
  ;; written) or None once the verified text is in place and the manager
  ;; has reread it.  Only a new text is verified, and reread.
  (setv new (content->bytes text))
  (when (or (= (read-bytes path) new) (checking?))
    (return (update-file path new :mode 0o644 :owner "root" :group "root")))
  (verify-unit-text unit relative text)
  (run-walked [path] "mkdir" "-p" "--" (posixpath.dirname path) :timeout 60)
  (update-file path new :mode 0o644 :owner "root" :group "root")
  (_reload-manager)
  None)

(defn _remove-unit-file [path [directory None]]
  (cond (not (remote-exists? path)) NO-CHANGE
        (checking?) (do (inform f"{path} would be removed") WOULD-CHANGE)
        True (do (run "rm" "-f" "--" path :timeout 60)
                 (when directory
                   (run "rmdir" "--ignore-fail-on-non-empty" "--" directory :timeout 60))
                 (_reload-manager)
                 None)))

(defprop unit-file :posix [#^ unit-file-name name #^ text text]
  "/etc/systemd/system/NAME holds TEXT, a unit file (mode 0644, owned by
root).  The new text is verified with `systemd-analyze verify` before it
replaces the old: a unit that would not load, a command that is not
there, or a warning about the text itself (an unknown key, a value systemd
cannot parse; name a key `X-…` for systemd to ignore it) fails the
property and leaves the old file as it was.  So install what the unit runs
before it.  The service manager rereads its configuration when the file
changed, where one runs.  Check mode shows the diff.  Unapplying disables
the unit if it is enabled and removes the file."
  (:simulates True)
  (:watch [(watch-path (unit-path name))])
  (:desc f"systemd unit {name} written")
  (:apply (_write-verified (unit-path name) name name text))
  (:unapply
    (when (and (remote-exists? (unit-path name)) (not (checking?))
               (= (unit-file-state name) "enabled"))
      (systemctl False "disable" "--" name))
    (_remove-unit-file (unit-path name))))

(defprop drop-in :posix [#^ unit-file-name unit #^ drop-in-name name #^ text text]
  "/etc/systemd/system/UNIT.d/NAME.conf holds TEXT, a drop-in that changes
some settings of UNIT (mode 0644, owned by root).  UNIT with the new drop-in
is verified with `systemd-analyze verify` first, as for `unit-file`: UNIT
must be there already, and a drop-in that would make it fail to load, or
that systemd would partly ignore, fails the property and changes nothing.
The service manager rereads its configuration when the drop-in changed,
where one runs.  Check mode shows the diff.  Unapplying removes the
drop-in (and UNIT.d, once empty)."
  (:simulates True)
  (:watch [(watch-path (drop-in-path unit name))])
  (:desc f"systemd drop-in {name} for {unit} written")
  (:apply (setv path (drop-in-path unit name))
          (_write-verified path unit (posixpath.relpath path UNIT-DIRECTORY) text))
  (:unapply (setv path (drop-in-path unit name))
            (_remove-unit-file path (posixpath.dirname path))))

(setv LINGER-DIRECTORY "/var/lib/systemd/linger")

(defn _lingers? [user]
  (remote-exists? (posixpath.join LINGER-DIRECTORY user)))

(defn _with-loginctl? []
  ;; loginctl starts or stops the user's manager: only where a manager runs
  ;; and services may be touched.  Elsewhere the file logind reads at boot
  ;; is written or removed directly.
  (and (not (no-services?)) (manager-running?)))

(defprop lingering-enabled :posix [#^ user-name user]
  "USER's own service manager runs from boot to shutdown, whether or not
USER is logged in, so that USER's units (`:user-instance True`) run
unattended.  Where a systemd manager runs, through `loginctl
enable-linger`, which starts it at once; elsewhere (a chroot, an image) by
the file /var/lib/systemd/linger/USER that logind reads when it starts.
USER must exist.  Unapplying disables lingering."
  (:desc f"{user} lingers")
  (:check (or (_lingers? user) (Drift f"{user} would linger")))
  (:apply
    (when (not (passwd-entry user))
      (raise (FailedChange f"there is no user {user}; create the account first (user.has-account)")))
    (if (_with-loginctl?)
        (run "loginctl" "enable-linger" "--" user :timeout 120)
        (do (run "mkdir" "-p" "--" LINGER-DIRECTORY :timeout 60)
            (write-remote-file (posixpath.join LINGER-DIRECTORY user) b"" :mode 0o644))))
  (:unapply
    (if (_with-loginctl?)
        (run "loginctl" "disable-linger" "--" user :timeout 120)
        (run "rm" "-f" "--" (posixpath.join LINGER-DIRECTORY user) :timeout 60))))

(export :objects [systemctl manager-running? unit-file-state daemon-reloaded
                  started stopped restarted reloaded enabled disabled masked
                  unit-file drop-in lingering-enabled verify-unit-text unit-path
                  drop-in-path])
