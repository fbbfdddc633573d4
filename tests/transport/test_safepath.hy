;; The safe walk, on real directories and real symlinks: "nobody" (65534)
;; plays the user who plants links; the tests run as root.

(import os
        tempfile
        pytest
        consfig.errors [SymlinkNotFollowed UnsafePath]
        consfig.transport.safepath [walk open-node chmod-node])

(setv NOBODY 65534)

(defn scene []
  "A root-owned ROOT/etc with a file, and ROOT/home owned by nobody."
  (setv root (tempfile.mkdtemp))
  (os.chmod root 0o755)
  (os.mkdir f"{root}/etc")
  (with [f (open f"{root}/etc/shadow" "w")] (.write f "secret\n"))
  (os.mkdir f"{root}/home")
  (os.chown f"{root}/home" NOBODY NOBODY)
  root)

(defn plant [root name target [uid NOBODY]]
  (setv link f"{root}/home/{name}")
  (os.symlink target link)
  (os.lchown link uid uid)
  link)

(defn name-found [path #** kw]
  (setv #(fd name) (walk path #** kw))
  (os.close fd)
  name)

(defn test-walk-returns-the-last-component-unfollowed []
  (setv root (scene))
  (plant root "victim" f"{root}/etc/shadow")
  (assert (= (name-found f"{root}/home/victim") "victim") "the link's own name"))

(defn test-walk-refuses-a-users-link-to-a-root-directory-on-the-way []
  (setv root (scene))
  (plant root "cfgdir" f"{root}/etc")
  (with [e (pytest.raises UnsafePath)]
    (walk f"{root}/home/cfgdir/x"))
  (assert (in "owned by nobody" (str e.value)) (str e.value)))

(defn test-walk-refuses-a-relative-link-that-climbs-out []
  (setv root (scene))
  (plant root "up" "../etc")
  (with [_ (pytest.raises UnsafePath)]
    (walk f"{root}/home/up/shadow")))

(defn test-walk-refuses-a-users-link-to-a-file-not-yet-made-in-a-root-directory []
  (setv root (scene))
  (plant root "new" f"{root}/etc/new")
  (with [_ (pytest.raises UnsafePath)]
    (walk f"{root}/home/new" :follow True)))

(defn test-walk-follows-a-users-link-to-what-the-user-owns []
  (setv root (scene))
  (os.mkdir f"{root}/home/real")
  (os.chown f"{root}/home/real" NOBODY NOBODY)
  (plant root "ok" f"{root}/home/real")
  (assert (= (name-found f"{root}/home/ok/f") "f") "walked through the user's own link"))

(defn test-walk-follows-a-root-owned-link-anywhere []
  (setv root (scene))
  (plant root "rootlink" f"{root}/etc" :uid 0)
  (assert (= (name-found f"{root}/home/rootlink/shadow") "shadow") "root's link is followed"))

(defn test-walk-gives-up-on-a-loop-of-links []
  (setv root (scene))
  (plant root "a" f"{root}/home/b" :uid 0)
  (plant root "b" f"{root}/home/a" :uid 0)
  (with [e (pytest.raises OSError)]
    (walk f"{root}/home/a/x"))
  (assert (in "too many symlinks" (str e.value)) (str e.value)))

(defn test-walk-says-which-directory-is-missing []
  (setv root (scene))
  (with [e (pytest.raises FileNotFoundError)]
    (walk f"{root}/nope/deeper/f"))
  (assert (in f"{root}/nope" (str e.value)) (str e.value)))

(defn test-open-node-refuses-a-symlink []
  (setv root (scene))
  (plant root "victim" f"{root}/etc/shadow")
  (setv #(fd name) (walk f"{root}/home/victim"))
  (try
    (with [_ (pytest.raises SymlinkNotFollowed)]
      (open-node fd name f"{root}/home/victim"))
    (finally (os.close fd))))

(defn test-chmod-node-changes-the-file-and-never-a-links-target []
  (setv root (scene))
  (os.chmod f"{root}/etc/shadow" 0o600)
  (plant root "victim" f"{root}/etc/shadow")
  (setv #(fd name) (walk f"{root}/home/victim"))
  (try
    (with [_ (pytest.raises SymlinkNotFollowed)]
      (chmod-node fd name f"{root}/home/victim" 0o644))
    (finally (os.close fd)))
  (assert (= (& (. (os.stat f"{root}/etc/shadow") st_mode) 0o777) 0o600) "target untouched")
  (setv #(fd name) (walk f"{root}/etc/shadow"))
  (try (chmod-node fd name f"{root}/etc/shadow" 0o640)
       (finally (os.close fd)))
  (assert (= (& (. (os.stat f"{root}/etc/shadow") st_mode) 0o777) 0o640) "mode set"))
