"git repositories: clones kept up to date, and their settings."

(eval-when-compile
  (require consfig.model.property [defprop]
           consfig.model.propspec [defproplist]))
(import consfig.model.watchspec [watch-path])
(import posixpath
        consfig.apply.combinators [with-unapply unapplied]
        consfig.apply.actions [NO-CHANGE Script run run-ok? remote-exists?]
        consfig.data.items [data-version get-data-bytes require-data]
        consfig.apply.engine [Drift]
        consfig.props.file [read-text]
        consfig.errors [AbortedChange]
        consfig.props [package]
        consfig.types *)

;; A branch or commit is given to git as an argument: one starting with `-`
;; would be an option (`:commit "--orphan=x"`).
(setv git-url (one-of url abs-path
                      (matching "scp-url" "user@host:path" r"[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^\s]+"))
      git-ref name)

(setv GIT-TIMEOUT 1800)

(defn git [repo #* args [check True]]
  "Run git with ARGS in the repository REPO; return the `CommandResult`."
  (run "git" "-C" repo #* args :check check :timeout GIT-TIMEOUT))

(defn _out [repo #* args]
  (.strip (. (git repo #* args :check False) stdout)))

(defn origin-url [repo]
  "The URL of REPO's origin remote, or None when REPO is no git work tree."
  (when (remote-exists? (posixpath.join repo ".git"))
    (or (_out repo "config" "--local" "--get" "remote.origin.url") None)))

(defn _at? [dest branch commit]
  (cond commit (= (_out dest "rev-parse" "-q" "--verify" "HEAD")
                  (_out dest "rev-parse" "-q" "--verify" f"{commit}^{{commit}}"))
        branch (= (_out dest "symbolic-ref" "-q" "--short" "HEAD") branch)
        True True))

(defn _check-out [dest branch commit]
  ;; Fetch only when what is wanted is not there yet.
  (setv rev (or commit branch))
  (when (and rev (not (run-ok? "git" "-C" dest "rev-parse" "-q" "--verify"
                               (if commit f"{commit}^{{commit}}" f"origin/{branch}"))))
    (git dest "fetch" "-q" "origin"))
  (cond commit (git dest "checkout" "-q" "--detach" commit "--")
        branch (git dest "checkout" "-q" branch "--")))

(defprop clone-exists :posix [#^ git-url url #^ abs-path dest
                              * #^ git-ref [branch None] #^ git-ref [commit None]]
  "DEST is a clone of URL with BRANCH (or COMMIT, detached) checked out.  A
DEST that holds anything else is left alone and the property fails.  Does
not install git: see `cloned`.  Unapplying deletes the clone."
  (:watch [(watch-path dest)])
  (:desc f"{url} cloned to {dest}")
  (:check (and (= (origin-url dest) url) (_at? dest branch commit)))
  (:apply
    (cond (= (origin-url dest) url) None
          (run-ok? "sh" "-c" "test -n \"$(ls -A -- \"$1\" 2>/dev/null)\"" "sh" dest)
          (raise (AbortedChange f"{dest} exists and is not a clone of {url}; move it away, or choose another directory"))
          True
          (do (run "mkdir" "-p" "--" (posixpath.dirname (.rstrip dest "/")))
              (run "git" "clone" "-q" #* (if branch ["--branch" branch] []) "--" url dest
                   :timeout GIT-TIMEOUT)))
    (_check-out dest branch commit))
  (:unapply (run "rm" "-rf" "--" dest :timeout 600)))

(defprop head-pulled :posix [#^ abs-path dest]
  "The branch checked out in DEST has been fast-forwarded to its upstream
(`git pull --ff-only`); a change only when that moved it."
  (:action "only the remote knows whether the branch is behind: asking it is fetching")
  (:desc f"{dest} pulled")
  (:apply
    (setv before (_out dest "rev-parse" "HEAD"))
    (git dest "pull" "-q" "--ff-only")
    (if (= before (_out dest "rev-parse" "HEAD")) NO-CHANGE None)))

(defproplist installed :posix []
  "git is installed."
  (:desc "git installed")
  (package.installed "git"))

(defproplist cloned :posix [#^ git-url url #^ abs-path dest
                            * #^ git-ref [branch None] #^ git-ref [commit None]]
  "git is installed and DEST is a clone of URL, with BRANCH (default: the
remote's default branch) or COMMIT checked out.  A DEST that holds anything
else is left alone and the property fails.  Unapplying deletes the clone
(and leaves git installed)."
  (:desc f"{url} cloned to {dest}")
  (with-unapply (installed)
                (clone-exists url dest :branch branch :commit commit)
                :unapply (unapplied (clone-exists url dest :branch branch :commit commit))))

(defproplist pulled :posix [#^ git-url url #^ abs-path dest * #^ git-ref [branch None]]
  "Like `cloned`, and each time it is applied the checked-out branch is
brought up to date with `git pull --ff-only`."
  (:desc f"{url} pulled to {dest}")
  (installed)
  (clone-exists url dest :branch branch)
  (head-pulled dest))

(defprop repo-configured :posix [#^ abs-path repo #^ name key #^ (one-of line integer boolean) value]
  "The git repository REPO has KEY set to VALUE in its own configuration
(`git config --local`).  Unapplying unsets KEY."
  (:watch [(watch-path repo) (watch-path (posixpath.join repo ".git"))])
  (:desc f"{repo} has git {key}={value}")
  (:check (= (_out repo "config" "--local" "--get" key) (str value)))
  (:apply (git repo "config" "--local" key (str value)))
  (:unapply (git repo "config" "--local" "--unset-all" key)))

(defn _snapshot-version-file [directory name]
  (posixpath.join directory f".consfig-snapshot-{name}"))

;; The tarball (tar or tar.gz) goes in on standard input and is unpacked beside the old
;; tree, which is swapped out only once the new one is whole: an interrupted
;; extraction leaves the old tree (and its version) as they were.  A tarball
;; holding one directory NAME/ is that directory; else its top is the tree.
(setv _EXTRACT (.join "\n" ["set -e"
                            "dir=$1 name=$2 version=$3"
                            "mkdir -p -- \"$dir\""
                            "new=$(mktemp -d \"$dir/.consfig-new-XXXXXXXX\")"
                            "tarball=$(mktemp \"$dir/.consfig-tar-XXXXXXXX\")"
                            "trap 'rm -rf --one-file-system -- \"$new\" \"$tarball\"' EXIT"
                            ;; tar tells gzip from plain tar in a file, not in a pipe.
                            "cat >\"$tarball\""
                            "tar -x -f \"$tarball\" -C \"$new\" --no-same-owner"
                            "tree=$new"
                            "if [ \"$(ls -A -- \"$new\")\" = \"$name\" ] && [ -d \"$new/$name\" ] && [ ! -L \"$new/$name\" ]; then tree=$new/$name; fi"
                            "chmod 755 -- \"$tree\""
                            "if [ -e \"$dir/$name\" ] || [ -L \"$dir/$name\" ]; then"
                            "  old=$(mktemp -d \"$dir/.consfig-old-XXXXXXXX\")"
                            "  mv -- \"$dir/$name\" \"$old/\""
                            "fi"
                            "mv -T -- \"$tree\" \"$dir/$name\""
                            "printf '%s\\n' \"$version\" >\"$dir/.consfig-snapshot-$name.tmp\""
                            "mv -f -- \"$dir/.consfig-snapshot-$name.tmp\" \"$dir/.consfig-snapshot-$name\""
                            "if [ -n \"${old:-}\" ]; then rm -rf --one-file-system -- \"$old\"; fi"]))

(defprop snapshot-extracted :posix [#^ abs-path directory #^ name snapshot-name]
  "DIRECTORY/SNAPSHOT-NAME holds the latest snapshot SNAPSHOT-NAME of a git
repository, the prerequisite data (`--git-snapshot` SNAPSHOT-NAME) a
`:git-snapshot` source makes: a tarball, versioned by its commit.  It is
unpacked with tar, so the target needs no git; the version is recorded in
DIRECTORY/.consfig-snapshot-SNAPSHOT-NAME, and a new one replaces the whole
tree (files the new commit lacks go too), the old one staying until the new
one is whole.  Unapplying removes the tree and the record."
  (:watch [(watch-path directory)])
  (:desc f"git snapshot {snapshot-name} extracted to {directory}")
  (:hostattrs (require-data "--git-snapshot" snapshot-name))
  (:check
    (setv have (.strip (or (read-text (_snapshot-version-file directory snapshot-name)) ""))
          want (data-version "--git-snapshot" snapshot-name))
    (or (and (= have want) (run-ok? "test" "-d" (posixpath.join directory snapshot-name)))
        (Drift (if have
                   f"{snapshot-name}: version {have} → {want}"
                   f"{snapshot-name} would be extracted at version {want}"))))
  (:apply
    (run (Script _EXTRACT directory snapshot-name (data-version "--git-snapshot" snapshot-name))
         :input (get-data-bytes "--git-snapshot" snapshot-name) :timeout GIT-TIMEOUT))
  (:unapply
    (run "rm" "-rf" "--one-file-system" "--" (posixpath.join directory snapshot-name)
         (_snapshot-version-file directory snapshot-name) :timeout 600)))

(export :objects [snapshot-extracted git origin-url clone-exists head-pulled installed cloned
                  pulled repo-configured])
