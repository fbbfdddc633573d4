"Files, directories and links on the target.

Every property here is `:posix`: it reads and writes through the connection,
so it works over any chain.  A change to a file's content is reported as a
unified diff event (shown at -v), except for content marked secret."

(require consfig.property [defprop])
(import difflib
        posixpath
        re
        shlex
        consfig.actions [NO-CHANGE Script run run-ok? run-script output
                         read-remote-file write-remote-file remote-exists?]
        consfig.engine [emit]
        consfig.errors [FailedChange]
        consfig.host [inapplicable])

(defn _lines [xs]
  "Lines given as strings (possibly several lines each) or lists of them."
  (setv out [])
  (for [x xs]
    (if (isinstance x #(list tuple))
        (.extend out (_lines x))
        (.extend out (.splitlines x))))
  out)

(defn _text [content]
  (if (isinstance content #(list tuple))
      (+ (.join "\n" (_lines content)) "\n")
      content))

(defn _unlines [lines]
  (.join "" (gfor l lines (+ l "\n"))))

(defn _diff [path old new]
  (.join "" (difflib.unified-diff (.splitlines (or old "") True)
                                  (.splitlines new True)
                                  (+ "a" path) (+ "b" path))))

(defn update-file [path new * [mode None] [secret False]]
  "Make PATH contain NEW (keeping its mode and owner, or setting MODE), and
report a diff unless SECRET.  `:no-change` when it already does."
  (setv old (read-remote-file path))
  (when (= old new)
    (return (if (is mode None) NO-CHANGE (_ensure-mode path mode))))
  (write-remote-file path new :mode mode)
  (when (not secret)
    (emit {"event" "diff" "path" path "text" (_diff path old new)})))

(defn map-file-lines [path f * [create False]]
  "Replace the lines of PATH by what F returns given them (without their
newlines).  Nothing to do when PATH does not exist, unless CREATE."
  (setv old (read-remote-file path))
  (if (and (is old None) (not create))
      NO-CHANGE
      (update-file path (_unlines (f (.splitlines (or old "")))))))

(defn _mode-of [path]
  (int (.strip (output "stat" "-c" "%a" "--" path)) 8))

(defn _ensure-mode [path mode]
  (if (= (_mode-of path) mode)
      NO-CHANGE
      (run "chmod" (format mode "o") "--" path)))

(defn _plural [xs]
  (if (= (len xs) 1)
      f"{(get xs 0)} does not exist"
      f"{(.join ", " xs)} do not exist"))

(defprop has-content :posix [path content * [mode None] [secret False]]
  "PATH has exactly CONTENT: a string, or a list of lines (joined, with a
final newline).  The file's mode and owner are kept, unless MODE is given.
With SECRET, no diff of the content is ever reported."
  (:desc f"{path} has content")
  (:apply (update-file path (_text content) :mode mode :secret secret)))

(defprop exists-with-content :posix [path content * [mode None] [secret False]]
  "Like `has-content`, but unapplying deletes PATH rather than restoring what
was there before: for files the deployment creates, not for files that came
with the OS."
  (:desc f"{path} exists with content")
  (:apply (update-file path (_text content) :mode mode :secret secret))
  (:unapply
    (if (remote-exists? path)
        (run "rm" "-f" "--" path)
        NO-CHANGE)))

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

