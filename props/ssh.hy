"SSH client-side state: users' keys, authorized keys and known hosts."

(eval-when-compile
  (require consfig.model.property [defprop]
           consfig.model.propspec [defpropspec]))
(import posixpath
        pwd
        consfig.model.watchspec [watch-path]
        consfig.apply.actions [NO-CHANGE Script make-remote-directory output remote-exists?
                               remove-remote run run-ok? set-remote-mode set-remote-owner]
        consfig.data.items [get-data-bytes require-data]
        consfig.apply.engine [Drift checking?]
        consfig.errors [FailedChange]
        consfig.model.context [connection]
        consfig.transport.hop [walk-refusal]
        consfig.model.host [get-hostname get-hostattrs hosts-with-hostattr]
        consfig.props.file :as file
        consfig.props.file [add-lines combined-results remove-lines content->bytes read-bytes
                            update-file]
        consfig.props.user [home-directory]
        consfig.types *)

;; Keys and host names are lines of authorized_keys and known_hosts.
(setv ssh-public-key (matching "ssh-public-key" "a public key line such as \"ssh-ed25519 AAAA… comment\""
                               r"[^\s#][^\n\r\x00]*")
      ssh-key-type (matching "ssh-key-type" "an SSH key type: ed25519, rsa or ecdsa" r"ed25519|rsa|ecdsa")
      known-hosts (one-of (matching "known-host" "a host name or address (no spaces or commas)"
                                    r"[^\s,#][^\s,]*")
                          (non-empty-list-of (matching "known-host" "a host name or address (no spaces or commas)"
                                                       r"[^\s,#][^\s,]*"))))

(defn _ssh-dir [username]
  "USERNAME's ~/.ssh, made (mode 0700, owned by USERNAME) if missing.  It is
in her home, so it is made, given to her and chmodded by the safe walk and
never through a link: one she swaps in meanwhile is itself given to her, or
refused, never followed (docs/security.md)."
  (setv d (posixpath.join (home-directory username) ".ssh"))
  (when (not (remote-exists? d))
    (make-remote-directory d)
    (set-remote-owner d username (_group-of username))
    (set-remote-mode d 0o700))
  d)

(defn _group-of [username]
  (.strip (. (run "id" "-gn" "--" username :timeout 60) stdout)))

(defn _owned-private [path username]
  ;; A file sshd reads for a user must be the user's and not writable by
  ;; others, or sshd ignores it.  She owns the directory, and may have put
  ;; a link at PATH since it was written: the link itself is given to her,
  ;; and a mode is never set through one (`set-owner`, `set-mode`).
  (set-remote-owner path username (_group-of username))
  (setv mode (int (.strip (output "stat" "-c" "%a" "--" path)) 8))
  (when (& mode 0o022)
    (set-remote-mode path (& mode (bnot 0o022)))))

(defn _user-file-lines [username name lines remove [mode None]]
  ;; In check mode the lines' editors say what would change; ~/.ssh is not
  ;; made.  MODE: what the file must have, whether or not its lines changed.
  (setv path (posixpath.join (if (checking?)
                                 (posixpath.join (home-directory username) ".ssh")
                                 (_ssh-dir username))
                             name)
        r (if remove (remove-lines path lines) (add-lines path lines)))
  (when (and (!= r NO-CHANGE) (remote-exists? path) (not (checking?)))
    (_owned-private path username))
  (if (and mode (remote-exists? path))
      (combined-results [r (file.ensure-mode path mode)])
      r))

