"Files, directories and links on the target.

Every property here is `:posix`: it reads and writes through the connection,
so it works over any chain.  A change to a file's content is reported as a
unified diff event (shown at -v), except for a secret's.  Content given
inline is in the propspec; a secret comes from prerequisite data instead
(`secret-uploaded`, docs/data.md).

Content is compared as bytes: desired text is encoded as UTF-8, `bytes` are
written as they are, and a file is never decoded lossily.  The properties
that edit lines read a file with `read-text`, whose undecodable bytes come
back as lone surrogates (Python's \"surrogateescape\") and are written back
unchanged, as is every line the property has no business with."

(eval-when-compile (require consfig.model.property [defprop]))
(import consfig.model.watchspec [watch-path]
        hashlib
        difflib)
(import consfig.types *)
(import errno
        json
        os
        stat
        posixpath
        re
        shlex
        consfig.apply.actions [NO-CHANGE Script run run-ok? run-script output write-remote-file
                               remote-exists? set-remote-mode set-remote-owner remove-remote
                               make-remote-directory make-remote-symlink]
        consfig.model.context [connection current-host]
        consfig.data.items [FETCHED-DATA MissingData Secret secret? data-sent-event data-sources
                            get-data get-data-bytes get-data-string local-digest lookup-data
                            on-target? provide-data require-data]
        consfig.model.host [get-hostattr get-hostattrs get-hostname]
        consfig.site.files [render-template site-directory site-path tree-manifest]
        consfig.apply.engine [Drift WOULD-CHANGE checking? emit inform]
        consfig.apply.events [diff-event fetched-event]
        consfig.errors [AbortedChange ConsfigError FailedChange]
        consfig.transport.hop [SAFE-WALK walk-refusal]
        consfig.transport.safepath [walk]
        consfig.apply.lock [CACHE-DIRECTORY-SCRIPT]
        consfig.util [create-temporary keyword-name sha256-hex])

;; Values that end up in a line-oriented file are single lines: a newline in
;; a key or value would add lines (sections, settings) of its own, and make
;; the file grow on every run.
(setv lines (named "lines" (one-of text (list-of text))
                   "text (one or more lines) or a list of such texts")
      content (named "content" (one-of string byte-string (list-of line))
                     "a string, a byte string, or a list of lines")
      conf-key (matching "conf-key" "a config key (no whitespace, =, or leading #, ; or [)"
                         r"[^\s=#;\[\]][^\s=]*")
      conf-value (one-of line integer)
      conf-pair (named "conf-pair" (one-of conf-value (dict-of conf-key conf-value))
                       "a key or a value (one line each, or an integer), or a dict of them")
      shell-pair (named "shell-pair" (one-of conf-value (dict-of shell-identifier conf-value))
                        "a key or a value (one line each, or an integer), or a dict of them")
      ini-key (matching "ini-key" "an INI key (one line, no =, not starting with #, ; or [)"
                        r"[^\s=#;\[][^=\n\r\x00]*")
      ini-triple (predicate "ini-triple"
                            "a [section key value] triple (section a line or None, key an INI key, value a line)"
                            (fn [t] (and (isinstance t #(list tuple)) (= (len t) 3)
                                         (.accepts (optional (matching "section" "" r"[^\]\n\r\x00]+"))
                                                   (get t 0))
                                         (.accepts ini-key (get t 1))
                                         (.accepts conf-value (get t 2))))))

(defn pairs-problem [pairs key-type]
  "What is wrong with PAIRS as alternating keys (of KEY-TYPE) and values, or
one dict; None when nothing is."
  (cond (and (= (len pairs) 1) (isinstance (get pairs 0) dict)) None
        (% (len pairs) 2) f"expected alternating keys and values, got {(show (list pairs))}"
        True (do (for [k (cut pairs 0 None 2)]
                   (when (not (.accepts key-type k))
                     (return (+ "each key " (.explain key-type k)))))
                 None)))

(defn _lines [xs]
  "Lines given as strings (possibly several lines each) or lists of them."
  (setv out [])
  (for [x xs]
    (if (isinstance x #(list tuple))
        (.extend out (_lines x))
        (.extend out (file-lines x))))
  out)

(defn content-text [content]
  "The text of a file given as CONTENT: a string as it is, or a list of
lines (nested lists flattened, each line ended by a newline)."
  (if (isinstance content #(list tuple))
      (+ (.join "\n" (_lines content)) "\n")
      content))

(defn _unlines [lines]
  (.join "" (gfor l lines (+ l "\n"))))

(defn file-lines [text]
  "TEXT split into lines, without their newlines; a final newline ends the
last line, it does not start another."
  ;; Only "\n" ends a line of a file: `str.splitlines` would also break at
  ;; form feeds, \x1c-\x1e, \x85 and U+2028, and drop carriage returns.
  (setv lines (.split text "\n"))
  (when (= (get lines -1) "") (.pop lines))
  lines)

(defn content->bytes [content]
  "CONTENT as the bytes to write: `bytes` as they are, text as UTF-8 (a lone
surrogate from `read-text` as the byte it stands for)."
  (if (isinstance content #(bytes bytearray))
      (bytes content)
      (.encode content "utf-8" "surrogateescape")))

(defn read-bytes [path * [follow False] [limit None]]
  "The bytes of PATH on the target, or None when it does not exist or is a
symlink (not read through, unless FOLLOW: docs/security.md).  LIMIT: no more
than that many bytes are read."
  (try (.read-file (connection) path :follow follow #** (if (is limit None) {} {"limit" limit}))
       (except [FileNotFoundError] None)))

(defn read-text [path]
  "The text of PATH on the target, or None when it does not exist.  Bytes
that are not UTF-8 come back as lone surrogates, so that `content->bytes` gives
the file back exactly."
  (setv b (read-bytes path))
  (when (is-not b None) (.decode b "utf-8" "surrogateescape")))

(defn _shown [b]
  ;; For a diff only: what is not UTF-8 shows as \xNN, distinct from the
  ;; characters a lossy decode would have turned it into.
  (.decode (or b b"") "utf-8" "backslashreplace"))

;; A diff is shown when both sides are at most this many bytes; past it, or
;; for a side not read whole, their sizes and hashes are (a drift is an
;; event, streamed and logged: a user's 20 MB file must not make one 20 MB).
(setv DIFF-LIMIT 65536)

(defn _side [b whole]
  (cond (is b None) "none"
        whole f"{(len b)} bytes, sha256 {(.hexdigest (hashlib.sha256 b))}"
        True f"more than {(len b)} bytes (not read further)"))

(defn _diff [path old new * [whole True]]
  ;; WHOLE: OLD is the whole file (else its first bytes only).
  (when (or (not whole) (> (len (or old b"")) DIFF-LIMIT) (> (len new) DIFF-LIMIT))
    (return (+ f"--- a{path}\n+++ b{path}\n(too large to show: was {(_side old whole)}; "
               f"will be {(_side new True)})\n")))
  (setv text (.join "" (difflib.unified-diff (.splitlines (_shown old) True)
                                             (.splitlines (_shown new) True)
                                             (+ "a" path) (+ "b" path))))
  (cond text text
        (is old None) f"+++ b{path}\n(a new, empty file)\n"
        True f"--- a{path}\n+++ b{path}\n(the bytes differ where they read the same)\n"))

(defn update-file [path new * [mode None] [owner None] [group None] [secret False]
                   [follow False]]
  "Make PATH contain NEW, text or bytes (keeping its mode and owner, or
setting MODE, OWNER and GROUP), and report a diff unless SECRET.
`:no-change` when it already has exactly those bytes, mode and owner.  In
check mode, change nothing: report what would change and return
`:would-change`.  A symlink at PATH is replaced by the file, never read
through, unless FOLLOW (docs/security.md)."
  ;; No more of the file is read than tells whether it is NEW, and shows
  ;; how it differs.
  (setv new (content->bytes new)
        bound (+ (max (len new) DIFF-LIMIT) 1)
        old (read-bytes path :follow follow :limit bound)
        whole (or (is old None) (< (len old) bound)))
  (when (= old new)
    (return (if (= (_ensure-mode path mode follow) (_ensure-ownership path owner group follow)
                   NO-CHANGE)
                NO-CHANGE
                (if (checking?) WOULD-CHANGE None))))
  (when (checking?)
    (inform (cond (is old None) f"{path} would be created"
                  secret f"{path} would change (secret: no diff)"
                  True f"{path} would change"))
    (when (not secret)
      (emit (diff-event path (_diff path old new :whole whole))))
    ;; The new file keeps the old one's mode and owner but for what is
    ;; asked: say what of those would change too.
    (when (is-not old None)
      (_ensure-mode path mode follow)
      (_ensure-ownership path owner group follow))
    (return WOULD-CHANGE))
  (write-remote-file path new :mode mode :owner (_id owner) :group (_id group) :follow follow)
  (when (not secret)
    (emit (diff-event path (_diff path old new :whole whole)))))

(defn _id [x] (when (is-not x None) (str x)))

(defn combined-results [results]
  "The result of a property made of several steps with RESULTS (each
`:no-change`, `:would-change` in check mode, or anything else for a
change): `:no-change` when none changed anything."
  (cond (all (gfor r results (= r NO-CHANGE))) NO-CHANGE
        (in WOULD-CHANGE results) WOULD-CHANGE
        True None))

(defn map-file-lines [path f * [create False]]
  "Replace the lines of PATH by what F returns given them (without their
newlines; see `read-text` for bytes that are not UTF-8).  Nothing to do when
PATH does not exist, unless CREATE, or when F returns the lines it was given:
as Consfigurator does, the lines are compared, so a file is not rewritten
only to end its last line."
  (setv old (read-text path))
  (when (and (is old None) (not create))
    (return NO-CHANGE))
  (setv have (file-lines (or old ""))
        new (list (f have)))
  (if (and (is-not old None) (= new have))
      NO-CHANGE
      (update-file path (_unlines new))))

(defn _mode-of [path [follow False]]
  (int (.strip (output (if follow
                           ["stat" "-L" "-c" "%a" "--" path]
                           ["stat" "-c" "%a" "--" path])))
       8))

(defn _ensure-mode [path mode [follow False]]
  (when (is mode None) (return NO-CHANGE))
  (setv have (_mode-of path follow))
  (cond (= have mode) NO-CHANGE
        (checking?) (do (inform (_mode-change path have mode)) WOULD-CHANGE)
        True (set-remote-mode path mode :follow follow)))

(defn ensure-mode [path mode]
  "PATH, which exists, has MODE (an integer): `:no-change` when it has,
`:would-change` in check mode (said), None once set."
  (_ensure-mode path mode))

(defn _mode-change [path have want]
  f"{path}: mode {(format have "o")} → {(format want "o")}")

(defn _plural [xs]
  (if (= (len xs) 1)
      f"{(get xs 0)} does not exist"
      f"{(.join ", " xs)} do not exist"))

(setv _INLINE-SECRET
      (+ "inline secret content is refused: the propspec is printed, logged and shipped, "
         "and a secret must never be in it.  Keep the secret in prerequisite data "
         "(a :files-tree, :pass or :pgp source) and install it with "
         "(file.secret-uploaded IDEN1 IDEN2 PATH); see docs/data.md"))

(defprop has-content :posix [#^ abs-path path #^ content content
                              * #^ file-mode [mode None] #^ boolean [secret False]
                              #^ boolean [follow False]]
  "PATH has exactly CONTENT: a string (written as UTF-8), `bytes` (written
as they are), or a list of lines (joined, with a final newline).  The file's
mode and owner are kept, unless MODE is given.  A symlink at PATH is
replaced by the file, unless FOLLOW: then the file it leads to is written,
if the link may lead there (docs/security.md).  SECRET True is refused:
content written here is in the propspec for all to see, so a secret comes
from prerequisite data instead (`secret-uploaded`)."
  (:simulates True)
  (:watch [(watch-path path)])
  (:desc f"{path} has content")
  (:invariant (not secret) _INLINE-SECRET)
  (:apply (update-file path (content-text content) :mode mode :follow follow)))

(defprop exists-with-content :posix [#^ abs-path path #^ content content
                                      * #^ file-mode [mode None] #^ boolean [secret False]]
  "Like `has-content`, but unapplying deletes PATH rather than restoring what
was there before: for files the deployment creates, not for files that came
with the OS.  SECRET True is refused, as there."
  (:simulates True)
  (:watch [(watch-path path)])
  (:desc f"{path} exists with content")
  (:invariant (not secret) _INLINE-SECRET)
  (:apply (update-file path (content-text content) :mode mode))
  (:unapply (remove-files path)))

(defn remove-files [#* paths]
  "Remove those of PATHS that exist (files or symlinks): `:no-change` when
none does; in check mode, say which would go and return `:would-change`."
  (setv there (lfor p paths :if (remote-exists? p) p))
  (cond (not there) NO-CHANGE
        (checking?) (do (inform f"{(.join ", " there)} would be removed") WOULD-CHANGE)
        True (do (remove-remote there) None)))

(defn add-lines [path lines]
  "Append those of LINES that PATH lacks, creating PATH if need be."
  (setv wanted (_lines lines))
  (map-file-lines path
                  (fn [have]
                    (setv present (set have))
                    (+ have (lfor l (dict.fromkeys wanted) :if (not-in l present) l)))
                  :create True))

(defn remove-lines [path lines]
  "Remove every one of LINES from PATH, if it exists."
  (setv unwanted (set (_lines lines)))
  (map-file-lines path (fn [have] (lfor l have :if (not-in l unwanted) l))))

(defprop contains-lines :posix [#^ abs-path path #^ lines #* lines]
  "PATH contains each of LINES, appended at the end where missing.  Creates
PATH if it does not exist.  Unapplying removes LINES."
  (:simulates True)
  (:watch [(watch-path path)])
  (:desc f"{path} contains {(.join " | " (_lines lines))}")
  (:apply (add-lines path lines))
  (:unapply (remove-lines path lines)))

(defprop lacks-lines :posix [#^ abs-path path #^ lines #* lines]
  "PATH has none of LINES.  Nothing to do if PATH does not exist.
Unapplying appends LINES where missing, as `contains-lines` does."
  (:simulates True)
  (:watch [(watch-path path)])
  (:desc f"{path} lacks {(.join " | " (_lines lines))}")
  (:apply (remove-lines path lines))
  (:unapply (add-lines path lines)))

(defprop lacks-lines-matching :posix [#^ abs-path path #^ regex #* patterns]
  "PATH has no line matching any of the regular expressions PATTERNS
(Python syntax, searched anywhere in the line).  Nothing to do if PATH does
not exist."
  (:simulates True)
  (:watch [(watch-path path)])
  (:desc f"{path} lacks lines matching {(.join " | " patterns)}")
  (:apply
    (setv regexes (lfor p patterns (re.compile p)))
    (map-file-lines path
                    (fn [have]
                      (lfor l have :if (not (any (gfor r regexes (.search r l)))) l)))))

(defprop regex-replaced-lines :posix [#^ abs-path path #^ regex regex #^ line replacement]
  "Like `s/REGEX/REPLACEMENT/` on each line of PATH: the first match in
each line is replaced.  Python syntax: `\\1` or `\\g<name>` in REPLACEMENT
refer to groups.  Nothing to do if PATH does not exist.  Idempotent as long
as a replaced line no longer matches REGEX."
  (:simulates True)
  (:watch [(watch-path path)])
  (:desc f"{path} has s/{regex}/{replacement}/ applied")
  (:apply
    (setv r (re.compile regex))
    (map-file-lines path (fn [have] (lfor l have (.sub r replacement l :count 1))))))

(defprop has-mode :posix [#^ abs-path path #^ file-mode mode * #^ boolean [follow False]]
  "PATH has permission bits MODE (an integer, such as 0o644).  A symlink at
PATH is refused, unless FOLLOW: then what it leads to gets MODE, if the link
may lead there (docs/security.md)."
  (:watch [(watch-path path)])
  (:desc f"{path} has mode {(format mode "o")}")
  (:check (if (remote-exists? path)
              (let [have (_mode-of path follow)]
                (or (= have mode) (Drift (_mode-change path have mode))))
              (Drift f"{path} does not exist")))
  (:apply (set-remote-mode path mode :follow follow)))

(defn _owner-spec [user group]
  (+ (if (is user None) "" (str user))
     (if (is group None) "" f":{group}")))

(defn _has-ownership? [path user group [follow False]]
  ;; Names are compared with names and numbers with numbers, whichever was given.
  (setv #(u g un gn) (.split (.strip (output "stat" #* (if follow ["-L"] [])
                                             "-c" "%u %g %U %G" "--" path))))
  (defn same? [want id name]
    (or (is want None) (in (str want) #(id name))))
  (or (and (same? user u un) (same? group g gn))
      (Drift f"{path}: owner {un}:{gn} → {(or user un)}:{(or group gn)}")))

(defprop has-ownership :posix [#^ abs-path path * #^ (one-of user-name id-number) [user None]
                               #^ (one-of group-name id-number) [group None]
                               #^ boolean [follow False]]
  "PATH (a symlink itself, not what it points to, unless FOLLOW) is owned by
USER and/or GROUP: names or numeric ids.  With FOLLOW, what a symlink leads
to is, if the link may lead there (docs/security.md)."
  (:watch [(watch-path path)])
  (:desc (+ f"{path} has"
            (if (is user None) "" f" owner {user}")
            (if (is group None) "" f" group {group}")))
  (:invariant (not (and (is user None) (is group None))) "needs :user or :group")
  (:check (_has-ownership? path user group follow))
  (:apply (set-remote-owner path user group :follow follow)))

(defprop does-not-exist :posix [#^ abs-path #* paths]
  "None of PATHS exists (files or symlinks; not directories)."
  (:watch (lfor p paths (watch-path p)))
  (:desc (_plural paths))
  (:check (_none-exist paths "removed"))
  (:apply (remove-remote paths)))

(defn _none-exist [paths what]
  (setv there (lfor p paths :if (remote-exists? p) p))
  (or (not there) (Drift (+ (.join ", " there) f" would be {what}"))))

(defprop directory-exists :posix [#^ abs-path directory]
  "DIRECTORY exists, with its parents."
  (:watch [(watch-path directory)])
  (:desc f"{directory} exists")
  (:check (or (run-ok? "test" "-d" directory)
              (Drift f"{directory} would be created")))
  (:apply (make-remote-directory directory)))

(defn _remove-directories [directories]
  ;; `rm -rf DIR/` on a symlink to a directory would empty the directory it
  ;; points to; a symlink or a file where a directory was expected is a
  ;; mistake to report, not something to delete.
  (for [d directories]
    (when (remote-exists? d)
      (when (not (run-ok? (Script "test -d \"$1\" && test ! -L \"$1\"" d)))
        (raise (FailedChange f"{d} exists but is not a directory; not removing it")))
      (remove-remote [d] :recursive True))))

(defprop directory-does-not-exist :posix [#^ abs-path #* directories]
  "None of DIRECTORIES exists: each is removed with everything in it.  It
is a failure if one of them is a file or a symlink."
  (:watch (lfor d directories (watch-path d)))
  (:desc (_plural directories))
  (:check (_none-exist directories "removed with everything in them"))
  (:apply (_remove-directories directories)))

(defn _parent [path]
  (or (posixpath.dirname (.rstrip path "/")) "."))

(defprop containing-directory-exists :posix [#^ abs-path path]
  "The directory PATH is in exists, with its parents."
  (:watch [(watch-path (posixpath.dirname path))])
  (:desc f"Directory containing {path} exists")
  (:check (run-ok? "test" "-d" (_parent path)))
  (:apply (make-remote-directory (_parent path))))

(defn _link-target [path]
  (setv r (run "readlink" "-n" "--" path :check False))
  (when r.ok? r.stdout))

(defn _links-to? [path target]
  ;; Compared by the shell, byte for byte: read back through a decode, a
  ;; link to b"t\xff" would pass for one to "t\ufffd".  The "." keeps the
  ;; command substitution from dropping a target's trailing newlines.
  (run-ok? (Script "[ \"$(readlink -n -- \"$1\" && echo .)\" = \"$2.\" ]" path target)))

(defprop symlinked :posix [* #^ abs-path from_ #^ path to]
  "FROM is a symbolic link to TO.  A link pointing elsewhere is replaced;
anything else at FROM is a failure.  Unapplying removes the link."
  (:watch [(watch-path from_)])
  (:desc f"{from_} is a symlink to {to}")
  (:check (or (_links-to? from_ to)
              (Drift (let [now (_link-target from_)]
                       (if (is now None)
                           f"{from_} would link to {to}"
                           f"{from_}: link {now} → {to}")))))
  (:apply
    (when (and (remote-exists? from_) (is (_link-target from_) None))
      (raise (FailedChange f"{from_} exists and is not a symbolic link; not replacing it")))
    (make-remote-directory (_parent from_))
    (make-remote-symlink to from_))
  (:unapply (remove-remote [from_])))

(defprop is-copy-of :posix [#^ abs-path dest #^ abs-path source]
  "DEST is a copy of SOURCE, a regular file on the target (a symlink at
SOURCE is followed, if it may lead there: docs/security.md), with SOURCE's
mode, ownership and times.  The copy is made beside DEST and renamed over
it: a symlink at DEST is replaced, never written through.  Both paths are
walked safely; a target's Python reads SOURCE and writes DEST through the
descriptors its walks hold."
  (:watch [(watch-path dest) (watch-path source)])
  (:desc f"{dest} is a copy of {source}")
  (:check (if (. (connection) python?)
              (_copy-holds-here? dest source)
              (_walked-copy "[ -f \"$1\" ] && [ ! -L \"$1\" ] && cmp -s -- \"$1\" \"$2\""
                            dest source :check True)))
  (:apply (if (. (connection) python?)
              (_copy-here dest source)
              (_walked-copy (.join "\n" ["[ -f \"$2\" ] || { echo \"$2 is not a regular file\" >&2; exit 1; }"
                                        "tmp=$(mktemp \"$3/.consfig-XXXXXXXX\")"
                                        "trap 'rm -f \"$tmp\"' EXIT"
                                        "cp -L --preserve=all -- \"$2\" \"$tmp\""
                                        "sync -- \"$tmp\" 2>/dev/null || true"
                                        "mv -f -T -- \"$tmp\" \"$1\""
                                        "trap - EXIT"])
                            dest source))))

(defn _walked-copy [code dest source * [check False]]
  ;; Over a POSIX chain: once the walks have passed SOURCE (following a link
  ;; at its end, by the rule) and DEST's directory, nothing on either path
  ;; can change but as root, so CODE may act on them by name.  $1 DEST, $2
  ;; SOURCE, $3 DEST's directory.
  ;; Each walk says on standard output which path it is about.
  (setv r (run-script (.join "\n" [SAFE-WALK "set -e" "echo source" "cf_walk \"$2\" 1"
                                   "echo dest" "cf_walk \"$1\" 0" code])
                      dest source (_parent dest) :check False)
        refusal (walk-refusal r.exit-code r.stderr
                              (if (= (get (.split r.stdout) -1) "source") source dest)
                              (. (connection) where)))
  (cond refusal (raise refusal)
        check r.ok?
        (not r.ok?) (raise (FailedChange (+ f"could not copy {source} to {dest}: "
                                            (or (.strip r.stderr) f"exit {r.exit-code}"))))))

(defn _open-walked [path follow]
  ;; A descriptor, open for reading, of the regular file at PATH found by
  ;; the safe walk (a link at its end followed only when FOLLOW), or None
  ;; when there is no regular file there.
  (try (setv #(dirfd name) (walk path :follow follow))
       (except [#(FileNotFoundError NotADirectoryError)] (return None)))
  (try
    (setv fd (os.open name (| os.O-RDONLY os.O-NOFOLLOW os.O-NONBLOCK os.O-CLOEXEC) :dir-fd dirfd))
    (except [e OSError]
      (when (and follow (= e.errno errno.ELOOP))
        ;; The walk followed it, and a link was put there since.
        (raise (FailedChange f"{path} was replaced by a symlink while it was being read")))
      (return None))
    (finally (os.close dirfd)))
  (if (stat.S-ISREG (. (os.fstat fd) st-mode))
      fd
      (do (os.close fd) None)))

(defn _copy-holds-here? [dest source]
  (setv a (_open-walked dest False) b None)
  (try
    (when (is a None) (return False))
    (setv b (_open-walked source True))
    (when (is b None) (return False))
    (while True
      (setv x (os.read a 1048576) y (os.read b 1048576))
      (when (!= x y) (return False))
      (when (not x) (return True)))
    (finally
      (for [fd [a b]] (when (is-not fd None) (os.close fd))))))

(defn _copy-here [dest source]
  ;; What the POSIX script does, through descriptors: SOURCE is read, and
  ;; its mode, owner and times taken, from one descriptor; the copy is a
  ;; temporary in the directory DEST's walk holds, renamed within it.
  (setv src (_open-walked source True))
  (when (is src None)
    (raise (FailedChange f"could not copy {source} to {dest}: {source} is not a regular file")))
  (try
    (setv st (os.fstat src)
          #(dirfd name) (walk dest))
    (try
      (setv #(fd tmp) (create-temporary dirfd))
      (try
        (with [f (os.fdopen fd "wb")]
          (while (setx chunk (os.read src 1048576))
            (.write f chunk))
          (.flush f)
          ;; Owner first: a chown clears the setuid and setgid bits.
          (os.fchown fd st.st-uid st.st-gid)
          (os.fchmod fd (stat.S-IMODE st.st-mode))
          (os.utime fd :ns #(st.st-atime-ns st.st-mtime-ns))
          (os.fsync fd))
        (os.rename tmp name :src-dir-fd dirfd :dst-dir-fd dirfd)
        (except [BaseException]
          (try (os.unlink tmp :dir-fd dirfd) (except [FileNotFoundError] None))
          (raise)))
      (finally (os.close dirfd)))
    (finally (os.close src))))

;; Files from prerequisite data.  The content never goes into the propspec:
;; the property names the item, the data layer supplies it (consfig.data.items).
;; A destination is compared by digest on the target (`sha256sum`), so an
;; unchanged file costs no transfer; a secret's destination is read and
;; compared in memory instead, since a digest of a short secret is enough
;; to guess it and would show in a command's output.

(defn _digest-on-target [path]
  ;; Never through a symlink at PATH, nor one on the way that may not lead
  ;; there (docs/security.md): the digest of a short file is enough to
  ;; guess it.  A Python target reads it through descriptors.
  (when (. (connection) python?)
    (return (try (sha256-hex (.read-file (connection) path))
                 (except [FileNotFoundError] None))))
  (setv r (run-script (+ SAFE-WALK "cf_walk \"$1\" 0\n"
                         "[ -f \"$1\" ] && [ ! -L \"$1\" ] || exit 66; exec sha256sum < \"$1\"")
                      path :check False))
  (setv refusal (walk-refusal r.exit-code r.stderr path (. (connection) where)))
  (when refusal (raise refusal))
  (cond (= r.exit-code 66) None
        r.ok? (get (.split r.stdout) 0)
        True (raise (FailedChange f"cannot read the digest of {path}: {(.strip (+ r.stdout r.stderr))}"))))

(defn _same-content? [item path]
  (if item.secret
      (= (read-bytes path) (.reveal (.content item)))
      (= (_digest-on-target path) item.sha256)))

(defn _ensure-ownership [path owner group [follow False]]
  (cond (or (and (is owner None) (is group None))
            (is (_has-ownership? path owner group follow) True))
        NO-CHANGE
        (checking?) (do (inform f"{path} would get owner {(_owner-spec owner group)}") WOULD-CHANGE)
        True (set-remote-owner path owner group :follow follow)))

(defn install-data [iden1 iden2 path * [mode None] [owner None] [group None]]
  "Make PATH on the target hold the content of the prerequisite data item
(IDEN1, IDEN2), declared by the caller's `:hostattrs`: written (atomically,
with MODE, OWNER and GROUP) only when its content differs, else only its
mode and owner set.  A secret item gets mode 0600 unless MODE says
otherwise, and is never shown in a diff.  `:no-change` when nothing was to
do; in check mode, what would change is reported and `:would-change`
returned."
  (setv item (get-data iden1 iden2))
  (when (and item.secret (is mode None))
    (setv mode 0o600))
  (when (_same-content? item path)
    (setv changes [(if (is mode None) NO-CHANGE (_ensure-mode path mode))
                   (_ensure-ownership path owner group)])
    (return (cond (in WOULD-CHANGE changes) WOULD-CHANGE
                  (all (gfor c changes (= c NO-CHANGE))) NO-CHANGE
                  True None)))
  (when (checking?)
    (inform (+ f"{path} would be written from data ({iden1} {iden2}) version {item.version}"
               (if item.secret " (secret: no diff)" "")))
    (return WOULD-CHANGE))
  (setv content (.content item))
  (write-remote-file path (if item.secret (.reveal content) content)
                     :mode mode :owner owner :group group)
  ;; On a target, the content came with the host, counted then.
  (when (not (on-target?))
    (emit (data-sent-event item path)))
  None)

(defprop data-uploaded :posix [#^ non-empty-line iden1 #^ non-empty-line iden2 #^ abs-path destination
                               * #^ (optional file-mode) [mode None]
                               #^ (optional (one-of user-name id-number)) [owner None]
                               #^ (optional (one-of group-name id-number)) [group None]]
  "DESTINATION holds the prerequisite data item (IDEN1, IDEN2), from the
data sources the consfig registers (docs/data.md), with MODE, OWNER and
GROUP when given (a secret item: mode 0600 unless MODE).  It is written
only when its content differs."
  (:simulates True)
  (:watch [(watch-path destination)])
  (:desc f"{destination} has data {iden1} {iden2}")
  (:hostattrs (require-data iden1 iden2))
  (:apply (install-data iden1 iden2 destination :mode mode :owner owner :group group)))

(defprop secret-uploaded :posix [#^ non-empty-line iden1 #^ non-empty-line iden2 #^ abs-path destination
                                 * #^ file-mode [mode 0o600]
                                 #^ (optional (one-of user-name id-number)) [owner None]
                                 #^ (optional (one-of group-name id-number)) [group None]]
  "DESTINATION holds the secret item (IDEN1, IDEN2), mode 0600 unless MODE
says otherwise.  It is compared with DESTINATION in memory and never shown."
  (:simulates True)
  (:watch [(watch-path destination)])
  (:desc f"{destination} has secret {iden1} {iden2}")
  (:hostattrs (require-data iden1 iden2 :secret True))
  (:apply (install-data iden1 iden2 destination :mode mode :owner owner :group group)))

(defprop host-data-uploaded :posix [#^ abs-path destination
                                    * #^ (optional file-mode) [mode None]
                                    #^ (optional (one-of user-name id-number)) [owner None]
                                    #^ (optional (one-of group-name id-number)) [group None]]
  "DESTINATION holds the item (HOSTNAME, DESTINATION) of the host it is
applied to, as `data-uploaded`."
  (:simulates True)
  (:watch [(watch-path destination)])
  (:desc f"{destination} has this host's data")
  (:hostattrs (require-data (get-hostname) destination))
  (:apply (install-data (get-hostname) destination destination :mode mode :owner owner :group group)))

(defprop host-secret-uploaded :posix [#^ abs-path destination
                                      * #^ file-mode [mode 0o600]
                                      #^ (optional (one-of user-name id-number)) [owner None]
                                      #^ (optional (one-of group-name id-number)) [group None]]
  "DESTINATION holds the secret item (HOSTNAME, DESTINATION) of the host it
is applied to, as `secret-uploaded`."
  (:simulates True)
  (:watch [(watch-path destination)])
  (:desc f"{destination} has this host's secret")
  (:hostattrs (require-data (get-hostname) destination :secret True))
  (:apply (install-data (get-hostname) destination destination :mode mode :owner owner :group group)))

(defprop data-cache-purged :posix []
  "The prerequisite data the target's user keeps after `:python` deployments
(`~/.cache/consfig/data`, or under $XDG_CACHE_HOME) is removed: what this
deployment needs it already holds in memory; the next one sends it again."
  (:unwatched "it empties consfig's own data cache, which only deployments fill")
  (:simulates True)
  (:desc "data cache purged")
  (:apply
    (setv dirs (lfor d (.splitlines (output (Script _DATA-CACHES)))
                     :if (run-ok? "test" "-d" d) d))
    (cond (not dirs) NO-CHANGE
          (checking?) (do (inform f"{(.join " " dirs)} would be removed") WOULD-CHANGE)
          True (run "rm" "-rf" "--" #* dirs))))

;; Where a target's Python keeps data: the cache directory it would use
;; (consfig.apply.lock has the shell's twin of consfig.boot.cache_directory), if
;; there is one already.
(setv _DATA-CACHES (+ CACHE-DIRECTORY-SCRIPT "d=$(consfig_cache) && echo \"$d/data\""))

;; Config files.  A line that sets a key is found by a regular expression
;; applied to the line with any leading comment characters removed, so that
;; a commented-out default ("#PermitRootLogin prohibit-password") can be
;; uncommented and set rather than a new line appended below the comments
;; that document it.

(defclass _ConfLine []
  "A LINE of a config file that sets KEY in SECTION, perhaps commented out."
  (defn __init__ [self line commented section key sep value]
    (setv self.line line
          self.commented commented
          self.section section
          self.key key
          self.sep sep
          self.value value)))

(defn _parse-conf [lines comment kv [section-re None]]
  "LINES with those that set a key replaced by `_ConfLine`s."
  (setv uncomment (re.compile (+ r"^\s*(?:" comment r")+\s*"))
        section None
        out [])
  (for [line lines]
    (setv m (.match uncomment line)
          commented (bool m)
          bare (if m (cut line (.end m) None) (.strip line))
          s (and section-re (not commented) (.match section-re bare))
          k (.match kv bare))
    (cond s (do (setv section (.strip (.group s 1))) (.append out line))
          k (.append out (_ConfLine line commented section #* (.groups k)))
          True (.append out line)))
  out)

(defn _conf-edit [parsed wanted same-value? render comment-prefix]
  "Set each `(section, key) → value` of WANTED in PARSED: the first
uncommented line for a key (else the first commented one) is set, and any
other uncommented line for it commented out.  A line already right is kept as
it is, byte for byte, as is every line we have no business with.  Return the
lines and the pairs no line took."
  (setv chosen {})
  (for [commented-pass [False True]
        [i l] (enumerate parsed)]
    (when (isinstance l _ConfLine)
      (setv k #(l.section l.key))
      (when (and (in k wanted) (not-in k chosen) (= l.commented commented-pass))
        (setv (get chosen k) i))))
  (defn edit [i l]
    (setv k (and (isinstance l _ConfLine) #(l.section l.key)))
    (cond (not k) l
          (not-in k wanted) l.line
          (= (get chosen k) i) (if (and (not l.commented) (same-value? l.value (get wanted k)))
                                   l.line
                                   (render l.key (get wanted k) l.sep))
          l.commented l.line
          True (+ comment-prefix l.line)))
  #((lfor [i l] (enumerate parsed) (edit i l))
    (dfor [k v] (.items wanted) :if (not-in k chosen) k v)))

(defn conf-pairs [pairs]
  "PAIRS given as alternating keys and values, or as one dict."
  (setv items (if (and (= (len pairs) 1) (isinstance (get pairs 0) dict))
                  (list (.items (get pairs 0)))
                  (do (when (% (len pairs) 2)
                        (raise (FailedChange f"expected alternating keys and values, got {(hy.repr (list pairs))}")))
                      (list (zip (cut pairs 0 None 2) (cut pairs 1 None 2))))))
  (dfor [k v] items #(None (str k)) (str v)))

(defn _simple-conf-lines [lines wanted kv render same-value?]
  (setv #(out missing) (_conf-edit (_parse-conf lines "#" kv) wanted same-value? render "#"))
  (+ out (lfor [[_ k] v] (.items missing) (render k v None))))

(defn _simple-conf-text [old wanted kv render same-value?]
  (_unlines (_simple-conf-lines (file-lines old) wanted kv render same-value?)))

(defn _simple-conf-update [path wanted kv render same-value?]
  (map-file-lines path (fn [lines] (_simple-conf-lines lines wanted kv render same-value?))
                  :create True))

(defn describe-pairs [pairs sep]
  (.join ", " (gfor [[_ k] v] (.items (conf-pairs pairs)) f"{k}{sep}{v}")))

(defn _strip-eq [a b] (= (.strip a) (.strip b)))

(setv _SPACE-KV (re.compile r"^(\S+)(\s+)(.*?)\s*$"))

(defn _space-kv [k v sep] (+ k (or sep " ") v))

(defn conf-space-text [old wanted]
  "OLD, the text of a `key value` config file, with WANTED (a dict of
`(None, key) → value`) set as `contains-conf-space` sets them."
  (_simple-conf-text old wanted _SPACE-KV _space-kv _strip-eq))

(defprop contains-conf-space :posix [#^ abs-path path #^ conf-pair #* pairs]
  "PATH, a config file of `key value` lines without sections, sets each key
of PAIRS (alternating keys and values, or a dict) to its value.  The first
line for a key is set — an uncommented one, else a commented-out one, which
is uncommented — and any other line setting it is commented out; keys with
no line are appended."
  (:simulates True)
  (:invariant (not (pairs-problem pairs conf-key)) (pairs-problem pairs conf-key))
  (:watch [(watch-path path)])
  (:desc f"{path} has {(describe-pairs pairs " ")}")
  (:apply (_simple-conf-update path (conf-pairs pairs) _SPACE-KV _space-kv _strip-eq)))

(setv _EQUALS-KV (re.compile r"^([^\s=]+)(\s*=\s*)(.*?)\s*$"))

(defn _equals-kv [k v sep] (+ k (or sep " = ") v))

(defn conf-equals-text [old wanted]
  "OLD, the text of a `key = value` config file, with WANTED (a dict of
`(None, key) → value`) set as `contains-conf-equals` sets them."
  (_simple-conf-text old wanted _EQUALS-KV _equals-kv _strip-eq))

(defprop contains-conf-equals :posix [#^ abs-path path #^ conf-pair #* pairs]
  "Like `contains-conf-space`, for a config file of `key = value` lines."
  (:simulates True)
  (:invariant (not (pairs-problem pairs conf-key)) (pairs-problem pairs conf-key))
  (:watch [(watch-path path)])
  (:desc f"{path} has {(describe-pairs pairs " = ")}")
  (:apply (_simple-conf-update path (conf-pairs pairs) _EQUALS-KV _equals-kv _strip-eq)))

(defn _shell-same? [raw v]
  (try (= (shlex.split raw :comments True) [v])
       (except [ValueError] False)))

(defprop contains-conf-shell :posix [#^ abs-path path #^ shell-pair #* pairs]
  "Like `contains-conf-space`, for a shell fragment of `KEY=value` lines
such as those in /etc/default.  Values are quoted for the shell as needed; a
line whose value already means the same (`KEY=\"x\"` for x) is left alone."
  (:simulates True)
  (:invariant (not (pairs-problem pairs shell-identifier)) (pairs-problem pairs shell-identifier))
  (:watch [(watch-path path)])
  (:desc f"{path} has {(describe-pairs pairs "=")}")
  (:apply (_simple-conf-update path (conf-pairs pairs) (re.compile r"^([A-Za-z_][A-Za-z0-9_]*)(=)(.*?)\s*$")
                               (fn [k v sep] f"{k}={(shlex.quote v)}") _shell-same?)))

(setv _INI-SECTION (re.compile r"^\[([^]]+)\]\s*$")
      _INI-KV (re.compile r"^([^=\s\[;#][^=]*?)(\s*=\s*)(.*?)\s*$"))

(defn _ini-triples [triples]
  (setv out {})
  (for [t triples]
    (when (not (and (isinstance t #(list tuple)) (= (len t) 3)))
      (raise (FailedChange f"contains-ini-settings wants [section key value] triples, not {(hy.repr t)}")))
    (setv #(s k v) t
          (get out #((if (is s None) None (str s)) (str k))) (str v)))
  out)

(defn _ini-update [lines wanted]
  (setv #(out missing) (_conf-edit (_parse-conf lines "[#;]" _INI-KV _INI-SECTION)
                                   wanted _strip-eq
                                   (fn [k v sep] (+ k (or sep "=") v)) "#"))
  ;; A key whose section exists goes at the end of that section (before the
  ;; blank lines that separate it from the next); a new section goes at the
  ;; end of the file.
  (for [section (dict.fromkeys (gfor [s _] missing s))]
    (setv new (lfor [[s k] v] (.items missing) :if (= s section) f"{k}={v}")
          start (if (is section None)
                    0
                    (next (gfor [i l] (enumerate out)
                                :if (and (isinstance l str)
                                         (setx m (.match _INI-SECTION l))
                                         (= (.strip (.group m 1)) section))
                                (+ i 1))
                          None)))
    (if (is start None)
        (do (when (and out (.strip (get out -1))) (.append out ""))
            (.extend out [f"[{section}]" #* new]))
        (do (setv end start)
            (while (and (< end (len out)) (not (.match _INI-SECTION (get out end))))
              (+= end 1))
            (while (and (> end start) (not (.strip (get out (- end 1)))))
              (-= end 1))
            (setv (cut out end end) new))))
  out)

(defprop contains-ini-settings :posix [#^ abs-path path #^ ini-triple #* triples]
  "PATH, an INI file, sets each `[section key value]` of TRIPLES.  As with
`contains-conf-space`, the first line for the key in its section is set (an
uncommented one, else a commented-out one, uncommented) and others for it
commented out.  A missing key goes at the end of its section; a missing
section is appended.  A section of None means the keys before any section."
  (:simulates True)
  (:watch [(watch-path path)])
  (:desc (+ f"{path} has "
            (.join ", " (gfor [[s k] v] (.items (_ini-triples triples)) f"[{s}] {k}={v}"))))
  (:apply (map-file-lines path (fn [lines] (_ini-update lines (_ini-triples triples)))
                          :create True)))

;; Trees.  What a destination holds is listed by one script on the target
;; (type, mode, owner, and each file's SHA-256), compared on the controller
;; (or, after a :python hop, on the target) with the manifest of the site's
;; tree, and only what differs is written, removed or fixed, in a few
;; commands: a tree that holds already costs one round trip and no transfer.

(setv _LISTING (.join "\n" ["set -e"
                            "d=$1"
                            "if [ -L \"$d\" ]; then printf 'link\\0'; exit 0; fi"
                            "if [ ! -e \"$d\" ]; then printf 'none\\0'; exit 0; fi"
                            "if [ -d \"$d\" ]; then"
                            "  printf 'dir\\0'; cd -- \"$d\""
                            "  find . -printf 'E\\0%y\\0%m\\0%U\\0%G\\0%u\\0%g\\0%l\\0%P\\0'"
                            "  find . -type f -exec sha256sum -z -- {} +"
                            "else"
                            "  printf 'file\\0'"
                            "  find \"$d\" -maxdepth 0 -printf 'E\\0%y\\0%m\\0%U\\0%G\\0%u\\0%g\\0%l\\0\\0'"
                            "  if [ -f \"$d\" ]; then sha256sum -z < \"$d\"; fi"
                            "fi"]))

(setv _TYPES {"f" "file" "d" "dir" "l" "link"})

(defn list-tree [path]
  "What is at PATH on the target: `#(KIND ENTRIES)`, KIND \"none\", \"dir\"
or \"file\", ENTRIES a dict of relative path (\"\" for PATH itself) → entry
as in `consfig.site.files.tree-manifest`, with the owner's and group's names
and numbers (\"users\" \"groups\")."
  (setv tokens (.split (output (Script _LISTING path) :timeout 600) "\0")
        kind (get tokens 0)
        entries {}
        i 1)
  (while (< i (len tokens))
    (setv tok (get tokens i))
    (cond (= tok "E")
          (do (setv #(y m U G u g l rel) (cut tokens (+ i 1) (+ i 9))
                    (get entries rel) {"path" rel "type" (.get _TYPES y y) "mode" (int m 8)
                                       "users" #(U u) "groups" #(G g) "target" l})
              (+= i 9))
          (>= (len tok) 64)
          (do (setv rel (if (= kind "file") "" (.removeprefix (cut tok 66 None) "./")))
              (when (in rel entries)
                (setv (get entries rel "sha256") (cut tok 0 64)))
              (+= i 1))
          True (+= i 1)))
  #(kind entries))

(defn _kind-name [t]
  (.get {"dir" "directory" "link" "symbolic link"} t t))

(defn dir-mode [mode]
  "The mode of a directory holding files of MODE: MODE with each
permission to search where there is one to read (0o640 → 0o750)."
  (| mode (>> (& mode 0o444) 2)))

(defn _wanted-mode [entry mode]
  (cond (= (get entry "type") "link") None
        (is mode None) (get entry "mode")
        (= (get entry "type") "dir") (dir-mode mode)
        True mode))

(defn tree-plan [dest manifest have * [mode None] [owner None] [group None] [delete False]]
  "What makes DEST, whose listing is HAVE (see `list-tree`) hold
the tree MANIFEST (`consfig.site.files.tree-manifest`): a dict of \"remove\",
\"mkdir\", \"write\" (manifest entries), \"link\" (manifest entries),
\"chmod\" (mode → paths) and \"chown\" (paths), and \"changes\", what
differs, for people.  Without DELETE, what the manifest lacks is kept; a
thing of the wrong type is replaced whatever DELETE says."
  (setv plan {"remove" [] "mkdir" [] "write" [] "link" [] "chmod" {} "chown" [] "changes" []}
        wanted (dfor e manifest (get e "path") e))
  (when (and (in "" have) (!= (get have "" "type") (get wanted "" "type")))
    (raise (AbortedChange (+ f"{dest} is a {(_kind-name (get have "" "type"))}, "
                             f"not a {(_kind-name (get wanted "" "type"))}; "
                             "not replacing it: move it away, or choose another destination"))))
  (defn note [text] (.append (get plan "changes") text))
  (defn shown [rel] (or rel "."))
  (defn removed-above? [rel]
    (any (gfor r (get plan "remove") (.startswith rel (+ r "/")))))
  (for [rel (sorted have :key (fn [r] #((.count r "/") r)))]
    (setv h (get have rel)
          w (.get wanted rel))
    (when (and (!= rel "") (not (removed-above? rel))
               (or (and w (!= (get w "type") (get h "type")))
                   (and (not w) delete)))
      (.append (get plan "remove") rel)
      (when (not w) (note f"{(shown rel)} would be removed"))))
  (for [e manifest]
    (setv rel (get e "path")
          h (.get have rel)
          gone (or (not h) (removed-above? rel) (in rel (get plan "remove")))
          want-mode (_wanted-mode e mode)
          kind (get e "type"))
    (cond (= kind "dir")
          (when gone
            (.append (get plan "mkdir") rel)
            (note f"{(shown rel)}/ would be created"))
          (= kind "file")
          (when (or gone (!= (.get h "sha256") (get e "sha256")))
            (.append (get plan "write") e)
            (note f"{(shown rel)} would be {(if gone "written" "updated")}"))
          (= kind "link")
          (when (or gone (!= (get h "target") (get e "target")))
            (.append (get plan "link") e)
            (note f"{(shown rel)} would link to {(get e "target")}")))
    (setv fresh (or gone (in e (get plan "write")) (in e (get plan "link"))))
    (when (and (is-not want-mode None) (not (and fresh (= kind "file")))
               (or fresh (!= (get h "mode") want-mode)))
      (.append (.setdefault (get plan "chmod") want-mode []) rel)
      (when (not fresh)
        (note f"{(shown rel)}: mode {(format (get h "mode") "o")} → {(format want-mode "o")}")))
    (when (and (or owner group) (not (and fresh (= kind "file")))
               (or fresh
                   (and owner (not-in (str owner) (get h "users")))
                   (and group (not-in (str group) (get h "groups")))))
      (.append (get plan "chown") rel)
      (when (not fresh)
        (note f"{(shown rel)}: owner {(get h "users" 1)}:{(get h "groups" 1)} → {(or owner (get h "users" 1))}:{(or group (get h "groups" 1))}"))))
  plan)

(defn plan-empty? [plan]
  "Whether PLAN (`tree-plan`) has nothing to do."
  (not (get plan "changes")))

(defn _each [dest code paths]
  ;; CODE run with the paths PATHS (relative to DEST) as arguments, given
  ;; NUL-separated on standard input: one command for any number of them.
  (when paths
    (run (Script (+ "xargs -0 -r " code))
         :input (.join "" (gfor p paths (+ (if p (posixpath.join dest p) dest) "\0")))
         :timeout 600)))

(defn apply-tree-plan [dest plan content * [mode None] [owner None] [group None]
                       [written None]]
  "Carry out PLAN (`tree-plan`) in DEST on the target; CONTENT, given a
manifest entry of a file, returns its bytes.  Each file is written
atomically (see `write-remote-file`), and WRITTEN, when given, called with
its entry and path.  `:no-change` when PLAN is empty."
  (when (plan-empty? plan) (return NO-CHANGE))
  (_each dest "rm -rf --one-file-system --" (get plan "remove"))
  (when (in "" (get plan "mkdir"))
    (make-remote-directory dest))
  (_each dest "mkdir --" (lfor r (get plan "mkdir") :if r r))
  (for [e (get plan "write")]
    (setv target (if (get e "path") (posixpath.join dest (get e "path")) dest))
    (write-remote-file target (content e)
                       :mode (_wanted-mode e mode) :owner (_id owner) :group (_id group))
    (when written (written e target)))
  (for [e (get plan "link")]
    (setv target (posixpath.join dest (get e "path")))
    (run "ln" "-sfnT" "--" (get e "target") target))
  (for [[m paths] (.items (get plan "chmod"))]
    (_each dest f"chmod {(format m "o")} --" paths))
  (_each dest (+ "chown -h " (shlex.quote (_owner-spec owner group)) " --") (get plan "chown"))
  None)

;; Content from the site, rendered or read on the controller in :hostattrs and
;; provided as prerequisite data: the propspec holds only names, and the
;; content travels as data does (after a :python hop, once per version).

(defn _template-data [secret-used]
  ;; `data(iden1, iden2)` in a template: read at once, on the controller,
  ;; and not declared for the host, since only the rendered text travels.
  ;; It is a secret when its source holds secrets or a property before the
  ;; template declared it one; then so is the rendered file.
  (fn [iden1 iden2]
    (setv host (.get current-host)
          secret (any (gfor d (get-hostattrs "data")
                            (and (= #((get d "iden1") (get d "iden2")) #(iden1 iden2))
                                 (get d "secret"))))
          item (or (.get host.provided #(iden1 iden2)) (lookup-data iden1 iden2 :secret secret)))
    (when (is item None)
      (raise (MissingData (+ f"data({(hy.repr iden1)}, {(hy.repr iden2)}): no data source has it; "
                             "sources asked: "
                             (or (.join "; " (gfor s (data-sources) (.describe s))) "none")))))
    (setv content (.content item))
    (when (secret? content)
      (.append secret-used True)
      (setv content (.reveal content)))
    (.decode content "utf-8")))

(defn _received [iden1 iden2]
  ;; A host deployed from a target has its :hostattrs run again there, with
  ;; no site to read: what the controller rendered or read for it came with
  ;; the host.  Declare it, and return it.
  (setv item (lookup-data iden1 iden2))
  (require-data iden1 iden2 :secret (and item item.secret))
  item)

(defn template-variables [variables]
  "What a template sees: `hostname`, `hostattrs` (name → values, newest
first), `hostattr(name)` (the newest value, or None), and VARIABLES."
  {"hostname" (get-hostname)
   "hostattrs" (dict (. (.get current-host) hostattrs))
   "hostattr" (fn [name] (get-hostattr name))
   #** (or variables {})})

(setv template-vars (dict-of (one-of string keyword) anything)
      owner-type (optional (one-of user-name id-number))
      group-type (optional (one-of group-name id-number)))

(defprop templated :posix [#^ abs-path path #^ path template
                           * #^ (optional template-vars) [vars None]
                           #^ owner-type [owner None] #^ group-type [group None]
                           #^ file-mode [mode None] #^ boolean [secret False]]
  "PATH has the content of the Jinja2 TEMPLATE, a file of the site (relative
to the directory of the consfig that defines the host; see
`consfig.site.files`), rendered on the controller before anything connects.
The template sees `hostname`, `hostattrs` and `hostattr(name)` (what the
properties before this one declared), `data(iden1, iden2)` (an item of
prerequisite data, as text) and the variables VARS.  A variable it uses and
nothing defines is an error naming the template's file and line.  The
rendered text travels as prerequisite data, not in the propspec.  When the
template reads a secret (an item from a source of secrets such as :pass, or
one a property before this one declared secret), or with SECRET, the file is
a secret: mode 0600 unless MODE says otherwise, and never a diff."
  (:watch [(watch-path path)])
  (:desc f"{path} rendered from {template}")
  (:hostattrs
    (if (on-target?)
        (_received "--template" path)
        (do (setv secret-used [])
            (try
              (setv text (render-template template (template-variables vars)
                                          :data (_template-data secret-used)))
              (except [e ConsfigError]
                (setv e.message f"file.templated {path}: {e.message}")
                (raise)))
            (provide-data "--template" path (if (or secret secret-used) (Secret text) text)))))
  (:simulates True)
  (:apply
    ;; A rendered config file is shown as a diff (in check mode too), as
    ;; `has-content` shows one; a secret is compared without one.
    (setv item (get-data "--template" path))
    (if item.secret
        (install-data "--template" path path :mode mode :owner owner :group group)
        (let [r (update-file path (.content item) :mode mode :owner owner :group group)]
          (when (and (is r None) (not (on-target?)))
            (emit (data-sent-event item path)))
          r))))

(defn _site-file-iden [root e]
  ;; A file of the site is named by its path relative to the site
  ;; directory, or its absolute path outside it.
  (setv full (if (get e "path") (os.path.join root (get e "path")) root)
        site (site-directory))
  (if (and site (.startswith full (+ site os.sep)))
      (os.path.relpath full site)
      full))

(defn _tree-item [dest]
  (setv manifest (json.loads (get-data-string "--site-tree" dest))
        #(kind have) (list-tree dest))
  (when (= kind "link")
    (raise (AbortedChange f"{dest} is a symbolic link; give the path it points to")))
  #(manifest have))

(defn _changes [plan]
  (setv changes (get plan "changes"))
  (.join "\n" (+ (cut changes 20)
                 (if (> (len changes) 20) [f"… and {(- (len changes) 20)} more"] []))))

;; In check mode, the diffs of the first few files a tree would change:
;; each costs reading the destination, a round trip over a POSIX chain.
(setv _TREE-DIFFS 20
      _TREE-DIFF-BYTES (* 256 1024))

(defn _tree-diffs [dest plan have]
  (setv shown 0
        untold 0)
  (for [e (get plan "write")]
    (setv rel (get e "path")
          target (if rel (posixpath.join dest rel) dest)
          new (get-data-bytes "--site-file" (get e "iden2")))
    (if (and (< shown _TREE-DIFFS) (<= (len new) _TREE-DIFF-BYTES))
        (do (emit (diff-event target (_diff target
                                            (when (= (.get (.get have rel {}) "type") "file")
                                              (read-bytes target))
                                            new)))
            (+= shown 1))
        (+= untold 1)))
  (when untold
    (inform f"{dest}: {untold} more file(s) would change (diffs not shown)")))

(defprop copied-from-site :posix [#^ abs-path dest #^ path source
                                  * #^ owner-type [owner None] #^ group-type [group None]
                                  #^ file-mode [mode None] #^ boolean [delete False]]
  "DEST is a copy of SOURCE, a file or a directory tree of the site
(relative to the directory of the consfig that defines the host): its files
with their content, modes (MODE instead, when given: directories get it with
x wherever it has r) and symlinks, owned by OWNER and GROUP when given.
With DELETE, what DEST holds that SOURCE lacks is removed, as rsync's
--delete does.  Files are compared by SHA-256, listed on the target by one
command, so an unchanged tree costs no transfer; a file that differs is
written atomically.  The files travel as prerequisite data.  In check mode,
the diffs of the first 20 files that would change are shown (files up to
256 KiB), and the others counted."
  (:watch [(watch-path dest)])
  (:desc f"{dest} is a copy of the site's {source}")
  (:hostattrs
    (if (on-target?)
        (let [tree (_received "--site-tree" dest)]
          (when tree
            (for [e (json.loads (.content tree)) :if (= (get e "type") "file")]
              (_received "--site-file" (get e "iden2")))))
        (do (setv root (site-path source "site file")
                  manifest (tree-manifest root))
            (for [e manifest :if (= (get e "type") "file")]
              (setv (get e "iden2") (_site-file-iden root e))
              (provide-data "--site-file" (get e "iden2")
                            (with [f (open (if (get e "path") (os.path.join root (get e "path")) root)
                                           "rb")]
                              (.read f))
                            :version (get e "sha256")))
            (provide-data "--site-tree" dest (json.dumps manifest :sort-keys True)))))
  (:check
    (setv #(manifest have) (_tree-item dest)
          plan (tree-plan dest manifest have :mode mode :owner owner :group group :delete delete))
    (when (checking?)
      (_tree-diffs dest plan have))
    (or (plan-empty? plan) (Drift (_changes plan))))
  (:apply
    (setv #(manifest have) (_tree-item dest)
          plan (tree-plan dest manifest have :mode mode :owner owner :group group :delete delete))
    (apply-tree-plan dest plan (fn [e] (get-data-bytes "--site-file" (get e "iden2")))
                     :mode mode :owner owner :group group
                     :written (fn [e path]
                                ;; On a target, the content came with the host.
                                (when (not (on-target?))
                                  (emit (data-sent-event (get-data "--site-file" (get e "iden2"))
                                                         path)))))))

;; Files from the network, and archives unpacked.

(setv http-url (matching "http-url" "an http:// or https:// URL (no whitespace, NUL or quote)"
                         r"https?://[^\s\x00\"'\\]+")
      sha256-digest (matching "sha256-digest" "a SHA-256 digest (64 hexadecimal digits)"
                              r"[0-9A-Fa-f]{64}")
      archive-format (enum "tar" "zip"))

;; $1 destination, $2 URL, $3 the SHA-256 wanted, $4 seconds, $5 a mode
;; (octal) or "".  The download goes to a temporary file beside the
;; destination, renamed over it only once its digest is right.  Exit 65: the
;; digest is another (printed); 69: nothing here downloads; 70: the
;; download failed (why, on standard error).
(setv _DOWNLOAD (+ SAFE-WALK "
dest=$1 url=$2 want=$3 seconds=$4 mode=$5
cf_walk \"$dest\" 0
dir=${dest%/*}; [ -n \"$dir\" ] || dir=/
tmp=$(mktemp \"$dir/.consfig-XXXXXXXX\") || exit 70
trap 'rm -f \"$tmp\"' EXIT
trap 'exit 129' HUP INT TERM PIPE
if command -v curl >/dev/null 2>&1; then
  curl -fsSL --proto =http,https --proto-redir =http,https --max-time \"$seconds\" \\
    -o \"$tmp\" -- \"$url\" || exit 70
elif command -v wget >/dev/null 2>&1; then
  wget -q --timeout=\"$seconds\" -O \"$tmp\" -- \"$url\" || exit 70
elif command -v python3 >/dev/null 2>&1; then
  python3 -c 'import shutil, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[3])) as r, open(sys.argv[2], \"wb\") as f:
    shutil.copyfileobj(r, f)' \"$url\" \"$tmp\" \"$seconds\" || exit 70
else
  echo 'there is no curl, wget or python3 here to download with' >&2; exit 69
fi
got=$(sha256sum < \"$tmp\") || exit 70
got=${got%% *}
if [ \"$got\" != \"$want\" ]; then echo \"$got\"; exit 65; fi
if [ -f \"$dest\" ] && [ ! -L \"$dest\" ]; then
  set -- $(stat -c '%a %u %g' -- \"$dest\")
  chmod \"$1\" \"$tmp\" && { chown \"$2:$3\" \"$tmp\" 2>/dev/null || true; }
else
  chmod \"$(printf '%o' $(( 0666 & ~0$(umask) )))\" \"$tmp\"
fi
if [ -n \"$mode\" ]; then chmod \"$mode\" \"$tmp\"; fi
sync -- \"$tmp\" 2>/dev/null || true
mv -f -T -- \"$tmp\" \"$dest\" || exit 70
trap - EXIT"))

(defn _mismatch [url dest got want]
  (FailedChange (+ f"{url}: its SHA-256 is {got}, not the {want} wanted; refused, and "
                   f"{dest} was left as it was")))

(defn _download-here [url dest want seconds mode]
  ;; A Python of ours on the target: urllib, into a temporary file beside
  ;; DEST, hashed as it comes, renamed over DEST only once its digest is right.
  ;; Made, looked at and renamed in the directory the safe walk holds.
  (setv #(dirfd name) (walk dest))
  (try
    (_download-into dirfd name url dest want seconds mode)
    (finally (os.close dirfd))))

(defn _download-into [dirfd name url dest want seconds mode]
  (import stat urllib.request)  ; lazy: 5 ms or more, for a download alone
  (setv #(fd tmp) (create-temporary dirfd)
        h (hashlib.sha256))
  (try
    (with [f (os.fdopen fd "wb")]
      (try
        (with [r (urllib.request.urlopen url :timeout seconds)]
          (while (setx chunk (.read r 65536))
            (.update h chunk)
            (.write f chunk)))
        (except [e OSError]
          (raise (FailedChange f"could not download {url}: {e}"))))
      (when (!= (.hexdigest h) want)
        (raise (_mismatch url dest (.hexdigest h) want)))
      (setv old (try (os.stat name :dir-fd dirfd :follow-symlinks False)
                     (except [FileNotFoundError] None)))
      (cond (is-not mode None) (os.fchmod (.fileno f) mode)
            (and old (stat.S-ISREG old.st-mode))
            (do (os.fchmod (.fileno f) (stat.S-IMODE old.st-mode))
                (os.fchown (.fileno f) old.st-uid old.st-gid))
            True (os.fchmod (.fileno f) (& 0o666 (bnot (_umask)))))
      (.flush f)
      (os.fsync (.fileno f)))
    (os.rename tmp name :src-dir-fd dirfd :dst-dir-fd dirfd)
    (except [BaseException]
      (try (os.unlink tmp :dir-fd dirfd) (except [FileNotFoundError] None))
      (raise))))

(defn _umask []
  (setv m (os.umask 0o22))
  (os.umask m)
  m)

(defn download [url dest sha256 * [timeout 600] [mode None]]
  "Make DEST on the target the file at URL, whose SHA-256 must be SHA256:
downloaded there, by the target's own Python over a `:python` hop (urllib),
else by curl, wget or python3, whichever it has, into a temporary file
beside DEST, renamed over it only once its digest is right.  A wrong digest
is a `FailedChange`, and DEST is left as it was."
  (setv want (.lower sha256))
  (if (. (connection) python?)
      (_download-here url dest want timeout mode)
      (do (setv r (run (Script _DOWNLOAD dest url want timeout (if mode (format mode "o") ""))
                       :check False :timeout (+ timeout 60)))
          (cond (= r.exit-code 0) None
                (= r.exit-code 65) (raise (_mismatch url dest (.strip r.stdout) want))
                (walk-refusal r.exit-code r.stderr dest (. (connection) where))
                (raise (walk-refusal r.exit-code r.stderr dest (. (connection) where)))
                (= r.exit-code 69) (raise (FailedChange (+ f"cannot download {url}: " (.strip r.stderr)
                                                           "; install curl or wget")))
                True (raise (FailedChange (+ f"could not download {url} to {dest}: "
                                             (or (.strip r.stderr) f"exit {r.exit-code}"))))))))

(defprop downloaded :posix [#^ http-url url #^ abs-path path * #^ sha256-digest sha256
                            #^ file-mode [mode None] #^ seconds [timeout 600]]
  "PATH is the file at URL, whose SHA-256 is SHA256.  It is downloaded on
the target, with what it has — its own Python's urllib over a `:python`
hop, else curl, wget or python3 — into a temporary file beside PATH, renamed
over it only once its digest is SHA256: a download with another digest is
refused, and nothing is written.  Nothing is downloaded while PATH has that
digest.  PATH keeps its mode and owner, unless MODE; TIMEOUT bounds the
download."
  (:watch [(watch-path path)])
  (:desc f"{path} downloaded from {url}")
  (:check (let [have (_digest-on-target path)]
            (cond (= have (.lower sha256)) True
                  (is have None) (Drift f"{path} would be downloaded from {url}")
                  True (Drift f"{path} has SHA-256 {have}: it would be downloaded again from {url}"))))
  (:apply (download url path sha256 :timeout timeout :mode mode)))

(setv _TAR-MEMBER (re.compile (+ r"^(?P<type>\S)\S*\s+\S+\s+.*?\d{4}-\d\d-\d\d \d\d:\d\d(?::\d\d)? "
                                 r"\"(?P<name>(?:[^\"\\]|\\.)*)\""
                                 r"(?:(?P<kind> -> | link to )\"(?P<target>(?:[^\"\\]|\\.)*)\")?$")))

(defn _c-unquoted [s]
  ;; GNU tar's --quoting-style=c, under LC_ALL=C: every byte that is not
  ;; printable ASCII is an escape.
  (.decode (.encode (.decode (.encode s "ascii") "unicode_escape") "latin-1")
           "utf-8" "surrogateescape"))

(defn tar-members [listing]
  "The members of a tar archive, from `tar -tv --quoting-style=c` run under
LC_ALL=C: `#(type name link-target)`, type the first letter of the mode
(`-` file, `d` directory, `l` symlink, `h` hard link, …)."
  (lfor line (.splitlines listing)
        :if (.strip line)
        :setv m (or (.match _TAR-MEMBER line)
                    (raise (FailedChange f"cannot read this line of tar's listing: {line !r}")))
        #((if (= (.group m "kind") " link to ") "h" (.group m "type"))
          (_c-unquoted (.group m "name"))
          (when (.group m "target") (_c-unquoted (.group m "target"))))))

(defn _escapes? [path]
  (or (.startswith path "/")
      (in ".." (.split path "/"))))

(defn member-problem [kind name target]
  "What makes an archive's member unfit to unpack into a directory — its
name or link leads out of it, or it is a device — or None."
  (cond (_escapes? name) f"{name !r} leads out of the directory"
        (in kind "cbp") f"{name !r} is a device or a pipe"
        (and (= kind "l") (or (.startswith target "/")
                              (.startswith (posixpath.normpath (posixpath.join (posixpath.dirname name)
                                                                               target))
                                           "..")))
        f"{name !r} is a symbolic link to {target !r}, out of the directory"
        (and (= kind "h") (_escapes? target)) f"{name !r} is a hard link to {target !r}, out of the directory"
        True None))

(defn _archive-kind [archive kind]
  (cond kind (keyword-name kind)
        (.endswith (.lower archive) ".zip") "zip"
        True "tar"))

(defn archive-members [archive kind]
  "The members of ARCHIVE (on the target), a tar or zip archive: as
`tar-members` gives them."
  (if (= kind "zip")
      (let [names (run "unzip" "-Z1" "--" archive :check False :timeout 600)
            long (run "unzip" "-Z" "--" archive :check False :timeout 600)]
        (when (= names.exit-code 127)
          (raise (FailedChange "unzip is not installed here: add (apt.installed \"unzip\") before")))
        (when (not names.ok?)
          (raise (FailedChange f"cannot list {archive}: {(.strip (+ names.stderr names.stdout))}")))
        (when (any (gfor l (.splitlines long.stdout) (re.match r"^l[rwxsStT-]{9}\s" l)))
          (raise (FailedChange f"{archive} holds symbolic links, which are not unpacked from a zip archive")))
        (lfor n (.splitlines names.stdout) :if n #((if (.endswith n "/") "d" "-") n None)))
      ;; --absolute-names: the names as they are, not as tar would rewrite
      ;; them (without a leading / or ../), so that they can be refused.
      (let [r (run "tar" "-tv" "--absolute-names" "--quoting-style=c" "-f" archive
                   :env {"LC_ALL" "C"} :check False :timeout 600)]
        (when (not r.ok?)
          (raise (FailedChange f"cannot list {archive}: {(.strip r.stderr)}")))
        (tar-members r.stdout))))

(defn _marker [archive directory]
  (posixpath.join directory f".consfig-extracted-{(cut (.hexdigest (hashlib.sha256 (.encode archive "utf-8" "surrogateescape"))) 16)}"))

(defn _extracted? [archive directory strip]
  (setv have (_digest-on-target archive))
  (when (is have None)
    (return (if (checking?)
                (Drift f"{archive} does not exist yet; it would be unpacked into {directory}")
                (raise (FailedChange f"{archive} does not exist (or is not a regular file): there is nothing to unpack")))))
  (setv want f"{have} strip-components={strip}\n")
  (or (= (read-text (_marker archive directory)) want)
      (Drift f"{archive} would be unpacked into {directory}")))

(defn unpack [archive directory * [kind None] [strip 0]]
  "Unpack the tar or zip ARCHIVE (on the target) into DIRECTORY, once its
members are all found to stay inside it (`member-problem`); then record the
archive's SHA-256 in a marker beside them, which says it is unpacked."
  (setv kind (_archive-kind archive kind)
        members (archive-members archive kind)
        problems (lfor [k n t] members :setv p (member-problem k n t) :if p p))
  (when problems
    (raise (FailedChange (+ f"{archive} is not unpacked: "
                            (.join "; " (cut problems 5))
                            (if (> (len problems) 5) f"; and {(- (len problems) 5)} more" "")))))
  (when (and strip (= kind "zip"))
    (raise (FailedChange ":strip-components is for tar archives, not zip ones")))
  (setv digest (_digest-on-target archive))
  (make-remote-directory directory)
  (if (= kind "zip")
      (run "unzip" "-o" "-q" archive "-d" directory :timeout 3600)
      (run "tar" "-x" "--no-same-owner" f"--strip-components={strip}" "-f" archive "-C" directory
           :timeout 3600))
  (write-remote-file (_marker archive directory) f"{digest} strip-components={strip}\n")
  (inform f"{(len members)} members unpacked"))

(defprop extracted :posix [#^ abs-path archive #^ abs-path directory
                           * #^ (optional archive-format) [format None]
                           #^ (int-range 0 100) [strip-components 0]]
  "The tar or zip ARCHIVE, a file on the target (`downloaded`, say), is
unpacked into DIRECTORY (made if need be): tar archives with any
compression tar knows, zip ones with unzip; FORMAT (`:tar` or `:zip`) when
the name does not say (a .zip is zip, anything else tar).
STRIP-COMPONENTS leading directories of each member's name are dropped (tar
only).  An archive whose members would escape DIRECTORY — absolute names,
`..`, links leading out, devices — is refused, and nothing unpacked.  It
holds while a marker in DIRECTORY holds the archive's SHA-256: a new
archive is unpacked over the old files.  Files belong to whoever deploys
(never the archive's owners)."
  (:watch [(watch-path directory)])
  (:desc f"{archive} unpacked into {directory}")
  (:check (_extracted? archive directory strip-components))
  (:apply (unpack archive directory :kind format :strip strip-components)))

(defprop exists :posix [#^ abs-path path * #^ file-mode [mode None]]
  "PATH exists as a regular file: where there is none, an empty one is made
(with MODE, when given); the content of one that is there is left alone.
Anything else at PATH (a directory, a device) is a failure."
  (:watch [(watch-path path)])
  (:desc f"{path} exists")
  (:check (or (run-ok? "test" "-f" path) (Drift f"{path} would be created")))
  (:apply
    (when (remote-exists? path)
      (raise (FailedChange f"{path} exists and is not a regular file; not replacing it")))
    (write-remote-file path b"" :mode mode)))

(defprop contains-conf-tab :posix [#^ abs-path path #^ conf-pair #* pairs]
  "Like `contains-conf-space`, for a config file of `key<TAB>value` lines:
a new or changed line has a tab between key and value (a changed line keeps
the whitespace it had)."
  (:watch [(watch-path path)])
  (:simulates True)
  (:invariant (not (pairs-problem pairs conf-key)) (pairs-problem pairs conf-key))
  (:desc f"{path} has {(describe-pairs pairs " ")}")
  (:apply (_simple-conf-update path (conf-pairs pairs) _SPACE-KV
                               (fn [k v sep] (+ k (or sep "\t") v)) _strip-eq)))

(setv block-name (matching "block-name"
                           "a block name (one line, not starting with - or whitespace)"
                           r"[^\s\x00-][^\n\r\x00]*")
      comment-prefix (matching "comment-prefix" "a comment prefix such as # or ; (no whitespace)"
                               r"[^\s\x00]+"))

(defn block-lines [lines name block comment]
  "LINES with the block NAME, between the lines `COMMENT BEGIN consfig NAME`
and `COMMENT END consfig NAME`, holding BLOCK (a list of lines), or gone when
BLOCK is None.  A new block is appended.  A begin marker without its end is a
failure: what follows it is not ours to replace."
  (setv begin f"{comment} BEGIN consfig {name}"
        end f"{comment} END consfig {name}"
        i (if (in begin lines) (.index lines begin) None)
        j (when (is-not i None)
            (next (gfor [n l] (enumerate lines) :if (and (> n i) (= l end)) n) None))
        new (if (is block None) [] [begin #* block end]))
  (cond (is i None) (+ lines new)
        (is j None) (raise (FailedChange f"the file has the line {(hy.repr begin)} but not {(hy.repr end)} after it; mend it by hand"))
        True (+ (cut lines i) new (cut lines (+ j 1) None))))

(defprop has-block :posix [#^ abs-path path #^ block-name name #^ lines #* lines
                           #^ comment-prefix [comment "#"]]
  "PATH has LINES between two marker lines, `# BEGIN consfig NAME` and
`# END consfig NAME` (COMMENT in place of #, for files commented otherwise):
the block is replaced when it differs, and appended when there is none.
Creates PATH.  Unapplying removes the block with its markers, as Ansible's
blockinfile does.

  (file.has-block \"/etc/ssh/ssh_config\" \"backup\" \"Host backup\" \"  User borg\")"
  (:watch [(watch-path path)])
  (:simulates True)
  (:desc f"{path} has block {name}")
  (:apply (map-file-lines path (fn [have] (block-lines have name (_lines lines) comment))
                          :create True))
  (:unapply (map-file-lines path (fn [have] (block-lines have name None comment)))))

(defn line-matching-lines [lines regex line]
  "LINES with LINE in place of the first line matching REGEX and without the
other lines matching it; with LINE appended when none matches and LINE is
not there."
  (setv r (re.compile regex)
        out []
        placed False)
  (for [l lines]
    (cond (not (.search r l)) (.append out l)
          (not placed) (do (.append out line) (setv placed True))))
  (if (or placed (in line out)) out (+ out [line])))

(defprop has-line-matching :posix [#^ abs-path path #^ regex regex #^ line line]
  "PATH has LINE in place of the lines matching REGEX (Python syntax,
searched anywhere in a line): the first such line becomes LINE and any other
is removed; when none matches, LINE is appended, unless PATH has it already.
Creates PATH.  Ansible's lineinfile, with `regexp`.

  (file.has-line-matching \"/etc/ssh/sshd_config\" r\"^#?\\s*PermitRootLogin\\b\" \"PermitRootLogin no\")"
  (:watch [(watch-path path)])
  (:simulates True)
  (:desc f"{path} has {line} for /{regex}/")
  (:apply (map-file-lines path (fn [have] (line-matching-lines have regex line)) :create True)))

(defprop empty-directory-does-not-exist :posix [#^ abs-path #* directories]
  "None of DIRECTORIES exists; each that does must be empty, and is removed
with rmdir.  A directory with anything in it is a failure, and stays: for
directories that must go only when nothing is left in them."
  (:watch (lfor d directories (watch-path d)))
  (:desc (_plural directories))
  (:check (_none-exist directories "removed"))
  (:apply (for [d directories :if (remote-exists? d)]
            (setv r (run "rmdir" "--" d :check False))
            (when (not r.ok?)
              (raise (FailedChange f"{d} was not removed: {(.strip r.stderr)}"))))))

(defn _find-first [directory #* tests]
  ;; The first path below DIRECTORY (itself included) that passes TESTS, or
  ;; "" when none does; symlinks are not followed.
  (.strip (output "find" directory #* tests "-print" "-quit")))

(defn _mode-word [mode]
  ;; Five digits: GNU chmod keeps a directory's setgid bit for a shorter
  ;; number, and `find -perm` would then never see the mode asked for.
  (.format "{:05o}" mode))

(defn _tree-mode-tests [files directories]
  (lfor [kind mode] [["f" files] ["d" directories]] :if (is-not mode None)
        ["-type" kind "!" "-perm" (_mode-word mode)]))

(defprop tree-has-modes :posix [#^ abs-path directory * #^ file-mode [files None]
                                #^ file-mode [directories None]]
  "Every regular file below DIRECTORY has mode FILES, and every directory
(DIRECTORY too) mode DIRECTORIES; either may be left out.  Symlinks are not
followed.  Ansible's `file … recurse: yes`, with a mode for each kind."
  (:unwatched "a whole tree: inotify watches one directory at a time, so the tree is re-checked at the host's interval")
  (:desc (+ f"{directory} has modes"
            (if (is files None) "" f" {(format files "o")} for files")
            (if (is directories None) "" f" {(format directories "o")} for directories")))
  (:invariant (not (and (is files None) (is directories None))) "needs :files or :directories")
  (:check (if (run-ok? "test" "-d" directory)
              (do (for [t (_tree-mode-tests files directories)]
                    (setv bad (_find-first directory #* t))
                    (when bad (return (Drift f"{bad} has another mode"))))
                  True)
              (Drift f"{directory} is not a directory")))
  (:apply (for [t (_tree-mode-tests files directories)]
            (run "find" directory #* t "-exec" "chmod" (get t -1) "--" "{}" "+"))))

(defn _tree-owner-tests [user group]
  (+ (if (is user None) [] ["!" "-user" (str user)])
     (if (and user group) ["-o"] [])
     (if (is group None) [] ["!" "-group" (str group)])))

(defprop tree-has-ownership :posix [#^ abs-path directory * #^ (one-of user-name id-number) [user None]
                                    #^ (one-of group-name id-number) [group None]]
  "DIRECTORY and everything below it (symlinks themselves, not what they
point to) is owned by USER and/or GROUP, names or numeric ids."
  (:unwatched "a whole tree: inotify watches one directory at a time, so the tree is re-checked at the host's interval")
  (:desc (+ f"{directory} and below have"
            (if (is user None) "" f" owner {user}")
            (if (is group None) "" f" group {group}")))
  (:invariant (not (and (is user None) (is group None))) "needs :user or :group")
  (:check (if (run-ok? "test" "-d" directory)
              (let [bad (_find-first directory "(" #* (_tree-owner-tests user group) ")")]
                (or (not bad) (Drift f"{bad} has another owner")))
              (Drift f"{directory} is not a directory")))
  (:apply (run "chown" "-R" "-h" (_owner-spec user group) "--" directory)))

(setv FETCH-LIMIT (* 8 1024 1024))

(defn _fetched [path dest mode]
  (setv content (read-bytes path :follow True))
  (when (is content None)
    (raise (FailedChange f"there is no {path} to fetch")))
  (when (> (len content) FETCH-LIMIT)
    (raise (FailedChange (+ f"{path} is {(len content)} bytes: file.fetched takes files of up to "
                            f"{FETCH-LIMIT} bytes (for more, copy it with rsync or scp)"))))
  (when (= (sha256-hex content) (get-data-string FETCHED-DATA dest))
    (return NO-CHANGE))
  (when (checking?)
    (inform f"{path} ({(len content)} bytes) would be fetched to {dest}")
    (return WOULD-CHANGE))
  (emit (fetched-event path dest mode content))
  :changed)

(defprop fetched :posix [#^ abs-path path #^ abs-path dest * #^ file-mode [mode 0o600]]
  "The file PATH of the target (read through symlinks) is copied to DEST on
the machine the deployment runs from — the controller, or the host itself
when it applies its own image — written atomically with MODE (0600 unless
told, since what is fetched is often a key or a dump).  Compared by digest:
an unchanged file is not sent again.  Its content travels in the
deployment's event stream and is written before any sink sees it; no
report, log or `--json` output shows it.  Files of up to 8 MiB.  Like
Ansible's `fetch`: `(file.fetched \"/etc/ssh/ssh_host_ed25519_key.pub\"
f\"/srv/keys/{host}.pub\")`.  It watches the target's PATH; DEST, where
the deployment runs from, is compared at each deployment."
  (:desc f"{path} fetched to {dest}")
  (:watch [(watch-path path)])
  (:simulates True)
  (:hostattrs
    (if (on-target?)
        (require-data FETCHED-DATA dest)
        ;; "" when DEST is missing or unreadable: it is fetched, or the
        ;; write says why.
        (provide-data FETCHED-DATA dest (local-digest dest))))
  (:apply (_fetched path dest mode)))

(export :objects [ensure-mode templated copied-from-site list-tree tree-plan plan-empty? apply-tree-plan
                  dir-mode template-variables has-content exists-with-content contains-lines lacks-lines
                  lacks-lines-matching regex-replaced-lines has-mode has-ownership
                  does-not-exist directory-exists directory-does-not-exist
                  containing-directory-exists symlinked is-copy-of data-uploaded
                  secret-uploaded host-data-uploaded host-secret-uploaded
                  data-cache-purged install-data
                  contains-conf-space contains-conf-equals contains-conf-shell
                  contains-ini-settings update-file map-file-lines read-bytes read-text
                  content->bytes add-lines conf-space-text conf-equals-text conf-pairs
                  combined-results remove-files
                  describe-pairs pairs-problem conf-key conf-value conf-pair
                  remove-lines downloaded extracted download unpack archive-members
                  tar-members member-problem http-url sha256-digest
                  exists contains-conf-tab has-block block-lines has-line-matching
                  line-matching-lines empty-directory-does-not-exist tree-has-modes
                  tree-has-ownership file-lines fetched FETCH-LIMIT])
