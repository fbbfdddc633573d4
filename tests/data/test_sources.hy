;; The data sources that call programs: :pass, :pgp, :git-snapshot, :prompt,
;; with a real gpg key (no passphrase) in a temporary GNUPGHOME, a real
;; password store and a real git repository.

(require consfig *)
(import consfig *
        consfig.data.sources [pgp-get-data pgp-set-data]
        getpass
        io
        os
        shutil
        subprocess
        tarfile
        tempfile
        threading
        pytest)
(use-props consfig.props [file])

(setv seen [])

(defprop reads :posix [iden1 iden2]
  "Record the content of (IDEN1, IDEN2) and whether it is a secret."
  (:hostattrs (require-data iden1 iden2))
  (:apply (let [item (get-data iden1 iden2)]
            (.append seen #((.content item) item.secret item.version)))
          :no-change))

(defhost bare.test {:deploy :local})

(defn [(pytest.fixture :autouse True)] clean []
  (.clear seen)
  (reset-data-sources)
  (yield)
  (reset-data-sources))

(defn _run [#* argv [input None] [cwd None]]
  (subprocess.run argv :input input :cwd cwd :check True :capture-output True :timeout 120))

(defn [(pytest.fixture :scope "module")] gnupg []
  ;; Without the tools, the tests of the pass source are skipped saying
  ;; why (an error in CI), rather than failing on a missing program.
  (import harness [unavailable])
  (setv missing (lfor t ["gpg" "pass"] :if (is (shutil.which t) None) t))
  (when missing
    (unavailable f"the pass data source needs {(.join ", " missing)} (Debian: gnupg, pass)"))
  ;; A short path: gpg-agent's socket lives in it.
  (setv home (tempfile.mkdtemp :prefix "cfg-gpg-")
        old (os.environ.get "GNUPGHOME"))
  (os.chmod home 0o700)
  (setv (get os.environ "GNUPGHOME") home)
  (_run "gpg" "--batch" "--passphrase" "" "--quick-gen-key"
        "consfig test <test@consfig.invalid>" "default" "default" "never")
  (yield home)
  (subprocess.run ["gpgconf" "--kill" "gpg-agent"] :timeout 30)
  (if (is old None) (del (get os.environ "GNUPGHOME")) (setv (get os.environ "GNUPGHOME") old))
  (shutil.rmtree home True))

(defn [(pytest.fixture)] store [gnupg tmp-path monkeypatch]
  (setv d (/ tmp-path "store"))
  (monkeypatch.setenv "PASSWORD_STORE_DIR" (str d))
  (_run "pass" "init" "test@consfig.invalid")
  (_run "pass" "insert" "-m" "_db/password" :input b"hunter2\nsecond line\n")
  (_run "pass" "insert" "-m" "web.test/deploy" :input b"sudo-pw\n")
  d)

(defn test-pass-item-is-a-secret-read-from-the-store [store events]
  (register-data-source "pass")
  (deploy-these* [:local] "bare.test" (reads "_db" "password") :sink events)
  (setv [[content secret version]] seen)
  (assert (= content (Secret b"hunter2\nsecond line\n")) "the whole entry")
  (assert secret "every item of :pass is a secret")
  (assert (= version (str (. (os.stat (/ store "_db" "password.gpg")) st-mtime-ns))) version))

(defn test-pass-user-password-is-the-first-line-of-host-slash-user [store]
  (setv item (lookup-data "--user-passwd--web.test" "deploy"
                          :secret False))
  (assert (is item None) "no source registered yet")
  (register-data-source "pass" :location (str store))
  (setv item (lookup-data "--user-passwd--web.test" "deploy"))
  (assert (= (.content item) (Secret b"sudo-pw")) "first line"))

(defn test-pass-without-the-program-is-skipped [store monkeypatch capsys]
  (monkeypatch.setenv "PATH" "/nonexistent")
  (assert (is (try-register-data-source :pass) None) "skipped")
  (assert (in "pass program is not installed" (. (capsys.readouterr) err)) "says why"))

(defn test-pass-without-a-store-is-skipped [gnupg tmp-path capsys]
  (assert (is (try-register-data-source :pass :location (str (/ tmp-path "none"))) None) "skipped")
  (assert (in "no password store" (. (capsys.readouterr) err)) "says why"))

(defn test-pass-missing-entry-is-missing-data-naming-the-store [store]
  (register-data-source "pass")
  (with [e (pytest.raises MissingData)]
    (deploy-these* [:local] "bare.test" (reads "_db" "absent")))
  (assert (in (str store) (str e.value)) (str e.value)))

(defn test-pgp-file-holds-many-versioned-items [gnupg tmp-path events]
  (setv f (str (/ tmp-path "secrets.gpg")))
  (assert (= (pgp-set-data f "_db" "password" "s3cret") 1) "first version")
  (pgp-set-data f "_tls" "key" b"\xff\x00binary")
  (assert (= (pgp-set-data f "_db" "password" "s3cret-2") 2) "a newer version")
  (assert (= (pgp-get-data f "_db" "password") (Secret "s3cret-2")) "read back")
  (assert (is (pgp-get-data f "_db" "absent") None) "absent")
  (with [h (open f "rb")]
    (assert (not-in b"s3cret" (.read h)) "the file is encrypted"))
  (try-register-data-source :pgp :location f)
  (deploy-these* [:local] "bare.test" (eseqprops (reads "_db" "password") (reads "_tls" "key"))
                 :sink events)
  (assert (= seen [#((Secret b"s3cret-2") True "2") #((Secret b"\xff\x00binary") True "1")]) seen))

(defn test-pgp-source-sees-a-changed-file [gnupg tmp-path]
  (setv f (str (/ tmp-path "secrets.gpg")))
  (pgp-set-data f "_db" "password" "one")
  (setv source (register-data-source "pgp" :location f))
  (assert (= (.version source "_db" "password") "1") "version 1")
  (pgp-set-data f "_db" "password" "two")
  (assert (= (.version source "_db" "password") "2") "re-read after a change"))

(defn test-pgp-without-its-file-is-skipped [capsys tmp-path]
  (assert (is (try-register-data-source :pgp :location (str (/ tmp-path "x.gpg"))) None) "skipped")
  (assert (in "no such file" (. (capsys.readouterr) err)) "says why"))

(defn [(pytest.fixture)] repo [tmp-path]
  (setv d (/ tmp-path "repo"))
  (.mkdir d)
  (_run "git" "init" "-q" "-b" "main" :cwd d)
  (.write-text (/ d "README") "first\n")
  (_run "git" "add" "README" :cwd d)
  (_run "git" "-c" "user.name=t" "-c" "user.email=t@t" "commit" "-qm" "one" :cwd d)
  d)

(defn _head [d]
  (.strip (.decode (. (_run "git" "rev-parse" "HEAD" :cwd d) stdout))))

(defn _tar-files [content]
  (with [t (tarfile.open :fileobj (io.BytesIO content))]
    (dfor m (.getmembers t) :if (.isfile m) m.name (.read (.extractfile t m)))))

(defn test-git-snapshot-is-a-tarball-versioned-by-commit [repo tmp-path monkeypatch events]
  (monkeypatch.setenv "XDG_CACHE_HOME" (str (/ tmp-path "cache")))
  (register-data-source "git-snapshot" :name "app" :repo (str repo) :branch "main")
  (deploy-these* [:local] "bare.test" (reads "--git-snapshot" "app") :sink events)
  (setv [[content secret version]] seen)
  (assert (= version (_head repo)) version)
  (assert (not secret) "a snapshot is no secret")
  (assert (= (_tar-files content) {"README" b"first\n"}) (_tar-files content)))

(defn test-git-snapshot-is-kept-in-the-controller-cache [repo tmp-path monkeypatch]
  (monkeypatch.setenv "XDG_CACHE_HOME" (str (/ tmp-path "cache")))
  (register-data-source "git-snapshot" :name "app" :repo (str repo))
  (setv item (lookup-data "--git-snapshot" "app"))
  (.content item)
  (setv data (/ tmp-path "cache" "consfig" "data"))
  (assert (= (& (. (os.stat data) st-mode) 0o777) 0o700) "a private cache")
  (setv kept (lfor [d _ files] (os.walk data) f files (os.path.join d f)))
  (assert (= (len kept) 1) kept)
  (with [f (open (get kept 0) "rb")]
    (assert (= (.read f) (.content item)) "the snapshot is what is kept"))
  ;; The next deployment takes that version from the cache, not from git.
  (with [f (open (get kept 0) "wb")] (.write f b"kept"))
  (assert (= (.content (lookup-data "--git-snapshot" "app")) b"kept") "from the cache"))

(defn test-git-snapshot-of-a-missing-repository-is-skipped [tmp-path capsys]
  (assert (is (try-register-data-source :git-snapshot :name "x" :repo (str (/ tmp-path "no")))
              None)
          "skipped")
  (assert (in "no such repository" (. (capsys.readouterr) err)) "says why"))

(defn test-prompt-without-a-terminal-is-missing-data-before-connecting []
  ;; The test runs without a controlling terminal (pytest's stdin is not one
  ;; when run by the suite); skip where it has one.
  (when (hy.I.consfig/data/sources.terminal?)
    (pytest.skip "this process has a terminal"))
  (register-data-source "prompt")
  (with [e (pytest.raises MissingData)]
    (deploy-these* [:local] "bare.test" (reads "--user-passwd--web.test" "deploy")))
  (assert (in ":prompt (no terminal here)" (str e.value)) (str e.value)))

(defn test-pgp-file-that-cannot-be-decrypted-fails-before-connecting [gnupg tmp-path]
  (setv f (/ tmp-path "secrets.gpg"))
  (.write-bytes f b"not encrypted at all")
  (register-data-source "pgp" :location (str f))
  (with [e (pytest.raises DataSourceFailed)]
    (deploy-these* [[:ssh :host "nowhere.invalid" :timeout 1]] "bare.test" (reads "_db" "password")))
  (assert (in "gpg failed" (str e.value)) (str e.value))
  (assert (in (str f) (str e.value)) (str e.value)))

;; :prompt in a fleet: each item is asked once, on the main thread, before
;; the hosts start.  The terminal's question itself is answered here; the
;; rest (the source, the deployments, the files) is real.

(defn [(pytest.fixture)] terminal [monkeypatch]
  ;; Each question asked, with whether it was asked on the main thread; the
  ;; answer names the question, so a file shows which answer it got.
  (setv asked [])
  (monkeypatch.setattr hy.I.consfig/data/sources (hy.mangle "terminal?") (fn [] True))
  (monkeypatch.setattr getpass "getpass"
                       (fn [question]
                         (.append asked #(question (is (threading.current-thread)
                                                       (threading.main-thread))))
                         f"answer to {question}"))
  asked)

(defn _prompt-hosts [tmp-path name-items]
  ;; A host per #(NAME ITEMS), writing each of its ITEMS to a file of its
  ;; own under TMP-PATH.
  (lfor [name items] name-items
        (make-host f"{name}.prompt.test" {} None
                   (eseqprops #* (gfor [i1 i2] items
                                       (file.secret-uploaded
                                         i1 i2 (str (/ tmp-path f"{name}-{(.strip i1 "-")}-{i2}"))))))))

(defn _deploy-fleet [chain hosts]
  ;; Deploy HOSTS side by side; return which items each host was sent.
  (setv events []
        outcomes (deploy-hosts* chain hosts :sink events.append :jobs (len hosts) :verbosity 3))
  (assert (all (gfor o outcomes (= o.status "changed")))
          #(outcomes (lfor e events :if (in (.get e "status") ["failed" "error"])
                           #((.get e "host") (.get e "desc") (.get e "message")))))
  (setv sent {})
  (for [e events :if (= (.get e "stream") "data")]
    (.append (.setdefault sent (get e "host") []) [(get e "iden1") (get e "iden2")]))
  (dfor [h items] (.items sent) h (sorted items)))

(setv API-TOKEN ["--api" "token"]
      DB-PASSWORD ["--db" "password"])

(defn [(pytest.mark.parametrize "chain" [[:local] [:local :python]] :ids ["local" "python"])]
      test-a-prompt-item-several-hosts-need-is-asked-once-before-they-start [terminal tmp-path chain]
  (register-data-source "prompt" :items [API-TOKEN])
  (_deploy-fleet chain (_prompt-hosts tmp-path [#("h1" [API-TOKEN]) #("h2" [API-TOKEN])
                                                #("h3" [API-TOKEN])]))
  (assert (= terminal [#("[consfig] data (--api token): " True)])
          f"asked once, on the main thread: {terminal}")
  (for [h ["h1" "h2" "h3"]]
    (assert (= (.read-text (/ tmp-path f"{h}-api-token")) "answer to [consfig] data (--api token): ")
            f"{h} has the answer")))

(defn [(pytest.mark.parametrize "chain" [[:local] [:local :python]] :ids ["local" "python"])]
      test-different-prompt-items-of-a-fleet-are-each-asked-once [terminal tmp-path chain]
  (register-data-source "prompt" :items [API-TOKEN DB-PASSWORD])
  (setv sent (_deploy-fleet chain (_prompt-hosts tmp-path [#("h1" [API-TOKEN])
                                                           #("h2" [API-TOKEN DB-PASSWORD])
                                                           #("h3" [DB-PASSWORD])])))
  (assert (= (sorted terminal) [#("[consfig] data (--api token): " True)
                                #("[consfig] data (--db password): " True)])
          f"each asked once, on the main thread: {terminal}")
  (assert (= sent {"h1.prompt.test" [API-TOKEN]
                   "h2.prompt.test" [API-TOKEN DB-PASSWORD]
                   "h3.prompt.test" [DB-PASSWORD]})
          f"each host is sent its own items alone: {sent}")
  (assert (= (sorted (gfor p (.iterdir tmp-path) p.name))
             ["h1-api-token" "h2-api-token" "h2-db-password" "h3-db-password"])
          "each host has its own items"))

(defn test-a-single-host-deployment-asks-its-prompt-item-once-per-deployment [terminal tmp-path]
  (register-data-source "prompt" :items [API-TOKEN])
  (setv [host] (_prompt-hosts tmp-path [#("h1" [API-TOKEN])])
        statuses (lfor _ (range 2) (. (deploy* [:local] host :sink (fn [e] None)) status)))
  (assert (= statuses ["changed" "no-change"]) statuses)
  (assert (= (len terminal) 2) f"asked once by each deployment: {terminal}"))

(defn test-a-fleet-without-a-terminal-stops-at-a-prompt-item-before-connecting [monkeypatch tmp-path]
  (monkeypatch.setattr hy.I.consfig/data/sources (hy.mangle "terminal?") (fn [] False))
  (register-data-source "prompt" :items [API-TOKEN])
  (with [e (pytest.raises MissingData)]
    (deploy-hosts* [:local] (_prompt-hosts tmp-path [#("h1" [API-TOKEN]) #("h2" [API-TOKEN])])
                   :sink (fn [e] None)))
  (assert (in ":prompt (no terminal here)" (str e.value)) (str e.value))
  (assert (in "h1.prompt.test" (str e.value)) (str e.value))
  (assert (= (list (.iterdir tmp-path)) []) "no host was deployed"))

(defn test-a-fleets-sudo-password-from-the-prompt-is-asked-once-before-a-hop-after-python [terminal tmp-path]
  ;; The sudo after :python runs on the target, which has no terminal of
  ;; ours: its password travels with each host's data, asked for here.
  (register-data-source "prompt")
  (_deploy-fleet [:local :python [:sudo :from "deploy@prompt.test"]]
                 (lfor i (range 2)
                       (make-host f"s{i}.prompt.test" {} None
                                  (eseqprops (file.has-content (str (/ tmp-path f"s{i}")) "x\n")))))
  (assert (= terminal [#("[consfig] password of deploy on prompt.test: " True)])
          f"asked once, on the main thread: {terminal}")
  (assert (= (sorted (gfor p (.iterdir tmp-path) p.name)) ["s0" "s1"]) "both deployed"))

(defn test-a-prompt-item-of-hosts-deployed-from-a-fleets-hosts-is-asked-once [terminal tmp-path]
  ;; Each nested deployment resolves its data again as it is applied.
  (register-data-source "prompt" :items [API-TOKEN])
  (setv inner (_prompt-hosts tmp-path [#("in1" [API-TOKEN]) #("in2" [API-TOKEN])]))
  (_deploy-fleet [:local]
                 (lfor [i h] (enumerate inner)
                       (make-host f"out{i}.prompt.test" {} None
                                  (eseqprops (deploys [:local] h.hostname)))))
  (assert (= terminal [#("[consfig] data (--api token): " True)])
          f"asked once, on the main thread: {terminal}")
  (assert (= (sorted (gfor p (.iterdir tmp-path) p.name)) ["in1-api-token" "in2-api-token"])
          "both nested hosts deployed"))
