"What travels with a host to where it is applied.

A `:python` hop sends the preprocessed host in its `apply` message; an
image (`consfig.image`) carries the same thing in a file.  Both make it
with `host-payload` and read it back with `payload-host`, so that whatever a
host needs besides its hostattrs and propspec (its prerequisite data, once
consfig has it) reaches it the same way on either path: this is the one
place to add it.

Secrets: `payload-secrets` says which secret values a payload would hold
(today, the arguments of properties that are secret, such as
`file.has-content`'s content with `:secret True`); `host-payload` without
`secrets` replaces each property holding one with `withheld-secret`, which
fails on the host saying why."

(eval-when-compile (require consfig.property [defprop]))
(import consfig.errors [FailedChange]
        consfig.property [Propapp find-property propapp-desc]
        consfig.types [_Secret annotation-type])

(defn _secret-arguments [propapp]
  ;; The names of PROPAPP's own arguments that hold a secret.
  (setv prop (find-property propapp.name)
        #(pos kw) (.bind prop propapp.args)
        bound (. (.bind-partial prop.signature #* pos #** kw) arguments)
        params prop.signature.parameters)
  (lfor [name value] (.items bound)
        :if (or (and (isinstance (annotation-type (. (get params name) annotation)) _Secret)
                     (is-not value None))
                (and (= name "secret") (is value True)))
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
  "The properties in PROPSPEC that hold a secret, each as `#(description
argument-names)`."
  (lfor [p names] (_secrets propspec) #((propapp-desc p) names)))

(defn secret-values [propspec]
  "The secret values PROPSPEC holds, as strings or bytes, each with the
description of the property holding it: `#(description value)`."
  (setv out [])
  (for [[p names] (_secrets propspec)]
    (setv prop (find-property p.name)
          #(pos kw) (.bind prop p.args)
          bound (. (.bind-partial prop.signature #* pos #** kw) arguments))
    (for [n names]
      (setv v (get bound n))
      ;; `:secret True` marks another argument as secret: in the file
      ;; properties' convention, the content.
      (when (= n "secret")
        (setv v (.get bound "content")))
      (when (isinstance v #(str bytes))
        (.append out #((propapp-desc p) v)))))
  out)

(defn payload-secrets [host]
  "What secret values the payload of the preprocessed HOST would hold: a
list of descriptions, empty when none."
  (lfor [desc names] (propspec-secrets host.propspec)
        f"{desc} ({(.join ", " (gfor n names (hy.unmangle n)))})"))

(defn _withholding [propapp]
  (if (_secret-arguments propapp)
      (Propapp "consfig.payload.withheld-secret" [(propapp-desc propapp)])
      propapp))

(defn host-payload [host * [secrets True]]
  "The JSON-compatible data that carries the preprocessed HOST to where it
is applied, over a `:python` hop or in an image.  Without SECRETS, each
property holding a secret is replaced by one that fails there, saying so."
  (import consfig.host [Host])
  (when (not secrets)
    (setv host (Host host.hostname (_walk host.propspec _withholding)
                     :deploy host.deploy :desc host.desc :groups host.groups
                     :hostattrs host.hostattrs)))
  {"host" (.->data host)})

(defn payload-host [payload]
  "The preprocessed host a PAYLOAD made by `host-payload` carries."
  (import consfig.host [Host])
  (Host.<-data (get payload "host")))

(defprop withheld-secret :posix [desc]
  "Stands for the property described by DESC, which needed a secret that was
left out of what was sent here (an image built with --no-secrets): fails,
saying so."
  (:desc desc)
  (:check False)
  (:apply (raise (FailedChange (+ "this property needs a secret, which this image does not "
                                  "hold (it was built with --no-secrets); apply it with "
                                  "`consfig deploy`, or build the image with its secrets")))))

(export :objects [host-payload payload-host payload-secrets propspec-secrets secret-values
                  withheld-secret])
