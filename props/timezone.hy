"The system timezone."

(eval-when-compile (require consfig.model.property [defprop]))
(import consfig.model.watchspec [watch-path])
(import posixpath
        re
        consfig.apply.actions [run run-ok? read-remote-file write-remote-file
                               remote-exists?]
        consfig.errors [AbortedChange]
        consfig.model.host [push-hostattr]
        consfig.types *)

(setv timezone-name (predicate "timezone-name" "a timezone name such as \"Europe/London\""
                               (fn [v] (and (isinstance v str)
                                            (re.fullmatch r"[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*" v)
                                            (not-in ".." (.split v "/"))))))

(setv ZONEINFO "/usr/share/zoneinfo")

(defn zone-file [timezone]
  "The tzdata file of TIMEZONE, such as \"Europe/London\"."
  (posixpath.join ZONEINFO timezone))

(defn _localtime []
  (.rstrip (. (run "readlink" "--" "/etc/localtime" :check False) stdout) "\n"))

(defprop configured :posix [#^ timezone-name timezone]
  "The system timezone is TIMEZONE, a name under /usr/share/zoneinfo such as
\"Europe/London\": /etc/localtime links to its file, and /etc/timezone (where
the system has one, as Debian before trixie does) names it.  The hostattr
`timezone` records it."
  (:desc f"Timezone is {timezone}")
  (:watch [(watch-path "/etc/localtime") (watch-path "/etc/timezone")])
  (:hostattrs (push-hostattr "timezone" timezone))
  (:check (and (= (_localtime) (zone-file timezone))
               (= (read-remote-file "/etc/timezone" (+ timezone "\n"))
                  (+ timezone "\n"))))
  (:apply
    (setv zone (zone-file timezone))
    (when (not (run-ok? "test" "-f" zone))
      (raise (AbortedChange f"no timezone {timezone} here: {zone} does not exist (is tzdata installed?)")))
    (when (!= (_localtime) zone)
      (run "ln" "-sfn" "--" zone "/etc/localtime"))
    (when (remote-exists? "/etc/timezone")
      (write-remote-file "/etc/timezone" (+ timezone "\n")))))

(export :objects [ZONEINFO zone-file configured])
