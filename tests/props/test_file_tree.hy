;; Copying a tree onto the target by content hash (props/file.hy: list-tree,
;; tree-plan, apply-tree-plan), over :local in a temporary directory, with
;; the site's side (consfig.site.files.tree-manifest) read straight from disk.

(require consfig *)
(import os
        consfig *
        consfig.site.files [tree-manifest]
        proptest [LOCAL apply-twice deploy-propspec statuses])
(use-props consfig.props [file])

(defn _content [source]
  (fn [e]
    (with [f (open (if (get e "path") (os.path.join source (get e "path")) source) "rb")]
      (.read f))))

(defprop copied :posix [dest source * [mode None] [owner None] [group None] [delete False]]
  "DEST is a copy of SOURCE, a tree on this machine."
  (:desc f"{dest} is a copy of {source}")
  (:check
    (setv #(kind have) (file.list-tree dest)
          plan (file.tree-plan dest (tree-manifest source) have :mode mode :owner owner
                               :group group :delete delete))
    (or (file.plan-empty? plan) (Drift (.join "; " (get plan "changes")))))
  (:apply
    (setv #(kind have) (file.list-tree dest)
          plan (file.tree-plan dest (tree-manifest source) have :mode mode :owner owner
                               :group group :delete delete))
    (file.apply-tree-plan dest plan (_content source) :mode mode :owner owner :group group)))

(defn spit [p s]
  (os.makedirs (os.path.dirname p) :exist-ok True)
  (with [f (open p "w")] (.write f s)))
(defn slurp [p] (with [f (open p)] (.read f)))
(defn mode-of [p] (& (. (os.lstat p) st_mode) 0o7777))

(defn site-tree [root]
  (spit (os.path.join root "a.conf") "a\n")
  (spit (os.path.join root "sub dir" "-b") "b\n")
  (spit (os.path.join root "sub dir" "deep" "c") "c\n")
  (os.chmod (os.path.join root "a.conf") 0o640)
  (os.symlink "a.conf" (os.path.join root "link"))
  root)

(defn walk [root]
  (sorted (gfor [d dirs files] (os.walk root) n (+ dirs files)
                (os.path.relpath (os.path.join d n) root))))

(defn test-tree-copied-then-unchanged [tmp-path]
  (setv src (site-tree (str (/ tmp-path "src")))
        dest (str (/ tmp-path "dest")))
  (apply-twice LOCAL (copied dest src))
  (assert (= (walk dest) (walk src)) (walk dest))
  (assert (= (slurp (os.path.join dest "sub dir" "-b")) "b\n") "a file named -b")
  (assert (= (os.readlink (os.path.join dest "link")) "a.conf") "the symlink copied")
  (assert (= (mode-of (os.path.join dest "a.conf")) 0o640) "the source's mode by default"))

(defn inodes [root]
  (dfor r (walk root) r (. (os.lstat (os.path.join root r)) st_ino)))

(defn test-tree-writes-only-what-changed [tmp-path]
  (setv src (site-tree (str (/ tmp-path "src")))
        dest (str (/ tmp-path "dest")))
  (deploy-propspec LOCAL (copied dest src))
  (setv before (inodes dest))
  (spit (os.path.join src "sub dir" "deep" "c") "changed\n")
  (deploy-propspec LOCAL (copied dest src))
  (setv after (inodes dest))
  (assert (= (slurp (os.path.join dest "sub dir" "deep" "c")) "changed\n") "the changed file")
  (assert (= (lfor [r i] (.items after) :if (!= i (get before r)) r) ["sub dir/deep/c"])
          "only the changed file was written"))

