"Entries of /etc/hosts: the addresses the host's own resolver gives for
names, without DNS."

(eval-when-compile (require consfig.model.property [defprop]))
(import consfig.model.watchspec [watch-path])
(import ipaddress
        re
        consfig.props.file [map-file-lines]
        consfig.types *)

(setv HOSTS "/etc/hosts")

(defn _address? [v]
  ;; No IPv6 zone (fe80::1%eth0): what follows the % could be anything.
  (and (isinstance v str)
       (re.fullmatch r"[0-9A-Fa-f:.]+" v)
       (try (ipaddress.ip-address v) True
            (except [ValueError] False))))

(setv ip-address (predicate "ip-address" "an IPv4 or IPv6 address, such as 192.0.2.1 or 2001:db8::1"
                            _address?))

(defn _fields [l]
  ;; The address and names of an entry line, or None for a comment or a
  ;; blank line.
  (setv words (.split (get (.split l "#" 1) 0)))
  (when (and words (_address? (get words 0)))
    #((ipaddress.ip-address (get words 0)) (cut words 1 None))))

(defn _entry [address names]
  (+ address "\t" (.join " " names)))

(defn _without [lines names keep]
  ;; LINES with NAMES taken off every entry but those KEEP says to leave;
  ;; an entry left with no name goes.
  (setv out [])
  (for [l lines]
    (setv f (_fields l))
    (if (or (not f) (keep (get f 0)) (not (& (set (get f 1)) (set names))))
        (.append out l)
        (let [left (lfor n (get f 1) :if (not-in n names) n)]
          (when left (.append out (_entry (str (get f 0)) left))))))
  out)

(defn entry-lines [lines address names]
  "LINES of an /etc/hosts with ADDRESS's first entry naming exactly NAMES,
and NAMES taken off the other entries of the same address family (so that
each resolves to ADDRESS there).  A missing entry is appended."
  (setv ip (ipaddress.ip-address address)
        names (list (dict.fromkeys names))
        wanted (_entry address names)
        same? (fn [a] (or (= a ip) (!= a.version ip.version))))
  (setv out (_without lines names same?))
  (setv at (next (gfor [i l] (enumerate out) :if (and (_fields l) (= (get (_fields l) 0) ip)) i)
                 None))
  (cond (is at None) (+ out [wanted])
        (= (get (_fields (get out at)) 1) names) out
        True (do (setv (get out at) wanted) out)))

(defprop has-entry :posix [#^ ip-address address #^ hostname #* names]
  "/etc/hosts maps ADDRESS to NAMES: the first entry for ADDRESS lists
exactly NAMES (the first one is the canonical name), and no other entry of
the same address family lists any of them.  A missing entry is appended.
Unapplying takes NAMES off ADDRESS's entries (an entry left with no name
goes).

  (hosts.has-entry \"192.0.2.10\" \"db.example.com\" \"db\")"
  (:watch [(watch-path HOSTS)])
  (:simulates True)
  (:invariant names "needs at least one name")
  (:desc f"/etc/hosts maps {address} to {(.join " " names)}")
  (:apply (map-file-lines HOSTS (fn [ls] (entry-lines ls address names)) :create True))
  (:unapply (setv ip (ipaddress.ip-address address))
            (map-file-lines HOSTS (fn [ls] (_without ls names (fn [a] (!= a ip)))))))

(defprop lacks-names :posix [#^ hostname #* names]
  "No entry of /etc/hosts lists any of NAMES (an entry left with no name
goes), so that they resolve through DNS."
  (:watch [(watch-path HOSTS)])
  (:simulates True)
  (:invariant names "needs at least one name")
  (:desc f"/etc/hosts lacks {(.join " " names)}")
  (:apply (map-file-lines HOSTS (fn [ls] (_without ls names (fn [a] False))))))

(export :objects [HOSTS ip-address entry-lines has-entry lacks-names])
