"The OpenSSH server: installed, and configured safely.

A change to sshd_config is checked with `sshd -t` on a copy before the real
file is touched, so that a typo never leaves a host unreachable: an invalid
configuration fails the property and the file stays as it was."

(eval-when-compile
  (require consfig.model.property [defprop]
           consfig.model.propspec [defproplist]))
(import consfig.model.watchspec [watch-path])
(import consfig.apply.actions [NO-CHANGE output run run-script]
        consfig.data.items [get-data-bytes require-data]
        consfig.apply.engine [Drift]
        consfig.errors [AbortedChange FailedChange]
        consfig.transport.hop [Script]
        consfig.model.host [get-hostname push-hostattr]
        consfig.props.apt :as apt
        consfig.props.file [conf-space-text update-file conf-pairs describe-pairs file-lines
                            read-bytes read-text content->bytes pairs-problem conf-pair]
        consfig.props.ssh [ssh-public-key ssh-key-type]
        consfig.props.service :as service
        consfig.types *)

;; Keywords and values are lines of sshd_config: a newline would add
;; settings of its own (`PermitRootLogin yes`), which `sshd -t` accepts.
(setv sshd-keyword (matching "sshd-keyword" "an sshd_config keyword (letters and digits)"
                             r"[A-Za-z][A-Za-z0-9]*"))

(setv CONFIG "/etc/ssh/sshd_config")

(defproplist installed :posix []
  "The OpenSSH server is installed."
  (:desc "OpenSSH server installed")
  (apt.installed "openssh-server"))

