"sudo's configuration, in drop-in files of /etc/sudoers.d.

A sudoers file with a mistake in it stops sudo altogether — and with it,
perhaps, the chain a deployment came in by — so a drop-in is checked with
`visudo -cf` before it is put in place, and the whole configuration with
`visudo -c` once it is: a drop-in that fails either is refused and the file
that was there before stays."

(eval-when-compile (require consfig.model.property [defprop]
                           consfig.model.propspec [defproplist]))
(import posixpath
        consfig.model.watchspec [watch-path])
(import consfig.apply.actions [output run run-ok? write-remote-file]
        consfig.apply.engine [checking? inform]
        consfig.errors [FailedChange]
        consfig.props.file [content->bytes read-bytes remove-files update-file]
        consfig.types *)

;; sudo skips the files of an includedir whose names contain a dot or end
;; in ~: a drop-in named so would be written and silently never read.
(setv drop-in-name (matching "drop-in-name"
                             (+ "a sudoers.d file name (letters, digits, _ and -, not starting with -: "
                                "sudo ignores names with a . or ending in ~)")
                             r"[A-Za-z0-9_][A-Za-z0-9_-]*"))

(setv DIRECTORY "/etc/sudoers.d")

(defn _visudo [#* args]
  (when (not (run-ok? "test" "-x" "/usr/sbin/visudo"))
    (raise (FailedChange "visudo is not installed: (apt.installed \"sudo\") first")))
  (run "/usr/sbin/visudo" #* args :check False :timeout 60))

(defn validate [text]
  "Check TEXT as a sudoers file with `visudo -cf` on a temporary copy in
/etc/sudoers.d (named with a dot, so that sudo never reads it); a failure
carrying visudo's complaint when it is not valid."
  (setv tmp (.strip (output "mktemp" f"{DIRECTORY}/.consfig-XXXXXXXX")))
  (try
    (write-remote-file tmp text :mode 0o440)
    (setv r (_visudo "-c" "-f" tmp))
    (when (not r.ok?)
      (raise (FailedChange (+ "the drop-in would be invalid; nothing was changed:\n"
                              (.replace (.strip (+ r.stdout r.stderr)) tmp "(the drop-in)")))))
    (finally (run "rm" "-f" "--" tmp))))

(defn _included? []
  (run-ok? "grep" "-Eq" r"^[#@]includedir[[:space:]]+/etc/sudoers\.d/?[[:space:]]*$"
           "/etc/sudoers"))

(defn _install [path text]
  ;; Put TEXT at PATH, then check the whole configuration: a drop-in valid
  ;; on its own may clash with the rest (an alias defined twice).  On a
  ;; clash the file that was there comes back.
  (setv old (read-bytes path))
  (update-file path text :mode 0o440 :owner "root" :group "root")
  (setv r (_visudo "-c"))
  (when (not r.ok?)
    (if (is old None)
        (run "rm" "-f" "--" path)
        (write-remote-file path old :mode 0o440 :owner "root" :group "root"))
    (raise (FailedChange (+ "with the drop-in, sudo's configuration would be invalid; "
                            f"{path} is as it was:\n" (.strip (+ r.stdout r.stderr)))))))

(defprop drop-in :posix [#^ drop-in-name name #^ text text]
  "/etc/sudoers.d/NAME holds TEXT (a final newline added if it lacks one),
mode 0440, owned by root.  TEXT is checked with `visudo -cf` before the file
is touched, and sudo's whole configuration with `visudo -c` after: when
either fails, the property fails with visudo's complaint and the file that
was there stays.  NAME may not contain a dot or end in ~, which sudo would
ignore.  Unapplying removes the file.

  (sudoers.drop-in \"deploy\" \"deploy ALL=(root) NOPASSWD: /usr/bin/systemctl restart app\\n\")"
  (:simulates True)
  (:desc f"sudoers drop-in {name}")
  (:watch [(watch-path (posixpath.join DIRECTORY name))])
  (:apply
    (setv path f"{DIRECTORY}/{name}"
          text (if (.endswith text "\n") text (+ text "\n"))
          old (read-bytes path))
    (cond (= old (content->bytes text)) (update-file path text :mode 0o440 :owner "root" :group "root")
          (checking?) (update-file path text :mode 0o440 :owner "root" :group "root")
          True (do (run "mkdir" "-p" "-m" "755" "--" DIRECTORY)
                   (validate text)
                   (_install path text)
                   (when (not (_included?))
                     (inform f"/etc/sudoers does not include {DIRECTORY}: sudo does not read {path}"))
                   None)))
  (:unapply (remove-files f"{DIRECTORY}/{name}")))

(setv sudo-command (matching "sudo-command"
                             "a program's absolute path (no whitespace, comma, colon, = or backslash)"
                             r"/[^\s,:=\\\x00]+"))

(defn _rule [user commands nopasswd]
  (+ user " ALL=(ALL:ALL) " (if nopasswd "NOPASSWD: " "")
     (if commands (.join ", " commands) "ALL") "\n"))

(defproplist user-can-sudo :posix [#^ user-name user #^ sudo-command #* commands
                                   #^ boolean [nopasswd False]]
  "USER may run COMMANDS (absolute paths of programs, each allowed with any
arguments), or any command when none is given, as any user, through sudo — without a
password when NOPASSWD — by the drop-in /etc/sudoers.d/user-USER, written
as `drop-in` writes one.  Unapplying removes the drop-in.

  (sudoers.user-can-sudo \"deploy\" \"/usr/bin/systemctl\" :nopasswd True)"
  (:invariant (not (.endswith user "$")) "a user name ending in $ cannot name a sudoers.d file")
  (:desc (+ f"{user} can sudo " (if commands (.join " " commands) "anything")
            (if nopasswd " without a password" "")))
  (drop-in f"user-{user}" (_rule user commands nopasswd)))

(export :objects [drop-in validate drop-in-name user-can-sudo])
