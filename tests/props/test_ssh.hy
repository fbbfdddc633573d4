;; ssh and sshd, in the Debian chroot.  sshd is never started here.

(require consfig *)
(import pytest
        proptest [apply-twice deploy-propspec unapply in-chroot this-os])
(use-props consfig.props [ssh sshd user apt service])

(setv pytestmark pytest.mark.chroot)

(setv KEY1 "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHm1+eUOHqPoJzz4Abc1 one@example"
      KEY2 "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHm1+eUOHqPoJzz4Abc2 two@example")

(defn sh [root script] (. (in-chroot root script) stdout))

(defn test-authorized-keys [debian-chroot chroot-chain]
  (apply-twice chroot-chain [(user.has-account "alice") (ssh.authorized-keys "alice" KEY1 KEY2)])
  (assert (= (sh debian-chroot "cat /home/alice/.ssh/authorized_keys") (+ KEY1 "\n" KEY2 "\n")) "keys")
  (assert (= (sh debian-chroot "stat -c '%U %a' /home/alice/.ssh /home/alice/.ssh/authorized_keys")
             "alice 700\nalice 600\n")
          "owned by alice, readable by her alone")
  (unapply chroot-chain (ssh.authorized-keys "alice" KEY1))
  (assert (= (sh debian-chroot "cat /home/alice/.ssh/authorized_keys") (+ KEY2 "\n")) "KEY1 gone"))

(defn test-authorized-keys-left-0644-are-made-0600 [debian-chroot chroot-chain]
  (deploy-propspec chroot-chain [(user.has-account "erin") (ssh.authorized-keys "erin" KEY1)])
  (sh debian-chroot "chmod 644 /home/erin/.ssh/authorized_keys")
  (apply-twice chroot-chain (ssh.authorized-keys "erin" KEY1))
  (assert (= (sh debian-chroot "stat -c '%U %a' /home/erin/.ssh/authorized_keys") "erin 600\n")
          "the keys were there already: the mode is still put right"))

(defn test-known-hosts [debian-chroot chroot-chain]
  (apply-twice chroot-chain [(user.has-account "bob")
                             (ssh.known-host "bob" ["git.example.org" "192.0.2.1"] KEY1)])
  (assert (= (sh debian-chroot "cat /home/bob/.ssh/known_hosts") (+ "git.example.org,192.0.2.1 " KEY1 "\n")) "line")
  (unapply chroot-chain (ssh.known-host "bob" ["git.example.org" "192.0.2.1"] KEY1))
  (assert (= (sh debian-chroot "cat /home/bob/.ssh/known_hosts") "") "removed")
  (apply-twice chroot-chain (ssh.system-known-host "git.example.org" KEY2))
  (assert (= (sh debian-chroot "cat /etc/ssh/ssh_known_hosts") (+ "git.example.org " KEY2 "\n")) "system")
  (unapply chroot-chain (ssh.system-known-host "git.example.org" KEY2))
  (assert (= (sh debian-chroot "cat /etc/ssh/ssh_known_hosts") "") "system removed"))

(defn test-has-user-key [debian-chroot chroot-chain]
  (apply-twice chroot-chain [(this-os) (apt.installed-minimally "openssh-client")
                             (user.has-account "carol") (ssh.has-user-key "carol")])
  (assert (= (sh debian-chroot "stat -c '%U %a' /home/carol/.ssh/id_ed25519") "carol 600\n") "private key")
  (assert (.startswith (sh debian-chroot "cat /home/carol/.ssh/id_ed25519.pub") "ssh-ed25519 ") "public key"))

(defn sshd-config [root] (.read-text (/ root "etc/ssh/sshd_config")))

(defn test-sshd [debian-chroot chroot-chain]
  (apply-twice chroot-chain [(this-os) (service.without-starting-services (sshd.installed))])
  (assert (.exists (/ debian-chroot "usr/sbin/sshd")) "installed")
  (apply-twice chroot-chain (sshd.configured "PermitRootLogin" "no" "X11Forwarding" "no"))
  (setv text (sshd-config debian-chroot))
  (assert (in "\nPermitRootLogin no\n" text) "uncommented and set")
  (assert (in "\nX11Forwarding no\n" text) "set")
  (apply-twice chroot-chain (sshd.no-passwords))
  (assert (in "\nPasswordAuthentication no\n" (sshd-config debian-chroot)) "no passwords"))

(defn test-sshd-invalid-config-is-refused [debian-chroot chroot-chain]
  (deploy-propspec chroot-chain [(this-os) (service.without-starting-services (sshd.installed))])
  (setv before (sshd-config debian-chroot)
        #(o events) (deploy-propspec chroot-chain (sshd.configured "PermitRootLogin" "sometimes")
                                     :check False))
  (assert (= o.status "failed") "refused")
  (assert (any (gfor e events (in "invalid" (.get e "message" "")))) "says why")
  (assert (= (sshd-config debian-chroot) before) "sshd_config unchanged")
  (assert (not (list (.glob (/ debian-chroot "etc/ssh") ".sshd_config.consfig-*"))) "no copy left"))

(defn checked [chain propspec]
  "The outcome of checking PROPSPEC over CHAIN, and what it said."
  (import proptest [said])
  (setv #(o events) (deploy-propspec chain propspec :check-mode True))
  #(o.status (said events)))

(defn test-sshd-configured-checks-a-password-login-written-by-hand [debian-chroot chroot-chain]
  ;; Issue 31: sshd.configured had no :check, so neither check mode nor
  ;; the agent saw `PasswordAuthentication yes` written by hand.
  (deploy-propspec chroot-chain [(this-os) (service.without-starting-services (sshd.installed))])
  (apply-twice chroot-chain (sshd.no-passwords) :changes False)
  (assert (= (get (checked chroot-chain (sshd.no-passwords)) 0) "no-change") "converged: clean")
  (in-chroot debian-chroot "sed -i 's/^PasswordAuthentication no$/PasswordAuthentication yes/' /etc/ssh/sshd_config")
  (setv #(status text) (checked chroot-chain (sshd.no-passwords)))
  (assert (= status "changed") f"the drift is seen: {status}")
  (assert (in "PasswordAuthentication no" text) text)
  (deploy-propspec chroot-chain (sshd.no-passwords))
  (assert (in "\nPasswordAuthentication no\n" (sshd-config debian-chroot)) "repaired"))

(defn test-a-deleted-authorized-keys-file-is-drift [debian-chroot chroot-chain]
  (apply-twice chroot-chain [(user.has-account "dave") (ssh.authorized-keys "dave" KEY1)])
  (assert (= (get (checked chroot-chain (ssh.authorized-keys "dave" KEY1)) 0) "no-change") "clean")
  (in-chroot debian-chroot "rm /home/dave/.ssh/authorized_keys")
  (assert (= (get (checked chroot-chain (ssh.authorized-keys "dave" KEY1)) 0) "changed")
          "a missing file is seen")
  (assert (not (.exists (/ debian-chroot "home/dave/.ssh/authorized_keys"))) "check mode wrote nothing"))
