;; Properties built from the site's other hosts, in the Debian chroot:
;; ssh.known-hosts-of-site and hostgroup.listed-in-file.

(require consfig *)
(import consfig *
        consfig.model.host [hosts]
        pytest
        proptest [apply-twice checks-clean deploy-propspec failure-text in-chroot])
(use-props consfig.props [ssh sshd hostgroup])

(setv pytestmark pytest.mark.chroot)

(setv KEY-A "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKeyOfHostAaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa root@a"
      KEY-A-RSA "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQKeyOfHostArsa"
      KEY-B "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKeyOfHostBbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
      GITHUB "github.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl")

(defprop pushes :posix [k v]
  "Push V onto hostattr K."
  (:hostattrs (push-hostattr k v)))

(defn [(pytest.fixture :autouse True)] only-this-tests-hosts []
  ;; Every host the site defines is read: leave out other modules' hosts.
  (setv saved (dict hosts))
  (.clear hosts)
  (yield)
  (.clear hosts)
  (.update hosts saved))

(defn sh [root script] (. (in-chroot root script) stdout))

(defn deploy-site-host [chain host]
  (setv events []
        outcome (deploy* chain host :sink (fn [e] (.append events e))))
  (assert (!= outcome.status "failed") (failure-text events))
  outcome)

(defn test-known-hosts-of-site-lists-every-hosts-keys-and-names [debian-chroot chroot-chain]
  (make-host "a.site.test" {} None
             (eseqprops (sshd.has-host-public-key KEY-A) (sshd.has-host-public-key KEY-A-RSA)
                        (pushes "aliases" "a") (pushes "aliases" "192.0.2.1")))
  (make-host "nokey.site.test" {} None (eseqprops))
  (make-host "b.site.test" {} None (eseqprops (sshd.has-host-public-key KEY-B)))
  (apply-twice chroot-chain (ssh.known-hosts-of-site :extra [GITHUB]))
  (assert (= (sh debian-chroot "cat /etc/ssh/ssh_known_hosts")
             (+ "a.site.test,a,192.0.2.1 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKeyOfHostAaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n"
                "a.site.test,a,192.0.2.1 " KEY-A-RSA "\n"
                "b.site.test " KEY-B "\n"
                GITHUB "\n"))
          "each key of each host, under its names, then the extra lines")
  (assert (= (sh debian-chroot "stat -c %a /etc/ssh/ssh_known_hosts") "644\n") "readable by every user")
  (del (get hosts "b.site.test"))
  (apply-twice chroot-chain (ssh.known-hosts-of-site))
  (assert (not-in "b.site.test" (sh debian-chroot "cat /etc/ssh/ssh_known_hosts"))
          "a host taken out of the site leaves the file"))

(defn test-every-host-of-the-site-knowing-every-other [debian-chroot chroot-chain]
  ;; The hosts read each other's keys: not a cycle.  a is deployed to the
  ;; chroot, whose host key is a's.
  (in-chroot debian-chroot (+ "mkdir -p /etc/ssh && echo '" KEY-A "' > /etc/ssh/ssh_host_ed25519_key.pub"))
  (setv a (make-host "a.site.test" {} None
                     (eseqprops (sshd.has-host-public-key KEY-A) (ssh.known-hosts-of-site))))
  (make-host "b.site.test" {} None
             (eseqprops (ssh.known-hosts-of-site) (sshd.has-host-public-key KEY-B)))
  (deploy-site-host chroot-chain a)
  (setv lines (.splitlines (sh debian-chroot "cat /etc/ssh/ssh_known_hosts")))
  (assert (= (lfor l lines (get (.split l) 0)) ["a.site.test" "b.site.test"]) lines))

(defn test-has-host-public-key-fails-when-the-host-has-another-key [debian-chroot chroot-chain]
  (in-chroot debian-chroot (+ "mkdir -p /etc/ssh && echo '" KEY-A "' > /etc/ssh/ssh_host_ed25519_key.pub"))
  (setv #(ok _) (deploy-propspec chroot-chain (sshd.has-host-public-key KEY-A)))
  (assert (= ok.status "no-change") "the host has it: nothing to do")
  (checks-clean chroot-chain (sshd.has-host-public-key KEY-A))
  (setv #(o events) (deploy-propspec chroot-chain (sshd.has-host-public-key KEY-B) :check False))
  (assert (= o.status "failed") "another key")
  (assert (any (gfor e events (in "no /etc/ssh/ssh_host_*_key.pub holds the key" (or (.get e "message") ""))))
          (failure-text events)))

(defn site-with-web-group []
  (make-host "w1.site.test" {:groups ["web"]} None (eseqprops (pushes "port" 8080)))
  (make-host "db.site.test" {:groups ["db"]} None (eseqprops (pushes "port" 5432)))
  (make-host "w2.site.test" {} None (eseqprops (pushes "groups" "web") (pushes "port" 8081))))

(defn test-hostgroup-listed-in-file-writes-a-line-per-host-of-the-group [debian-chroot chroot-chain]
  (site-with-web-group)
  (apply-twice chroot-chain
               (hostgroup.listed-in-file "/etc/backends.cfg" "web"
                                         :line "    server {hostname} {hostname}:{port} check"
                                         :header "backend web\n" :footer "# end\n" :mode 0o640))
  (assert (= (sh debian-chroot "cat /etc/backends.cfg")
             (+ "backend web\n"
                "    server w1.site.test w1.site.test:8080 check\n"
                "    server w2.site.test w2.site.test:8081 check\n"
                "# end\n"))
          "declared and pushed members, in definition order, db left out")
  (assert (= (sh debian-chroot "stat -c %a /etc/backends.cfg") "640\n") "mode"))

(defn test-hostgroup-listed-in-file-names-a-host-missing-a-field [chroot-chain]
  (site-with-web-group)
  (make-host "w3.site.test" {:groups ["web"]} None (eseqprops))
  (with [e (pytest.raises ConsfigError)]
    (deploy-propspec chroot-chain (hostgroup.listed-in-file "/etc/backends.cfg" "web"
                                                            :line "{hostname}:{port}")))
  (assert (in "w3.site.test has no hostattr \"port\"" (str e.value)) (str e.value)))

(defn test-hostgroup-listed-in-file-wants-named-fields []
  (with [e (pytest.raises ConsfigError)]
    (hostgroup.listed-in-file "/etc/backends.cfg" "web" :line "{} {0}"))
  (assert (in "never {} or {0}" (str e.value)) (str e.value)))

(defn test-a-host-key-installed-from-data-is-known-to-the-other-hosts []
  (setv h (make-host "a.site.test" {} None (eseqprops (sshd.has-host-key "ed25519" KEY-A))))
  (assert (= (get-hostattrs "ssh-host-key" (preprocess-host h))
             ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKeyOfHostAaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"])
          "the key, without its comment"))
