;; What travels with a host (consfig.python_hop.payload): the host and its data, with
;; or without its secrets, the same for a :python hop and an image.

(import json
        os
        pytest
        hy.models [Keyword]
        consfig.data.items [reset-data-sources register-data-source]
        consfig.deployer.deployment [prepare-deployment]
        consfig.model.host [Host]
        consfig.python_hop.payload [host-payload payload-host payload-secrets secret-values]
        consfig.model.property [find-property])

(defn [(pytest.fixture :autouse True)] clean []
  (reset-data-sources)
  (yield)
  (reset-data-sources))

(defn _write [path text]
  (os.makedirs (os.path.dirname path) :exist-ok True)
  (with [f (open path "w")] (.write f text)))

(defn _host [tree]
  ;; payload.test, preprocessed and its data resolved from the data tree
  ;; TREE, as for a deployment: a secret argument, a secret item, plain data.
  (_write (os.path.join tree "payload.test" "motd") "data-4711\n")
  (_write (os.path.join tree "_keys" "key") "key-4711\n")
  (register-data-source "files-tree" :location tree)
  (setv p find-property)
  (. (prepare-deployment
       (Keyword "local")
       (Host "payload.test"
             ((p "consfig.combinators.seqprops")
               ((p "consfig.props.user.has-enabled-password") "bob" :initial-password "pw-4711")
               ((p "consfig.props.user.has-enabled-password") "alice")
               ((p "consfig.props.file.has-content") "/etc/issue" "hi\n")
               ((p "consfig.props.file.data-uploaded") "payload.test" "motd" "/etc/motd")
               ((p "consfig.props.file.secret-uploaded") "_keys" "key" "/etc/key"))))
     host))

(defn test-payload-secrets-names-the-secret-arguments-and-the-secret-data [tmp-path]
  (setv found (payload-secrets (_host (str tmp-path))))
  (assert (= (len found) 2) f"one secret argument, one secret item: {found}")
  (assert (in "bob has an enabled password (initial-password)" found) found)
  (assert (any (gfor f found (and (.startswith f "data (_keys key)") (in "/etc/key" f)))) found))

(defn test-a-payload-reads-back-as-the-same-host [tmp-path]
  (setv host (_host (str tmp-path))
        back (payload-host (json.loads (json.dumps (host-payload host)))))
  (assert (= back.propspec host.propspec) "the propspec survives the trip")
  (assert (= back.hostattrs host.hostattrs) "the hostattrs survive the trip"))

(defn test-a-payload-lists-the-data-and-holds-its-content-only-when-asked [tmp-path]
  (setv host (_host (str tmp-path))
        manifest (get (host-payload host) "data")
        inline (json.dumps (host-payload host :content True)))
  (assert (= (sorted (gfor m manifest #((get m "iden1") (get m "iden2"))))
             [#("_keys" "key") #("payload.test" "motd")])
          f"both items are listed: {manifest}")
  (assert (not-in "4711" (json.dumps manifest)) "the hop's manifest holds no content")
  (assert (and (in "data-4711" inline) (in "key-4711" inline)) "an image's holds both"))

(defn test-a-payload-without-secrets-holds-none-and-keeps-the-rest [tmp-path]
  (setv host (_host (str tmp-path))
        payload (host-payload host :secrets False :content True)
        text (json.dumps payload))
  (assert (not-in "pw-4711" text) "no secret argument is left in it")
  (assert (not-in "key-4711" text) "no secret data is left in it")
  (assert (in "withheld-secret" text) "the property with a secret argument is replaced")
  (assert (in "data-4711" text) "the other data is kept")
  (assert (in "/etc/issue" text) "the other properties are kept")
  (setv [key] (lfor m (get payload "data") :if (= (get m "iden1") "_keys") m))
  (assert (and (get key "withheld") (= (get key "version") "withheld"))
          f"the secret item is listed as withheld, without its version: {key}")
  (assert (= (payload-secrets (payload-host (json.loads text))) [])
          "read back, no property holds a secret"))

(defn test-secret-values-are-the-secret-arguments-not-the-others [tmp-path]
  (setv values (lfor [_ v] (secret-values (. (_host (str tmp-path)) propspec)) v))
  (assert (= values ["pw-4711"]) f"the one secret argument, and only it: {values}"))
