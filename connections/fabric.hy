"The `:fabric` hop: a chain that starts on a `fabric.Connection` of yours.

`[[:fabric :connection c] :sudo :python]` runs the rest of the chain over C,
a Fabric `Connection` your code or `fab` made: its host, user, port, keys
and gateway are whatever Fabric made of them.  A C that is not open yet is
opened (with its gateways) as an `:ssh` hop opens its own, host keys checked
against known_hosts; one already open is used as it is.  The hop never
closes C, which stays yours.  Over it, commands run as over `:ssh`: each on
a channel of its own, with timeouts, the keepalive and signals.

A chain holding a Connection is not data that can be written down: it is
for deployments made from Python (`consfig.deployer.fabric`), not for a `defhost`'s
`:deploy` or `--via`."

(import sys
        consfig.connections.ssh [HOP :as SSH-HOP connect-over]
        consfig.errors [ChainError]
        consfig.transport.hop [Hop SECONDS]
        consfig.types [Type])

(defn _fabric-connection? [v]
  ;; Without importing Fabric: whoever made a Connection has imported it.
  (setv fabric (.get sys.modules "fabric"))
  (and fabric (isinstance v fabric.Connection)))

(defn establish [upstream * connection [strict-host-key-checking None] [command-timeout None]]
  "The `SSHConnection` over CONNECTION, which this hop leaves open."
  (when (!= upstream.hop-name "local")
    (raise (ChainError (+ f":fabric starts a chain, on a connection Fabric made; "
                          f"it cannot follow {upstream.where}"))))
  (connect-over upstream connection connection.original-host
                :own False
                :strict-host-key-checking strict-host-key-checking
                :command-timeout command-timeout))

(setv HOP (Hop "fabric" {"connection" (Type "fabric-connection" "a fabric.Connection" _fabric-connection?)
                         "strict-host-key-checking" (get SSH-HOP.arguments
                                                         "strict-host-key-checking")
                         "command-timeout" SECONDS}
               establish
               :required ["connection"]))

(export :objects [HOP])