(defprop contains-lines :posix [path #* lines]
  "PATH contains each of LINES, appended at the end where missing.  Creates
PATH if it does not exist.  Unapplying removes LINES."
  (:desc f"{path} contains {(.join " | " (_lines lines))}")
  (:apply (add-lines path lines))
  (:unapply (remove-lines path lines)))

(defprop lacks-lines :posix [path #* lines]
  "PATH has none of LINES.  Nothing to do if PATH does not exist.
Unapplying appends LINES where missing, as `contains-lines` does."
  (:desc f"{path} lacks {(.join " | " (_lines lines))}")
  (:apply (remove-lines path lines))
  (:unapply (add-lines path lines)))

(defprop lacks-lines-matching :posix [path #* patterns]
  "PATH has no line matching any of the regular expressions PATTERNS
(Python syntax, searched anywhere in the line).  Nothing to do if PATH does
not exist."
  (:desc f"{path} lacks lines matching {(.join " | " patterns)}")
  (:apply
    (setv regexes (lfor p patterns (re.compile p)))
    (map-file-lines path
                    (fn [have]
                      (lfor l have :if (not (any (gfor r regexes (.search r l)))) l)))))

(defprop regex-replaced-lines :posix [path regex replacement]
  "Like `s/REGEX/REPLACEMENT/` on each line of PATH: the first match in
each line is replaced.  Python syntax: `\\1` or `\\g<name>` in REPLACEMENT
refer to groups.  Nothing to do if PATH does not exist.  Idempotent as long
as a replaced line no longer matches REGEX."
  (:desc f"{path} has s/{regex}/{replacement}/ applied")
  (:apply
    (setv r (re.compile regex))
    (map-file-lines path (fn [have] (lfor l have (.sub r replacement l :count 1))))))

(defprop has-mode :posix [path mode]
  "PATH has permission bits MODE (an integer, such as 0o644)."
  (:desc f"{path} has mode {(format mode "o")}")
  (:check (= (_mode-of path) mode))
  (:apply (run "chmod" (format mode "o") "--" path)))

(defn _owner-spec [user group]
  (+ (if (is user None) "" (str user))
     (if (is group None) "" f":{group}")))

(defn _has-ownership? [path user group]
  ;; Names are compared with names and numbers with numbers, whichever was given.
  (setv #(u g un gn) (.split (.strip (output "stat" "-c" "%u %g %U %G" "--" path))))
  (defn same? [want id name]
    (or (is want None) (in (str want) #(id name))))
  (and (same? user u un) (same? group g gn)))

(defprop has-ownership :posix [path * [user None] [group None]]
  "PATH (a symlink itself, not what it points to) is owned by USER and/or
GROUP: names or numeric ids."
  (:desc (+ f"{path} has"
            (if (is user None) "" f" owner {user}")
            (if (is group None) "" f" group {group}")))
  (:hostattrs
    (when (and (is user None) (is group None))
      (inapplicable "file.has-ownership needs :user or :group")))
  (:check (_has-ownership? path user group))
  (:apply
    (if (is user None)
        (run "chgrp" "-h" "--" (str group) path)
        (run "chown" "-h" "--" (_owner-spec user group) path))))

(defprop does-not-exist :posix [#* paths]
  "None of PATHS exists (files or symlinks; not directories)."
  (:desc (_plural paths))
  (:check (not (any (map remote-exists? paths))))
  (:apply (run "rm" "-f" "--" #* paths)))

(defprop directory-exists :posix [directory]
  "DIRECTORY exists, with its parents."
  (:desc f"{directory} exists")
  (:check (run-ok? "test" "-d" directory))
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

(defprop directory-does-not-exist :posix [#* directories]
  "None of DIRECTORIES exists: each is removed with everything in it.  It
is a failure if one of them is a file or a symlink."
  (:desc (_plural directories))
  (:check (not (any (map remote-exists? directories))))
  (:apply (_remove-directories directories)))

(defn _parent [path]
  (or (posixpath.dirname (.rstrip path "/")) "."))

(defprop containing-directory-exists :posix [path]
  "The directory PATH is in exists, with its parents."
  (:desc f"Directory containing {path} exists")
  (:check (run-ok? "test" "-d" (_parent path)))
  (:apply (run "mkdir" "-p" "--" (_parent path))))

(defn _link-target [path]
  (setv r (run "readlink" "-n" "--" path :check False))
  (when r.ok? r.stdout))

(defprop symlinked :posix [* from_ to]
  "FROM is a symbolic link to TO.  A link pointing elsewhere is replaced;
anything else at FROM is a failure.  Unapplying removes the link."
  (:desc f"{from_} is a symlink to {to}")
  (:check (= (_link-target from_) to))
  (:apply
    (when (and (remote-exists? from_) (is (_link-target from_) None))
      (raise (FailedChange f"{from_} exists and is not a symbolic link; not replacing it")))
    (run "mkdir" "-p" "--" (_parent from_))
    (run "ln" "-sfT" "--" to from_))
  (:unapply (run "rm" "-f" "--" from_)))

(defprop is-copy-of :posix [dest source]
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
  (setv #(out missing) (_conf-edit (_parse-conf (.splitlines old) "#" kv)
                                   wanted same-value? render "#"))
  (_unlines (+ out (lfor [[_ k] v] (.items missing) (render k v None)))))

(defn _simple-conf-update [path wanted kv render same-value?]
  (setv old (or (read-remote-file path) ""))
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

(defprop contains-conf-space :posix [path #* pairs]
  "PATH, a config file of `key value` lines without sections, sets each key
of PAIRS (alternating keys and values, or a dict) to its value.  The first
line for a key is set — an uncommented one, else a commented-out one, which
is uncommented — and any other line setting it is commented out; keys with
no line are appended."
  (:desc f"{path} has {(describe-pairs pairs " ")}")
  (:apply (_simple-conf-update path (conf-pairs pairs) _SPACE-KV _space-kv _strip-eq)))

(defprop contains-conf-equals :posix [path #* pairs]
  "Like `contains-conf-space`, for a config file of `key = value` lines."
  (:desc f"{path} has {(describe-pairs pairs " = ")}")
  (:apply (_simple-conf-update path (conf-pairs pairs) (re.compile r"^([^\s=]+)(\s*=\s*)(.*?)\s*$")
                               (fn [k v sep] (+ k (or sep " = ") v)) _strip-eq)))

(defn _shell-same? [raw v]
  (try (= (shlex.split raw :comments True) [v])
       (except [ValueError] False)))

(defprop contains-conf-shell :posix [path #* pairs]
  "Like `contains-conf-space`, for a shell fragment of `KEY=value` lines
such as those in /etc/default.  Values are quoted for the shell as needed; a
line whose value already means the same (`KEY=\"x\"` for x) is left alone."
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

(defprop contains-ini-settings :posix [path #* triples]
  "PATH, an INI file, sets each `[section key value]` of TRIPLES.  As with
`contains-conf-space`, the first line for the key in its section is set (an
uncommented one, else a commented-out one, uncommented) and others for it
commented out.  A missing key goes at the end of its section; a missing
section is appended.  A section of None means the keys before any section."
  (:desc (+ f"{path} has "
            (.join ", " (gfor [[s k] v] (.items (_ini-triples triples)) f"[{s}] {k}={v}"))))
  (:apply (map-file-lines path (fn [lines] (_ini-update lines (_ini-triples triples)))
                          :create True)))

(export :objects [has-content exists-with-content contains-lines lacks-lines
                  lacks-lines-matching regex-replaced-lines has-mode has-ownership
                  does-not-exist directory-exists directory-does-not-exist
                  containing-directory-exists symlinked is-copy-of
                  contains-conf-space contains-conf-equals contains-conf-shell
                  contains-ini-settings update-file map-file-lines add-lines conf-space-text conf-pairs
                  describe-pairs
                  remove-lines])