(defn test-tree-delete-removes-what-the-source-lacks [tmp-path]
  (setv src (site-tree (str (/ tmp-path "src")))
        dest (str (/ tmp-path "dest")))
  (deploy-propspec LOCAL (copied dest src))
  (spit (os.path.join dest "stray") "x\n")
  (spit (os.path.join dest "stray dir" "y") "y\n")
  (os.remove (os.path.join src "sub dir" "-b"))
  (assert (= (. (get (deploy-propspec LOCAL (copied dest src)) 0) status) "no-change")
          "without :delete, what the source lacks is no change to make")
  (assert (os.path.exists (os.path.join dest "stray")) "kept without :delete")
  (assert (os.path.exists (os.path.join dest "sub dir" "-b")) "kept without :delete, too")
  (setv untouched (. (os.stat (os.path.join dest "a.conf")) st_ino))
  (apply-twice LOCAL (copied dest src :delete True))
  (assert (= (walk dest) (walk src)) (walk dest))
  (assert (= (. (os.stat (os.path.join dest "a.conf")) st_ino) untouched) "a.conf kept"))

(defn test-tree-mode-and-owner-fixed-without-rewriting [tmp-path]
  (setv src (site-tree (str (/ tmp-path "src")))
        dest (str (/ tmp-path "dest")))
  (apply-twice LOCAL (copied dest src :mode 0o600 :owner "nobody" :group 0))
  (assert (= (mode-of (os.path.join dest "a.conf")) 0o600) "files get :mode")
  (assert (= (mode-of (os.path.join dest "sub dir")) 0o700) "directories a searchable :mode")
  (assert (= (. (os.lstat (os.path.join dest "sub dir" "-b")) st_uid)
             (. (os.lstat (os.path.join dest "link")) st_uid)
             (. (os.lstat dest) st_uid)
             65534)
          "every entry owned by nobody")
  (os.chmod (os.path.join dest "a.conf") 0o644)
  (setv inode (. (os.stat (os.path.join dest "a.conf")) st_ino)
        #(_ events) (deploy-propspec LOCAL (copied dest src :mode 0o600 :owner "nobody" :group 0)
                                     :check-mode True))
  (assert (in "a.conf: mode 644 → 600" (str events)) "check mode says what would change")
  (apply-twice LOCAL (copied dest src :mode 0o600 :owner "nobody" :group 0))
  (assert (= (mode-of (os.path.join dest "a.conf")) 0o600) "mode put back")
  (assert (= (. (os.stat (os.path.join dest "a.conf")) st_ino) inode) "by chmod, not a rewrite"))

(defn test-tree-replaces-a-thing-of-the-wrong-type [tmp-path]
  (setv src (site-tree (str (/ tmp-path "src")))
        dest (str (/ tmp-path "dest"))
        outside (str (/ tmp-path "outside")))
  (os.makedirs outside)
  (os.makedirs dest)
  ;; A symlink where the source has a directory: writing through it would
  ;; land outside the destination.
  (os.symlink outside (os.path.join dest "sub dir"))
  (spit (os.path.join dest "a.conf" "x") "x\n")
  (apply-twice LOCAL (copied dest src))
  (assert (= (walk dest) (walk src)) (walk dest))
  (assert (= (os.listdir outside) []) "nothing written through the symlink"))

(defn test-single-file-copied [tmp-path]
  (setv src (str (/ tmp-path "one.conf"))
        dest (str (/ tmp-path "etc" "one.conf")))
  (spit src "one\n")
  (os.makedirs (os.path.dirname dest))
  (apply-twice LOCAL (copied dest src :mode 0o604))
  (assert (= (slurp dest) "one\n") "copied")
  (assert (= (mode-of dest) 0o604) "with :mode"))

(defn test-directory-where-a-file-belongs-is-left-alone [tmp-path]
  (setv src (str (/ tmp-path "one.conf"))
        dest (str (/ tmp-path "dest")))
  (spit src "one\n")
  (spit (os.path.join dest "precious") "keep\n")
  (setv #(outcome events) (deploy-propspec LOCAL (copied dest src) :check False))
  (assert (= outcome.status "failed") (statuses events))
  (assert (in "is a directory, not a file; not replacing it" (str events)) (str events))
  (assert (= (slurp (os.path.join dest "precious")) "keep\n") "left alone"))
