"Settings in /etc/default: the shell fragments Debian's init scripts and
package scripts read."

(require consfig.property [defprop]
         consfig.propspec [defproplist])
(import posixpath
        consfig.props [file])

(defn default-file [name]
  "The path of /etc/default/NAME (NAME may also be a full path)."
  (posixpath.join "/etc/default" name))

(defproplist contains [name #* pairs]
  "/etc/default/NAME sets each key of PAIRS (alternating keys and values, or
one dict) to its value, quoted for the shell: an existing line for a key is
changed (a commented-out one uncommented), other keys are appended.

  (etc-default.contains \"rsync\" \"RSYNC_ENABLE\" \"true\")"
  (:desc f"{(default-file name)} has {(.join ", " (map str pairs))}")
  (file.contains-conf-shell (default-file name) #* pairs))

(export :objects [default-file contains])
