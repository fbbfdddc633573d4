"The site's dataspace on etcd v3: where records are kept, under which
lease, and how an observer reads them (a snapshot, then a watch from its
revision).  The client is etcd3gw, over etcd's JSON gateway.

A site's dataspace is a dict (the `:dataspace` hostattr; see
consfig.props.dataspace): \"endpoints\", a list of URLs of etcd members
(http://127.0.0.1:2379); \"prefix\", the site's key prefix; \"ttl\", the
seconds a dead agent's records outlive it; \"push-ttl\", the seconds a
push's records last when no agent renews them; and, for TLS, \"ca\",
\"cert\" and \"key\", paths on the host; \"password-file\" (and
\"user\", by default the hostname) for etcd's own authentication; in
every path `{hostname}` stands for the host's name.

Keys are PREFIX/hosts/HOSTNAME/TYPE/DIGEST: a host writes under its own
prefix only (etcd's roles can hold it to that: docs/dataspace.md); the
value is the record as JSON with the time it was first asserted."

(import base64
        importlib
        json
        socket
        threading
        urllib.parse
        consfig.errors [ConsfigError PropspecError]
        consfig.model.dataspace [json->record record->json record-digest]
        consfig.apply.targetstate [host-state-file read-state-file save-state-file])

(defclass DataspaceUnavailable [ConsfigError]
  "No member of the site's etcd answered, or it has no quorum.")

(defclass EtcdRefused [ConsfigError]
  "etcd answered a request with a refusal: permission denied, a bad request.")

(defn _etcd3gw []
  ;; Imported where used: a host that does not use the dataspace never
  ;; needs etcd3gw, nor requests under it (some 140 ms).
  ;; (`etcd3gw.client` as an attribute is the function its package exports.)
  (importlib.import-module "etcd3gw.client"))

(defclass Dataspace []
  "The site's etcd, as CONFIG (a dict, see the module) names it."
  (defn __init__ [self config [hostname None]]
    ;; HOSTNAME fills `{hostname}` in the paths of :cert and :key: one
    ;; client certificate per host.
    (setv self.config config
          self.hostname hostname
          self.prefix (.rstrip (get config "prefix") "/")
          self._clients {}
          self._preferred 0))

  (defn _client [self url [timeout None]]
    ;; One client per member and per time limit: the lease keeper's
    ;; requests have a shorter one than the rest.
    (setv timeout (or timeout (.get self.config "timeout" 5)))
    (when (not-in #(url timeout) self._clients)
      (setv u (urllib.parse.urlsplit url)
            c self.config
            client ((. (_etcd3gw) Etcd3Client)
                    :host u.hostname :port (or u.port 2379) :protocol u.scheme
                    :ca-cert (.get c "ca") :cert-cert (self._path "cert")
                    :cert-key (self._path "key")
                    :timeout timeout :api-path "/v3/"))
      ;; Not the environment's: REQUESTS_CA_BUNDLE would replace the site's
      ;; CA, and HTTP_PROXY send the dataspace through a proxy.
      (setv client.session.trust-env False)
      (setv password (self._password))
      (when password
        ;; etcd's gateway ignores a client certificate's CN: a host is an
        ;; etcd user by its name and password, the token in each request.
        (setv user (.replace (.get c "user" "{hostname}") "{hostname}" (or self.hostname ""))
              token (get (.post client (.get-url client "/auth/authenticate")
                                :json {"name" user "password" password})
                         "token")
              (get client.session.headers "Authorization") token))
      (setv (get self._clients #(url timeout)) client))
    (get self._clients #(url timeout)))

  (defn _path [self option]
    (setv p (.get self.config option))
    (when p (.replace p "{hostname}" (or self.hostname ""))))

  (defn _password [self]
    ;; The password given, or read from :password-file (mode 0600 on the
    ;; host, its `{hostname}` filled in).
    (setv f (self._path "password-file"))
    (if f
        (with [h (open f)] (.strip (.read h)))
        (.get self.config "password")))

  (defn call [self f * [retried False] [timeout None]]
    "F applied to a client of a member that answers, trying each in turn
from the last that did; `DataspaceUnavailable` when none does.  TIMEOUT,
if given, is the seconds each member has to answer (else the site's
:timeout, 5)."
    (setv exc (. (_etcd3gw) exceptions)
          urls (get self.config "endpoints")
          n (len urls)
          errors [])
    (for [i (range n)]
      (setv j (% (+ self._preferred i) n)
            url (get urls j))
      (try
        (setv r (f (self._client url timeout)))
        (setv self._preferred j)
        (return r)
        (except [e [exc.ConnectionFailedError exc.ConnectionTimeoutError]]
          (self._forget url)
          (.append errors f"{url}: {(_why e)}"))
        (except [e exc.InternalServerError]
          ;; A member without quorum answers "etcdserver: request timed out"
          ;; or "no leader" (503 or 500): another may have it.
          (self._forget url)
          (.append errors f"{url}: {(_why e)}"))
        (except [e exc.Etcd3Exception]
          (self._forget url)
          (when (and (in "invalid auth token" (_why e)) (not retried))
            ;; The token expired (etcd's --auth-token-ttl): once more, anew.
            (return (self.call f :retried True :timeout timeout)))
          ;; etcd answered, and said no (permission denied, say): not
          ;; something another member would say otherwise.
          (raise (EtcdRefused f"etcd at {url} refused: {(_why e)}")))))
    (raise (DataspaceUnavailable (+ "dataspace unavailable: " (.join "; " errors)))))

  (defn _forget [self url]
    (for [k (list self._clients)]
      (when (= (get k 0) url) (.pop self._clients k None))))

  (defn prefer [self endpoint]
    "Ask ENDPOINT first from now on (another client found it answering)."
    (when (in endpoint (get self.config "endpoints"))
      (setv self._preferred (.index (get self.config "endpoints") endpoint))))

  (defn [property] endpoint [self]
    "The member that answered last."
    (get (get self.config "endpoints") self._preferred))

  (defn status [self [timeout None]]
    "etcd's status, from a member that has a leader.  A member answers it
on its own, quorum or not: one that knows no leader (two of three gone)
could serve no read, watch or lease, so it counts as not answering."
    (self.call (fn [c]
                 (setv s (.status c))
                 (when (not (int (.get s "leader" 0)))
                   (raise ((. (_etcd3gw) exceptions InternalServerError) "etcdserver: no leader")))
                 s)
               :timeout timeout))

  (defn hosts-prefix [self]
    f"{self.prefix}/hosts/")

  (defn host-prefix [self hostname]
    f"{self.prefix}/hosts/{hostname}/")

  (defn key-of [self hostname rec]
    (+ (self.host-prefix hostname) rec.name "/" (record-digest rec)))

  (defn range [self prefix]
    "#(REVISION KVS): the keys under PREFIX at one revision, each a dict
with \"key\", \"value\" (bytes), \"lease\" and \"create_revision\"."
    (setv gw (_etcd3gw)
          end (. gw _increment-last-byte)
          r (self.call (fn [c] (.post c (.get-url c "/kv/range")
                                      :json {"key" (gw._encode prefix)
                                             "range_end" (gw._encode (end prefix))}))))
    #((int (get r "header" "revision"))
      (lfor kv (.get r "kvs" [])
            {"key" (.decode (base64.b64decode (get kv "key")) "utf-8" "surrogateescape")
             "value" (base64.b64decode (.get kv "value" ""))
             "lease" (int (.get kv "lease" 0))
             "create_revision" (int (.get kv "create_revision" 0))})))

  (defn grant [self ttl]
    (. (self.call (fn [c] (.lease c ttl))) id))

  (defn lease-ttl [self lease-id]
    "The seconds left to LEASE-ID; -1 when it is gone."
    (int (.get (self.call (fn [c] (.post c (.get-url c "/kv/lease/timetolive")
                                         :json {"ID" lease-id})))
               "TTL" -1)))

  (defn refresh [self lease-id [timeout None]]
    "Keep LEASE-ID alive for its TTL again; the TTL left (0 or less: it was gone)."
    (setv r (self.call (fn [c] (.post c (.get-url c "/lease/keepalive") :json {"ID" lease-id}))
                       :timeout timeout))
    (int (.get (.get r "result" r) "TTL" 0)))

  (defn put [self key value lease-id]
    (setv gw (_etcd3gw))
    (self.call (fn [c] (.post c (.get-url c "/kv/put")
                              :json {"key" (gw._encode key) "value" (gw._encode value)
                                     "lease" lease-id}))))

  (defn delete [self key]
    (self.call (fn [c] (.delete c key))))

  (defn watch [self prefix revision callback [on-end None]]
    "Call CALLBACK with each event under PREFIX from REVISION on (a dict:
\"type\", PUT or DELETE, and \"kv\": its key as text, as `range` gives
it, its value as bytes), in a thread of its own; then ON-END, if given, when the stream ends without being
stopped (its member went away or restarted, or etcd canceled the watch):
whoever keeps a view must start afresh.  Return what stops it.

etcd3gw's own watch is not used for this: its events never end when its
stream does, so a member that restarts between two keep-alives would leave
the watch dead and its view stale, with nothing said."
    (setv gw (_etcd3gw)
          requests (importlib.import-module "requests")
          end (. gw _increment-last-byte)
          exc (. gw exceptions)
          request {"create_request" {"key" (gw._encode prefix)
                                     "range_end" (gw._encode (end prefix))
                                     "start_revision" revision}})
    (defn open-stream [c]
      (try
        (setv resp (.post c.session (.get-url c "/watch") :json request :stream True
                          :timeout #((.get self.config "timeout" 5) None)))
        (except [e requests.exceptions.RequestException]
          (raise (exc.ConnectionFailedError (str e)))))
      (when (!= resp.status-code 200)
        (.close resp)
        (raise ((if (>= resp.status-code 500) exc.InternalServerError exc.Etcd3Exception)
                 resp.text resp.reason)))
      resp)
    (setv resp (self.call open-stream)
          stopped (threading.Event))
    (defn read []
      (try
        (for [line (.iter-lines resp)]
          (when (not line) (continue))
          (setv result (.get (json.loads line) "result" {}))
          (when (.get result "canceled")
            ;; Compacted past its revision, or refused: a new snapshot.
            (break))
          (for [e (.get result "events" [])]
            (setv kv (get e "kv")
                  (get kv "key") (.decode (base64.b64decode (get kv "key")) "utf-8"
                                          "surrogateescape"))
            (when (in "value" kv)
              (setv (get kv "value") (base64.b64decode (get kv "value"))))
            (callback e)))
        (except [Exception] None)
        (finally (.close resp)))
      (when (and on-end (not (.is-set stopped)))
        (on-end)))
    (.start (threading.Thread :target read :daemon True :name "consfig-dataspace-watch"))
    (defn stop []
      (.set stopped)
      ;; Wakes the reader in its recv: closing alone may wait for it.
      (try (.shutdown (. resp raw connection sock) socket.SHUT-RDWR)
           (except [Exception] None))
      (try (.close resp) (except [Exception] None)))
    stop))

(defclass View []
  "The records under a prefix as a live watch keeps them: the snapshot it
started from, then each event, so that an observer reads them without
asking etcd again (one range a change, of every record, for every observer
of a fleet, was n² reads a round).  `read` is None while the view is not
live (before its watch started, and once it is lost): the reader then asks
etcd, and fails as it would."
  (defn __init__ [self]
    (setv self._lock (threading.Lock)
          self._kvs None
          self._base None
          self._revision None))

  (defn reset [self revision kvs]
    "Start from a snapshot: KVS, as `Dataspace.range` gives them, at REVISION."
    (with [self._lock]
      (setv self._base revision
            self._revision revision
            self._kvs (dfor kv kvs (get kv "key") kv))))

  (defn apply [self event]
    "An event of the watch started after the snapshot.  One of a watch
before it (its revision is in the snapshot already) changes nothing."
    (with [self._lock]
      (setv kv (get event "kv")
            revision (int (.get kv "mod_revision" 0)))
      (when (or (is self._kvs None) (<= revision self._base))
        (return))
      (setv key (get kv "key"))
      ;; etcd's JSON leaves out a field at its default: PUT is type 0.
      (if (= (.get event "type") "DELETE")
          (.pop self._kvs key None)
          (setv (get self._kvs key)
                {"key" key
                 "value" (.get kv "value" b"")
                 "lease" (int (.get kv "lease" 0))
                 "create_revision" (int (.get kv "create_revision" 0))}))
      (setv self._revision (max self._revision revision))))

  (defn invalidate [self]
    (with [self._lock]
      (setv self._kvs None self._base None self._revision None)))

  (defn read [self prefix]
    "#(REVISION KVS) under PREFIX, sorted by key as etcd's range is; None
when the view is not live."
    (with [self._lock]
      (when (is-not self._kvs None)
        #(self._revision (lfor k (sorted self._kvs) :if (.startswith k prefix) (get self._kvs k)))))))

;; The live views of this process, by the prefix they keep (the agent's
;; dataspace watch publishes its own).
(setv _views {})

(defn publish-view [prefix view]
  (setv (get _views prefix) view))

(defn withdraw-view [prefix view]
  (when (is (.get _views prefix) view)
    (del (get _views prefix))))

(defn records [ds]
  "#(REVISION KVS): the site's records now, from this process's live view
when it has one, else from etcd (one range, at one revision)."
  (setv prefix (ds.hosts-prefix)
        view (.get _views prefix)
        seen (when view (.read view prefix)))
  (or seen (ds.range prefix)))

(defn _why [e]
  ;; etcd3gw's exceptions keep etcd's answer in detail_text, and their
  ;; str is often empty.
  (setv text (or (getattr e "detail_text" None) (str e) (. (type e) __name__)))
  (when (isinstance text bytes) (setv text (.decode text "utf-8" "replace")))
  (setv text (str text))
  (if (> (len text) 200) (+ (cut text 0 200) "…") text))

(defn decode-entry [ds key value]
  "The record stored under KEY as VALUE (bytes), with its writer:
`#(HOSTNAME RECORD SINCE)`; a `PropspecError` naming the key and its
writer when it is not a record of the site's types."
  (setv rest (cut key (len (ds.hosts-prefix)) None)
        host (get (.split rest "/") 0))
  (when (> (len value) 65536)
    (raise (PropspecError f"{key} (written by {host}): {(len value)} bytes, more than a record may have")))
  (try
    (setv text (.decode value "utf-8")
          data (json.loads text))
    (when (not (and (isinstance data dict) (in "record" data)))
      (raise (PropspecError "not a record")))
    (setv rec (json->record (json.dumps (get data "record"))))
    (except [e UnicodeDecodeError]
      (raise (PropspecError f"{key} (written by {host}): not UTF-8")))
    (except [e #(PropspecError ValueError)]
      (raise (PropspecError f"{key} (written by {host}): {e}"))))
  (when (!= (+ (ds.host-prefix host) rec.name "/" (record-digest rec)) key)
    (raise (PropspecError f"{key} (written by {host}): the key is not that of the record it holds")))
  #(host rec (.get data "since")))

(defn encode-record [rec since]
  (json.dumps {"record" (json.loads (record->json rec)) "since" since}
              :sort-keys True :ensure-ascii False))

;; This process's lease for each host: the agent keeps it alive
;; (`keep-leases`), a push leaves it to run out after its push-ttl.
(setv _keeping {}
      ;; hostname -> the lease its records were last put under, for the
      ;; keeper's thread, which has no connection to read the host's state.
      _current {}
      _lock (threading.Lock))

(defn _lease-file [hostname]
  (host-state-file "dataspace" hostname))

(defn lease-for [ds hostname]
  "The lease HOSTNAME's records are held by: the one recorded on the host
while it lives and has the TTL wanted now (the agent's short one, or a
push's long one), else a new one, recorded."
  (setv ttl (if (in hostname _keeping)
                (int (.get ds.config "ttl" 10))
                (int (.get ds.config "push-ttl" 3600)))
        path (_lease-file hostname)
        known (try (read-state-file path) (except [#(ValueError OSError)] None)))
  (when (and (isinstance known dict) (= (.get known "ttl") ttl)
             (= (.get known "prefix") ds.prefix)
             (> (ds.lease-ttl (get known "id")) 0))
    (setv (get _current hostname) (get known "id"))
    (return (get known "id")))
  (setv lease (ds.grant ttl))
  (save-state-file path {"id" lease "ttl" ttl "prefix" ds.prefix})
  (setv (get _current hostname) lease)
  lease)

(defn keeping? [hostname]
  "Whether this process keeps HOSTNAME's lease alive (it is its agent)."
  (in hostname _keeping))

(defn keep-leases [ds hostname [on-state None]]
  "Keep HOSTNAME's lease alive from now on, every third of its TTL, in a
thread (a host that holds no lease asks etcd's status instead, so that it
learns as soon whether the dataspace is there); return a function that
stops.  From now on this process's records are held under a lease of the
site's :ttl (`lease-for`).  ON-STATE, if given, is called after each
round: with None when etcd answered, with why when it did not."
  (setv stop (threading.Event))
  (with [_lock] (setv (get _keeping hostname) stop))
  (setv ttl (int (.get ds.config "ttl" 10))
        ;; A member that takes the request and never answers (frozen, or
        ;; cut off by a firewall that drops) must not hold the keep-alive
        ;; past the lease's end: between two rounds a third of the TTL
        ;; apart, every member gets its share of another third.
        patience (min (float (.get ds.config "timeout" 5))
                      (max 0.2 (/ ttl (* 3 (len (get ds.config "endpoints")))))))
  (defn keeper []
    (while (not (.wait stop (/ ttl 3)))
      (try
        (setv lease (.get _current hostname))
        (if lease
            (when (<= (ds.refresh lease patience) 0)
              ;; It ran out while etcd was away: the records went with it,
              ;; and are put again, under a new one, by those who hold them.
              (with [_lock] (when (= (.get _current hostname) lease)
                              (.pop _current hostname None))))
            (ds.status patience))
        (when on-state (on-state None))
        (except [e Exception]
          (when on-state (on-state (str e)))))))
  (.start (threading.Thread :target keeper :daemon True :name "consfig-dataspace-lease"))
  (fn []
    (.set stop)
    (with [_lock] (.pop _keeping hostname None))))

(export :objects [Dataspace DataspaceUnavailable EtcdRefused View decode-entry encode-record lease-for
                  keeping? keep-leases publish-view withdraw-view records])
