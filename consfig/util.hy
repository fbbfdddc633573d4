"Small helpers every layer uses: keyword names, the text/bytes boundary,
text bounded in length, digests, and writing a local file atomically.

Nothing here imports anything of consfig's, so any module may import it."

(import os
        hashlib
        hy.models [Keyword]
        errno
        stat)

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

(defn left-out-note [n]
  "The line that stands, in bounded output, for the N bytes left out."
  f"\n[… {n} bytes left out …]\n")

(defn bounded [text [limit 65536]]
  "TEXT, or when it is longer than LIMIT characters its head and tail with
a line in between saying how many bytes were left out."
  (if (<= (len text) limit)
      text
      (do (setv half (// limit 2)
                left-out (len (.encode (cut text half (- half)) "utf-8" "replace")))
          (+ (cut text 0 half) (left-out-note left-out) (cut text (- half) None)))))

(defn sha256-hex [b]
  "The hex SHA-256 digest of the bytes B."
  (.hexdigest (hashlib.sha256 b)))

(defn write-atomically [path data [mode 0o644] * [dir-fd None] [prepare None]]
  "Write DATA (bytes) to the local file PATH, with MODE, through a temporary
file in its directory, flushed to disk before it is renamed over PATH (and
the directory flushed after, but for DIR-FD: a property's write, as over
a POSIX hop, leaves that to the file system): a reader sees the old file or the new one,
never part of one, and a failure leaves no temporary behind.  The
temporary is named `.consfig-XXXXXXXX`, so that what a killed write left
can be recognised.  With DIR-FD (a descriptor of a directory, `O_PATH`
will do, as the local connection's safe walk leaves it), PATH is a name in
that directory.  PREPARE, when given, is called with the temporary's
descriptor once DATA is in it, and sets its mode and owner instead of MODE.

This is the one atomic write of a local file: the local connection's
`write-file` is it after a safe walk; over a POSIX hop the same steps are a
shell script (`consfig.transport.hop.Connection.write-script`)."
  (if (is dir-fd None)
      (do (setv path (os.fspath path)
                fd (os.open (or (os.path.dirname path) ".") (| os.O-PATH os.O-DIRECTORY os.O-CLOEXEC)))
          (try (write-atomically (os.path.basename path) data mode :dir-fd fd :prepare prepare)
               (setv d (os.open "." (| os.O-RDONLY os.O-CLOEXEC) :dir-fd fd))
               (try (os.fsync d) (finally (os.close d)))
               (finally (os.close fd))))
      (do (setv #(fd tmp) (create-temporary dir-fd))
          (try
            (with [f (os.fdopen fd "wb")]
              (.write f data)
              (.flush f)
              (if prepare (prepare fd) (os.fchmod fd mode))
              (os.fsync fd))
            (os.rename tmp path :src-dir-fd dir-fd :dst-dir-fd dir-fd)
            (except [BaseException]
              (try (os.unlink tmp :dir-fd dir-fd) (except [FileNotFoundError] None))
              (raise))))))

(defn create-temporary [dir-fd]
  "Make a new empty file `.consfig-XXXXXXXX` (mode 0600) in the directory
DIR-FD, as mkstemp does, there and nowhere else; return `#(fd name)`, the
descriptor open for writing."
  (for [_ (range 100)]
    (setv name (+ ".consfig-" (.hex (os.urandom 4))))
    (try (return #((os.open name (| os.O-WRONLY os.O-CREAT os.O-EXCL os.O-NOFOLLOW os.O-CLOEXEC)
                            0o600 :dir-fd dir-fd)
                   name))
         (except [FileExistsError] None)))
  (raise (FileExistsError errno.EEXIST "no free temporary name" ".consfig-XXXXXXXX")))

(defn _own-directory? [path]
  (when (not (os.path.isabs path)) (return False))
  (try (setv st (os.stat path))
       (except [OSError] (return False)))
  (and (stat.S-ISDIR st.st-mode) (= st.st-uid (os.geteuid))))

(defn state-directory []
  "Where consfig keeps state on a machine (a run of an image records its
outcome, the converging agent its events): $STATE_DIRECTORY when it names
a directory of this user's (systemd's StateDirectory= sets it for a
service; the tests set it to keep their state apart), else /var/lib/consfig
for root, else consfig under $XDG_STATE_HOME (when absolute) or
~/.local/state."
  (setv given (os.environ.get "STATE_DIRECTORY" ""))
  (cond (_own-directory? given) given
        (= (os.geteuid) 0) "/var/lib/consfig"
        True (do (setv given (os.environ.get "XDG_STATE_HOME" ""))
                 (os.path.join (if (os.path.isabs given)
                                   given
                                   (os.path.join (os.path.expanduser "~") ".local" "state"))
                               "consfig"))))

;; Shell code that sets $d to `state-directory` as the user the chain ends
;; as sees it: for a target reached by a shell, not by a Python of ours.
(setv STATE-DIRECTORY-SCRIPT "
case \"${STATE_DIRECTORY:-}\" in /*) [ -d \"$STATE_DIRECTORY\" ] && [ -O \"$STATE_DIRECTORY\" ] ;; *) false ;; esac &&
  d=$STATE_DIRECTORY ||
{
if [ \"$(id -u)\" = 0 ]; then d=/var/lib/consfig
else case \"${XDG_STATE_HOME:-}\" in
  /*) d=\"$XDG_STATE_HOME/consfig\" ;;
  *) d=\"$HOME/.local/state/consfig\" ;;
esac; fi; }")

(export :objects [keyword-name bytes->text text->bytes sha256-hex write-atomically create-temporary bounded
                  left-out-note state-directory STATE-DIRECTORY-SCRIPT])