;; TEXT on standard input: written to a temporary file of root's only
;; (mktemp's mode), checked there, removed whatever sshd said.  Debian's sshd
;; refuses to run, even as -t, without its privilege separation directory,
;; which lives in /run and so vanishes at boot.  One shell, not five
;; commands: this runs in every repair of sshd_config the agent makes.  A
;; TERM (a timeout's) ends it through its EXIT trap too: sh runs none for a
;; signal it does not trap.
(setv VALIDATE-TIMEOUT 60)
(setv _VALIDATE "
tmp=$(mktemp /etc/ssh/.sshd_config.consfig-XXXXXXXX) || exit 125
trap 'rm -f -- \"$tmp\"' EXIT
trap 'exit 143' TERM HUP INT
cat >\"$tmp\" || exit 125
mkdir -p /run/sshd || exit 125
/usr/sbin/sshd -t -f \"$tmp\"
")

(defn validate [text]
  "Check TEXT as sshd_config with `sshd -t`; a failure carrying sshd's
complaint when it is not valid."
  (setv r (run (Script _VALIDATE) :input text :check False :timeout VALIDATE-TIMEOUT))
  (cond r.ok? None
        (= r.exit-code 125)
          (raise (FailedChange (+ "sshd_config could not be checked (a temporary file in /etc/ssh, "
                                  "or /run/sshd); left unchanged:\n" (.strip (+ r.stdout r.stderr)))))
        True
          (raise (FailedChange (+ "sshd_config would be invalid; left unchanged:\n"
                                  (.strip (+ r.stdout r.stderr)))))))

(defn _reload []
  (when (not (service.no-services?))
    (run-script (+ "if [ -d /run/systemd/system ]; then systemctl try-reload-or-restart ssh.service; "
                   "else invoke-rc.d ssh reload; fi")
                :check False :timeout 120)))

(defn host-key-path [type]
  "The file of sshd's host key of TYPE: /etc/ssh/ssh_host_TYPE_key."
  f"/etc/ssh/ssh_host_{type}_key")

(defprop has-host-key :posix [#^ ssh-key-type type #^ ssh-public-key public-key]
  "sshd's host key of TYPE is the private key held as prerequisite data of
the host (HOSTNAME, /etc/ssh/ssh_host_TYPE_key), a secret, installed with
mode 0600, and its .pub is PUBLIC-KEY: the host keeps its identity when it
is reinstalled, and other hosts can know PUBLIC-KEY from the consfig (it is
hostattr `ssh-host-key`, as for `has-host-public-key`).  sshd
reloads when it changed (where services run)."
  (:watch [(watch-path (host-key-path type)) (watch-path (+ (host-key-path type) ".pub"))])
  (:desc f"sshd has its {type} host key from data")
  (:hostattrs
    (require-data (get-hostname) (host-key-path type) :secret True)
    ;; Other hosts know it: ssh.known-hosts-of-site.
    (push-hostattr "ssh-host-key" (_key-of public-key)))
  (:check
    (setv key (host-key-path type))
    (or (and (= (read-bytes key) (.reveal (get-data-bytes (get-hostname) key)))
             (= (read-bytes (+ key ".pub")) (content->bytes (+ public-key "\n"))))
        (Drift f"{key} would be installed from data")))
  (:apply
    (setv key (host-key-path type))
    (run "mkdir" "-p" "/etc/ssh")
    (update-file key (.reveal (get-data-bytes (get-hostname) key))
                 :mode 0o600 :owner "root" :group "root" :secret True)
    (update-file (+ key ".pub") (+ public-key "\n") :mode 0o644 :owner "root" :group "root")
    (_reload)
    None))

(defn _configured? [text pairs]
  ;; Lines, not text: a file without a final newline is no reason to write.
  (= (file-lines (conf-space-text text (conf-pairs pairs))) (file-lines text)))

(defprop configured :posix [#^ conf-pair #* pairs]
  "sshd_config sets each keyword of PAIRS (alternating keywords and values,
or a dict) to its value, as `file.contains-conf-space` does.  The new file is
validated with `sshd -t` before it replaces the old, and sshd reloads it
afterwards (where services run).  sshd takes the first value it reads for a
keyword, so a file in sshd_config.d that sets the same one overrides this."
  (:invariant (not (pairs-problem pairs sshd-keyword)) (pairs-problem pairs sshd-keyword))
  (:watch [(watch-path CONFIG)])
  (:desc f"sshd configured: {(describe-pairs pairs " ")}")
  (:check
    (setv old (read-text CONFIG))
    (cond (is old None) (Drift f"{CONFIG} does not exist")
          (_configured? old pairs) True
          True (Drift f"{CONFIG} would set {(describe-pairs pairs " ")}")))
  (:apply
    (setv old (read-text CONFIG))
    (when (is old None)
      (raise (FailedChange f"{CONFIG} does not exist: is the OpenSSH server installed?")))
    (setv new (conf-space-text old (conf-pairs pairs)))
    (if (_configured? old pairs)
        NO-CHANGE
        (do (validate (content->bytes new))
            (update-file CONFIG new)
            (_reload)
            None))))

(defproplist no-passwords :posix []
  "sshd accepts no passwords: keys only."
  (:desc "sshd accepts no passwords")
  (configured "PasswordAuthentication" "no" "KbdInteractiveAuthentication" "no"))

(setv ssh-host-public-key
      (matching "ssh-host-public-key"
                "a public key line such as \"ssh-ed25519 AAAA… comment\""
                r"(ssh-[a-z0-9-]+|ecdsa-sha2-[a-z0-9-]+|sk-[a-z0-9@.-]+) [A-Za-z0-9+/=]+( [^\n\r\x00]*)?"))

(defn _key-of [line]
  ;; A public key without its comment: its type and its base64 data.
  (.join " " (cut (.split line) 2)))

(defn _host-public-keys []
  (lfor line (.splitlines (output (Script "cat /etc/ssh/ssh_host_*_key.pub 2>/dev/null || :")
                                  :timeout 60))
        :if (.strip line)
        (_key-of line)))

(defprop has-host-public-key :posix [#^ ssh-host-public-key key]
  "This host's SSH host key is KEY (`ssh-ed25519 AAAA…`, as in
/etc/ssh/ssh_host_ed25519_key.pub): the site records it as hostattr
`ssh-host-key`, for other hosts to know it (`ssh.known-hosts-of-site`).
Applying it checks that one of /etc/ssh/ssh_host_*_key.pub is KEY, and
fails, changing nothing, when none is: the key recorded is wrong, or the
host has a new one."
  (:watch [(watch-path "/etc/ssh")])
  (:desc f"SSH host key {(get (.split key) 0)} recorded")
  (:hostattrs (push-hostattr "ssh-host-key" (_key-of key)))
  (:check (in (_key-of key) (_host-public-keys)))
  (:apply
    (raise (AbortedChange
             (+ f"no /etc/ssh/ssh_host_*_key.pub holds the key recorded for this host ({(_key-of key)}); "
                "record the one the host has")))))

(export :objects [installed configured no-passwords validate has-host-key host-key-path CONFIG
                  has-host-public-key ssh-host-public-key])
