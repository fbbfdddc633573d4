"/etc/environment: the variables pam_env sets for every login session."

(eval-when-compile (require consfig.model.propspec [defproplist]))
(import re
        consfig.props [file]
        consfig.props.file [describe-pairs pairs-problem]
        consfig.types *)

(setv ENVIRONMENT "/etc/environment")

;; pam_env reads /etc/environment as KEY=VALUE lines and takes off one pair
;; of quotes around a value, but knows no escapes: a value with a quote or
;; a backslash in it could not be written so that it reads back the same.
(setv env-value (one-of integer
                        (matching "env-value" "one line with no quote or backslash"
                                  r"[^\n\r\x00'\"\\]*"))
      env-pair (named "env-pair" (one-of env-value (dict-of shell-identifier env-value))
                      "a variable name or a value (one line, no quote or backslash), or a dict of them"))

(defproplist has-variables :posix [#^ env-pair #* pairs]
  "/etc/environment sets each variable of PAIRS (alternating names and
values, or one dict) to its value, quoted where it needs to be: an existing
line for a variable is changed (a commented-out one uncommented), the others
appended.  pam_env reads it at login, so sessions started afterwards see it.

  (environment.has-variables \"http_proxy\" \"http://proxy.example:3128\")"
  (:invariant (not (pairs-problem pairs shell-identifier)) (pairs-problem pairs shell-identifier))
  (:desc f"/etc/environment has {(describe-pairs pairs "=")}")
  (file.contains-conf-shell ENVIRONMENT #* pairs))

(defproplist lacks-variables :posix [#^ shell-identifier #* names]
  "/etc/environment sets none of the variables NAMES: their lines go."
  (:invariant names "needs at least one variable name")
  (:desc f"/etc/environment lacks {(.join ", " names)}")
  (file.lacks-lines-matching ENVIRONMENT
                             #* (lfor n names f"^\\s*(export\\s+)?{(re.escape n)}\\s*=")))

(export :objects [ENVIRONMENT has-variables lacks-variables])
