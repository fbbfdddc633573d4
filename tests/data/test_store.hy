;; The data cache (consfig.data.store): versions kept between deployments, in
;; a directory no one else can write, on real files with real modes.

(import os
        stat
        time
        pytest
        harness [unavailable]
        consfig.boot [data-entry]
        consfig.data.store [DataCache cache-root controller-cache UNUSED-DAYS]
        consfig.util [sha256-hex])

(defn mode-of [path]
  (stat.S-IMODE (. (os.lstat path) st-mode)))

(defn files-under [root]
  ;; Every file under ROOT, relative to it.
  (sorted (gfor [d dirs names] (os.walk root) n names (os.path.relpath (os.path.join d n) root))))

(defn old [path days]
  ;; Date PATH DAYS days back.
  (setv t (- (time.time) (* days 86400)))
  (os.utime path #(t t) :follow-symlinks False))

;; The directory

(defn test-a-missing-cache-directory-is-made-private [tmp-path]
  (setv root (/ tmp-path "data"))
  (DataCache (str root))
  (assert (.is-dir root) "the directory is made")
  (assert (= (mode-of root) 0o700) f"mode 0700, not {(oct (mode-of root))}"))

(defn test-a-cache-directory-others-can-write-is-refused [tmp-path]
  (setv root (/ tmp-path "data"))
  (.mkdir root)
  (os.chmod root 0o777)
  (with [e (pytest.raises OSError)]
    (DataCache (str root)))
  (assert (in (str root) (str e.value)) f"the message names the directory: {e.value}")
  (assert (in "written by others" (str e.value)) f"and says why: {e.value}")
  (assert (= (mode-of root) 0o777) "an unsafe directory is not quietly made safe"))

(defn test-a-cache-directory-owned-by-another-user-is-refused [tmp-path]
  (when (!= (os.geteuid) 0)
    (unavailable "giving a directory away needs root"))
  (setv root (/ tmp-path "data"))
  (.mkdir root :mode 0o700)
  (os.chown root 65534 65534)
  (with [e (pytest.raises OSError)]
    (DataCache (str root)))
  (assert (in "owned by uid 65534" (str e.value)) f"the message says whose it is: {e.value}"))

(defn test-a-symlink-planted-as-the-cache-directory-is-refused [tmp-path]
  (setv elsewhere (/ tmp-path "elsewhere")
        root (/ tmp-path "data"))
  (.mkdir elsewhere :mode 0o700)
  (.symlink-to root elsewhere)
  (with [e (pytest.raises OSError)]
    (DataCache (str root)))
  (assert (in "not a directory" (str e.value)) f"a symlink is not a directory: {e.value}"))

;; Versions

(defn test-a-stored-version-loads-back-with-private-modes [tmp-path]
  (setv cache (DataCache (str (/ tmp-path "data")))
        content (bytes (range 256)))
  (.store cache "_web" "nginx.conf" "v1" content)
  (assert (= (.load cache "_web" "nginx.conf" "v1") content) "the same bytes come back")
  (setv path (.path cache "_web" "nginx.conf" "v1"))
  (assert (= (mode-of path) 0o600) f"the version is 0600, not {(oct (mode-of path))}")
  (assert (= (mode-of (os.path.dirname path)) 0o700) "its item directory is 0700"))

(defn test-a-version-not-kept-loads-as-none [tmp-path]
  (setv cache (DataCache (str (/ tmp-path "data"))))
  (.store cache "_web" "nginx.conf" "v1" b"one")
  (assert (is (.load cache "_web" "nginx.conf" "v2") None) "another version of a kept item")
  (assert (is (.load cache "_web" "other" "v1") None) "another item"))

(defn test-a-version-whose-digest-matches-loads [tmp-path]
  (setv cache (DataCache (str (/ tmp-path "data"))))
  (.store cache "a" "b" "v1" b"content")
  (assert (= (.load cache "a" "b" "v1" (sha256-hex b"content")) b"content") "its digest matches"))

(defn test-a-damaged-version-is-discarded-by-its-digest [tmp-path]
  (setv cache (DataCache (str (/ tmp-path "data"))))
  (.store cache "a" "b" "v1" b"content")
  (setv path (.path cache "a" "b" "v1"))
  (with [f (open path "wb")] (.write f b"cOntent"))
  (assert (is (.load cache "a" "b" "v1" (sha256-hex b"content")) None) "damaged: not given")
  (assert (not (os.path.exists path)) "and the damaged file is gone"))

(defn test-storing-a-version-forgets-the-items-other-versions-only [tmp-path]
  (setv cache (DataCache (str (/ tmp-path "data"))))
  (.store cache "a" "b" "v1" b"one")
  (.store cache "a" "other" "v1" b"other")
  (.store cache "a" "b" "v2" b"two")
  (assert (is (.load cache "a" "b" "v1") None) "the older version is gone")
  (assert (= (.load cache "a" "b" "v2") b"two") "the new one is kept")
  (assert (= (.load cache "a" "other" "v1") b"other") "another item keeps its version")
  (assert (= (len (files-under (/ tmp-path "data"))) 2) "one file per item, no temporary"))

(defn test-hostile-identifiers-stay-inside-the-cache-as-digests [tmp-path]
  (setv root (/ tmp-path "data")
        cache (DataCache (str root)))
  (for [[iden1 iden2 version] [["../../etc" "passwd" "../x"]
                               ["a\nb" "c\x00d" "v\n1"]
                               ["-rf" "$(touch pwned)" "`id`"]
                               [(* "x" 1000000) "big" (* "v" 100000)]
                               ["caf\udcc3" "\udcff" "v1"]]]
    (.store cache iden1 iden2 version b"x")
    (setv path (.path cache iden1 iden2 version))
    (assert (= (os.path.dirname (os.path.dirname path)) (str root))
            f"two levels under the root: {(cut path 0 200)}")
    (assert (= (len (os.path.basename path)) 32) "a file name is a digest, whatever the version")
    (assert (= (.load cache iden1 iden2 version) b"x") "and loads back"))
  (assert (= (sorted (os.listdir tmp-path)) ["data"]) "nothing written beside the cache"))

(defn test-a-version-that-is-not-valid-unicode-is-kept-under-a-digest-too [tmp-path]
  ;; A site's own source may give any string as a version: a file name read
  ;; with os.fsdecode carries lone surrogates.
  (setv cache (DataCache (str (/ tmp-path "data"))))
  (.store cache "site" "blob" "v\udcff" b"x")
  (assert (= (.load cache "site" "blob" "v\udcff") b"x") "kept and loaded back")
  (assert (is (.load cache "site" "blob" "v\udcfe") None) "another such version is another file"))

(defn test-an-item-directory-planted-as-a-symlink-is-refused [tmp-path]
  (setv root (/ tmp-path "data")
        cache (DataCache (str root))
        elsewhere (/ tmp-path "elsewhere"))
  (.mkdir elsewhere :mode 0o700)
  (.symlink-to (/ root (get (data-entry "a" "b" "v1") 0)) elsewhere)
  (with [e (pytest.raises OSError)]
    (.store cache "a" "b" "v1" b"content"))
  (assert (in "not a directory" (str e.value)) f"says why: {e.value}")
  (assert (= (list (.iterdir elsewhere)) []) "nothing is written through the symlink"))

(defn test-an-item-directory-others-can-write-is-refused [tmp-path]
  (setv root (/ tmp-path "data")
        cache (DataCache (str root))
        item (/ root (get (data-entry "a" "b" "v1") 0)))
  (.mkdir item)
  (os.chmod item 0o777)
  (with [e (pytest.raises OSError)]
    (.store cache "a" "b" "v1" b"content"))
  (assert (in (str item) (str e.value)) f"the message names the directory: {e.value}")
  (assert (= (list (.iterdir item)) []) "nothing is written there"))

;; Use and pruning

(defn test-prune-removes-items-unused-for-longer-than-the-limit [tmp-path]
  (setv root (/ tmp-path "data")
        cache (DataCache (str root)))
  (.store cache "a" "stale" "v1" b"old")
  (.store cache "a" "fresh" "v1" b"new")
  (old (os.path.dirname (.path cache "a" "stale" "v1")) (+ UNUSED-DAYS 1))
  (old (os.path.dirname (.path cache "a" "fresh" "v1")) (- UNUSED-DAYS 1))
  (.prune cache)
  (assert (is (.load cache "a" "stale" "v1") None) "the stale item is gone")
  (assert (= (.load cache "a" "fresh" "v1") b"new") "the recent one stays")
  (assert (= (len (os.listdir root)) 1) "its directory went with it"))

(defn test-prune-takes-a-number-of-days [tmp-path]
  (setv cache (DataCache (str (/ tmp-path "data"))))
  (.store cache "a" "b" "v1" b"x")
  (old (os.path.dirname (.path cache "a" "b" "v1")) 3)
  (.prune cache 5)
  (assert (= (.load cache "a" "b" "v1") b"x") "kept: used within 5 days")
  (.prune cache 2)
  (assert (is (.load cache "a" "b" "v1") None) "gone: unused for more than 2"))

(defn test-using-an-item-keeps-it-from-being-pruned [tmp-path]
  (setv cache (DataCache (str (/ tmp-path "data"))))
  (.store cache "a" "b" "v1" b"x")
  (old (os.path.dirname (.path cache "a" "b" "v1")) (+ UNUSED-DAYS 10))
  (.used cache "a" "b")
  (.prune cache)
  (assert (= (.load cache "a" "b" "v1") b"x") "used now: kept"))

(defn test-using-an-item-never-stored-is-harmless [tmp-path]
  (setv root (/ tmp-path "data")
        cache (DataCache (str root)))
  (.used cache "never" "stored")
  (assert (= (os.listdir root) []) "nothing is made for it"))

(defn test-prune-does-not-follow-a-symlink-planted-in-the-cache [tmp-path]
  (setv root (/ tmp-path "data")
        cache (DataCache (str root))
        victim (/ tmp-path "victim"))
  (.mkdir victim)
  (.write-bytes (/ victim "precious") b"keep me")
  (old victim 365)
  (setv link (/ root "0123456789abcdef0123456789abcdef"))
  (.symlink-to link victim)
  (old link 365)
  (.prune cache)
  (assert (= (.read-bytes (/ victim "precious")) b"keep me") "what the link points to is untouched"))

;; Where the controller's cache is

(defn [(pytest.fixture)] xdg [monkeypatch tmp-path]
  ;; XDG_CACHE_HOME, a private directory under tmp-path, for this test only.
  (setv d (/ tmp-path "xdg"))
  (.mkdir d :mode 0o700)
  (.setenv monkeypatch "XDG_CACHE_HOME" (str d))
  d)

(defn test-the-cache-root-is-data-under-xdg-cache-home [xdg]
  (assert (= (cache-root) (str (/ xdg "consfig" "data"))) f"under XDG_CACHE_HOME: {(cache-root)}"))

(defn test-a-relative-xdg-cache-home-is-ignored [monkeypatch]
  (import pwd)
  (.setenv monkeypatch "XDG_CACHE_HOME" "relative/cache")
  (setv home (. (pwd.getpwuid (os.geteuid)) pw-dir))
  (assert (= (cache-root) (os.path.join home ".cache" "consfig" "data"))
          f"the home's .cache instead: {(cache-root)}"))

(defn test-the-controller-cache-lives-at-the-cache-root [xdg]
  (setv cache (controller-cache))
  (assert (isinstance cache DataCache) "a DataCache")
  (assert (= cache.root (str (/ xdg "consfig" "data"))) f"at the cache root: {cache.root}")
  (assert (= (mode-of cache.root) 0o700) "made private"))

(defn test-no-controller-cache-when-its-directory-cannot-be-used [xdg]
  (setv data (/ xdg "consfig" "data"))
  (.mkdir data :parents True :mode 0o700)
  (os.chmod data 0o777)
  (assert (is (controller-cache) None) "an unsafe directory: no cache, no error"))
