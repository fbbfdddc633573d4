"Files, directories and links on the target.

Every property here is `:posix`: it reads and writes through the connection,
so it works over any chain.  A change to a file's content is reported as a
unified diff event (shown at -v), except for content marked secret.

Content is compared as bytes: desired text is encoded as UTF-8, `bytes` are
written as they are, and a file is never decoded lossily.  The properties
that edit lines read a file with `read-text`, whose undecodable bytes come
back as lone surrogates (Python's \"surrogateescape\") and are written back
unchanged, as is every line the property has no business with."

(eval-when-compile (require consfig.property [defprop]))
(import consfig.types *)
(import difflib
        posixpath
        re
        shlex
        consfig.actions [NO-CHANGE Script run run-ok? run-script output
                         write-remote-file remote-exists?]
        consfig.context [connection]
        consfig.engine [Drift WOULD-CHANGE checking? emit inform]
        consfig.events [diff-event]
        consfig.errors [FailedChange])

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
        True (for [k (cut pairs 0 None 2)]
               (when (not (.accepts key-type k))
                 (return (+ "each key " (.explain key-type k))))))
  None)

(defn _lines [xs]
  "Lines given as strings (possibly several lines each) or lists of them."
  (setv out [])
  (for [x xs]
    (if (isinstance x #(list tuple))
        (.extend out (_lines x))
        (.extend out (_file-lines x))))
  out)

(defn _text [content]
  (if (isinstance content #(list tuple))
      (+ (.join "\n" (_lines content)) "\n")
      content))

(defn _unlines [lines]
  (.join "" (gfor l lines (+ l "\n"))))

(defn _file-lines [text]
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

(defn read-bytes [path]
  "The bytes of PATH on the target, or None when it does not exist."
  (try (.read-file (connection) path)
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

(defn _diff [path old new]
  (setv text (.join "" (difflib.unified-diff (.splitlines (_shown old) True)
                                             (.splitlines (_shown new) True)
                                             (+ "a" path) (+ "b" path))))
  (cond text text
        (is old None) f"+++ b{path}\n(a new, empty file)\n"
        True f"--- a{path}\n+++ b{path}\n(the bytes differ where they read the same)\n"))

(defn update-file [path new * [mode None] [secret False]]
  "Make PATH contain NEW, text or bytes (keeping its mode and owner, or
setting MODE), and report a diff unless SECRET.  `:no-change` when it
already has exactly those bytes.  In check mode, change nothing: report
what would change and return `:would-change`."
  (setv old (read-bytes path)
        new (content->bytes new))
  (when (= old new)
    (return (if (is mode None) NO-CHANGE (_ensure-mode path mode))))
  (when (checking?)
    (inform (cond (is old None) f"{path} would be created"
                  secret f"{path} would change (secret: no diff)"
                  True f"{path} would change"))
    (when (not secret)
      (emit (diff-event path (_diff path old new))))
    (return WOULD-CHANGE))
  (write-remote-file path new :mode mode)
  (when (not secret)
    (emit (diff-event path (_diff path old new)))))

(defn map-file-lines [path f * [create False]]
  "Replace the lines of PATH by what F returns given them (without their
newlines; see `read-text` for bytes that are not UTF-8).  Nothing to do when
PATH does not exist, unless CREATE."
  (setv old (read-text path))
  (if (and (is old None) (not create))
      NO-CHANGE
      (update-file path (_unlines (f (_file-lines (or old "")))))))

(defn _mode-of [path]
  (int (.strip (output "stat" "-c" "%a" "--" path)) 8))

(defn _ensure-mode [path mode]
  (setv have (_mode-of path))
  (cond (= have mode) NO-CHANGE
        (checking?) (do (inform (_mode-change path have mode)) WOULD-CHANGE)
        True (run "chmod" (format mode "o") "--" path)))

(defn _mode-change [path have want]
  f"{path}: mode {(format have "o")} → {(format want "o")}")

(defn _plural [xs]
  (if (= (len xs) 1)
      f"{(get xs 0)} does not exist"
      f"{(.join ", " xs)} do not exist"))

(defprop has-content :posix [#^ abs-path path #^ content content
                              * #^ file-mode [mode None] #^ boolean [secret False]]
  "PATH has exactly CONTENT: a string (written as UTF-8), `bytes` (written
as they are), or a list of lines (joined, with a final newline).  The file's
mode and owner are kept, unless MODE is given.  With SECRET, no diff of the
content is ever reported."
  (:simulates True)
  (:desc f"{path} has content")
  (:apply (update-file path (_text content) :mode mode :secret secret)))

(defprop exists-with-content :posix [#^ abs-path path #^ content content
                                      * #^ file-mode [mode None] #^ boolean [secret False]]
  "Like `has-content`, but unapplying deletes PATH rather than restoring what
was there before: for files the deployment creates, not for files that came
with the OS."
  (:simulates True)
  (:desc f"{path} exists with content")
  (:apply (update-file path (_text content) :mode mode :secret secret))
  (:unapply
    (cond (not (remote-exists? path)) NO-CHANGE
          (checking?) (do (inform f"{path} would be removed") WOULD-CHANGE)
          True (run "rm" "-f" "--" path))))

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
  (:desc f"{path} contains {(.join " | " (_lines lines))}")
  (:apply (add-lines path lines))
  (:unapply (remove-lines path lines)))

(defprop lacks-lines :posix [#^ abs-path path #^ lines #* lines]
  "PATH has none of LINES.  Nothing to do if PATH does not exist.
Unapplying appends LINES where missing, as `contains-lines` does."
  (:simulates True)
  (:desc f"{path} lacks {(.join " | " (_lines lines))}")
  (:apply (remove-lines path lines))
  (:unapply (add-lines path lines)))

(defprop lacks-lines-matching :posix [#^ abs-path path #^ regex #* patterns]
  "PATH has no line matching any of the regular expressions PATTERNS
(Python syntax, searched anywhere in the line).  Nothing to do if PATH does
not exist."
  (:simulates True)
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
  (:desc f"{path} has s/{regex}/{replacement}/ applied")
  (:apply
    (setv r (re.compile regex))
    (map-file-lines path (fn [have] (lfor l have (.sub r replacement l :count 1))))))

(defprop has-mode :posix [#^ abs-path path #^ file-mode mode]
  "PATH has permission bits MODE (an integer, such as 0o644)."
  (:desc f"{path} has mode {(format mode "o")}")
  (:check (if (remote-exists? path)
              (let [have (_mode-of path)]
                (or (= have mode) (Drift (_mode-change path have mode))))
              (Drift f"{path} does not exist")))
  (:apply (run "chmod" (format mode "o") "--" path)))

(defn _owner-spec [user group]
  (+ (if (is user None) "" (str user))
     (if (is group None) "" f":{group}")))

(defn _has-ownership? [path user group]
  ;; Names are compared with names and numbers with numbers, whichever was given.
  (setv #(u g un gn) (.split (.strip (output "stat" "-c" "%u %g %U %G" "--" path))))
  (defn same? [want id name]
    (or (is want None) (in (str want) #(id name))))
  (or (and (same? user u un) (same? group g gn))
      (Drift f"{path}: owner {un}:{gn} → {(or user un)}:{(or group gn)}")))

(defprop has-ownership :posix [#^ abs-path path * #^ (one-of user-name id-number) [user None]
                               #^ (one-of group-name id-number) [group None]]
  "PATH (a symlink itself, not what it points to) is owned by USER and/or
GROUP: names or numeric ids."
  (:desc (+ f"{path} has"
            (if (is user None) "" f" owner {user}")
            (if (is group None) "" f" group {group}")))
  (:invariant (not (and (is user None) (is group None))) "needs :user or :group")
  (:check (_has-ownership? path user group))
  (:apply
    (if (is user None)
        (run "chgrp" "-h" "--" (str group) path)
        (run "chown" "-h" "--" (_owner-spec user group) path))))

(defprop does-not-exist :posix [#^ abs-path #* paths]
  "None of PATHS exists (files or symlinks; not directories)."
  (:desc (_plural paths))
  (:check (_none-exist paths "removed"))
  (:apply (run "rm" "-f" "--" #* paths)))

(defn _none-exist [paths what]
  (setv there (lfor p paths :if (remote-exists? p) p))
  (or (not there) (Drift (+ (.join ", " there) f" would be {what}"))))

(defprop directory-exists :posix [#^ abs-path directory]
  "DIRECTORY exists, with its parents."
  (:desc f"{directory} exists")
  (:check (or (run-ok? "test" "-d" directory)
              (Drift f"{directory} would be created")))
  (:apply (run "mkdir" "-p" "--" directory)))

(defn _remove-directories [directories]
  ;; `rm -rf DIR/` on a symlink to a directory would empty the directory it
  ;; points to; a symlink or a file where a directory was expected is a
  ;; mistake to report, not something to delete.
  (for [d directories]
    (when (remote-exists? d)
      (when (not (run-ok? (Script "test -d \"$1\" && test ! -L \"$1\"" d)))
        (raise (FailedChange f"{d} exists but is not a directory; not removing it")))
      (run "rm" "-rf" "--one-file-system" "--" d))))

(defprop directory-does-not-exist :posix [#^ abs-path #* directories]
  "None of DIRECTORIES exists: each is removed with everything in it.  It
is a failure if one of them is a file or a symlink."
  (:desc (_plural directories))
  (:check (_none-exist directories "removed with everything in them"))
  (:apply (_remove-directories directories)))

(defn _parent [path]
  (or (posixpath.dirname (.rstrip path "/")) "."))

(defprop containing-directory-exists :posix [#^ abs-path path]
  "The directory PATH is in exists, with its parents."
  (:desc f"Directory containing {path} exists")
  (:check (run-ok? "test" "-d" (_parent path)))
  (:apply (run "mkdir" "-p" "--" (_parent path))))

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
  (:desc f"{from_} is a symlink to {to}")
  (:check (or (_links-to? from_ to)
              (Drift (let [now (_link-target from_)]
                       (if (is now None)
                           f"{from_} would link to {to}"
                           f"{from_}: link {now} → {to}")))))
  (:apply
    (when (and (remote-exists? from_) (is (_link-target from_) None))
      (raise (FailedChange f"{from_} exists and is not a symbolic link; not replacing it")))
    (run "mkdir" "-p" "--" (_parent from_))
    (run "ln" "-sfT" "--" to from_))
  (:unapply (run "rm" "-f" "--" from_)))

(defprop is-copy-of :posix [#^ abs-path dest #^ abs-path source]
  "DEST is a copy of SOURCE, a file on the target (a symlink's target is
copied).  The copy is made beside DEST and renamed over it, keeping SOURCE's
mode, ownership and times."
  (:desc f"{dest} is a copy of {source}")
  (:check (run-ok? (Script "test -f \"$1\" && cmp -s -- \"$1\" \"$2\"" dest source)))
  (:apply
    (run-script (.join "\n" ["set -e"
                             "tmp=$(mktemp \"$3/.consfig-XXXXXXXX\")"
                             "trap 'rm -f \"$tmp\"' EXIT"
                             "cp -L --preserve=all -- \"$2\" \"$tmp\""
                             "mv -f -- \"$tmp\" \"$1\""
                             "trap - EXIT"])
                dest source (_parent dest))))

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

(defn _simple-conf-text [old wanted kv render same-value?]
  (setv #(out missing) (_conf-edit (_parse-conf (_file-lines old) "#" kv)
                                   wanted same-value? render "#"))
  (_unlines (+ out (lfor [[_ k] v] (.items missing) (render k v None)))))

(defn _simple-conf-update [path wanted kv render same-value?]
  (setv old (or (read-text path) ""))
  (update-file path (_simple-conf-text old wanted kv render same-value?)))

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
  (:desc f"{path} has {(describe-pairs pairs " ")}")
  (:apply (_simple-conf-update path (conf-pairs pairs) _SPACE-KV _space-kv _strip-eq)))

(defprop contains-conf-equals :posix [#^ abs-path path #^ conf-pair #* pairs]
  "Like `contains-conf-space`, for a config file of `key = value` lines."
  (:simulates True)
  (:invariant (not (pairs-problem pairs conf-key)) (pairs-problem pairs conf-key))
  (:desc f"{path} has {(describe-pairs pairs " = ")}")
  (:apply (_simple-conf-update path (conf-pairs pairs) (re.compile r"^([^\s=]+)(\s*=\s*)(.*?)\s*$")
                               (fn [k v sep] (+ k (or sep " = ") v)) _strip-eq)))

(defn _shell-same? [raw v]
  (try (= (shlex.split raw :comments True) [v])
       (except [ValueError] False)))

(defprop contains-conf-shell :posix [#^ abs-path path #^ shell-pair #* pairs]
  "Like `contains-conf-space`, for a shell fragment of `KEY=value` lines
such as those in /etc/default.  Values are quoted for the shell as needed; a
line whose value already means the same (`KEY=\"x\"` for x) is left alone."
  (:simulates True)
  (:invariant (not (pairs-problem pairs shell-identifier)) (pairs-problem pairs shell-identifier))
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
  (:desc (+ f"{path} has "
            (.join ", " (gfor [[s k] v] (.items (_ini-triples triples)) f"[{s}] {k}={v}"))))
  (:apply (map-file-lines path (fn [lines] (_ini-update lines (_ini-triples triples)))
                          :create True)))

(export :objects [has-content exists-with-content contains-lines lacks-lines
                  lacks-lines-matching regex-replaced-lines has-mode has-ownership
                  does-not-exist directory-exists directory-does-not-exist
                  containing-directory-exists symlinked is-copy-of
                  contains-conf-space contains-conf-equals contains-conf-shell
                  contains-ini-settings update-file map-file-lines read-bytes read-text
                  content->bytes add-lines conf-space-text conf-pairs
                  describe-pairs pairs-problem conf-key conf-value conf-pair
                  remove-lines])
