;; The file properties that install prerequisite data: over :local in a
;; temporary directory, and in the Debian chroot for owners.

(require consfig *)
(import consfig *
        os
        pytest
        proptest [HOSTNAME LOCAL apply-twice deploy-propspec diffs statuses])
(use-props consfig.props [file])

(defn slurp [p] (with [f (open p "rb")] (.read f)))

(defn _mode [p] (& (. (os.stat p) st_mode) 0o777))

(defn _sent [events]
  (lfor e events :if (= (.get e "stream") "data") #((get e "iden1") (get e "iden2") (get e "version"))))

(defn [(pytest.fixture)] tree [tmp-path]
  (setv root (/ tmp-path "data"))
  (for [[rel content] [["_web/motd" b"hello\n"]
                       ["_web/pw" b"hunter2\n"]]]
    (setv p (/ root rel))
    (.mkdir p.parent :parents True :exist-ok True)
    (.write-bytes p content))
  (reset-data-sources)
  (register-data-source "files-tree" :location (str root))
  (yield root)
  (reset-data-sources))

(defn test-data-uploaded-writes-once-and-says-so [tree tmp-path]
  (setv dest (str (/ tmp-path "motd"))
        events (apply-twice LOCAL (file.data-uploaded "_web" "motd" dest)))
  (assert (= (slurp dest) b"hello\n") "content written")
  (assert (= (lfor s (_sent events) (cut s 2)) [#("_web" "motd")]) (_sent events)))

(defn test-data-uploaded-rewrites-only-when-the-content-differs [tree tmp-path]
  (setv dest (str (/ tmp-path "motd")))
  (with [f (open dest "w")] (.write f "hello\n"))
  (setv #(outcome events) (deploy-propspec LOCAL (file.data-uploaded "_web" "motd" dest)))
  (assert (= outcome.status "no-change") (statuses events))
  (assert (= (_sent events) []) "nothing sent for an up-to-date file")
  (with [f (open dest "w")] (.write f "tampered\n"))
  (setv #(outcome events) (deploy-propspec LOCAL (file.data-uploaded "_web" "motd" dest)))
  (assert (= (slurp dest) b"hello\n") "put back")
  (assert (= (len (diffs events)) 0) "no diff of data (it may be large or binary)"))

(defn test-data-uploaded-sets-mode-of-an-up-to-date-file [tree tmp-path]
  (setv dest (str (/ tmp-path "motd")))
  (with [f (open dest "w")] (.write f "hello\n"))
  (os.chmod dest 0o644)
  (apply-twice LOCAL (file.data-uploaded "_web" "motd" dest :mode 0o640))
  (assert (= (_mode dest) 0o640) (oct (_mode dest))))

(defn test-secret-uploaded-is-mode-0600-and-never-shown [tree tmp-path]
  (setv dest (str (/ tmp-path "pw"))
        events (apply-twice LOCAL (file.secret-uploaded "_web" "pw" dest)))
  (assert (= (slurp dest) b"hunter2\n") "content written")
  (assert (= (_mode dest) 0o600) (oct (_mode dest)))
  (assert (not-in "hunter2" (str events)) "the secret is in no event")
  (assert (not (diffs events)) "no diff"))

(defn test-secret-uploaded-in-check-mode-changes-nothing-and-shows-nothing [tree tmp-path]
  (setv dest (str (/ tmp-path "pw")))
  (setv #(outcome events) (deploy-propspec LOCAL (file.secret-uploaded "_web" "pw" dest)
                                           :check-mode True))
  (assert (not (os.path.exists dest)) "nothing written")
  (assert (= outcome.status "changed") (statuses events))
  (assert (not-in "hunter2" (str events)) "the secret is in no event"))

(defn test-secret-uploaded-takes-a-mode [tree tmp-path]
  (setv dest (str (/ tmp-path "pw")))
  (apply-twice LOCAL (file.secret-uploaded "_web" "pw" dest :mode 0o640))
  (assert (= (_mode dest) 0o640) (oct (_mode dest))))

(defn test-host-data-and-secret-are-named-by-the-host-and-destination [tree tmp-path]
  ;; The destination is the item's iden2: the tree has it below the host's
  ;; directory, so the test writes it to that very path, under tmp-path.
  (setv conf (/ tree HOSTNAME (cut (str (/ tmp-path "host.conf")) 1 None))
        key (/ tree HOSTNAME (cut (str (/ tmp-path "host.key")) 1 None)))
  (.mkdir conf.parent :parents True :exist-ok True)
  (.write-bytes conf b"host-specific\n")
  (.write-bytes key b"host-secret\n")
  (apply-twice LOCAL [(file.host-data-uploaded (str (/ tmp-path "host.conf")))
                      (file.host-secret-uploaded (str (/ tmp-path "host.key")))])
  (assert (= (slurp (/ tmp-path "host.conf")) b"host-specific\n") "host data")
  (assert (= (slurp (/ tmp-path "host.key")) b"host-secret\n") "host secret")
  (assert (= (_mode (/ tmp-path "host.key")) 0o600) "secret mode"))

(defn test-data-uploaded-sets-owner-and-group [tree tmp-path]
  (setv dest (str (/ tmp-path "motd")))
  (apply-twice LOCAL (file.data-uploaded "_web" "motd" dest :owner "nobody" :group "nogroup"))
  (setv st (os.stat dest))
  (assert (= #(st.st_uid st.st_gid) #(65534 65534)) #(st.st_uid st.st_gid))
  (os.chown dest 0 0)
  (setv #(outcome events) (deploy-propspec LOCAL (file.data-uploaded "_web" "motd" dest
                                                                     :owner "nobody" :group "nogroup")))
  (assert (= outcome.status "changed") (statuses events))
  (assert (= (_sent events) []) "owner fixed without sending the content again")
  (assert (= (. (os.stat dest) st_uid) 65534) "owner set"))

(defn test-data-cache-purged-removes-the-target-cache [tmp-path monkeypatch]
  (setv cache (/ tmp-path "xdg" "consfig" "data"))
  (.mkdir cache :parents True)
  (.write-bytes (/ cache "x") b"x")
  (monkeypatch.setenv "XDG_CACHE_HOME" (str (/ tmp-path "xdg")))
  (apply-twice LOCAL (file.data-cache-purged))
  (assert (not (os.path.exists cache)) "removed")
  (assert (os.path.isdir (/ tmp-path "xdg" "consfig")) "only the data cache"))
