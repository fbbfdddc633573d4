"GRUB's settings in /etc/default/grub: the kernel's command line."

(eval-when-compile (require consfig.model.property [defprop]))
(import consfig.model.watchspec [watch-path])
(import re
        shlex
        consfig.apply.actions [NO-CHANGE run run-ok?]
        consfig.apply.engine [WOULD-CHANGE inform]
        consfig.errors [FailedChange]
        consfig.props.file [map-file-lines read-text]
        consfig.types *)

(setv DEFAULTS "/etc/default/grub")

(setv kernel-option (matching "kernel-option"
                              "a kernel command-line option such as quiet or console=ttyS0,115200 (no whitespace or quote, not starting with -)"
                              r"[A-Za-z0-9_][A-Za-z0-9_.,:/=+@-]*"))

(defn _variable [all-kernels]
  (if all-kernels "GRUB_CMDLINE_LINUX" "GRUB_CMDLINE_LINUX_DEFAULT"))

(defn _key [option] (get (.split option "=" 1) 0))

(defn with-options [words options]
  "WORDS, a kernel command line, with OPTIONS: an option with a value
(`key=value`) replaces the words that set the same key."
  (setv keys (set (gfor o options (_key o)))
        kept (lfor w words :if (not (and (in "=" w) (in (_key w) keys) (not-in w options))) w))
  (+ kept (lfor o (dict.fromkeys options) :if (not-in o kept) o)))

(defn _words [variable raw]
  ;; The words of a shell value.  One that expands anything is not ours to
  ;; rewrite: quoted back, it would no longer expand.
  (setv words (try (shlex.split raw :comments True) (except [ValueError] None)))
  (when (or (is words None) (re.search r"[$`\\]" raw))
    (raise (FailedChange f"{DEFAULTS}: the value of {variable} ({raw}) is not plain words; edit it by hand")))
  (.split (.join " " words)))

(defn _edit [lines variable f [append True]]
  ;; The value of the first VARIABLE= line goes through F; a missing line is
  ;; appended, when APPEND.
  (setv line-re (re.compile (+ r"^\s*" variable r"=(.*)$"))
        out []
        done False)
  (for [l lines]
    (setv m (and (not done) (.match line-re l)))
    (if m
        (do (setv done True
                  words (_words variable (.group m 1))
                  new (f words))
            (.append out (if (= new words) l f"{variable}={(shlex.quote (.join " " new))}")))
        (.append out l)))
  (if (or done (not append))
      out
      (+ out [f"{variable}={(shlex.quote (.join " " (f [])))}"])))

(defn _update-grub [result]
  (cond (or (= result NO-CHANGE) (= result WOULD-CHANGE)) result
        (run-ok? "test" "-x" "/usr/sbin/update-grub")
        (do (run "/usr/sbin/update-grub" :timeout 600) None)
        True (do (inform f"{DEFAULTS} changed; update-grub is not installed to act on it") None)))

(defprop has-kernel-options :posix [#^ kernel-option #* options #^ boolean [all-kernels False]]
  "The kernel's command line, as GRUB boots it, has OPTIONS: they are added
to GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub (GRUB_CMDLINE_LINUX, which
the recovery entries get too, with ALL-KERNELS), an option `key=value`
replacing one that sets the same key, and `update-grub` runs when it
changed.  They take effect at the next boot.  Unapplying takes OPTIONS off.

  (grub.has-kernel-options \"console=ttyS0,115200\" \"console=tty0\")"
  (:watch [(watch-path DEFAULTS)])
  (:simulates True)
  (:invariant options "needs at least one option")
  (:desc f"kernel command line has {(.join " " options)}")
  (:apply
    (when (is (read-text DEFAULTS) None)
      (raise (FailedChange f"{DEFAULTS} does not exist: is GRUB installed (apt.installed \"grub-pc\" or \"grub-efi\")?")))
    (_update-grub (map-file-lines DEFAULTS (fn [ls] (_edit ls (_variable all-kernels)
                                                           (fn [ws] (with-options ws options)))))))
  (:unapply
    (_update-grub (map-file-lines DEFAULTS (fn [ls] (_edit ls (_variable all-kernels)
                                                           (fn [ws] (lfor w ws :if (not-in w options) w))
                                                           :append False))))))

(export :objects [DEFAULTS with-options has-kernel-options])
