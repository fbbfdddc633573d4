"Settings in /etc/default: the shell fragments Debian's init scripts and
package scripts read."

(eval-when-compile
  (require consfig.model.property [defprop]
           consfig.model.propspec [defproplist]))
(import posixpath
        consfig.props [file]
        consfig.props.file [pairs-problem shell-pair]
        consfig.types *)

(setv default-name (one-of abs-path
                           (matching "default-name"
                                     "a file name in /etc/default (letters, digits, _ . and -)"
                                     r"[A-Za-z0-9_][A-Za-z0-9_.-]*")))

(defn default-file [name]
  "The path of /etc/default/NAME (NAME may also be a full path)."
  (posixpath.join "/etc/default" name))

(defproplist contains :posix [#^ default-name name #^ shell-pair #* pairs]
  "/etc/default/NAME sets each key of PAIRS (alternating keys and values, or
one dict) to its value, quoted for the shell: an existing line for a key is
changed (a commented-out one uncommented), other keys are appended.

  (etc-default.contains \"rsync\" \"RSYNC_ENABLE\" \"true\")"
  (:invariant (not (pairs-problem pairs shell-identifier)) (pairs-problem pairs shell-identifier))
  (:desc f"{(default-file name)} has {(.join ", " (map str pairs))}")
  (file.contains-conf-shell (default-file name) #* pairs))

(export :objects [default-file contains])