(defn authorized-keys-path [username]
  "Where USERNAME's authorized_keys is: in ~/.ssh, by the target's passwd
when this runs on it, else under /home (root's under /root)."
  (try (posixpath.join (. (pwd.getpwnam username) pw-dir) ".ssh" "authorized_keys")
       (except [KeyError]
         (posixpath.join (if (= username "root") "/root" f"/home/{username}") ".ssh" "authorized_keys"))))

(defprop authorized-keys :posix [#^ user-name username #^ ssh-public-key #* keys]
  "USERNAME's ~/.ssh/authorized_keys contains each of KEYS (whole lines:
`ssh-ed25519 AAAA… comment`); other keys in it are left alone.  The file is
USERNAME's, mode 0600.  Unapplying removes KEYS from it."
  (:simulates True)
  (:desc f"{username} has {(len keys)} authorized SSH key(s)")
  (:watch [(watch-path (authorized-keys-path username))])
  (:apply (_user-file-lines username "authorized_keys" keys False 0o600))
  (:unapply (_user-file-lines username "authorized_keys" keys True)))

(defn user-key-iden2 [username type]
  "The second identifier of USERNAME's private key of TYPE, as data of the
current host: `~USERNAME/.ssh/id_TYPE`."
  f"~{username}/.ssh/id_{type}")

(defn _key-pair-holds? [key private public]
  (and (= (read-bytes key) private)
       (= (read-bytes (+ key ".pub")) (content->bytes (+ public "\n")))))

(defprop has-user-key :posix [#^ user-name username * #^ ssh-key-type [type "ed25519"]
                              #^ (optional ssh-public-key) [public-key None]]
  "USERNAME has an SSH key pair of TYPE, ~/.ssh/id_TYPE and its .pub.
Without PUBLIC-KEY, it is generated on the target if missing, so that the
private key never leaves it (this needs ssh-keygen, from openssh-client).
With PUBLIC-KEY, the private key is prerequisite data of the host
(HOSTNAME, `~USERNAME/.ssh/id_TYPE`), a secret, installed with mode 0600, and
the .pub gets PUBLIC-KEY: a key that survives reinstalling the host."
  (:watch [(watch-path (posixpath.join (posixpath.dirname (authorized-keys-path username)) f"id_{type}"))])
  (:desc f"{username} has an {type} SSH key")
  (:hostattrs
    (when public-key
      (require-data (get-hostname) (user-key-iden2 username type) :secret True)))
  (:check
    (setv key (posixpath.join (home-directory username) ".ssh" f"id_{type}"))
    (if public-key
        (or (_key-pair-holds? key (.reveal (get-data-bytes (get-hostname) (user-key-iden2 username type)))
                              public-key)
            (Drift f"{key} would be installed from data"))
        (remote-exists? key)))
  (:apply
    (setv key (posixpath.join (_ssh-dir username) f"id_{type}")
          group (_group-of username))
    (if public-key
        (do (update-file key (.reveal (get-data-bytes (get-hostname) (user-key-iden2 username type)))
                         :mode 0o600 :owner username :group group :secret True)
            (update-file (+ key ".pub") (+ public-key "\n") :mode 0o644 :owner username :group group))
        (do (when (not (run-ok? "command" "-v" "ssh-keygen"))
              (raise (FailedChange "ssh-keygen is not installed; add (apt.installed \"openssh-client\") first")))
            (_generate-key-pair key type username group)))))

(defn _generate-key-pair [key type username group]
  ;; ssh-keygen writes by path and follows links, and ~/.ssh is hers: so it
  ;; writes into a directory of root's that no one else may enter, and each
  ;; file is then installed as consfig writes any file, by the safe walk,
  ;; given its owner and mode before it is renamed to its name.
  ;; In /tmp itself, never $TMPDIR: a sticky directory, where no one else
  ;; may rename what root makes.
  (setv tmp (.strip (output "mktemp" "-d" "/tmp/consfig-key.XXXXXXXX")))
  (try
    (run "ssh-keygen" "-q" "-t" type "-N" "" "-C" username "-f" (posixpath.join tmp "key")
         :timeout 120)
    (_install-generated (posixpath.join tmp "key") key 0o600 username group)
    (_install-generated (posixpath.join tmp "key.pub") (+ key ".pub") 0o644 username group)
    (finally (remove-remote [tmp] :recursive True))))

(defn _install-generated [source dest mode owner group]
  ;; The private key never leaves the target: a Python there reads it and
  ;; writes it itself; over a POSIX chain the write's script takes it from
  ;; SOURCE on its standard input, not from the controller.
  (setv conn (connection))
  (when conn.python?
    (return (.write-file conn dest (.read-file conn source) :mode mode :owner owner :group group)))
  (setv size (int (.strip (output "stat" "-c" "%s" "--" source)))
        r (run (Script (+ "exec <\"$1\" || exit 1\n"
                          (.write-script conn dest size :mode mode :owner owner :group group))
                       source)
               :check False :timeout 120)
        refusal (walk-refusal r.exit-code r.stderr dest conn.where))
  (when refusal (raise refusal))
  (when (not r.ok?)
    (raise (FailedChange (+ f"could not install {dest}: " (or (.strip r.stderr) f"exit {r.exit-code}"))))))

(defn _known-hosts-line [hosts key]
  (+ (.join "," (if (isinstance hosts #(list tuple)) hosts [hosts])) " " key))

(defprop known-host :posix [#^ user-name username #^ known-hosts hosts #^ ssh-public-key key]
  "USERNAME's ~/.ssh/known_hosts says that HOSTS (a name, or a list of names
and addresses) have the public KEY (`ssh-ed25519 AAAA…`).  Unapplying
removes that line."
  (:watch [(watch-path (posixpath.join (posixpath.dirname (authorized-keys-path username)) "known_hosts"))])
  (:simulates True)
  (:desc f"{username} knows the SSH host key of {hosts}")
  (:apply (_user-file-lines username "known_hosts" [(_known-hosts-line hosts key)] False))
  (:unapply (_user-file-lines username "known_hosts" [(_known-hosts-line hosts key)] True)))

(setv SYSTEM-KNOWN-HOSTS "/etc/ssh/ssh_known_hosts")

(defprop system-known-host :posix [#^ known-hosts hosts #^ ssh-public-key key]
  "/etc/ssh/ssh_known_hosts, read by every user's ssh, says that HOSTS have
the public KEY.  Unapplying removes that line."
  (:watch [(watch-path SYSTEM-KNOWN-HOSTS)])
  (:simulates True)
  (:desc f"The system knows the SSH host key of {hosts}")
  (:apply
    (when (not (checking?)) (run "mkdir" "-p" "/etc/ssh"))
    (add-lines SYSTEM-KNOWN-HOSTS [(_known-hosts-line hosts key)]))
  (:unapply (remove-lines SYSTEM-KNOWN-HOSTS [(_known-hosts-line hosts key)])))

(defn site-known-hosts-lines []
  "The known_hosts lines of every host the site defines that has an SSH
host key (hostattr `ssh-host-key`): its hostname and aliases (hostattr
`aliases`), then the key, one line per key, in the order the hosts were
defined."
  (lfor [hostname keys] (.items (hosts-with-hostattr "ssh-host-key"))
        key (reversed keys)
        (_known-hosts-line [hostname #* (reversed (get-hostattrs hostname "aliases"))]
                           (.join " " (cut (.split key) 2)))))

(defpropspec known-hosts-of-site :posix [* #^ (list-of ssh-public-key) [extra #()]]
  "/etc/ssh/ssh_known_hosts lists the SSH host keys of the site: of every
host the site defines that has one (hostattr `ssh-host-key`, which
`sshd.has-host-public-key` pushes), this host too, under its hostname and
its aliases (hostattr `aliases`); then the EXTRA lines (`github.com
ssh-ed25519 AAAA…`).  Nothing else: the file is the site's, so a host
taken out of the site, or whose key changed, loses its old line.  Each
user's ssh reads it, so hosts of the site reach each other without being
asked to trust a key."
  (:desc "SSH known hosts of the site")
  [(file.directory-exists "/etc/ssh")
   (file.has-content SYSTEM-KNOWN-HOSTS
                     (.join "" (gfor l [#* (site-known-hosts-lines) #* extra] (+ l "\n")))
                     :mode 0o644)])

(export :objects [authorized-keys authorized-keys-path has-user-key known-host system-known-host
                  user-key-iden2 ssh-public-key ssh-key-type known-hosts-of-site
                  site-known-hosts-lines])
