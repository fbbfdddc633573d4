"systemd-tmpfiles: files and directories made (and cleaned) at boot and on
demand, from drop-ins of /etc/tmpfiles.d."

(eval-when-compile (require consfig.model.property [defprop]))
(import consfig.model.watchspec [watch-path])
(import consfig.apply.actions [NO-CHANGE run run-ok?]
        consfig.apply.engine [checking? inform]
        consfig.errors [FailedChange]
        consfig.props.file [remove-files update-file]
        consfig.types *)

(setv DIRECTORY "/etc/tmpfiles.d")

(setv tmpfiles-name (matching "tmpfiles-name"
                              "a drop-in name (letters, digits, _ . @ and -, not starting with . or -)"
                              r"[A-Za-z0-9_][A-Za-z0-9_.@-]*")
      ;; Type, path, then the optional fields, as tmpfiles.d(5) has them.
      tmpfiles-line (matching "tmpfiles-line"
                              "a tmpfiles.d line: a type such as d, then an absolute path, then optional fields"
                              r"[A-Za-z][!+=~^-]*[ \t]+/[^\n\r\x00]*"))

(defn tmpfiles-path [name]
  "The drop-in NAME of /etc/tmpfiles.d."
  (+ DIRECTORY "/" name ".conf"))

(defn _created [path]
  (setv r (run "systemd-tmpfiles" "--create" path :check False :timeout 300))
  (when (or (not r.ok?) (.strip r.stderr))
    (raise (FailedChange (+ f"{path} is written, but systemd-tmpfiles --create complained "
                            f"(exit {r.exit-code}):\n" (.strip (+ r.stdout r.stderr)))))))

(defprop configured :posix [#^ tmpfiles-name name #^ tmpfiles-line #* lines]
  "/etc/tmpfiles.d/NAME.conf holds LINES (tmpfiles.d(5): `d /run/app 0755
app app -`), and what they describe is made now, with `systemd-tmpfiles
--create`, where systemd-tmpfiles is installed (it is made at every boot
anyway).  Lines systemd-tmpfiles complains of fail the property.  Unapplying
removes the drop-in (what it made stays).

  (tmpfiles.configured \"app\" \"d /run/app 0750 app app -\")"
  (:watch [(watch-path (tmpfiles-path name))])
  (:simulates True)
  (:invariant lines "needs at least one line")
  (:desc f"tmpfiles {name}")
  (:apply
    (setv path (tmpfiles-path name)
          text (+ "# Written by consfig.\n" (.join "" (gfor l lines (+ l "\n"))))
          result (update-file path text :mode 0o644))
    (cond (or (= result NO-CHANGE) (checking?)) result
          (not (run-ok? "test" "-x" "/usr/bin/systemd-tmpfiles"))
          (inform f"{path} is written; systemd-tmpfiles is not installed to act on it now")
          True (_created path)))
  (:unapply (remove-files (tmpfiles-path name))))

(export :objects [DIRECTORY tmpfiles-path configured])
