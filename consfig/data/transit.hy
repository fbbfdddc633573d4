"How prerequisite data travels over a `:python` hop (it is kept between
deployments as `consfig.data.store` says).

Over a `:python` hop the controller sends, with the host, the manifest of
the items it carries (its own and those of the hosts deployed from it),
without their content.  The target's hello lists the versions it keeps;
the controller answers it with one `data` frame holding the content of the
others and of every secret.  A version the target finds damaged it asks for
again (`need-data`).  The target then resolves the host's declarations
against what it holds (`ReceivedData`, made the only source by
`consfig.python_hop.payload.host-on-target`), and a hop after `:python` gets its data
from there, not from the controller.  An image holds the same manifest with
the content inside (`consfig.python_hop.payload.host-payload`)."

(import consfig.boot [data-entry]
        consfig.data.items [DataItem DataSource Secret data-sent-event]
        consfig.data.store [DataCache]
        consfig.errors [FailedChange]
        consfig.util [sha256-hex])

;; The controller's side

(defn items-to-carry [host]
  "The resolved items a `:python` hop carries for HOST: its own and those
of the hosts deployed from it."
  (list (.values {#** host.nested-data #** host.data})))

(defn data-manifest [items]
  "What the apply message says of ITEMS: identifiers, version, whether
secret, and a non-secret's digest; never content."
  (lfor i items
        {"iden1" i.iden1 "iden2" i.iden2 "version" i.version "secret" i.secret
         "sha256" (if i.secret None i.sha256)}))

(defn kept? [item inventory]
  "Whether a target whose hello listed INVENTORY keeps ITEM's version."
  (setv #(entry name) (data-entry item.iden1 item.iden2 item.version))
  (and (not item.secret)
       (isinstance inventory dict)
       (in name (.get inventory entry []))))

(defn data-frame [items]
  "The `data` message and payload carrying the content of ITEMS."
  (setv parts (lfor i items (let [c (.content i)] (if i.secret (.reveal c) c))))
  #({"op" "data"
     "items" (lfor [i c] (zip items parts)
                   {"iden1" i.iden1 "iden2" i.iden2 "version" i.version "size" (len c)})}
    (.join b"" parts)))

(defn sent-events [items hostname]
  "The events saying ITEMS were sent to HOSTNAME's target."
  (lfor i items {#** (data-sent-event i) "host" hostname "depth" 0}))

;; The target's side

(defn withheld-message [iden1 iden2]
  "Why the secret (IDEN1, IDEN2) cannot be had on a host whose image was
built without secrets, and what to do."
  (+ f"the secret ({iden1} {iden2}) is not in this image (it was built with --no-secrets); "
     "deploy this host with `consfig deploy`, or build its image with its secrets"))

(defclass ReceivedData [DataSource]
  "On a target: the items that came with the host (or were kept from an
earlier deployment), the only data source there.  An item an image was
built without (a secret, with --no-secrets) has a version but no content:
the property reading it fails, saying why, and the others apply."
  ;; The content is here already; a withheld item must fail its property
  ;; alone, not the whole host before anything applies.
  (setv prefetch False)
  (defn __init__ [self entries]
    (setv self.entries entries))
  (defn version [self iden1 iden2]
    (setv e (.get self.entries #(iden1 iden2)))
    (when e (get e "version")))
  (defn secret? [self iden1 iden2]
    (get self.entries #(iden1 iden2) "secret"))
  (defn fetch [self iden1 iden2]
    (setv e (get self.entries #(iden1 iden2)))
    (when (.get e "withheld")
      (raise (FailedChange (withheld-message iden1 iden2))))
    (if (get e "secret") (Secret (get e "content")) (get e "content")))
  (defn describe [self] "the data sent with the host"))

(defn _split-payload [msg]
  (setv payload (get msg "_payload") at 0 out {})
  (for [i (get msg "items")]
    (setv size (get i "size")
          (get out #((get i "iden1") (get i "iden2") (get i "version")))
          (bytes (cut payload at (+ at size))))
    (+= at size))
  out)

(defn receive-data [msg next-data ask root]
  "On a target, for the apply message MSG: take each item its manifest
names from the cache at ROOT (None: keep nothing) or from the `data`
frames NEXT-DATA returns, asking with ASK (a message to send) for what is
still missing, and keep the non-secret ones: the entries, for
`consfig.python_hop.payload.host-on-target`."
  (setv manifest (.get msg "data" [])
        cache (when root (try (DataCache root) (except [OSError] None)))
        entries {}
        missing [])
  (for [m manifest]
    (setv content (when (and cache (not (get m "secret")))
                    (.load cache (get m "iden1") (get m "iden2") (get m "version") (get m "sha256"))))
    (if (is content None)
        (.append missing m)
        (setv (get entries #((get m "iden1") (get m "iden2"))) (dict m :content content))))
  ;; The controller answers the hello with one data frame when it carries
  ;; anything; what it held back and this cache lacks after all is asked for.
  (when manifest
    (setv received (_split-payload (next-data))
          still [])
    (for [m missing]
      (setv content (.get received #((get m "iden1") (get m "iden2") (get m "version"))))
      (if (is content None)
          (.append still m)
          (_take m content entries cache)))
    (when still
      (ask {"op" "need-data" "items" (lfor m still [(get m "iden1") (get m "iden2")])})
      (setv received (_split-payload (next-data)))
      (for [m still]
        (setv content (.get received #((get m "iden1") (get m "iden2") (get m "version"))))
        (when (is content None)
          (raise (OSError f"the controller did not send data {(_named m)}")))
        (_take m content entries cache))))
  (when cache
    (for [m manifest :if (not (get m "secret"))]
      (.used cache (get m "iden1") (get m "iden2")))
    (.prune cache))
  entries)

(defn received-items [entries]
  "The items ENTRIES (from `receive-data`) hold, as `DataItem`s."
  (dfor [key e] (.items entries)
        key (DataItem #* key (get e "version") :secret (get e "secret") :content (get e "content")
                      :fetch (fn [[key key]] (raise (FailedChange (withheld-message #* key))))
                      :source "the data sent with the host")))

(defn _named [m]
  (setv iden1 (get m "iden1") iden2 (get m "iden2") version (get m "version"))
  f"({iden1} {iden2}) version {version}")

(defn _take [m content entries cache]
  (when (and (not (get m "secret")) (get m "sha256") (!= (sha256-hex content) (get m "sha256")))
    (raise (OSError f"data {(_named m)} arrived damaged")))
  (when (and cache (not (get m "secret")))
    (.store cache (get m "iden1") (get m "iden2") (get m "version") content))
  (setv (get entries #((get m "iden1") (get m "iden2"))) (dict m :content content)))

(export :objects [items-to-carry data-manifest kept?
                  data-frame sent-events ReceivedData receive-data received-items
                  withheld-message])
