;; What a deployment remembers on its target (consfig.apply.targetstate):
;; where the state directory is, the file of a host's state, reading and
;; saving it.  Over :local, on real files; a shell connection runs real
;; commands as the user nobody.

(import json
        os
        shlex
        stat
        pytest
        harness [unavailable]
        consfig.apply.targetstate [target-state-directory host-state-file
                                   read-state-file save-state-file]
        consfig.errors [FailedChange]
        consfig.model.context [applying get-connattr set-connattr]
        consfig.model.host [Host]
        consfig.transport.local [LocalConnection]
        consfig.util [state-directory])

(defclass CountingConnection [LocalConnection]
  "The local connection, counting the commands it runs."
  (defn __init__ [self]
    (.__init__ (super))
    (setv self.scripts []))
  (defn run-script [self script #* args #** kw]
    (.append self.scripts script)
    (.run-script (super) script #* args #** kw)))

(defclass ShellAsNobody [CountingConnection]
  "A connection whose commands run in a shell, as the user nobody, with
the environment ENV: as over ssh to a shell-only target."
  (setv python? False)
  (defn __init__ [self env]
    (.__init__ (super))
    (setv self.env env))
  (defn run-script [self script input timeout #** kw]
    (.run-script (super)
                 (.join " " ["exec setpriv --reuid=65534 --regid=65534 --clear-groups env -i"
                             #* (gfor [k v] (.items self.env) (shlex.quote f"{k}={v}"))
                             "/bin/sh -c" (shlex.quote script)])
                 input timeout #** kw)))

(defn [(pytest.fixture)] state [tmp-path]
  ;; A local connection whose state directory is STATE under tmp-path.
  (setv conn (LocalConnection)
        d (/ tmp-path "state"))
  (with [(applying (Host "test.example" None) conn)]
    (set-connattr "consfig-state-directory" (str d))
    (yield d)))

(defn mode-of [path]
  (stat.S-IMODE (. (os.stat path) st-mode)))

;; The state directory

(defn test-over-python-the-state-directory-is-asked-of-python-not-a-shell []
  (setv conn (CountingConnection))
  (with [(applying (Host "test.example" None) conn)]
    (assert (= (target-state-directory) (state-directory)) (target-state-directory)))
  (assert (= conn.scripts []) f"no command run: {conn.scripts}"))

(defn need-root []
  (when (!= (os.geteuid) 0)
    (unavailable "running a shell as nobody needs root")))

(defn test-over-a-shell-the-state-directory-is-that-of-the-user-it-runs-as []
  (need-root)
  (with [(applying (Host "test.example" None)
                   (ShellAsNobody {"HOME" "/nonexistent" "XDG_STATE_HOME" "/srv/state"}))]
    (assert (= (target-state-directory) "/srv/state/consfig")
            f"nobody's, not root's: {(target-state-directory)!r}")))

(defn test-over-a-shell-a-relative-xdg-state-home-is-ignored []
  (need-root)
  (with [(applying (Host "test.example" None)
                   (ShellAsNobody {"HOME" "/nonexistent" "XDG_STATE_HOME" "relative"}))]
    (assert (= (target-state-directory) "/nonexistent/.local/state/consfig")
            (target-state-directory))))

(defn test-the-state-directory-is-asked-once-per-connection []
  (need-root)
  (setv conn (ShellAsNobody {"HOME" "/nonexistent"}))
  (with [(applying (Host "test.example" None) conn)]
    (target-state-directory)
    (target-state-directory)
    (assert (= (get-connattr "consfig-state-directory") (target-state-directory))
            "kept on the connection"))
  (assert (= (len conn.scripts) 1) f"one command: {conn.scripts}"))

;; The file of a host's state

(defn test-a-hosts-state-file-is-kind-slash-hostname-json [state]
  (assert (= (host-state-file "handlers" "web.example") (str (/ state "handlers" "web.example.json")))
          (host-state-file "handlers" "web.example")))

(defn test-a-hostname-that-cannot-name-a-file-is-refused [state]
  (for [bad ["" "a/b" "../etc/passwd" ".hidden" "." ".." "a\nb" "a\x00b" "a\tb" "\x1b[31m"]]
    (with [e (pytest.raises FailedChange)]
      (host-state-file "handlers" bad))
    (assert (in "(handlers)" (str e.value)) f"the message names the kind: {e.value}")
    (assert (in (repr bad) (str e.value)) f"and the name, quoted: {e.value}")))

(defn test-a-hostname-with-shell-syntax-names-a-file-and-runs-nothing [state tmp-path monkeypatch]
  (.chdir monkeypatch tmp-path)
  (setv path (host-state-file "during" "$(touch pwned) -rf"))
  (save-state-file path {"a" 1})
  (assert (= (read-state-file path) {"a" 1}) "saved and read back under that name")
  (save-state-file path None)
  (assert (not (os.path.exists path)) "and removed")
  (assert (not (os.path.exists (/ tmp-path "pwned"))) "no command ran"))

;; Reading and saving

(defn test-reading-a-missing-state-file-gives-none [state]
  (assert (is (read-state-file (host-state-file "handlers" "web.example")) None) "None"))

(defn test-a-state-file-that-is-not-json-is-a-value-error [state]
  (setv path (host-state-file "handlers" "web.example"))
  (os.makedirs (os.path.dirname path))
  (with [f (open path "wb")] (.write f b"{\"half\": \xff"))
  (with [e (pytest.raises ValueError)]
    (read-state-file path)))

(defn test-saved-state-reads-back [state]
  (setv path (host-state-file "handlers" "web.example")
        data {"owed" ["restart nginx" "line\nbreak" "caf\u00e9"] "n" 3})
  (save-state-file path data)
  (assert (= (read-state-file path) data) (read-state-file path))
  (assert (= (json.loads (.read-text (/ state "handlers" "web.example.json"))) data) "as JSON"))

(defn test-saved-state-is-private-in-a-private-directory [state]
  (setv path (host-state-file "handlers" "web.example"))
  (save-state-file path [])
  (assert (= (mode-of path) 0o600) f"the file is 0600, not {(oct (mode-of path))}")
  (assert (= (mode-of (os.path.dirname path)) 0o700) "its directory, made, is 0700"))

(defn test-saving-replaces-the-state-leaving-no-temporary [state]
  (setv path (host-state-file "handlers" "web.example"))
  (save-state-file path {"v" 1})
  (save-state-file path {"v" 2})
  (assert (= (read-state-file path) {"v" 2}) "the new state")
  (assert (= (os.listdir (os.path.dirname path)) ["web.example.json"]) "and nothing else"))

(defn test-saving-none-removes-the-state-file [state]
  (setv path (host-state-file "handlers" "web.example")
        other (host-state-file "handlers" "db.example"))
  (save-state-file path {"v" 1})
  (save-state-file other {"v" 1})
  (save-state-file path None)
  (assert (not (os.path.exists path)) "removed")
  (assert (= (read-state-file other) {"v" 1}) "another host's stays"))

(defn test-saving-none-when-there-is-no-state-is-harmless [state]
  (save-state-file (host-state-file "handlers" "web.example") None)
  (assert (not (os.path.exists state)) "nothing made"))
