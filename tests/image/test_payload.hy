(import json
        consfig.host [Host]
        consfig.payload [host-payload payload-host payload-secrets secret-values]
        consfig.property [find-property])

(defn _host []
  (setv p find-property)
  (Host "payload.test"
        ((p "consfig.combinators.seqprops")
          ((p "consfig.props.user.has-enabled-password") "bob" :initial-password "pw-4711")
          ((p "consfig.props.user.has-enabled-password") "alice")
          ((p "consfig.props.file.has-content") "/etc/motd" "hi\n")
          ((p "consfig.props.file.has-content") "/etc/key" "key-4711\n" :secret True))
        :hostattrs {"hostname" ["payload.test"]}))

(defn test-payload-secrets-names-the-properties-holding-one []
  (setv found (payload-secrets (_host)))
  (assert (= (len found) 2) f"two properties hold a secret: {found}")
  (assert (in "bob has an enabled password (initial-password)" found) found)
  (assert (any (gfor f found (.startswith f "/etc/key"))) found))

(defn test-a-payload-reads-back-as-the-same-host []
  (setv host (_host)
        back (payload-host (json.loads (json.dumps (host-payload host)))))
  (assert (= back.propspec host.propspec) "the propspec survives the trip")
  (assert (= back.hostattrs host.hostattrs) "the hostattrs survive the trip"))

(defn test-a-payload-without-secrets-holds-none-and-keeps-the-rest []
  (setv text (json.dumps (host-payload (_host) :secrets False)))
  (assert (not-in "4711" text) "no secret value is left in it")
  (assert (in "withheld-secret" text) "their properties are replaced")
  (assert (in "/etc/motd" text) "the other properties are kept")
  (assert (= (payload-secrets (payload-host (json.loads text))) [])
          "read back, it holds no secret"))

(defn test-secret-values-are-the-secret-arguments-not-the-others []
  (setv values (lfor [_ v] (secret-values (. (_host) propspec)) v))
  (assert (= (sorted values) ["key-4711\n" "pw-4711"]) f"the two secrets, and only them: {values}"))
