"`consfig dataspace`: run a site's etcd, and look into its dataspace.

  consfig dataspace serve              a one-member etcd for the site's dataspace
  consfig dataspace ls [TYPE]          the records now, as Hy, with host and age
  consfig dataspace watch [TYPE]       the same, then each change as it comes

The site's dataspace is the one its consfig names with `defdataspace`
(docs/dataspace.md)."

(import json
        os
        shutil
        sys
        time
        urllib.parse
        consfig.apply.dataspace [Dataspace decode-entry]
        consfig.errors [ConsfigError PropspecError]
        consfig.model.dataspace [site-dataspaces]
        consfig.model.property [find-property]
        consfig.util [state-directory])

(defn site-config [site-file]
  "The dataspace the consfig at SITE-FILE names; a `ConsfigError` saying
what to add when it names none."
  (setv c (.get site-dataspaces (os.path.abspath site-file)))
  (when (is c None)
    (raise (ConsfigError (+ f"{site-file} names no dataspace: add (defdataspace {{:endpoints "
                            "[\"http://127.0.0.1:2379\"] :prefix \"/consfig/SITE\"}) to it"))))
  c)

(defn _free-port []
  ;; A loopback port nobody listens on now: a one-member cluster's peer
  ;; listener, which nobody dials, need not be the client port plus one
  ;; (which something else may hold).
  (import socket)  ; lazy: the controller's
  (with [s (socket.socket)]
    (.bind s #("127.0.0.1" 0))
    (get (.getsockname s) 1)))

(defn serve-argv [config data-dir [name "consfig"] [peer-port None]]
  "The etcd command line of a one-member cluster serving CONFIG's first
endpoint, its data in DATA-DIR, its peer listener on PEER-PORT (a free
one by default)."
  (setv etcd (or (shutil.which "etcd") "/usr/bin/etcd")
        url (get (get config "endpoints") 0)
        u (urllib.parse.urlsplit url)
        peer f"http://127.0.0.1:{(or peer-port (_free-port))}")
  (when (not (os.path.exists etcd))
    (raise (ConsfigError "no etcd here: install Debian's etcd-server (apt-get install etcd-server)")))
  [etcd "--name" name "--data-dir" data-dir
   "--listen-client-urls" url "--advertise-client-urls" url
   "--listen-peer-urls" peer "--initial-advertise-peer-urls" peer
   "--initial-cluster" f"{name}={peer}"
   #* (if (= u.scheme "https")
          ["--cert-file" (get config "server-cert") "--key-file" (get config "server-key")
           "--trusted-ca-file" (get config "ca") "--client-cert-auth"]
          [])])

(defn serve [config [data-dir None]]
  "Become a one-member etcd serving CONFIG's dataspace (until interrupted)."
  (setv data-dir (or data-dir (os.path.join (state-directory) "etcd"
                                            (.replace (.strip (get config "prefix") "/") "/" "-"))))
  (os.makedirs data-dir :mode 0o700 :exist-ok True)
  (setv argv (serve-argv config data-dir))
  (print f"consfig: serving the dataspace {(get config "prefix")} at {(get config "endpoints" 0)} "
         f"(data in {data-dir})" :file sys.stderr :flush True)
  (os.execv (get argv 0) argv))

(defn _short [name]
  (. (find-property name) short-name))

(defn _age [since now]
  (if (not (isinstance since #(int float)))
      "?"
      (do (setv s (int (max 0 (- now since))))
          (cond (< s 120) f"{s}s"
                (< s 7200) f"{(// s 60)}m"
                (< s 172800) f"{(// s 3600)}h"
                True f"{(// s 86400)}d"))))

(defn _line [host rec since now as-json [sign ""]]
  (if as-json
      (json.dumps {"host" host "type" (_short rec.name) "record" (hy.repr rec)
                   "since" since #** (if sign {"change" (if (= sign "+") "asserted" "retracted")} {})}
                  :ensure-ascii False)
      (+ sign (if sign " " "") f"{host}  {(_age since now)}  "
         (.replace (hy.repr rec) rec.name (_short rec.name) 1))))

(defn _wanted? [rec type-name]
  (or (is type-name None) (= (_short rec.name) type-name) (= rec.name type-name)))

(defn _entries [ds warn]
  (setv #(revision kvs) (ds.range (ds.hosts-prefix))
        out [])
  (for [kv kvs]
    (try (.append out #((get kv "key") #* (decode-entry ds (get kv "key") (get kv "value"))))
         (except [e PropspecError] (warn f"refused {e.message}"))))
  #(revision out))

(defn ls [config type-name as-json [out sys.stdout]]
  "Print the records of CONFIG's dataspace (of TYPE-NAME, if given)."
  (setv ds (Dataspace config)
        #(_ entries) (_entries ds (fn [m] (print f"consfig: {m}" :file sys.stderr)))
        now (time.time))
  (for [[_ host rec since] (sorted entries :key (fn [e] #((get e 1) (hy.repr (get e 2)))))]
    (when (_wanted? rec type-name)
      (print (_line host rec since now as-json) :file out :flush True)))
  0)

(defn watch [config type-name as-json [out sys.stdout] [stop None]]
  "Print the records of CONFIG's dataspace, then each change as it comes,
from the revision of that snapshot, until interrupted (or STOP, an Event,
is set)."
  (import queue threading)  ; lazy: the controller's
  (setv ds (Dataspace config)
        warn (fn [m] (print f"consfig: {m}" :file sys.stderr :flush True))
        #(revision entries) (_entries ds warn)
        known (dfor [k host rec since] entries k #(host rec since))
        now (time.time))
  (for [[host rec since] (.values known)]
    (when (_wanted? rec type-name)
      (print (_line host rec since now as-json) :file out :flush True)))
  (setv q (queue.Queue)
        cancel (ds.watch (ds.hosts-prefix) (+ revision 1) (fn [e] (.put q e)))
        stop (or stop (threading.Event)))
  (try
    (while (not (.is-set stop))
      (try (setv e (.get q :timeout 0.5))
           (except [queue.Empty] (continue)))
      (setv kv (get e "kv")
            key (get kv "key"))
      (if (= (.get e "type") "DELETE")
          (when (in key known)
            (setv #(host rec since) (.pop known key))
            (when (_wanted? rec type-name)
              (print (_line host rec since (time.time) as-json "-") :file out :flush True)))
          (try
            (setv #(host rec since) (decode-entry ds key (.get kv "value" b"")))
            (when (not-in key known)
              (setv (get known key) #(host rec since))
              (when (_wanted? rec type-name)
                (print (_line host rec since (time.time) as-json "+") :file out :flush True)))
            (except [err PropspecError] (warn f"refused {err.message}")))))
    (finally (cancel)))
  0)

(export :objects [site-config serve-argv serve ls watch])
