"logrotate: how log files are rotated, in drop-ins of /etc/logrotate.d."

(eval-when-compile
  (require consfig.model.property [defprop]
           consfig.model.propspec [defpropspec]))
(import posixpath
        consfig.model.watchspec [watch-path])
(import consfig.apply.actions [output run run-ok? write-remote-file]
        consfig.apply.engine [checking?]
        consfig.errors [FailedChange]
        consfig.props.file [content->bytes read-bytes remove-files update-file]
        consfig.types *)

(setv DIRECTORY "/etc/logrotate.d")

(setv logrotate-name (matching "logrotate-name"
                               "a drop-in name (letters, digits, _ and -, not starting with -: logrotate skips names with a dot)"
                               r"[A-Za-z0-9_][A-Za-z0-9_-]*")
      ;; A path or glob logrotate reads as one word: no whitespace, no quote,
      ;; no brace (which would open or close a block).
      log-path (matching "log-path" "an absolute path or glob with no whitespace, quote or brace"
                         r"/[^\s\"'{}\x00]*"))

(defn validate [text]
  "Check TEXT as a logrotate configuration with `logrotate --debug` on a
temporary file, which rotates nothing; a failure carrying logrotate's
complaint when it is not valid."
  (when (not (run-ok? "test" "-x" "/usr/sbin/logrotate"))
    (raise (FailedChange "logrotate is not installed: (apt.installed \"logrotate\") first")))
  (setv tmp (.strip (output "mktemp" "-d" "-t" "consfig-logrotate.XXXXXXXX" :timeout 60)))
  (try
    (write-remote-file (+ tmp "/conf") text :mode 0o644)
    (setv r (run "/usr/sbin/logrotate" "--debug" "--state" (+ tmp "/state") (+ tmp "/conf")
                 :check False :timeout 120)
          ;; What logrotate says of the text itself names it, with a line
          ;; number; a log that is not there yet is no mistake in the text.
          errors (lfor l (.splitlines (+ r.stdout r.stderr))
                       :if (and (.startswith l "error:") (in (+ tmp "/conf:") l)) l))
    (when errors
      (raise (FailedChange (+ "the configuration would be invalid; nothing was changed:\n"
                              (.replace (.join "\n" errors) (+ tmp "/conf") "(the drop-in)")))))
    (finally (run "rm" "-rf" "--" tmp :timeout 60))))

(defprop configured :posix [#^ logrotate-name name #^ text text]
  "/etc/logrotate.d/NAME holds TEXT, a logrotate.conf(5) configuration,
checked with `logrotate --debug` before it replaces what was there: a text
logrotate rejects fails the property and changes nothing.  Unapplying
removes the file."
  (:watch [(watch-path (posixpath.join DIRECTORY name))])
  (:simulates True)
  (:desc f"logrotate {name}")
  (:apply
    (setv path (+ DIRECTORY "/" name)
          text (if (.endswith text "\n") text (+ text "\n")))
    (when (and (!= (read-bytes path) (content->bytes text)) (not (checking?)))
      (validate text))
    (update-file path text :mode 0o644))
  (:unapply (remove-files (+ DIRECTORY "/" name))))

(defn rotation-text [paths frequency keep compress size]
  "The logrotate stanza for PATHS: rotated FREQUENCY (or past SIZE), KEEP
old logs, compressed (but the newest old one) when COMPRESS."
  (+ (.join " " paths) " {\n"
     (.join "" (gfor l [frequency.name
                        f"rotate {keep}"
                        #* (if size [f"maxsize {size}"] [])
                        #* (if compress ["compress" "delaycompress"] [])
                        "missingok" "notifempty"]
                     f"    {l}\n"))
     "}\n"))

(setv rotation-frequency (enum "daily" "weekly" "monthly" "yearly")
      log-count (int-range 0 100000)
      log-size (optional (matching "log-size" "a size such as 100M" r"[0-9]+[kMG]?")))

(defpropspec rotates :posix [#^ logrotate-name name #^ log-path #* paths
                             #^ rotation-frequency [frequency :weekly] #^ log-count [keep 4]
                             #^ boolean [compress True] #^ log-size [size None]]
  "logrotate rotates PATHS (absolute paths or globs) every FREQUENCY, or
sooner once one is past SIZE, keeping KEEP old logs, compressed when
COMPRESS; a missing or empty log is no error.  The stanza goes to
/etc/logrotate.d/NAME, as `configured` writes it.

  (logrotate.rotates \"app\" \"/var/log/app/*.log\" :frequency :daily :keep 14)"
  (:invariant paths "needs at least one path")
  (:desc f"logrotate rotates {(.join " " paths)}")
  (configured name (rotation-text paths frequency keep compress size)))

(export :objects [validate configured rotation-text rotates])
