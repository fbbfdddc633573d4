;; Prerequisite data: secrets, declaring and reading items, the sources.

(require consfig *)
(import consfig *
        hashlib
        json
        os
        pytest)

(setv seen [])

(defprop reads-data :posix [iden1 iden2]
  "Record the content and version of (IDEN1, IDEN2)."
  (:desc f"reads {iden1} {iden2}")
  (:hostattrs (require-data iden1 iden2))
  (:apply (.append seen #((get-data-bytes iden1 iden2) (data-version iden1 iden2)))
          :no-change))

(defprop reads-secret :posix [iden1 iden2]
  "Record (IDEN1, IDEN2), declared secret."
  (:hostattrs (require-data iden1 iden2 :secret True))
  (:apply (.append seen (get-data-string iden1 iden2)) :no-change))

(defprop reads-undeclared :posix []
  "Ask for an item no :hostattrs declared."
  (:desc "reads undeclared")
  (:apply (get-data "web.test" "never-declared")))

(defprop provides :posix [text]
  "Provide (\"--test\", \"computed\") with TEXT, and read it back."
  (:hostattrs (provide-data "--test" "computed" text))
  (:apply (do (setv item (get-data "--test" "computed"))
              (.append seen #((.content item) item.version item.sha256)))
          :no-change))

(defprop provides-secret :posix [text]
  "Provide a secret TEXT and record its item."
  (:hostattrs (provide-data "--test" "secret" (Secret text)))
  (:apply (.append seen (get-data "--test" "secret")) :no-change))

(defhost web.test {:deploy :local}
  (reads-data "web.test" "motd"))

(defhost bare.test {:deploy :local})

(defhost inner.test {:deploy :local}
  (reads-data "inner.test" "conf"))

(defhost outer.test {:deploy :local}
  (deploys :local "inner.test"))

(defn [(pytest.fixture :autouse True)] clean []
  (.clear seen)
  (reset-data-sources)
  (yield)
  (reset-data-sources))

(defn _tree [root files]
  (for [[rel content] (.items files)]
    (setv path (/ root rel))
    (.mkdir path.parent :parents True :exist-ok True)
    (.write-bytes path content))
  root)

(defn test-secret-is-redacted-wherever-it-is-printed []
  (setv s (Secret "hunter2"))
  (for [shown [(repr s) (str s) (hy.repr s) f"{s}" (format s "") (hy.repr [s {"k" s}])]]
    (assert (not-in "hunter2" shown) shown)
    (assert (in "«secret»" shown) shown)))

(defn test-secret-is-refused-by-json []
  (with [(pytest.raises TypeError)]
    (json.dumps {"password" (Secret "hunter2")})))

(defn test-secret-reveals-its-value-and-compares-by-it []
  (assert (= (.reveal (Secret b"k")) b"k") "reveal gives the value")
  (assert (= (Secret "a") (Secret "a")) "equal values, equal secrets")
  (assert (!= (Secret "a") (Secret "b")) "different values")
  (assert (!= (Secret "a") "a") "a secret is not its value")
  (assert (secret? (Secret "a")) "secret?")
  (assert (not (secret? "a")) "a string is no secret"))

(defn test-files-tree-item-is-read-while-applying [tmp-path events]
  (_tree tmp-path {"web.test/motd" b"hello\n"})
  (register-data-source "files-tree" :location (str tmp-path))
  (deploy* [:local] "web.test" :sink events)
  (assert (= (len seen) 1) seen)
  (setv [[content version]] seen)
  (assert (= content b"hello\n") content)
  (assert (= version (str (. (os.stat (/ tmp-path "web.test/motd")) st-mtime-ns))) version))

(defn test-files-tree-identifiers-may-hold-slashes-and-absolute-paths [tmp-path events]
  (_tree tmp-path {"_web/etc/nginx/site.conf" b"server {}\n"})
  (register-data-source "files-tree" :location (str tmp-path))
  (deploy-these* [:local] "bare.test" (reads-data "_web" "/etc/nginx/site.conf") :sink events)
  (assert (= (get seen 0 0) b"server {}\n") seen))

(defn test-files-tree-does-not-climb-out-of-its-directory [tmp-path]
  (_tree tmp-path {"outside" b"x" "tree/web.test/.keep" b""})
  (register-data-source "files-tree" :location (str (/ tmp-path "tree")))
  (with [e (pytest.raises MissingData)]
    (deploy-these* [:local] "bare.test" (reads-data "web.test" "../../outside")))
  (assert (in "../../outside" (str e.value)) (str e.value)))

(defn test-local-file-source-has-an-explicit-version-or-its-mtime [tmp-path events]
  (_tree tmp-path {"a" b"A" "b" b"B"})
  (register-data-source "local-file" :location (str (/ tmp-path "a"))
                        :iden1 "web.test" :iden2 "motd" :version "7")
  (register-data-source "local-file" :location (str (/ tmp-path "b"))
                        :iden1 "web.test" :iden2 "other")
  (deploy-these* [:local] "bare.test" (eseqprops (reads-data "web.test" "motd")
                                                 (reads-data "web.test" "other"))
                 :sink events)
  (assert (= (get seen 0) #(b"A" "7")) seen)
  (assert (= (get seen 1) #(b"B" (str (. (os.stat (/ tmp-path "b")) st-mtime-ns)))) seen))

(defn test-first-registered-source-that-has-an-item-wins [tmp-path events]
  (_tree tmp-path {"one/web.test/motd" b"first" "two/web.test/motd" b"second"})
  (register-data-source "files-tree" :location (str (/ tmp-path "one")))
  (register-data-source "files-tree" :location (str (/ tmp-path "two")))
  (deploy* [:local] "web.test" :sink events)
  (assert (= (get seen 0 0) b"first") seen))

(defn test-require-data-secret-gives-a-secret [tmp-path events]
  (_tree tmp-path {"web.test/pw" b"hunter2"})
  (register-data-source "files-tree" :location (str tmp-path))
  (deploy-these* [:local] "bare.test" (reads-secret "web.test" "pw") :sink events)
  (assert (= seen [(Secret "hunter2")]) seen)
  (assert (not-in "hunter2" (str events.events)) "no event carries the secret"))

(defn test-provided-data-is-read-back-with-a-digest-for-version [events]
  (deploy-these* [:local] "bare.test" (provides "rendered\n") :sink events)
  (setv digest (.hexdigest (hashlib.sha256 b"rendered\n")))
  (assert (= seen [#(b"rendered\n" digest digest)]) seen))

(defn test-missing-data-is-one-error-before-anything-is-applied [tmp-path]
  (register-data-source "files-tree" :location (str tmp-path))
  (with [e (pytest.raises MissingData)]
    (deploy-these* [:local] "bare.test" (eseqprops (reads-data "web.test" "absent")
                                                   (reads-data "_shared" "also-absent"))))
  (setv message (str e.value))
  (assert (= seen []) "nothing was applied")
  (for [part ["bare.test" "\"absent\"" "\"also-absent\"" "reads-data web.test absent"
              "test_items.hy:" (str tmp-path)]]
    (assert (in part message) message)))

(defn test-missing-data-without-any-source-says-how-to-register-one []
  (with [e (pytest.raises MissingData)]
    (deploy* [:local] "web.test"))
  (assert (in "try-register-data-source" (str e.value)) (str e.value)))

(defn test-nested-host-data-is-resolved-before-connecting [tmp-path]
  (register-data-source "files-tree" :location (str tmp-path))
  (with [e (pytest.raises MissingData)]
    (deploy* [:local] "outer.test"))
  (assert (in "inner.test" (str e.value)) (str e.value)))

(defn test-nested-host-reads-its-own-data [tmp-path events]
  (_tree tmp-path {"inner.test/conf" b"inner"})
  (register-data-source "files-tree" :location (str tmp-path))
  (deploy* [:local] "outer.test" :sink events)
  (assert (= (get seen 0 0) b"inner") seen))

(defn test-undeclared-item-fails-the-property-naming-it [events]
  (deploy-these* [:local] "bare.test" (reads-undeclared) :sink events)
  (assert (= (events.status-of "reads undeclared") "failed") (events.ends))
  (setv text (str events.events))
  (assert (in "never-declared" text) text)
  (assert (in "require-data" text) text))

(defn test-try-register-skips-an-unusable-source-with-a-warning [capsys]
  (setv source (try-register-data-source :files-tree :location "no-such-data-dir"))
  (assert (is source None) source)
  (assert (= (data-sources) []) (data-sources))
  (setv err (. (capsys.readouterr) err))
  (assert (in "warning" err) err)
  (assert (in (os.path.join (os.path.dirname __file__) "no-such-data-dir") err) err))

(defn test-register-data-source-raises-for-an-unusable-source []
  (with [(pytest.raises DataSourceUnusable)]
    (register-data-source "files-tree" :location "/nonexistent/consfig-data")))

(defn test-unknown-source-kind-names-the-known-ones []
  (with [e (pytest.raises ConsfigError)]
    (register-data-source "s3-bucket"))
  (assert (in ":files-tree" (str e.value)) (str e.value)))

(defn test-try-register-macro-takes-keywords-as-written [tmp-path]
  (setv d (str tmp-path))
  (setv source (try-register-data-source :local-file :location (+ d "/x") :iden1 "a" :iden2 "b"))
  (assert (is source None) "no such file: skipped")
  (.write-text (/ tmp-path "x") "x")
  (setv source (try-register-data-source :local-file :location (+ d "/x") :iden1 "a" :iden2 "b"))
  (assert (= (.version source "a" "b") (str (. (os.stat (/ tmp-path "x")) st-mtime-ns))) source))

(defn test-missing-data-stops-a-deployment-before-it-connects [tmp-path]
  ;; The chain leads nowhere: reaching it would be a connection failure.
  (register-data-source "files-tree" :location (str tmp-path))
  (with [e (pytest.raises MissingData)]
    (deploy* [[:ssh :host "nowhere.invalid" :timeout 1]] "web.test"))
  (assert (in "(\"web.test\" \"motd\")" (str e.value)) (str e.value)))

(defn test-a-site-may-register-a-source-of-its-own [events]
  (defclass Constant [DataSource]
    (defn version [self iden1 iden2] (when (= iden2 "motd") "v1"))
    (defn fetch [self iden1 iden2] b"constant"))
  (setv source (register-data-source (Constant)))
  (deploy* [:local] "web.test" :sink events)
  (assert (= seen [#(b"constant" "v1")]) seen)
  (forget-data-source source)
  (assert (= (data-sources) []) (data-sources)))

(defn test-a-provided-secret-is-not-versioned-by-its-digest [events]
  (deploy-these* [:local] "bare.test" (provides-secret "hunter2") :sink events)
  (setv [item] seen)
  (assert item.secret "a secret")
  (assert (= item.version "provided") item.version)
  (assert (= (.content item) (Secret b"hunter2")) "its content"))

(defn test-a-source-that-fails-is-one-error-before-connecting []
  (defclass Broken [DataSource]
    (defn version [self iden1 iden2] "1")
    (defn fetch [self iden1 iden2] (raise (OSError "the disk is on fire")))
    (defn describe [self] "a broken source"))
  (register-data-source (Broken))
  (with [e (pytest.raises DataSourceFailed)]
    (deploy* [[:ssh :host "nowhere.invalid" :timeout 1]] "web.test"))
  (setv message (str e.value))
  (for [part ["web.test" "(\"web.test\" \"motd\")" "a broken source" "the disk is on fire"]]
    (assert (in part message) message)))
