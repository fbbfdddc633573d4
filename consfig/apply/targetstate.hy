"Where consfig keeps what a deployment must remember on its target: the
handlers still owed (`consfig.apply.handlers`), the `during` blocks last applied
(`consfig.apply.combinators`).  It is the target user's state directory,
/var/lib/consfig for root (see `consfig.util.state-directory`), reached
through the connection, so over a shell-only chain too.

It may import consfig.apply.actions, consfig.model.context and consfig.util."

(import posixpath
        consfig.apply.actions [output run Script]
        consfig.model.context [connection get-connattr set-connattr]
        consfig.errors [FailedChange]
        consfig.util [STATE-DIRECTORY-SCRIPT state-directory]
        json)

(defn target-state-directory []
  "The state directory of the user the current connection runs as."
  ;; Asked once per connection: over a shell, asking is a command.
  (or (get-connattr "consfig-state-directory")
      (set-connattr "consfig-state-directory" (_ask-state-directory))))

(defn _ask-state-directory []
  ;; A Python of ours on the target asks itself; a shell, its shell.
  (if (. (connection) python?)
      (state-directory)
      (.rstrip (output (Script (+ STATE-DIRECTORY-SCRIPT "\nprintf '%s\\n' \"$d\""))) "\n")))

(defn host-state-file [kind hostname]
  "The file KIND/HOSTNAME.json under the target's state directory; a
`FailedChange` when HOSTNAME cannot name a file."
  (when (or (not hostname) (in "/" hostname) (.startswith hostname ".")
            (any (gfor c hostname (< (ord c) 32))))
    (raise (FailedChange f"{hostname !r} cannot name a file of consfig's state ({kind})")))
  (posixpath.join (target-state-directory) kind f"{hostname}.json"))

(defn read-state-file [path]
  "The JSON data in PATH, a file of the state directory; None when there is
no such file, a `ValueError` when it is not JSON."
  (try
    (json.loads (.read-file (connection) path))
    (except [FileNotFoundError]
      None)))

(defn save-state-file [path data]
  "Write DATA as JSON to PATH, a file of the state directory, atomically,
mode 0600, its directory made (mode 0700) if need be; remove PATH when DATA
is None."
  (if (is data None)
      (run "rm" "-f" "--" path)
      (do (run "mkdir" "-p" "-m" "700" "--" (posixpath.dirname path))
          (.write-file (connection) path (.encode (+ (json.dumps data :indent 1) "\n"))
                       :mode 0o600))))

(export :objects [target-state-directory host-state-file read-state-file save-state-file])
