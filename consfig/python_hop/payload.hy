"What travels with a host to where it is applied.

A `:python` hop sends the preprocessed host in its `apply` message; an
image (`consfig.image.build`) carries the same thing in a file.  Both make it
with `host-payload`, and the target makes it a host to apply with
`host-on-target`: whatever a host needs besides its hostattrs and propspec
reaches it the same way on either path.

The payload is the host (`\"host\"`) and the manifest of the prerequisite
data it carries (`\"data\"`: its own items and those of the hosts deployed
from it; `consfig.data.transit.data-manifest`).  The hop sends the content of
those items in `data` frames beside the payload; an image holds it inside
the manifest (`\"text\"`, or `\"base64\"` for bytes that are not UTF-8).

Secrets: a propspec holds no inline secret (the file properties refuse
`:secret True` content: secrets are prerequisite data).  What can still
hold one is an argument of a property typed `(secret …)`, such as
`user.has-enabled-password`'s `:initial-password`, and the host's secret
data items.  `payload-secrets` names both; `host-payload` without `secrets`
leaves both out: each such property is replaced by `withheld-secret`, and
each secret item is listed as withheld, without version or content, so
that a property needing it fails on the host, saying why."

(eval-when-compile (require consfig.model.property [defprop]))
(import base64
        consfig.data.transit [data-manifest items-to-carry ReceivedData received-items]
        consfig.errors [FailedChange]
        consfig.model.property [Propapp find-property propapp-desc]
        consfig.types [annotation-type secret-type?]
        consfig.model.host [Host]
        consfig.data.items [resolve-data use-only-source])

