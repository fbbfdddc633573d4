"systemd units, through systemctl(1).

Enabling, disabling and masking are changes to unit files and links, which
systemctl makes itself when no systemd runs (in a chroot, in an image being
built), so those properties work there too.  Starting, stopping and
reloading need a running service manager: where there is none, or where
services are not to be started (`service.without-starting-services`), they
say so and do nothing.

With `:user-instance True` a property acts on the user's own service manager
(`systemctl --user`) of the user the connection runs as."

(eval-when-compile (require consfig.property [defprop]))
(import consfig.actions [NO-CHANGE Script run run-ok?]
        consfig.engine [Drift inform]
        consfig.props.service [no-services? skip-for-no-services]
        consfig.types *)

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
  (:desc f"systemd service {service} started")
  (:check (and (not (no-services?))
               (let [state (_active-state service user-instance)]
                 (or (= state "active") (Drift f"{service}: {state} → active")))))
  (:apply (_runtime-action user-instance f"starting {service}" "start" "--" service)))

(defprop stopped :posix [#^ unit-name service * #^ boolean [user-instance False]]
  "The unit SERVICE is not active."
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
  (:desc f"systemd service {service} enabled")
  (:check (or (run-ok? (_systemctl user-instance ["is-enabled" "--quiet" "--" service]))
              (Drift f"{service}: {(unit-file-state service user-instance)} → enabled")))
  (:apply (systemctl user-instance "enable" "--" service))
  (:unapply (systemctl user-instance "disable" "--" service)))

(defprop disabled :posix [#^ unit-name service * #^ boolean [user-instance False]]
  "The unit SERVICE is not enabled (a masked, static or missing unit counts
as disabled).  Works without a running systemd.  Unapplying enables it."
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
  (:desc f"systemd service {service} masked")
  (:check (setv state (unit-file-state service user-instance))
          (or (.startswith state "masked") (Drift f"{service}: {state} → masked")))
  (:apply (systemctl user-instance "mask" "--" service))
  (:unapply (systemctl user-instance "unmask" "--" service)))

(export :objects [systemctl manager-running? unit-file-state daemon-reloaded
                  started stopped restarted reloaded enabled disabled masked])
