"The fleet as one dataspace: hosts assert typed records, others react.

  (defdataspace {:endpoints [\"http://10.0.0.1:2379\"] :prefix \"/consfig/example\"})
  (defassertion web-backend [#^ hostname host #^ ip-address addr #^ port port])

  (defhost web1.example.org {}
    (dataspace.asserted (web-backend \"web1.example.org\" \"10.0.0.5\" 8080)))

  (defhost lb.example.org {}
    (during (dataspace.collected (web-backend :addr ?addr :port ?port) ?backends)
      (upstream-file ?backends)))

`asserted` holds a record in the site's dataspace under the host's lease;
`observed` is a fact holding once for each record its pattern matches (a
`during` holds its properties once for each, with the binders bound);
`collected` binds one binder to every match at once, sorted (the set form).
See docs/dataspace.md."

(eval-when-compile (require consfig.model.property [defprop]
                            consfig.model.propspec [defproplist]
                            consfig.model.fact [deffact]))
(import json
        time
        consfig.apply.dataspace [Dataspace decode-entry encode-record records
                                 keeping? lease-for]
        consfig.apply.engine [emit]
        consfig.apply.events [output-event]
        consfig.errors [FailedChange PropspecError]
        consfig.model.context [current-host]
        consfig.model.dataspace [pattern record canonical check-pattern match-record
                                 site-dataspaces site-names-dataspace?]
        consfig.model.host [get-hostattr get-hostname push-hostattr]
        consfig.model.property [Propapp find-property]
        consfig.model.propspec [propspec->data]
        consfig.python_hop.bundle [ship-distributions-with]
        consfig.apply.targetstate [host-state-file read-state-file]
        consfig.types *
        consfig.props [apt file service]
        consfig.apply.combinators [on-change])

(ship-distributions-with __name__ "etcd3gw" "requests" "urllib3" "idna" "certifi"
                         "charset-normalizer" "futurist" "debtcollector" "wrapt" "pbr")

(setv _ADD (+ "this site names no dataspace: add (defdataspace {:endpoints [\"http://HOST:2379\"] "
              ":prefix \"/consfig/SITE\"}) to the site file, before its hosts "
              "(`consfig dataspace serve` runs one)"))

(defn _refuse-without-dataspace []
  ;; At load: a site that uses the dataspace names it.
  (not (= (site-names-dataspace?) False)))

(defn _config-hostattr []
  ;; Pushed where a host uses the dataspace, so that it travels with the
  ;; host to the target: the host's own, else its site's.
  (when (get-hostattr "dataspace") (return))
  (setv host (.get current-host)
        c (.get site-dataspaces host.site-file))
  (when (is c None) (raise (PropspecError _ADD)))
  (push-hostattr "dataspace" c))

(defn _dataspace []
  (setv c (get-hostattr "dataspace"))
  (when (is c None)
    (raise (FailedChange (+ f"{(get-hostname)} has no :dataspace hostattr: " _ADD))))
  (Dataspace c (get-hostname)))

(defn _held [ds key]
  ;; The entry under KEY, or None.
  (setv #(_ kvs) (ds.range key))
  (next (gfor kv kvs :if (= (get kv "key") key) kv) None))

(defn _wanted-ttl [ds]
  (if (keeping? (get-hostname))
      (int (.get ds.config "ttl" 10))
      (int (.get ds.config "push-ttl" 3600))))

(defn _shown [x]
  ;; X, a record or pattern, as Hy, by the short names a site writes.
  (setv text (hy.repr x))
  (for [n (sorted (_record-names x) :key len :reverse True)]
    (setv text (.replace text (+ "(" n " ") (+ "(" (. (find-property n) short-name) " "))))
  text)

(defn _record-names [x]
  (if (isinstance x Propapp)
      (+ [x.name] (sum (gfor a x.args (_record-names a)) []))
      []))

(defn _since [value]
  ;; When the record stored as VALUE was first asserted, or None.
  (try (.get (json.loads value) "since")
       (except [#(ValueError AttributeError)] None)))

(defprop asserted :python [#^ record rec]
  "REC, a record (see `defassertion`), is in the site's dataspace, held by
this host's lease: gone when it is unapplied, and when the host stops
renewing its lease (its agent is killed, it is powered off, cut off).  A
push holds it for the site's :push-ttl; the converging agent for as long
as it runs, renewing a lease of :ttl."
  (:desc f"the dataspace has {(_shown (canonical rec))}")
  (:invariant (_refuse-without-dataspace) _ADD)
  (:hostattrs (_config-hostattr))
  (:check (setv ds (_dataspace)
                kv (_held ds (ds.key-of (get-hostname) rec))
                known (read-state-file (host-state-file "dataspace" (get-hostname))))
          (and kv known
               (= (get kv "lease") (.get known "id"))
               (= (.get known "ttl") (_wanted-ttl ds))))
  (:apply (setv ds (_dataspace)
                key (ds.key-of (get-hostname) rec)
                kv (_held ds key)
                since (or (when kv (_since (get kv "value"))) (time.time)))
          (ds.put key (encode-record (canonical rec) since) (lease-for ds (get-hostname))))
  (:unapply (setv ds (_dataspace))
            (ds.delete (ds.key-of (get-hostname) rec)))
  (:watch [["dataspace" "self"]]))

(defn snapshot [ds]
  "#(REVISION ENTRIES): the records in DS at one revision (the agent's live
view, else etcd's), each entry
#(KEY HOSTNAME RECORD SINCE).  An entry that is not a record of this site's
types is left out, with an event naming its key and its writer."
  (setv #(revision kvs) (records ds)
        out [])
  (for [kv kvs]
    (try (.append out #((get kv "key") #* (decode-entry ds (get kv "key") (get kv "value"))))
         (except [e PropspecError]
           (emit (output-event f"dataspace: refused {e.message}")))))
  #(revision out))

(defn _bindings-key [bindings]
  (json.dumps (propspec->data bindings) :sort-keys True :ensure-ascii False))

(defn observed-matches [pat]
  "The matches of PAT in the dataspace now: a list of #(KEY BINDINGS), one
for each distinct binding, sorted by KEY."
  (setv ds (_dataspace)
        #(_ entries) (snapshot ds)
        found {})
  (for [[_ _ rec _] entries]
    (setv b (match-record pat rec))
    (when (is-not b None)
      (setv (get found (_bindings-key b)) b)))
  (lfor k (sorted found) #(k (get found k))))

(deffact observed :python [#^ pattern pat]
  "A record in the site's dataspace matches PAT.  As the fact of a `during`,
it holds once for each distinct match, the properties with PAT's binders
bound:

  (during (dataspace.observed (web-backend :addr ?addr :port ?port))
    (backend-check ?addr ?port))

A match that goes (its record withdrawn, or its host's lease run out) has
its properties retracted."
  (:desc f"the dataspace has {(_shown pat)}")
  (:invariant (_refuse-without-dataspace) _ADD)
  (:hostattrs (check-pattern pat) (_config-hostattr))
  (:holds (bool (observed-matches pat)))
  (:matches (observed-matches pat))
  (:watch [["dataspace" "all"]]))

(setv binder (Type "binder" "a binder, such as ?backends" (fn [v] (isinstance v Binder))))

(defn all-matches [pat into]
  "One match binding INTO to every binding of PAT now, as a list of dicts
(binder name -> value), sorted."
  (setv ms (lfor [_ b] (observed-matches pat) b))
  [#("all" {into.name ms})])

(deffact collected :python [#^ pattern pat #^ binder into]
  "The set form: INTO (a binder) is bound to every match of PAT in the
site's dataspace, a sorted list of dicts (binder name -> value); a `during`
holds its properties once, applied again whenever the set changes:

  (during (dataspace.collected (web-backend :addr ?addr :port ?port) ?backends)
    (upstream-file ?backends))

It always holds, even with no match (the list is empty)."
  (:desc f"every {(_shown pat)} in the dataspace")
  (:invariant (_refuse-without-dataspace) _ADD)
  (:hostattrs (check-pattern pat) (_config-hostattr))
  (:holds True)
  (:matches (all-matches pat into))
  (:watch [["dataspace" "all"]]))

(defn member-environment [name client-url peer-url cluster [data-dir "/var/lib/etcd/consfig"]]
  "What /etc/default/etcd says for the member NAME of the cluster CLUSTER (a
dict member name -> peer URL), serving clients at CLIENT-URL and its peers
at PEER-URL: the ETCD_* variables Debian's etcd.service reads."
  (when (not-in name cluster)
    (raise (PropspecError f"dataspace.etcd-member: {name} is not among the members {(sorted cluster)}")))
  (.join "" (gfor [k v] [["ETCD_NAME" name]
                            ["ETCD_DATA_DIR" data-dir]
                            ["ETCD_LISTEN_CLIENT_URLS" client-url]
                            ["ETCD_ADVERTISE_CLIENT_URLS" client-url]
                            ["ETCD_LISTEN_PEER_URLS" peer-url]
                            ["ETCD_INITIAL_ADVERTISE_PEER_URLS" peer-url]
                            ["ETCD_INITIAL_CLUSTER"
                             (.join "," (gfor m (sorted cluster) f"{m}={(get cluster m)}"))]
                            ["ETCD_INITIAL_CLUSTER_STATE" "new"]
                            ["ETCD_INITIAL_CLUSTER_TOKEN" "consfig"]]
                     f"{k}=\"{v}\"\n")))

(setv member-name (matching "member-name" "an etcd member's name (letters, digits, - and _)"
                            r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")
      etcd-url (matching "etcd-url" "an http or https URL of host and port, no path"
                         r"https?://[A-Za-z0-9.:\[\]-]+:[0-9]{1,5}"))

(defproplist etcd-member :posix [#^ member-name name #^ etcd-url client-url #^ etcd-url peer-url
                                 #^ (dict-of member-name etcd-url) cluster]
  "This host is the member NAME of the site's etcd cluster CLUSTER (a dict:
member name -> peer URL, three or five of them), serving clients at
CLIENT-URL: Debian's etcd-server, configured in /etc/default/etcd and
running.  consfig configures its own dataspace:

  (dataspace.etcd-member \"m0\" \"http://10.0.0.1:2379\" \"http://10.0.0.1:2380\"
    {\"m0\" \"http://10.0.0.1:2380\" \"m1\" \"http://10.0.0.2:2380\" \"m2\" \"http://10.0.0.3:2380\"})"
  (apt.installed "etcd-server")
  (on-change (file.has-content "/etc/default/etcd"
                               (member-environment name client-url peer-url cluster))
    (service.restarted "etcd"))
  (service.running "etcd"))

(export :objects [asserted observed collected etcd-member member-environment binder snapshot observed-matches all-matches])
