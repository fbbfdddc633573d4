;; consfig.util: the helpers every layer uses, on real files.

(import os
        stat
        pytest
        hy.models [Keyword]
        consfig.util [keyword-name bytes->text text->bytes sha256-hex write-atomically])

(defn test-keyword-name-takes-keywords-and-keyword-like-strings []
  (assert (= (keyword-name (Keyword "foo")) "foo") "a keyword")
  (assert (= (keyword-name ":foo") (keyword-name "foo") "foo") "a string, with or without :")
  (assert (is (keyword-name 3) None) "anything else names nothing"))

(defn test-bytes->text-replaces-what-is-not-utf-8 []
  (assert (= (bytes->text b"a\xffb") "a\ufffdb") "undecodable bytes replaced")
  (assert (= (bytes->text None) "") "None is empty"))

(defn test-text->bytes-is-utf-8-and-leaves-bytes-and-none []
  (assert (= (text->bytes "é") b"\xc3\xa9") "UTF-8")
  (assert (= (text->bytes b"\xff") b"\xff") "bytes as they are")
  (assert (is (text->bytes None) None) "None stays None"))

(defn test-sha256-hex-is-the-hex-digest []
  (assert (= (sha256-hex b"") "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
          "the digest of nothing"))

(defn test-write-atomically-replaces-a-file-with-the-mode-given [tmp-path]
  (setv path (/ tmp-path "f"))
  (.write-bytes path b"old")
  (write-atomically path b"new\n" :mode 0o600)
  (assert (= (.read-bytes path) b"new\n") "the new content")
  (assert (= (stat.S-IMODE (. (os.stat path) st-mode)) 0o600) "the mode given")
  (assert (= (os.listdir tmp-path) ["f"]) "no temporary left"))

(defn test-write-atomically-leaves-the-old-file-and-no-temporary-when-it-fails [tmp-path]
  (setv path (/ tmp-path "f"))
  (.write-bytes path b"old")
  (with [(pytest.raises TypeError)]
    (write-atomically path "not bytes"))
  (assert (= (.read-bytes path) b"old") "the old content")
  (assert (= (os.listdir tmp-path) ["f"]) "no temporary left"))

(defn test-write-atomically-in-a-directory-descriptor-lets-prepare-set-the-mode [tmp-path]
  (setv fd (os.open tmp-path (| os.O-PATH os.O-DIRECTORY))
        seen [])
  (defn prepare [f]
    (.append seen (os.fstat f))
    (os.fchmod f 0o640))
  (try (write-atomically "g" b"x" :dir-fd fd :prepare prepare)
       (finally (os.close fd)))
  (assert (= (. (get seen 0) st-size) 1) "PREPARE sees the data written")
  (assert (= (stat.S-IMODE (. (os.stat (/ tmp-path "g")) st-mode)) 0o640) "PREPARE's mode, not MODE"))

(defn test-write-atomically-does-not-write-through-a-symlink [tmp-path]
  (setv target (/ tmp-path "target") link (/ tmp-path "link"))
  (.write-bytes target b"kept")
  (os.symlink target link)
  (write-atomically link b"new")
  (assert (= (.read-bytes target) b"kept") "the file the link led to is untouched")
  (assert (and (not (os.path.islink link)) (= (.read-bytes link) b"new")) "the link is replaced"))
