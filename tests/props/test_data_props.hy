;; Properties that take what they install from prerequisite data: a user's
;; hashed password, SSH keys (in the Debian chroot), a git snapshot (over
;; :local).  The data comes from :local-file sources registered here.

(require consfig *)
(import os
        subprocess
        pytest
        consfig.data.items [register-data-source reset-data-sources]
        proptest [HOSTNAME LOCAL apply-twice deploy-propspec diffs unapply in-chroot])
(use-props consfig.props [user ssh sshd git])

(defn [(pytest.fixture :autouse True)] no-sources []
  (reset-data-sources)
  (yield)
  (reset-data-sources))

(defn spit [p s [mode "w"]]
  (os.makedirs (os.path.dirname p) :exist-ok True)
  (with [f (open p mode)] (.write f s)))
(defn slurp [p] (with [f (open p)] (.read f)))

(defn item [tmp-path iden1 iden2 content #** kw]
  "Register CONTENT (a string) as the item (IDEN1, IDEN2)."
  (setv p (str (/ tmp-path (.replace (+ iden1 "_" iden2) "/" "_"))))
  (spit p content)
  (register-data-source "local-file" :location p :iden1 iden1 :iden2 iden2 #** kw))

;; A SHA-512 crypt(3) hash of "correct horse", made with `openssl passwd -6`.
(setv HASH "$6$Zb3OuLHSvkHK6TQe$onSlUawNgV4vDFTyS3LivBUba4mReiyktImTTC.LQUA01dWUxmPK2nSlVL3tYi12k0iDiNQC8C81DW.yfYIqf.")

(defn [pytest.mark.chroot] test-user-has-password-from-data [tmp-path debian-chroot chroot-chain]
  (item tmp-path (+ "--user-passwd--" HOSTNAME) "frank" (+ HASH "\n"))
  (setv events (apply-twice chroot-chain [(user.has-account "frank") (user.has-password "frank")]))
  (assert (= (. (in-chroot debian-chroot "getent shadow frank | cut -d: -f2") stdout) (+ HASH "\n"))
          "the hash is in /etc/shadow")
  (assert (not-in (cut HASH 10 40) (str events)) "the hash is in no event"))

(defn [pytest.mark.chroot] test-user-password-that-is-no-hash-is-refused [tmp-path chroot-chain]
  (item tmp-path (+ "--user-passwd--" HOSTNAME) "gina" "two\nlines:here\n")
  (setv #(outcome events) (deploy-propspec chroot-chain [(user.has-account "gina")
                                                         (user.has-password "gina")]
                                           :check False))
  (assert (= outcome.status "failed") "refused")
  (assert (in "is not a hashed password" (str events)) (str events))
  (assert (not-in "lines:here" (str events)) "its content is not shown"))

(defn keypair [tmp-path name]
  (setv key (str (/ tmp-path name)))
  (subprocess.run ["ssh-keygen" "-q" "-t" "ed25519" "-N" "" "-C" name "-f" key]
                  :check True :timeout 60)
  #((slurp key) (.strip (slurp (+ key ".pub")))))

(defn [pytest.mark.chroot] test-user-key-from-data [tmp-path debian-chroot chroot-chain]
  (setv #(private public) (keypair tmp-path "hank"))
  (item tmp-path HOSTNAME "~hank/.ssh/id_ed25519" private)
  (setv events (apply-twice chroot-chain [(user.has-account "hank")
                                          (ssh.has-user-key "hank" :public-key public)]))
  (setv key (/ debian-chroot "home/hank/.ssh/id_ed25519"))
  (assert (= (slurp key) private) "the private key installed")
  (assert (= (& (. (os.stat key) st_mode) 0o777) 0o600) "mode 0600")
  (assert (= (slurp (+ (str key) ".pub")) (+ public "\n")) "and the public key")
  (assert (= (. (in-chroot debian-chroot "stat -c %U:%a /home/hank/.ssh/id_ed25519") stdout)
             "hank:600\n") "owned by hank")
  (assert (not-in "PRIVATE KEY" (str events)) "the key is in no event")
  (assert (not (lfor d (diffs events) :if (.endswith (get d "path") "id_ed25519") d)) "no diff of it"))

(defn [pytest.mark.chroot] test-sshd-host-key-from-data [tmp-path debian-chroot chroot-chain]
  (setv #(private public) (keypair tmp-path "host"))
  (item tmp-path HOSTNAME "/etc/ssh/ssh_host_ed25519_key" private)
  (setv events (apply-twice chroot-chain (sshd.has-host-key "ed25519" public)))
  (setv key (/ debian-chroot "etc/ssh/ssh_host_ed25519_key"))
  (assert (= (slurp key) private) "the host key installed")
  (assert (= (& (. (os.stat key) st_mode) 0o777) 0o600) "mode 0600")
  (assert (= (slurp (+ (str key) ".pub")) (+ public "\n")) "and its public key")
  (assert (not-in "PRIVATE KEY" (str events)) "the key is in no event")
  (setv #(outcome events) (deploy-propspec chroot-chain (sshd.has-host-key "ed25519" public)
                                           :check-mode True))
  (assert (= outcome.status "no-change") "check mode: it holds"))

(defn snapshot [repo out [prefix None]]
  "A tarball of REPO's HEAD (its files at the top, as :git-snapshot makes
it, or below PREFIX), and its commit."
  (setv commit (.strip (. (subprocess.run ["git" "-C" repo "rev-parse" "HEAD"] :check True
                                          :capture-output True :text True) stdout)))
  (subprocess.run ["git" "-C" repo "archive" "--format=tar.gz"
                   #* (if prefix [f"--prefix={prefix}/"] []) "-o" out "HEAD"]
                  :check True)
  commit)

(defn git-repo [root files]
  (os.makedirs root :exist-ok True)
  (subprocess.run ["git" "init" "-q" root] :check True)
  (for [[name text] (.items files)]
    (spit (os.path.join root name) text))
  (subprocess.run ["git" "-C" root "add" "-A"] :check True)
  (subprocess.run ["git" "-C" root "-c" "user.name=t" "-c" "user.email=t@t" "commit" "-q" "-m" "c"
                   "--allow-empty"] :check True))

(defn test-git-snapshot-extracted-and-replaced [tmp-path]
  (setv repo (str (/ tmp-path "repo"))
        tarball (str (/ tmp-path "app.tar"))
        dest (str (/ tmp-path "srv")))
  (git-repo repo {"README" "one\n" "lib/old.py" "x = 1\n"})
  (setv commit (snapshot repo tarball))
  (register-data-source "local-file" :location tarball :iden1 "--git-snapshot" :iden2 "app"
                        :version commit)
  (apply-twice LOCAL (git.snapshot-extracted dest "app"))
  (assert (= (slurp (os.path.join dest "app" "README")) "one\n") "extracted")
  (assert (= (slurp (os.path.join dest ".consfig-snapshot-app")) (+ commit "\n")) "version recorded")
  (os.remove (os.path.join repo "lib" "old.py"))
  (git-repo repo {"README" "two\n"})
  ;; A tarball whose one directory is the snapshot's name is that directory.
  (setv commit2 (snapshot repo tarball "app"))
  (reset-data-sources)
  (register-data-source "local-file" :location tarball :iden1 "--git-snapshot" :iden2 "app"
                        :version commit2)
  (setv #(outcome events) (deploy-propspec LOCAL (git.snapshot-extracted dest "app") :check-mode True))
  (assert (in f"app: version {commit} → {commit2}" (str events)) (str events))
  (apply-twice LOCAL (git.snapshot-extracted dest "app"))
  (assert (= (slurp (os.path.join dest "app" "README")) "two\n") "the new commit")
  (assert (not (os.path.exists (os.path.join dest "app" "lib" "old.py"))) "what it lacks is gone")
  (assert (= (sorted (os.listdir dest)) [".consfig-snapshot-app" "app"]) "no temporaries left")
  (unapply LOCAL (git.snapshot-extracted dest "app"))
  (assert (= (os.listdir dest) []) "unapplied"))
