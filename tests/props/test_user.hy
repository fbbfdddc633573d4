;; user, package and hostname, in the Debian chroot.

(require consfig *)
(import pytest
        proptest [apply-twice deploy-propspec unapply in-chroot])
(use-props consfig.props [user package hostname])

(setv pytestmark pytest.mark.chroot)

(defn sh [root script] (. (in-chroot root script) stdout))

(defn test-has-account-and-uid [debian-chroot chroot-chain]
  (apply-twice chroot-chain (user.has-account "alice"))
  (assert (.startswith (sh debian-chroot "getent passwd alice") "alice:") "account made")
  (assert (= (sh debian-chroot "test -d /home/alice && echo yes") "yes\n") "with a home")
  (apply-twice chroot-chain (user.has-account-with-uid "alice" 2345))
  (assert (= (sh debian-chroot "id -u alice") "2345\n") "uid changed")
  (apply-twice chroot-chain (user.has-account-with-uid "bob" 2346))
  (assert (= (sh debian-chroot "id -u bob") "2346\n") "new account with uid")
  (unapply chroot-chain (user.has-account "bob"))
  (assert (not (. (in-chroot debian-chroot "getent passwd bob" :check False) stdout)) "bob deleted"))

(defn test-groups [debian-chroot chroot-chain]
  (apply-twice chroot-chain [(user.has-account "carol") (user.group-exists "web" :gid 3000)])
  (assert (= (sh debian-chroot "getent group web | cut -d: -f3") "3000\n") "gid")
  (apply-twice chroot-chain (user.has-groups "carol" "web" ["users"]))
  (assert (<= #{"web" "users"} (set (.split (sh debian-chroot "id -nG carol")))) "member")
  (unapply chroot-chain (user.has-groups "carol" "web"))
  (assert (not-in "web" (.split (sh debian-chroot "id -nG carol"))) "left web")
  (unapply chroot-chain (user.group-exists "web"))
  (assert (= (. (in-chroot debian-chroot "getent group web" :check False) returncode) 2) "group deleted"))

(defn test-login-shell [debian-chroot chroot-chain]
  (apply-twice chroot-chain [(user.has-account "dave") (user.has-login-shell "dave" "/bin/dash")])
  (assert (= (sh debian-chroot "getent passwd dave | cut -d: -f7") "/bin/dash\n") "shell")
  (assert (in "/bin/dash\n" (sh debian-chroot "cat /etc/shells")) "listed in /etc/shells"))

(defn test-passwords [debian-chroot chroot-chain]
  (apply-twice chroot-chain [(user.has-account "erin")
                             (user.has-enabled-password "erin" :initial-password "s3cret pass")])
  (assert (= (get (.split (sh debian-chroot "passwd -S erin")) 1) "P") "usable password")
  (setv #(_ events) (deploy-propspec chroot-chain (user.has-enabled-password "erin" :initial-password "s3cret pass")))
  (assert (not-in "s3cret" (str events)) "the password appears in no event")
  (apply-twice chroot-chain (user.has-locked-password "erin"))
  (assert (= (get (.split (sh debian-chroot "passwd -S erin")) 1) "L") "locked")
  (apply-twice chroot-chain (user.has-enabled-password "erin"))
  (assert (= (get (.split (sh debian-chroot "passwd -S erin")) 1) "P") "unlocked again"))

(defn test-enabled-password-needs-initial-one [debian-chroot chroot-chain]
  (setv #(o events) (deploy-propspec chroot-chain [(user.has-account "frank")
                                                   (user.has-enabled-password "frank")]
                                     :check False))
  (assert (= o.status "failed") "no password to enable"))

(defn test-package-installed-picks-apt [debian-chroot chroot-chain]
  (apply-twice chroot-chain (package.installed "hello"))
  (assert (= (sh debian-chroot "hello") "Hello, world!\n") "installed with apt"))

(defn test-hostname-configured [debian-chroot chroot-chain]
  (import socket)
  (setv before (socket.gethostname))
  (apply-twice chroot-chain [(hostname.is "box.example.org") (hostname.configured)
                             (hostname.mailname-configured)])
  (assert (= (sh debian-chroot "cat /etc/hostname") "box\n") "short name")
  (assert (in "127.0.1.1\tbox.example.org\tbox\n" (sh debian-chroot "cat /etc/hosts")) "hosts")
  (assert (= (sh debian-chroot "cat /etc/mailname") "box.example.org\n") "mailname")
  (assert (= (socket.gethostname) before) "this machine's hostname untouched")
  (apply-twice chroot-chain (hostname.configured :hostname "other.example.org"))
  (setv hosts (sh debian-chroot "cat /etc/hosts"))
  (assert (and (in "127.0.1.1\tother.example.org\tother\n" hosts) (not-in "box" hosts)) hosts))

(defn test-hostname-configured-checks-clean-then-sees-an-edit [debian-chroot chroot-chain]
  ;; Issue 31: it had no :check, so a converged host said "cannot check".
  (setv p (hostname.configured :hostname "walked.example.org"))
  (deploy-propspec chroot-chain p)
  (setv #(o events) (deploy-propspec chroot-chain p :check-mode True))
  (assert (= o.status "no-change") f"converged: clean, not {o.status}")
  (in-chroot debian-chroot "echo elsewhere > /etc/hostname")
  (setv #(o events) (deploy-propspec chroot-chain p :check-mode True))
  (assert (= o.status "changed") f"the edit is seen: {o.status}")
  (assert (in "/etc/hostname" (.join " " (notes events))) (notes events))
  (assert (= (sh debian-chroot "cat /etc/hostname") "elsewhere\n") "check mode wrote nothing"))

(defn notes [events]
  (lfor e events :if (= (get e "event") "output") (get e "text")))

(defn test-check-mode-says-what-would-change-in-an-account [debian-chroot chroot-chain]
  (apply-twice chroot-chain (user.has-account "dora"))
  (setv #(outcome events)
        (deploy-propspec chroot-chain [(user.has-account "eve")
                                       (user.has-login-shell "dora" "/bin/sh")
                                       (user.has-account-with-uid "dora" 2999)
                                       (user.has-groups "dora" "users")]
                         :check-mode True))
  (assert (= (.exit-code outcome True) 2) outcome)
  (setv said (notes events))
  (assert (in "account eve would be created" said) said)
  (assert (in "dora would join users" said) said)
  (assert (any (gfor n said (.startswith n "dora: uid "))) said)
  (assert (not (. (in-chroot debian-chroot "getent passwd eve" :check False) stdout))
          "no account made"))

(defn members [root group]
  (setv field (get (.split (.strip (sh root f"getent group {group}")) ":") 3))
  (if field (.split field ",") []))

(defn test-group-has-members [debian-chroot chroot-chain]
  (apply-twice chroot-chain [(user.has-account "gina") (user.has-account "hal")
                             (user.has-account "ivy") (user.group-exists "ops")])
  (apply-twice chroot-chain (user.group-has-members "ops" "gina" ["hal"]))
  (assert (= (members debian-chroot "ops") ["gina" "hal"]) (members debian-chroot "ops"))
  (apply-twice chroot-chain (user.group-has-members "ops" "ivy"))
  (assert (= (members debian-chroot "ops") ["gina" "hal" "ivy"]) "others kept")
  (apply-twice chroot-chain (user.group-has-members "ops" "hal" :exactly True))
  (assert (= (members debian-chroot "ops") ["hal"]) "only hal with :exactly")
  (unapply chroot-chain (user.group-has-members "ops" "hal"))
  (assert (= (members debian-chroot "ops") []) "hal taken out")
  (apply-twice chroot-chain (user.group-has-members "ops" "gina" "ivy"))
  (apply-twice chroot-chain (user.group-has-members "ops" :exactly True))
  (assert (= (members debian-chroot "ops") []) "no members with :exactly and none given"))

(defn test-group-has-members-check-mode-says-who-would-join-and-leave [debian-chroot chroot-chain]
  (apply-twice chroot-chain [(user.has-account "jon") (user.has-account "kim")
                             (user.group-exists "dev") (user.group-has-members "dev" "jon")])
  (setv #(outcome events) (deploy-propspec chroot-chain (user.group-has-members "dev" "kim" :exactly True)
                                           :check-mode True))
  (assert (= (.exit-code outcome True) 2) "would change")
  (assert (in "kim would join dev; jon would leave dev" (notes events)) (notes events))
  (assert (= (members debian-chroot "dev") ["jon"]) "nothing changed"))

(defn test-group-has-members-of-a-missing-group-fails-saying-what-to-add [debian-chroot chroot-chain]
  (setv #(outcome events) (deploy-propspec chroot-chain (user.group-has-members "nosuchgroup" "root")
                                           :check False))
  (assert (= outcome.status "failed") "no such group")
  (assert (in "(user.group-exists \"nosuchgroup\")" (str events)) (str events)))

(defn test-group-has-members-refuses-hostile-names []
  (import consfig.errors [PropspecError])
  (for [args [["ops" "-r"] ["ops" "a,b"] ["ops" "a\nb"] ["o:ps" "a"] ["ops" "$(id)"] ["ops"]]]
    (with [_ (pytest.raises PropspecError)]
      (user.group-has-members #* args))))
