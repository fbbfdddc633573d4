"The `:su` hop: run scripts as another user with su(1).

`[:su :to \"postgres\"]` runs each script as `su -s /bin/sh -c SCRIPT -- USER`
on the upstream connection.  su asks for passwords on a terminal, which a
deployment has not got, so this hop is for switching user from root (or
wherever PAM lets su through without a password); for a password, use
`[:sudo :from …]`.  As with `sudo -H`, HOME (and USER, LOGNAME, SHELL) are
the target user's and the working directory is unchanged."

(import shlex
        consfig.errors [ConnectionFailed]
        consfig.transport.frames [OUTPUT-LIMIT]
        consfig.transport.hop [Connection Hop STRING PROBE-TIMEOUT])

(defn _su-argv [user script]
  ["su" "-s" "/bin/sh" "-c" script "--" user])

(defclass SuConnection [Connection]
  "Scripts run as `su -s /bin/sh -c SCRIPT -- USER` on the upstream."
  (setv hop-name "su")

  (defn __init__ [self upstream user]
    (.__init__ (super) upstream)
    (setv self.user user))

  (defn describe [self] f"su:{self.user}")

  (defn run-script [self script input timeout * [limit OUTPUT-LIMIT]]
    (.run-script self.upstream (shlex.join (_su-argv self.user script)) input timeout
                 :limit limit))

  (defn start-process [self argv]
    ;; su hands its -c string to the shell; `exec` leaves no shell between
    ;; su and the program.
    (.start-process self.upstream (_su-argv self.user (+ "exec " (shlex.join argv))))))

(defn su-probe [upstream user]
  "The result of su'ing to USER to do nothing.  su gets an empty standard
input, so that a password prompt fails at once instead of waiting."
  (.run upstream (_su-argv user ":") :check False :timeout PROBE-TIMEOUT))

(defn establish [upstream * [to "root"]]
  (setv r (su-probe upstream to))
  (when (not r.ok?)
    (raise (ConnectionFailed
             (+ f"su to {to} failed: " (or (.strip (+ r.stderr r.stdout)) f"exit code {r.exit-code}")
                "\n  consfig can su only where no password is needed (from root); "
                "for a password use [:sudo :user … :from \"user@host\"].")
             upstream.where)))
  (SuConnection upstream to))

(setv HOP (Hop "su" {"to" STRING} establish :user-hop True))

(export :objects [SuConnection HOP su-probe])
