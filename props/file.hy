"Files, directories and links on the target."

(require consfig.property [defprop])
(import difflib
        posixpath
        consfig.connection [NO-CHANGE run run-ok? output read-remote-file
                            write-remote-file remote-exists?]
        consfig.engine [emit])

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

(defn _mode-of [path]
  (int (.strip (output "stat" "-c" "%a" "--" path)) 8))

(defn _ensure-mode [path mode]
  (if (= (_mode-of path) mode)
      NO-CHANGE
      (run "chmod" (format mode "o") "--" path)))

(defprop has-content :posix [path content * [mode None] [secret False]]
  "PATH has exactly CONTENT: a string, or a list of lines (joined, with a
final newline).  The file's mode and owner are kept, unless MODE is given."
  (:desc f"{path} has content")
  (:apply (update-file path (_text content) :mode mode :secret secret)))

(defprop contains-lines :posix [path #* lines]
  "PATH contains each of LINES, appended at the end where missing.  Creates
PATH if it does not exist."
  (:desc f"{path} contains {(.join " | " (_lines lines))}")
  (:apply
    (setv old (or (read-remote-file path) "")
          have (set (.splitlines old))
          missing (lfor l (_lines lines) :if (not-in l have) l))
    (if missing
        (update-file path (+ old (if (and old (not (.endswith old "\n"))) "\n" "")
                             (.join "\n" missing) "\n"))
        NO-CHANGE)))

(defprop lacks-lines :posix [path #* lines]
  "PATH has none of LINES.  Nothing to do if PATH does not exist."
  (:desc f"{path} lacks {(.join " | " (_lines lines))}")
  (:apply
    (setv old (read-remote-file path)
          unwanted (set (_lines lines)))
    (if (is old None)
        NO-CHANGE
        (update-file path (.join "" (gfor l (.splitlines old True)
                                          :if (not-in (.rstrip l "\r\n") unwanted)
                                          l))))))

(defprop directory-exists :posix [directory]
  "DIRECTORY exists, with its parents."
  (:desc f"{directory} exists")
  (:check (run-ok? "test" "-d" directory))
  (:apply (run "mkdir" "-p" "--" directory)))

(defprop does-not-exist :posix [#* paths]
  "None of PATHS exists (files or symlinks; not directories)."
  (:desc f"{(.join " " paths)} does not exist")
  (:check (not (any (map remote-exists? paths))))
  (:apply (run "rm" "-f" "--" #* paths)))

(defprop has-mode :posix [path mode]
  "PATH has permission bits MODE (an integer, such as 0o644)."
  (:desc f"{path} has mode {(format mode "o")}")
  (:apply (_ensure-mode path mode)))

(defprop symlinked :posix [* from_ to]
  "FROM is a symbolic link to TO, replacing whatever link or file was there."
  (:desc f"{from_} is a symlink to {to}")
  (:check (= (.rstrip (. (run "readlink" "--" from_ :check False) stdout) "\n") to))
  (:apply
    (run "mkdir" "-p" "--" (or (posixpath.dirname from_) "."))
    (run "ln" "-sfT" "--" to from_))
  (:unapply (run "rm" "-f" "--" from_)))

(export :objects [has-content contains-lines lacks-lines directory-exists
                  does-not-exist has-mode symlinked update-file])
