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

(eval-when-compile (require consfig.model.property [defprop]
                           consfig.model.propspec [defpropspec]))
(import consfig.model.watchspec [watch-path watch-unit watch-poll])
(import posixpath
        consfig.apply.combinators [eseqprops unapplied with-unapply]
        consfig.apply.actions [NO-CHANGE Script run run-ok? make-remote-directory output remote-exists?
                               write-remote-file]
        consfig.apply.engine [Drift WOULD-CHANGE checking? inform]
        consfig.errors [AbortedChange FailedChange]
        consfig.props.file [conf-pairs pairs-problem read-bytes content->bytes update-file]
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

(defn in-chroot? []
  "Whether the target runs in a chroot: its / is no mount point of its
own (a directory of another tree), or no /proc is mounted.  (systemd asks
whether / is PID 1's, which a container may forbid even root to see.)"
  (run-ok? (Script "[ -r /proc/self/mountinfo ] || exit 0
awk '$5 == \"/\" { found = 1 } END { exit found }' /proc/self/mountinfo")))

(defn _runtime-action [user-instance what #* args]
  ;; Starting, stopping and reloading: only where a manager runs and
  ;; services may be touched.
  (cond (no-services?) (skip-for-no-services what)
        (manager-running? user-instance) (do (systemctl user-instance #* args) None)
        ;; A chroot entered without consfig's :chroot hop (an image's run
        ;; inside the tree it will boot): nothing is started there either.
        (and (not user-instance) (in-chroot?))
        (do (inform f"not {what}: this is a chroot (its / is not a mount point of its own)")
            NO-CHANGE)
        ;; A live host whose PID 1 is not systemd: the unit cannot be
        ;; started, and an `ok` would hide that (a pull timer that never runs).
        True
        (raise (AbortedChange
                 (+ f"not {what}: no systemd service manager runs here"
                    (if user-instance " for this user" " (/run/systemd/system is absent)")
                    "; on a tree built to boot later, apply it under "
                    "service.without-starting-services, or schedule with :via :cron")))))

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
  (:action "rereading the unit files is an event, not a state systemd is in")
  (:desc "systemd configuration reloaded")
  (:apply (_runtime-action user-instance "reloading systemd" "daemon-reload")))

(defprop started :posix [#^ unit-name service * #^ boolean [user-instance False]]
  "The unit SERVICE is active.  Under `service.without-starting-services`
(a chroot, a tree built to boot later) nothing is started, and that is said;
elsewhere, a host where no systemd service manager runs fails it."
  (:watch (_unit-watches service user-instance))
  (:desc f"systemd service {service} started")
  ;; Where services are not started, nothing would be done: it holds, as
  ;; its :apply says, so that such a tree checks clean.
  (:check (if (no-services?)
              (= (skip-for-no-services f"starting {service}") NO-CHANGE)
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
  (:action "restarting is an event, not a state a unit is in")
  (:desc f"systemd service {service} restarted")
  (:apply (_runtime-action user-instance f"restarting {service}" "restart" "--" service)))

(defprop reloaded :posix [#^ unit-name service * #^ boolean [user-instance False]]
  "Make the unit SERVICE reload its configuration; always a change."
  (:action "reloading is an event, not a state a unit is in")
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
  ;; Where no manager runs, the next one to start reads the files as they
  ;; are: nothing is lost, so that is said, not failed.
  (cond (no-services?) (skip-for-no-services "reloading systemd")
        (manager-running?) (do (systemctl False "daemon-reload") None)
        True (do (inform (+ "not reloading systemd: no systemd service manager runs here "
                            "(/run/systemd/system is absent); one started later reads the file"))
                 NO-CHANGE)))

(defn _reload-pending? [unit]
  ;; Whether the running manager has not reread UNIT's files since they
  ;; changed on disk: a reload that failed, or that never ran, is tried
  ;; again by the next run.  A template has no state of its own.
  (and (not (in "@." unit))
       (not (no-services?))
       (manager-running?)
       (= (.strip (. (systemctl False "show" "--property=NeedDaemonReload" "--value" "--" unit
                                :check False)
                     stdout))
          "yes")))

(defn _pending-reload [unit]
  ;; NO-CHANGE, or the reload that was missed (WOULD-CHANGE in check mode).
  (cond (not (_reload-pending? unit)) NO-CHANGE
        (checking?) (do (inform f"systemd would reread {unit}, changed since it last did")
                        WOULD-CHANGE)
        True (_reload-manager)))

(defn _write-verified [path unit relative text]
  ;; NO-CHANGE, WOULD-CHANGE (check mode: a diff, nothing verified, nothing
  ;; written) or None once the verified text is in place and the manager
  ;; has reread it.  Only a new text is verified; the manager rereads a new
  ;; text, and one it has not reread yet.
  (setv new (content->bytes text))
  (when (or (= (read-bytes path) new) (checking?))
    (setv r (update-file path new :mode 0o644 :owner "root" :group "root"))
    (return (if (= r NO-CHANGE) (_pending-reload unit) r)))
  (verify-unit-text unit relative text)
  (make-remote-directory (posixpath.dirname path) :timeout 60)
  (update-file path new :mode 0o644 :owner "root" :group "root")
  (_reload-manager)
  None)

(defn _remove-unit-file [unit path [directory None]]
  (cond (not (remote-exists? path)) (_pending-reload unit)
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
    (_remove-unit-file name (unit-path name))))

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
            (_remove-unit-file unit path (posixpath.dirname path))))

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
  (:watch [(watch-path (posixpath.join LINGER-DIRECTORY user))])
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

(defn _default-target []
  (.strip (. (systemctl False "get-default" :check False) stdout)))

(defprop default-target :posix [#^ unit-name target]
  "The system boots into TARGET (\"multi-user.target\" for a server,
\"graphical.target\" for a desktop): `systemctl set-default`.  Works without
a running systemd."
  (:watch [(watch-path (unit-path "default.target"))])
  (:desc f"systemd boots into {target}")
  (:invariant (.endswith target ".target") "a default target is a .target unit")
  (:check (setv have (_default-target))
          (or (= have target) (Drift f"default target {have} → {target}")))
  (:apply (systemctl False "set-default" "--" target)))

(defprop enabled-for-all-users :posix [#^ unit-name unit]
  "The user unit UNIT is enabled for every user (`systemctl --global
enable`): each user's own manager starts it.  Works without a running
systemd.  Unapplying disables it globally."
  (:watch [(watch-path "/etc/systemd/user")])
  (:desc f"user unit {unit} enabled for all users")
  (:check (or (run-ok? "systemctl" "--global" "is-enabled" "--quiet" "--" unit)
              (Drift f"user unit {unit} would be enabled for all users")))
  (:apply (run "systemctl" "--global" "enable" "--" unit :timeout 300))
  (:unapply (if (run-ok? "systemctl" "--global" "is-enabled" "--quiet" "--" unit)
                (run "systemctl" "--global" "disable" "--" unit :timeout 300)
                NO-CHANGE)))

(setv component (matching "systemd-component"
                          (+ "a systemd component with a configuration file in /etc/systemd: system, "
                             "user, journald, logind, timesyncd, resolved, networkd, coredump, sleep, "
                             "pstore, oomd, homed, journal-upload or journal-remote")
                          (+ r"system|user|journald|logind|timesyncd|resolved|networkd|coredump"
                             r"|sleep|pstore|oomd|homed|journal-upload|journal-remote"))
      section-name (matching "section-name" "a section name such as Journal (letters, digits and -)"
                             r"[A-Za-z][A-Za-z0-9-]*")
      setting-key (matching "setting-key" "a setting such as SystemMaxUse (letters, digits and _)"
                            r"[A-Za-z][A-Za-z0-9_]*")
      setting (named "setting" (one-of line integer (dict-of setting-key (one-of line integer)))
                     "a setting's key or value (one line, or an integer), or a dict of them"))

(defn conf-path [component name]
  "Where the drop-in NAME of COMPONENT's configuration goes:
/etc/systemd/COMPONENT.conf.d/NAME.conf."
  (posixpath.join "/etc/systemd" (+ component ".conf.d") (+ name ".conf")))

(defn _settings [pairs]
  (lfor [[_ k] v] (.items (conf-pairs pairs)) [k v]))

(defn _settings-problem [pairs]
  (if pairs
      (pairs-problem pairs setting-key)
      "needs settings: alternating keys and values, or one dict"))

(defprop configured :posix [#^ component component #^ section-name section #^ setting #* pairs
                            #^ drop-in-name [name "consfig"]]
  "COMPONENT (journald, logind, timesyncd, resolved, …) has the settings
PAIRS (alternating keys and values, or one dict) in SECTION, in the drop-in
/etc/systemd/COMPONENT.conf.d/NAME.conf, which holds nothing else: the
packaged COMPONENT.conf stays as it is.  The component reads it when it next
starts; restart it with `on-change` for it to take effect now.  Unapplying
removes the drop-in.

  (systemd.configured \"logind\" \"Login\" \"HandleLidSwitch\" \"ignore\")"
  (:watch [(watch-path (conf-path component name))])
  (:simulates True)
  (:invariant (not (_settings-problem pairs)) (_settings-problem pairs))
  (:desc (+ f"systemd {component} has "
            (.join ", " (gfor [k v] (_settings pairs) f"{k}={v}"))))
  (:apply
    (setv path (conf-path component name))
    (when (not (checking?))
      (run "mkdir" "-p" "--" (posixpath.dirname path) :timeout 60))
    (update-file path (+ "# Written by consfig.\n" f"[{section}]\n"
                         (.join "" (gfor [k v] (_settings pairs) f"{k}={v}\n")))
                 :mode 0o644))
  (:unapply
    (setv path (conf-path component name))
    (if (remote-exists? path)
        (if (checking?) WOULD-CHANGE (run "rm" "-f" "--" path :timeout 60))
        NO-CHANGE)))

(defn exec-line [argv]
  "ARGV as the value of an ExecStart= line: each word in double quotes,
with what systemd would otherwise expand (`%` specifiers, `$` variables,
backslashes and quotes) escaped, so that the program gets ARGV as it is."
  (.join " " (gfor a argv
                   (+ "\""
                      (.translate a {(ord "\\") "\\\\" (ord "\"") "\\\"" (ord "%") "%%" (ord "$") "$$"})
                      "\""))))

(defn timer-texts [name calendar argv user]
  "The service and timer units that run ARGV (as USER, or root) at CALENDAR."
  #((+ f"[Unit]\nDescription={name} (consfig)\n\n[Service]\nType=oneshot\n"
       (if user f"User={user}\n" "")
       f"ExecStart={(exec-line argv)}\n")
    (+ f"[Unit]\nDescription={name} (consfig)\n\n[Timer]\nOnCalendar={calendar}\nPersistent=true\n\n"
       "[Install]\nWantedBy=timers.target\n")))

(setv calendar-event (matching "calendar-event"
                               "a systemd calendar event (one line) such as daily or Mon *-*-* 03:00"
                               r"[A-Za-z0-9 *:,./~+-]+"))

(defpropspec runs-on-calendar :posix [#^ drop-in-name name #^ calendar-event calendar
                                      #^ abs-path program #^ line #* args
                                      #^ (optional user-name) [user None]]
  "PROGRAM runs with ARGS (as USER, or as root) at the times CALENDAR
describes (systemd.time(7): `daily`, `Mon..Fri 02:30`, `*:0/15`), from the
units NAME.service and NAME.timer, which this writes, verifies and enables;
a run missed while the machine was off happens when it next boots.  The
systemd answer to a cron job.  Unapplying disables and removes both units.

  (systemd.runs-on-calendar \"backup\" \"*-*-* 03:00\" \"/usr/local/bin/backup\" \"--all\")"
  (:desc f"{name} runs at {calendar}")
  (setv #(service timer) (timer-texts name calendar [program #* args] user))
  (with-unapply
    (unit-file f"{name}.service" service)
    (unit-file f"{name}.timer" timer)
    (enabled f"{name}.timer")
    (started f"{name}.timer")
    :unapply
    (eseqprops (unapplied (unit-file f"{name}.timer" timer))
               (unapplied (unit-file f"{name}.service" service)))))

(export :objects [systemctl manager-running? in-chroot? unit-file-state daemon-reloaded
                  started stopped restarted reloaded enabled disabled masked
                  unit-file drop-in lingering-enabled verify-unit-text unit-path
                  drop-in-path default-target enabled-for-all-users configured conf-path
                  exec-line timer-texts runs-on-calendar])
