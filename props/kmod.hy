"Kernel modules: loaded at every boot (modules-load.d(5)), given options
and blacklisted (modprobe.d(5)).

Loading a module changes the running kernel, which is done only where it is
the system's own — not in a chroot, not where services are not started (see
`sysctl`), not in a container, whose kernel is the machine's — and where it
loads modules at all (a kernel built without them
has no /proc/modules).  Elsewhere the files are written and the property
says the running kernel was left alone.  A module the initramfs loads reads
its options from the copy of modprobe.d made when the initramfs was built:
run `update-initramfs -u` after changing those."

(eval-when-compile (require consfig.model.property [defprop]))
(import consfig.model.watchspec [watch-path])
(import consfig.apply.actions [NO-CHANGE remote-exists? run run-ok?]
        consfig.apply.engine [WOULD-CHANGE checking? inform]
        consfig.errors [FailedChange]
        consfig.props.file [add-lines combined-results conf-pairs describe-pairs pairs-problem
                            remove-files remove-lines update-file]
        consfig.props.service [kernel-left-alone-where no-services-where]
        consfig.types *)

(setv module-name (matching "module-name"
                            "a kernel module name (letters, digits, _ and -, not starting with -)"
                            r"[A-Za-z0-9_][A-Za-z0-9_-]*")
      option-name (matching "option-name" "a module parameter name (letters, digits and _)"
                            r"[A-Za-z0-9_]+")
      option-value (one-of integer (matching "option-value"
                                             "a parameter value (no whitespace or quotes)"
                                             r"[^\s\"'\x00]+")))

(setv LOAD-FILE "/etc/modules-load.d/consfig.conf"
      BLACKLIST-FILE "/etc/modprobe.d/consfig-blacklist.conf")

(defn _options-file [module] f"/etc/modprobe.d/consfig-{module}.conf")

(defn _sys-name [module]
  ;; The kernel knows snd-hda-intel as snd_hda_intel.
  (.replace module "-" "_"))

(defn _kernel-left-alone []
  ;; Why the running kernel is not to be touched, or None.
  (or (kernel-left-alone-where)
      (when (not (remote-exists? "/proc/modules")) "this kernel loads no modules")))

(defn loaded? [module]
  "Whether MODULE is in the running kernel: loaded, or built in."
  (or (remote-exists? f"/sys/module/{(_sys-name module)}")
      (. (run "sh" "-c" "command -v modprobe >/dev/null && modprobe -n -v -- \"$1\" 2>/dev/null"
              "sh" module :check False :timeout 60)
         stdout (startswith "builtin "))))

(defn _load [module]
  ;; A container runs on the machine's kernel: what is loaded there is
  ;; loaded for it.  A chroot's kernel is not the system's at all.
  (setv elsewhere (no-services-where))
  (cond (and (not elsewhere) (loaded? module)) NO-CHANGE
        (setx why (_kernel-left-alone))
        (do (inform f"{module} not loaded now: the running kernel is left alone ({why})")
            NO-CHANGE)
        (checking?) (do (inform f"{module} would be loaded") WOULD-CHANGE)
        (not (run-ok? "sh" "-c" "command -v modprobe" :timeout 60))
        (raise (FailedChange "modprobe is not installed: (apt.installed \"kmod\") first"))
        True (do (run "modprobe" "--" module :timeout 120) None)))

(defn _note-loaded [module what]
  (when (and (not (_kernel-left-alone)) (remote-exists? f"/sys/module/{(_sys-name module)}"))
    (inform f"{module} is loaded: {what}")))

(defn _ensure-dir [path]
  (when (not (checking?)) (run "mkdir" "-p" "--" path)))

(defprop loaded-at-boot :posix [#^ module-name module]
  "The kernel module MODULE is loaded at every boot (listed in
/etc/modules-load.d/consfig.conf) and, where the running kernel is the
system's own, loaded now (with modprobe, from the kmod package).
Unapplying takes it off the list; it stays loaded until the next boot."
  (:watch [(watch-path LOAD-FILE)])
  (:simulates True)
  (:desc f"kernel module {module} loaded at boot")
  (:apply
    (_ensure-dir "/etc/modules-load.d")
    (combined-results [(add-lines LOAD-FILE [module]) (_load module)]))
  (:unapply (remove-lines LOAD-FILE [module])))

(defn _options-problem [options]
  (or (pairs-problem options option-name)
      (for [[_ v] (.items (conf-pairs options))]
        (when (not (.accepts option-value v))
          (return (+ "each value " (.explain option-value v)))))))

(defprop has-options :posix [#^ module-name module
                             #^ (one-of option-value (dict-of option-name option-value)) #* options]
  "The kernel module MODULE is given OPTIONS (alternating parameter names
and values, or a dict) whenever it is loaded:
/etc/modprobe.d/consfig-MODULE.conf holds `options MODULE name=value…`.  A
module loaded already keeps the options it was loaded with until it is
loaded again.  Unapplying removes the file.

  (kmod.has-options \"zfs\" \"zfs_arc_max\" 4294967296)"
  (:watch [(watch-path (_options-file module))])
  (:simulates True)
  (:invariant options "needs at least one option")
  (:invariant (not (_options-problem options)) (_options-problem options))
  (:desc f"kernel module {module} has options {(describe-pairs options "=")}")
  (:apply
    (_ensure-dir "/etc/modprobe.d")
    (setv r (update-file (_options-file module)
                         (+ f"options {module} "
                            (.join " " (gfor [[_ k] v] (.items (conf-pairs options)) f"{k}={v}"))
                            "\n")
                         :mode 0o644))
    (when (is r None)
      (_note-loaded module "its new options take effect when it is next loaded"))
    r)
  (:unapply (remove-files (_options-file module))))

(defprop blacklisted :posix [#^ module-name module * #^ boolean [never-loaded False]]
  "The kernel module MODULE is not loaded for the devices it drives
(`blacklist MODULE` in /etc/modprobe.d/consfig-blacklist.conf), though it
may still be loaded by name or as another module's dependency; with
NEVER-LOADED, not even so (`install MODULE /bin/false` too).  A module
loaded already stays loaded until it is unloaded (`modprobe -r`) or the
system reboots.  Unapplying removes those lines."
  (:watch [(watch-path BLACKLIST-FILE)])
  (:simulates True)
  (:desc f"kernel module {module} blacklisted")
  (:apply
    (_ensure-dir "/etc/modprobe.d")
    (setv lines [f"blacklist {module}" #* (if never-loaded [f"install {module} /bin/false"] [])]
          r (combined-results [(add-lines BLACKLIST-FILE lines)
                        (if never-loaded
                            NO-CHANGE
                            (remove-lines BLACKLIST-FILE [f"install {module} /bin/false"]))]))
    (when (is r None)
      (_note-loaded module "it stays loaded until it is unloaded (modprobe -r) or the system reboots"))
    r)
  (:unapply (remove-lines BLACKLIST-FILE [f"blacklist {module}" f"install {module} /bin/false"])))

(export :objects [loaded-at-boot has-options blacklisted loaded? module-name])
