"The data sources that call other programs: `:pass` (the password store),
`:pgp` (one gpg-encrypted file of many items), `:git-snapshot` (a tarball of
a repository at a commit) and `:prompt` (asked on the terminal).

Each is registered by kind, as those of consfig.data.items are:

  (try-register-data-source :pass)
  (try-register-data-source :pgp :location \"secrets.gpg\")
  (try-register-data-source :git-snapshot :name \"app\" :repo \"~/src/app\" :branch \"main\")
  (try-register-data-source :prompt)

Every program runs with an argument list (no shell), its output read into
memory: a secret is never in a command line, an environment or a file."

(import json
        getpass
        tempfile
        os
        subprocess
        threading
        consfig.data.items [DataSource DataSourceUnusable Secret data-source-kinds
                            absolute-location tree-path mtime-version]
        consfig.model.context [deployment-cache]
        consfig.errors [ConsfigError]
        shutil
        base64)

(setv PROGRAM-TIMEOUT 120)

(defn _run [argv * [input None] [env None] [what None]]
  ;; stdout as bytes; a failure is a ConsfigError with the program's own
  ;; words (its stderr, never its stdout, which may be the secret).
  (try
    (setv r (subprocess.run argv :input input :capture-output True :env env
                            :timeout PROGRAM-TIMEOUT))
    (except [e OSError]
      (raise (ConsfigError f"{(or what (get argv 0))}: cannot run {(get argv 0)}: {e}")))
    (except [subprocess.TimeoutExpired]
      (raise (ConsfigError f"{(or what (get argv 0))}: {(get argv 0)} did not finish in {PROGRAM-TIMEOUT} s"))))
  (when r.returncode
    (raise (ConsfigError (+ f"{(or what (get argv 0))}: {(get argv 0)} failed (exit code {r.returncode})"
                            (let [err (.strip (.decode r.stderr "utf-8" "replace"))]
                              (if err f": {err}" ""))))))
  r.stdout)

(defn _need-program [name kind]
  (when (not (shutil.which name))
    (raise (DataSourceUnusable f":{kind}: the {name} program is not installed"))))

;; :pass

(setv USER-PASSWORD "--user-passwd--")

(defn user-password-item? [iden1]
  "Whether IDEN1 names a user's password: `--user-passwd--HOST`."
  (and (.startswith iden1 USER-PASSWORD) (> (len iden1) (len USER-PASSWORD))))

(defn password-host [iden1]
  "The HOST of `--user-passwd--HOST`."
  (cut iden1 (len USER-PASSWORD) None))

(defclass PassSource [DataSource]
  "`:pass`: the standard Unix password store, through the `pass` program.
The item (IDEN1, IDEN2) is the entry IDEN1/IDEN2 (slashes in an identifier
are path separators), except that a user's password
(`--user-passwd--HOST`, USER) is the entry HOST/USER, whose first line is
the password.  Versioned by the entry file's modification time; every item
is a secret."
  (setv secret-only True)
  (defn __init__ [self * [location None] [relative-to None]]
    (_need-program "pass" "pass")
    (setv self.location (absolute-location (or location (os.environ.get "PASSWORD_STORE_DIR")
                                       "~/.password-store")
                                   relative-to))
    (when (not (os.path.isdir self.location))
      (raise (DataSourceUnusable f":pass: no password store at {self.location}"))))

  (defn _entry [self iden1 iden2]
    (setv #(a b) (if (user-password-item? iden1)
                     #((password-host iden1) iden2)
                     #(iden1 iden2))
          path (tree-path self.location a b))
    (when path (os.path.relpath path self.location)))

  (defn version [self iden1 iden2]
    (setv entry (._entry self iden1 iden2))
    (when entry
      (setv path (os.path.join self.location (+ entry ".gpg")))
      (when (os.path.isfile path) (mtime-version path))))

  (defn fetch [self iden1 iden2]
    (setv out (_run ["pass" "show" "--" (._entry self iden1 iden2)]
                    :env {#** os.environ "PASSWORD_STORE_DIR" self.location}
                    :what f":pass ({iden1} {iden2})"))
    (Secret (if (user-password-item? iden1)
                (get (.split out b"\n" 1) 0)
                out)))

  (defn describe [self] f":pass {self.location}"))

;; :pgp

(defn _gpg [#* args #** kw]
  ;; Not --batch: decrypting may need gpg-agent to ask for the key's
  ;; passphrase.
  (_run ["gpg" "--quiet" "--yes" #* args] #** kw))

(defn _decrypt [path]
  ;; The file holds {"items": [{"iden1" "iden2" "version" "content"}]}, content
  ;; as text, or base64 under "base64" for bytes that are not UTF-8.
  (setv data (json.loads (_gpg "--decrypt" "--" path :what f":pgp {path}")))
  (dfor i (get data "items")
        #((get i "iden1") (get i "iden2"))
        i))

(defn _item-bytes [i]
  (if (in "base64" i)
      (base64.b64decode (get i "base64"))
      (.encode (get i "content") "utf-8")))

(defclass PgpSource [DataSource]
  "`:pgp`: one file, encrypted with gpg, holding many items, each with a
version; every item is a secret.  The file is decrypted (in memory) when it
is first asked, and again when it has changed.  `pgp-set-data` and
`pgp-get-data` edit and read it from the REPL."
  (setv secret-only True)
  (defn __init__ [self * location [relative-to None]]
    (_need-program "gpg" "pgp")
    (setv self.location (absolute-location location relative-to)
          self._items None
          self._stamp None)
    (when (not (os.path.isfile self.location))
      (raise (DataSourceUnusable f":pgp: no such file {self.location}"))))

  (defn _current [self]
    (setv stamp (mtime-version self.location))
    (when (!= stamp self._stamp)
      (setv self._items (_decrypt self.location)
            self._stamp stamp))
    self._items)

  (defn version [self iden1 iden2]
    (setv i (.get (._current self) #(iden1 iden2)))
    (when i (str (get i "version"))))

  (defn fetch [self iden1 iden2]
    (Secret (_item-bytes (get (._current self) #(iden1 iden2)))))

  (defn describe [self] f":pgp {self.location}"))

(defn pgp-get-data [location iden1 iden2]
  "The content of (IDEN1, IDEN2) in the gpg-encrypted data file LOCATION,
as a `Secret` (of a string when it is text), or None."
  (setv i (.get (_decrypt (os.path.expanduser location)) #(iden1 iden2)))
  (when i
    (Secret (if (in "base64" i) (_item-bytes i) (get i "content")))))

(defn pgp-set-data [location iden1 iden2 content * [recipients None]]
  "Set (IDEN1, IDEN2) in the gpg-encrypted data file LOCATION to CONTENT (a
string, bytes or a `Secret`), one version newer; LOCATION is made if need
be.  The file is encrypted to RECIPIENTS (key ids), by default to the
default key (`--default-recipient-self`).  The clear text goes to gpg on
its standard input; it is never written to a file."
  (setv path (os.path.expanduser location)
        items (if (os.path.exists path) (_decrypt path) {})
        old (.get items #(iden1 iden2))
        raw (if (isinstance content Secret) (.reveal content) content)
        entry {"iden1" iden1 "iden2" iden2
               "version" (+ 1 (if old (int (get old "version")) 0))})
  (if (isinstance raw bytes)
      (try (setv (get entry "content") (.decode raw "utf-8"))
           (except [UnicodeDecodeError]
             (setv (get entry "base64") (.decode (base64.b64encode raw) "ascii"))))
      (setv (get entry "content") raw))
  (setv (get items #(iden1 iden2)) entry
        plain (.encode (json.dumps {"items" (list (.values items))}) "utf-8")
        to (if recipients
               (sum (gfor r recipients ["--recipient" r]) [])
               ["--default-recipient-self"])
        directory (or (os.path.dirname (os.path.abspath path)) "."))
  (setv #(fd tmp) (tempfile.mkstemp :dir directory :prefix ".consfig-pgp-"))
  (os.close fd)
  (try
    (_gpg "--batch" "--encrypt" #* to "--output" tmp :input plain :what f"pgp-set-data {path}")
    (os.replace tmp path)
    (except [BaseException]
      (try (os.unlink tmp) (except [FileNotFoundError] None))
      (raise)))
  (get entry "version"))

;; :git-snapshot

(defclass GitSnapshotSource [DataSource]
  "`:git-snapshot`: the item (\"--git-snapshot\", NAME) is a gzipped tar of
the tree of REPO (a local repository, or a URL) at COMMIT, or else at the
tip of BRANCH (by default the repository's HEAD), versioned by the commit's
hash.  The controller keeps each snapshot it made in its data cache."
  (setv cached True)
  (defn __init__ [self * name repo [branch None] [commit None] [relative-to None]]
    (_need-program "git" "git-snapshot")
    (setv self.name name
          self.local (not (in "://" repo))
          self.repo (if self.local (absolute-location repo relative-to) repo)
          self.branch branch
          self.commit commit)
    (when (and self.local (not (os.path.isdir self.repo)))
      (raise (DataSourceUnusable f":git-snapshot {name}: no such repository {self.repo}")))
    (when (and commit (not self.local))
      (raise (ConsfigError f":git-snapshot {name}: :commit needs a local repository; give :branch for {repo}"))))

  (defn _git [self #* args]
    (.decode (_run ["git" "-C" self.repo #* args] :what f":git-snapshot {self.name}") "utf-8"))

  (defn version [self iden1 iden2]
    (when (and (= iden1 "--git-snapshot") (= iden2 self.name))
      (if self.local
          (.strip (._git self "rev-parse" "--verify" "--end-of-options"
                         (+ (or self.commit self.branch "HEAD") "^{commit}")))
          (let [out (.decode (_run ["git" "ls-remote" "--" self.repo (or self.branch "HEAD")]
                                   :what f":git-snapshot {self.name}")
                             "utf-8")]
            (when (not (.strip out))
              (raise (ConsfigError f":git-snapshot {self.name}: {self.repo} has no branch {self.branch}")))
            (get (.split out) 0)))))

  (defn fetch [self iden1 iden2]
    (setv commit (.version self iden1 iden2))
    (if self.local
        (_run ["git" "-C" self.repo "archive" "--format=tar.gz" commit]
              :what f":git-snapshot {self.name}")
        (with [d (tempfile.TemporaryDirectory :prefix "consfig-git-")]
          (_run ["git" "clone" "--quiet" "--depth" "1"
                 #* (if self.branch ["--branch" self.branch] []) "--" self.repo d]
                :what f":git-snapshot {self.name}")
          (_run ["git" "-C" d "archive" "--format=tar.gz" commit]
                :what f":git-snapshot {self.name}"))))

  (defn describe [self] f":git-snapshot {self.name} {self.repo}"))

;; :prompt

(setv _asking (threading.Lock))

(defn terminal? []
  "Whether there is a terminal to ask on."
  (try (.close (open "/dev/tty")) True
       (except [OSError] False)))

(defn ask-secret [question]
  "Ask QUESTION on the terminal, not echoing the answer; a `Secret`.  No
terminal (a deployment from cron) is a `ConsfigError`, not a read of
standard input."
  (when (not (terminal?))
    (raise (ConsfigError f"{question}: there is no terminal to ask on")))
  (with [_asking]
    (try
      (Secret (getpass.getpass f"[consfig] {question}: "))
      ;; ^D: the person would rather not answer.
      (except [EOFError]
        (raise (ConsfigError f"{question}: no answer (end of input at the prompt)"))))))

(defclass PromptSource [DataSource]
  "`:prompt`: items asked for on the terminal (not echoed), once per
deployment (hosts deployed at once share the answers, asked before they
start: `consfig.deployer.fleet`): those listed in ITEMS (pairs [IDEN1 IDEN2]), by
default every user's password (`--user-passwd--HOST`).  Without a terminal
it has none, so a deployment from cron says which item is missing before
connecting."
  (setv secret-only True
        prefetch False)
  (defn __init__ [self * [items None]]
    (setv self.items (when items (sfor [a b] items #(a b)))))
  (defn _answers? [self iden1 iden2]
    (if self.items
        (in #(iden1 iden2) self.items)
        (user-password-item? iden1)))
  (defn version [self iden1 iden2]
    (when (and (._answers? self iden1 iden2) (terminal?))
      "asked"))
  (defn fetch [self iden1 iden2]
    (setv cache (deployment-cache)
          key #("prompt" iden1 iden2))
    (when (not-in key cache)
      (setv (get cache key)
            (ask-secret (if (user-password-item? iden1)
                            f"password of {iden2} on {(password-host iden1)}"
                            f"data ({iden1} {iden2})"))))
    (get cache key))
  (defn describe [self]
    (if (terminal?) ":prompt" ":prompt (no terminal here)")))

(.update data-source-kinds {"pass" PassSource
                            "pgp" PgpSource
                            "git-snapshot" GitSnapshotSource
                            "prompt" PromptSource})

(export :objects [PassSource PgpSource GitSnapshotSource PromptSource pgp-get-data
                  pgp-set-data ask-secret terminal? user-password-item? password-host USER-PASSWORD])
