"The host's name: the hostattr, /etc/hostname, /etc/hosts and /etc/mailname."

(eval-when-compile (require consfig.model.property [defprop]))
(import consfig.model.watchspec [watch-path watch-poll])
(import re
        consfig.apply.actions [NO-CHANGE Script run run-ok? output]
        consfig.apply.engine [Drift]
        consfig.model.host [push-hostattr get-hostattr]
        consfig.props.file [file-lines read-text update-file map-file-lines]
        consfig.types *)

(defprop is :posix [#^ hostname hostname]
  "The host's hostname is HOSTNAME, whatever it is called in the consfig: for
chroots and containers, whose deployment names them after their parent."
  (:unwatched "a declaration for the controller (a hostattr): nothing on the target to keep")
  (:desc f"Hostname is {hostname}")
  (:hostattrs (push-hostattr "hostname" hostname))
  (:unapply NO-CHANGE))

;; How often the agent compares the running hostname with the files'.
(setv POLL 10)

(defn _short [fqdn] (get (.split fqdn ".") 0))

(defn _names-localhost? [line]
  (in "localhost" (cut (.split (get (.split line "#") 0)) 1 None)))

(defn _hosts-lines [lines fqdn]
  ;; Debian's convention: the host's own names on 127.0.1.1, so that they
  ;; resolve without DNS; the line is replaced, or added after localhost.
  ;; A file that maps no localhost (one made from nothing: debootstrap makes
  ;; none) gets Debian's lines for it first, or every service that listens
  ;; on "localhost" (PostgreSQL by default) fails to start.
  (setv entry (.join "\t" ["127.0.1.1" #* (dict.fromkeys [fqdn (_short fqdn)])])
        out (lfor l lines (if (.startswith (.strip l) "127.0.1.1") entry l)))
  (when (not (any (map _names-localhost? out)))
    (setv out ["127.0.0.1\tlocalhost" #* out "::1\tlocalhost ip6-localhost ip6-loopback"]))
  (when (not-in entry out)
    (setv at (next (gfor [i l] (enumerate out) :if (re.match r"^\s*127\.0\.0\.1\s" l) (+ i 1))
                   (len out)))
    (.insert out at entry))
  out)

(defn _in-chroot? []
  ;; Setting the running hostname from a chroot would rename the machine
  ;; the chroot is on.  Where / is not init's root (or /proc is not there
  ;; to tell), leave it alone.
  (not (run-ok? (Script "[ \"$(stat -c %d:%i /)\" = \"$(stat -Lc %d:%i /proc/1/root/ 2>/dev/null)\" ]")
                :timeout 30)))

(defprop configured :posix [* #^ hostname [hostname None]]
  "/etc/hostname holds the short name of HOSTNAME (by default the host's
hostname), and /etc/hosts maps 127.0.1.1 to it and its short name (and
localhost to the loopback addresses, when the file maps it nowhere).  The
running system's hostname is set too, except in a chroot."
  (:desc f"Hostname {(or hostname (get-hostattr "hostname"))} configured")
  (:watch [(watch-path "/etc/hostname") (watch-path "/etc/hosts") (watch-poll POLL)])
  (:check
    (setv fqdn (or hostname (get-hostattr "hostname"))
          hosts (read-text "/etc/hosts")
          wrong (lfor [what right?]
                      [["/etc/hostname" (fn [] (= (read-text "/etc/hostname") (+ (_short fqdn) "\n")))]
                       ["/etc/hosts" (fn [] (and (is-not hosts None)
                                                 (= (_hosts-lines (file-lines hosts) fqdn)
                                                    (file-lines hosts))))]
                       ["the running hostname" (fn [] (or (_in-chroot?)
                                                          (= (.strip (output "hostname" :timeout 30))
                                                             (_short fqdn))))]]
                      :if (not (right?))
                      what))
    (or (not wrong) (Drift f"{(.join ", " wrong)} would be set to {fqdn}")))
  (:apply
    (setv fqdn (or hostname (get-hostattr "hostname"))
          results [(update-file "/etc/hostname" (+ (_short fqdn) "\n"))
                   (map-file-lines "/etc/hosts" (fn [ls] (_hosts-lines ls fqdn)) :create True)])
    (when (and (not (_in-chroot?))
               (!= (.strip (output "hostname" :timeout 30)) (_short fqdn)))
      (run "hostname" (_short fqdn) :timeout 30)
      (.append results None))
    (if (all (gfor r results (= r NO-CHANGE))) NO-CHANGE None)))

(defprop mailname-configured :posix [* #^ hostname [mailname None]]
  "/etc/mailname, the domain mail from this host appears to come from, is
MAILNAME (by default the host's hostname)."
  (:simulates True)
  (:desc f"Mailname {(or mailname (get-hostattr "hostname"))} configured")
  (:watch [(watch-path "/etc/mailname")])
  (:apply (update-file "/etc/mailname" (+ (or mailname (get-hostattr "hostname")) "\n"))))

(export :objects [is configured mailname-configured])
