"The `:as` hop: apply as another user, by whatever means the upstream has.

`[:as :user \"postgres\"]` uses sudo when the upstream user may sudo to USER
without a password, and su otherwise (which works from root).  Either way
the script runs with USER's HOME, as `sudo -H` would.  The connection it
makes is the sudo or su hop's own, so scripts and streaming processes (for a
`:python` hop after it) run exactly as they would there."

(import consfig.connections.sudo [SudoConnection sudo-without-password?]
        consfig.connections.su [SuConnection su-probe]
        consfig.errors [ConnectionFailed]
        consfig.transport.hop [Hop STRING])

(defn establish [upstream * user]
  (cond
    (sudo-without-password? upstream user) (SudoConnection upstream user)
    (. (su-probe upstream user) ok?) (SuConnection upstream user)
    True (raise (ConnectionFailed
                  (+ f"cannot become {user}: sudo -n and su both need a password here.\n"
                     "  Use [:sudo :user … :from \"user@host\"] to give sudo a password.")
                  upstream.where))))

(setv HOP (Hop "as" {"user" STRING} establish :required ["user"] :user-hop True))

(export :objects [HOP])