(defn _secret-arguments [propapp]
  ;; The names of PROPAPP's own arguments typed secret that hold a value.
  (setv prop (find-property propapp.name)
        #(pos kw) (.bind prop propapp.args)
        bound (. (.bind-partial prop.signature #* pos #** kw) arguments)
        params prop.signature.parameters)
  (lfor [name value] (.items bound)
        :if (and (secret-type? (annotation-type (. (get params name) annotation)))
                 (is-not value None))
        name))

(defn _walk [x f]
  ;; X with every propapp P replaced by (F P), F seeing the inside first.
  (cond (isinstance x Propapp) (f (Propapp x.name (lfor a x.args (_walk a f))))
        (isinstance x list) (lfor a x (_walk a f))
        (isinstance x tuple) (tuple (gfor a x (_walk a f)))
        (isinstance x dict) (dfor [k v] (.items x) k (_walk v f))
        True x))

(defn _secrets [propspec]
  ;; #(propapp names) for each propapp holding a secret.
  (setv found [])
  (defn note [p]
    (setv names (_secret-arguments p))
    (when names (.append found #(p names)))
    p)
  (_walk propspec note)
  found)

(defn propspec-secrets [propspec]
  "The properties in PROPSPEC that hold a secret (an argument typed
`(secret …)`), each as `#(description argument-names)`."
  (lfor [p names] (_secrets propspec) #((propapp-desc p) names)))

(defn secret-values [propspec]
  "The secret values PROPSPEC holds (its arguments typed `(secret …)`), as
strings or bytes, each with the description of the property holding it:
`#(description value)`."
  (setv out [])
  (for [[p names] (_secrets propspec)]
    (setv prop (find-property p.name)
          #(pos kw) (.bind prop p.args)
          bound (. (.bind-partial prop.signature #* pos #** kw) arguments))
    (for [n names]
      (setv v (get bound n))
      (when (isinstance v #(str bytes))
        (.append out #((propapp-desc p) v)))))
  out)

(defn _carried [host]
  ;; The items the payload of HOST lists, in a fixed order.
  (sorted (items-to-carry host) :key (fn [i] #(i.iden1 i.iden2))))

(defn _declared-by [host iden1 iden2]
  (for [d (.get host.hostattrs "data" [])]
    (when (and (= (get d "iden1") iden1) (= (get d "iden2") iden2))
      (return (get d "by"))))
  "a host deployed from it")

(defn payload-secrets [host]
  "What secret values the payload of the preprocessed HOST would hold: a
list of descriptions (the properties with a secret argument, the secret
data items and the property needing each), empty when none."
  (+ (lfor [desc names] (propspec-secrets host.propspec)
           f"{desc} ({(.join ", " (gfor n names (hy.unmangle n)))})")
     (lfor i (_carried host)
           :if i.secret
           f"data ({i.iden1} {i.iden2}), for {(_declared-by host i.iden1 i.iden2)}")))

(defn _withholding [propapp]
  (if (_secret-arguments propapp)
      (Propapp withheld-secret.name [(propapp-desc propapp)])
      propapp))

(defn _inline [content]
  ;; CONTENT (bytes) as JSON: text when it is UTF-8, which keeps an image
  ;; readable (and a secret in it findable), else base64.
  (try {"text" (.decode content "utf-8")}
       (except [UnicodeDecodeError]
         {"base64" (.decode (base64.b64encode content) "ascii")})))

(defn _data-payload [host secrets content]
  (lfor i (_carried host)
        :setv m (get (data-manifest [i]) 0)
        (cond (and i.secret (not secrets))
              {#** m "version" "withheld" "withheld" True}
              content
              (let [c (.content i)]
                {#** m #** (_inline (if i.secret (.reveal c) c))})
              True m)))

(defn host-payload [host * [secrets True] [content False]]
  "The JSON-compatible data that carries the preprocessed HOST to where it
is applied, over a `:python` hop or in an image: the host, and the manifest
of the data it carries; with CONTENT (an image), the data's content too.
Without SECRETS, each property holding a secret is replaced by one that
fails there, and each secret item is withheld: listed, without content."
  (setv data (_data-payload host secrets content))
  (when (not secrets)
    (setv host (Host host.hostname (_walk host.propspec _withholding)
                     :deploy host.deploy :desc host.desc :groups host.groups
                     :hostattrs host.hostattrs)))
  {"host" (.->data host) "data" data})

(defn payload-host [payload]
  "The preprocessed host a PAYLOAD made by `host-payload` carries, without
its data (see `host-on-target`)."
  (Host.<-data (get payload "host")))

(defn _inline-entries [payload]
  ;; What an image's payload holds of each item, as `receive-data` gives it.
  (setv out {})
  (for [m (.get payload "data" [])]
    (setv content (cond (in "text" m) (.encode (get m "text") "utf-8")
                        (in "base64" m) (base64.b64decode (get m "base64"))
                        True None))
    (setv (get out #((get m "iden1") (get m "iden2")))
          (dict (dfor [k v] (.items m) :if (not-in k #("text" "base64")) k v)
                :content content)))
  out)

(defn host-on-target [payload * [entries None]]
  "On the target, the host PAYLOAD carries, ready to apply: its data is
ENTRIES (what `consfig.data.transit.receive-data` took from the hop's frames
and cache) or, in an image, what the payload holds; it becomes the only
data source here, the host's declarations are resolved against it, and a
deployment made from here carries it on."
  (setv entries (if (is entries None) (_inline-entries payload) entries)
        host (payload-host payload))
  (use-only-source (ReceivedData entries))
  (resolve-data host)
  (setv host.nested-data (received-items entries))
  host)

(defprop withheld-secret :posix [desc]
  "Stands for the property described by DESC, which needed a secret that was
left out of what was sent here (an image built with --no-secrets): fails,
saying so."
  (:desc desc)
  (:check False)
  (:apply (raise (FailedChange (+ "this property needs a secret, which this image does not "
                                  "hold (it was built with --no-secrets); apply it with "
                                  "`consfig deploy`, or build the image with its secrets")))))

(export :objects [host-payload payload-host host-on-target payload-secrets propspec-secrets
                  secret-values withheld-secret])
