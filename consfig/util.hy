"Small helpers every layer uses: keyword names, the text/bytes boundary,
digests, and writing a local file atomically.

Nothing here imports anything of consfig's, so any module may import it."

(import os
        hy.models [Keyword])

(defn keyword-name [x]
  "The name a keyword or a keyword-like string stands for: `:foo` and
\":foo\" and \"foo\" give \"foo\"; anything else gives None."
  (cond (isinstance x Keyword) x.name
        (isinstance x str) (.lstrip x ":")
        True None))

(defn bytes->text [b]
  "Output of a command as text: UTF-8, undecodable bytes replaced; None is \"\"."
  (if (isinstance b bytes) (.decode b "utf-8" "replace") (or b "")))

(defn text->bytes [s]
  "Input for a command or a file as bytes (UTF-8); None stays None."
  (cond (is s None) None
        (isinstance s bytes) s
        True (.encode s "utf-8")))

(defn sha256-hex [b]
  "The hex SHA-256 digest of the bytes B."
  ;; Imported here, as `tempfile` below: every module imports this one,
  ;; and the target of a :python hop often needs neither.
  (import hashlib)
  (.hexdigest (hashlib.sha256 b)))

(defn write-atomically [path data [mode 0o644]]
  "Write DATA (bytes) to the local file PATH, with MODE, through a temporary
file in its directory, flushed to disk before it is renamed over PATH (and
the directory flushed after): a reader sees the old file or the new one,
never part of one, and a failure leaves no temporary behind."
  (import tempfile)
  (setv path (os.fspath path)
        directory (or (os.path.dirname path) ".")
        #(fd tmp) (tempfile.mkstemp :dir directory :prefix f".{(os.path.basename path)}."
                                    :suffix ".tmp"))
  (try
    (with [f (os.fdopen fd "wb")]
      (os.fchmod (.fileno f) mode)
      (.write f data)
      (.flush f)
      (os.fsync (.fileno f)))
    (os.replace tmp path)
    (except [BaseException]
      (try (os.unlink tmp) (except [FileNotFoundError] None))
      (raise)))
  (setv dir-fd (os.open directory os.O-RDONLY))
  (try (os.fsync dir-fd) (finally (os.close dir-fd))))

(defn state-directory []
  "Where consfig keeps state on a machine (a run of an image records its
outcome, the converging agent its events): /var/lib/consfig for root,
else consfig under $XDG_STATE_HOME (when absolute) or ~/.local/state."
  (if (= (os.geteuid) 0)
      "/var/lib/consfig"
      (do (setv given (os.environ.get "XDG_STATE_HOME" ""))
          (os.path.join (if (os.path.isabs given)
                            given
                            (os.path.join (os.path.expanduser "~") ".local" "state"))
                        "consfig"))))

;; Shell code that sets $d to `state-directory` as the user the chain ends
;; as sees it: for a target reached by a shell, not by a Python of ours.
(setv STATE-DIRECTORY-SCRIPT "
if [ \"$(id -u)\" = 0 ]; then d=/var/lib/consfig
else case \"${XDG_STATE_HOME:-}\" in
  /*) d=\"$XDG_STATE_HOME/consfig\" ;;
  *) d=\"$HOME/.local/state/consfig\" ;;
esac; fi")

(export :objects [keyword-name bytes->text text->bytes sha256-hex write-atomically state-directory
                  STATE-DIRECTORY-SCRIPT])
