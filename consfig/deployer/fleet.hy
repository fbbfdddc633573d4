"Fleets: choosing hosts by what they are, and deploying several at once.

Hosts belong to groups, declared in their defhost options (`{:groups [\"web\"
\"eu\"]}`) or pushed by their properties' :hostattrs (`(push-hostattr \"groups\"
\"web\")`).  A selection pattern is one or more terms joined by `:`, all of
which a host must match; a term starting with `!` excludes what it matches:

  athena              a hostname, or the first label of exactly one
  'web*'              a glob (fnmatch) on the full hostname
  @web                the hosts in group web
  @web:!@eu           in web and not in eu
  'db*:@eu'           named db… and in eu

Several patterns are a union.  A pattern that matches nothing is an error.

`deploy-hosts*` deploys a list of hosts concurrently, each over its own chain
in a thread of its own (`jobs` at a time): the hostattrs of all of them are
computed first, so that a mistake anywhere stops everything before any
connection; what a host would ask for (a sudo password, a `:prompt` data
item) is asked for once, before any host starts; a host that fails or
cannot be reached does not stop the others; `max-fail` stops starting hosts
once that many failed; `serial` deploys in batches (a rolling deploy)."

(import fnmatch
        consfig.deployer.report [Reporter]
        consfig.options [run-options]
        math
        threading
        consfig.transport.chain [chain->data hop-spec python-kwargs]
        consfig.model.context [deployment-cache establishing-for]
        consfig.data.items [fetch-deferred]
        consfig.data.transit [items-to-carry]
        consfig.deployer.deployment [prepare-deployment run-prepared]
        consfig.apply.engine [Outcome announced-count]
        consfig.errors [ChainError ConnectionFailed ConsfigError]
        consfig.apply.events [end-event summary-event]
        consfig.model.host [Host hosts find-host get-hostattrs host-groups-of preprocess-host
                            site-facts-scope])

(setv DEFAULT-JOBS 10)

;; Choosing hosts

(defn host-groups [host [prepared None]]
  "The groups HOST belongs to: those its defhost declares, then those its
properties push as hostattr `groups` (from PREPARED, the preprocessed host,
computed when not given)."
  (setv host (find-host host)
        prepared (or prepared (preprocess-host host)))
  (host-groups-of host (get-hostattrs "groups" prepared)))

(defclass _Groups []
  ;; Each host's groups, its hostattrs computed once, when a term needs them.
  (defn __init__ [self]
    (setv self.known {}))
  (defn __call__ [self host]
    (when (not-in host.hostname self.known)
      (setv (get self.known host.hostname)
            (try (host-groups host)
                 (except [e ConsfigError]
                   ;; Its properties may put it in any group.
                   (raise (ConsfigError f"cannot tell which groups {host.hostname} is in: {e}")
                          :from e)))))
    (get self.known host.hostname))
  (defn all [self]
    (sorted (sfor h (.values hosts) g (self h) g))))

(defn _glob? [term]
  (any (gfor c "*?[" (in c term))))

(defn _term-matches [term pattern groups]
  ;; The hosts (in definition order) that TERM, a term of PATTERN, names.
  (cond
    (not term)
    (raise (ConsfigError f"host pattern {pattern !r} has an empty term; terms are joined by ':', e.g. @web:!@eu"))
    (.startswith term "@")
    (lfor h (.values hosts) :if (in (cut term 1 None) (groups h)) h)
    (_glob? term)
    (lfor h (.values hosts) :if (fnmatch.fnmatchcase h.hostname term) h)
    (in term hosts) [(get hosts term)]
    True (do (setv found (lfor h (.values hosts)
                               :if (= (get (.split h.hostname ".") 0) term) h))
             (when (> (len found) 1)
               (raise (ConsfigError (+ f"host pattern {pattern !r}: {term} names several hosts ("
                                       (.join ", " (gfor h found h.hostname))
                                       "); give the full hostname"))))
             found)))

(defn _pattern-matches [pattern groups]
  (setv selected None
        excluded #{})
  (for [term (.split pattern ":")]
    (if (.startswith term "!")
        (.update excluded (gfor h (_term-matches (cut term 1 None) pattern groups) h.hostname))
        (do (setv names (sfor h (_term-matches term pattern groups) h.hostname)
                  selected (if (is selected None) names (& selected names))))))
  (lfor h (.values hosts)
        :if (and (in h.hostname (if (is selected None) (set hosts) selected))
                 (not-in h.hostname excluded))
        h))

(defn _no-match [pattern groups [what "host pattern"]]
  (setv known (.all groups))
  (ConsfigError
    (+ (if (or (_glob? pattern) (in ":" pattern) (in "@" pattern) (in "!" pattern))
           f"{what} {pattern !r} matches no host"
           f"unknown host {pattern}")
       (if hosts
           (+ "; known hosts: " (.join ", " (sorted hosts))
              (if (and (in "@" pattern) known)
                  (+ "; groups: " (.join ", " known))
                  ""))
           "; no host is defined"))))

(defn select-hosts [patterns [limit None]]
  "The hosts PATTERNS choose (a union; see this module's documentation for
the syntax), narrowed to those LIMIT, a pattern too, also matches: a list of
`Host`s, each once, in the order the patterns name them.  A pattern that
matches nothing is an error naming it."
  (with [_ (site-facts-scope)]
    (_select-hosts patterns limit)))

(defn _select-hosts [patterns limit]
  (setv groups (_Groups)
        chosen {})
  (for [p patterns]
    (if (isinstance p Host)
        (setv (get chosen p.hostname) p)
        (do (setv found (_pattern-matches (str p) groups))
            (when (not found) (raise (_no-match (str p) groups)))
            (for [h found] (setv (get chosen h.hostname) h)))))
  (when (is-not limit None)
    (setv allowed (sfor h (_pattern-matches limit groups) h.hostname))
    (when (not allowed) (raise (_no-match limit groups "--limit")))
    (setv chosen (dfor [n h] (.items chosen) :if (in n allowed) n h))
    (when (not chosen)
      (raise (ConsfigError (+ f"--limit {limit !r} leaves none of the hosts "
                              (.join " " (gfor p patterns (str p))))))))
  (list (.values chosen)))

;; Counts given as N or N%

(defn parse-count [value total what]
  "VALUE, an int or a string \"N\" or \"N%\" (of TOTAL, rounded up, at least
1), as a positive int; WHAT names the option in an error."
  (when (is value None) (return None))
  (setv text (.strip (str value)))
  (try
    (setv n (if (.endswith text "%")
                (max 1 (math.ceil (/ (* (float (cut text 0 -1)) total) 100)))
                (int text)))
    (except [ValueError]
      (raise (ConsfigError f"{what}: {value !r} is not a count (N) or a percentage (N%)"))))
  (when (< n 1)
    (raise (ConsfigError f"{what}: {value !r} must be at least 1")))
  n)

;; Deploying several hosts

(defn ask-beforehand [deployments]
  "Ask, on this thread, for what DEPLOYMENTS would ask for once started: a
password a hop of their chains needs (a `[:sudo :from …]` hop's) and the
prerequisite data a source asks for when used (a `:prompt` item); each
once, however many hosts need it.  Return the answers, a dict to seed each
deployment's cache with."
  (setv hops {})
  (for [d deployments]
    (for [[name kwargs] d.chain]
      (setv spec (hop-spec name))
      ;; A hop after :python is established on the target, but what it asks
      ;; for is asked here all the same: the answer travels with the host's
      ;; data (a sudo password, consfig.deployer.deployment).
      (when spec.ask-beforehand
        (setv #(_ _ names) (.setdefault hops (hy.repr (chain->data [#(name kwargs)]))
                                        #(spec kwargs [])))
        (.append names d.hostname))))
  (setv deferred (lfor d deployments
                       i (items-to-carry d.host)
                       :if (not i.prefetch)
                       i))
  (when (not (or hops deferred)) (return {}))
  (with [_ (establishing-for (. (get deployments 0) host))]
    (for [[spec kwargs names] (.values hops)]
      (spec.ask-beforehand f"for {(.join ", " names)}" #** (python-kwargs kwargs)))
    ;; Each host keeps its own items, their content fetched here; the
    ;; source keeps what it asked in this one cache, so an item several
    ;; hosts need is asked once.
    (fetch-deferred deferred)
    (dict (deployment-cache))))

(defn _failure-events [hostname chain e check]
  ;; A host whose deployment stopped outside any property (its chain could
  ;; not be established, its target went away): its failure, and the
  ;; summary it never reached.
  (setv expected (isinstance e ConsfigError)
        message (if expected (str e) f"{(. (type e) __name__)}: {e}")
        doing (if (isinstance e #(ConnectionFailed ChainError)) "connecting" "deploying"))
  [{#** (end-event f"{doing} over {(hy.repr (chain->data chain))}" "failed"
                   :message message :property "connection")
    "host" hostname "depth" 0}
   {#** (summary-event "failed" 0 1 check) "host" hostname "depth" 0}])

(defn _deploy-one [deployment sink secrets options]
  (when (hasattr sink "expect")
    (.expect sink deployment.hostname (announced-count deployment.host.propspec)))
  (try
    (run-prepared deployment sink options :secrets secrets)
    (except [e Exception]
      (for [event (_failure-events deployment.hostname deployment.chain e options.check)]
        (sink event))
      (Outcome deployment.hostname 0 1))))

(defclass _Scheduler []
  ;; Hands hosts to worker threads, JOBS at a time, batch after batch, and
  ;; stops handing them out once MAX-FAIL have failed or a worker hit
  ;; something that must stop everything (the sink failed).
  (defn __init__ [self run-one jobs max-fail]
    (setv self.run-one run-one
          self.jobs jobs
          self.max-fail max-fail
          self.lock (threading.Lock)
          self.failed 0
          self.fatal None
          self.pending []
          self.outcomes {}))

  (defn stopped? [self]
    (or (is-not self.fatal None)
        (and self.max-fail (>= self.failed self.max-fail))))

  (defn _next [self]
    (with [self.lock]
      (if (or (not self.pending) (.stopped? self))
          None
          (.pop self.pending 0))))

  (defn _work [self]
    (while True
      (setv item (._next self))
      (when (is item None) (return))
      (setv #(i deployment) item)
      (try
        (setv outcome (self.run-one deployment))
        (except [e BaseException]
          (with [self.lock] (setv self.fatal e))
          (return)))
      (with [self.lock]
        (setv (get self.outcomes i) outcome)
        (when (= outcome.status "failed") (+= self.failed 1)))))

  (defn run-batch [self items]
    (setv self.pending (list items))
    (if (= self.jobs 1)
        (._work self)
        (do (setv workers (lfor _ (range (min self.jobs (len items)))
                                (threading.Thread :target self._work :daemon True
                                                  :name "consfig-host")))
            (for [w workers] (.start w))
            ;; Joined with a timeout, so that ^C reaches the main thread.
            (for [w workers]
              (while (.is-alive w) (.join w 0.2)))))
    (when (is-not self.fatal None)
      (raise self.fatal))))

(defn _batches [items size]
  (if size
      (lfor i (range 0 (len items) size) (cut items i (+ i size)))
      [items]))

(defn deploy-hosts* [chain hosts * [propspec None] [additional None] [sink None]
                     [verbosity 0] [unapply False] [check False] [diff False]
                     [jobs None] [max-fail None] [serial None] [chains None] [options None]]
  "Deploy HOSTS (Hosts or hostnames) concurrently, each over CHAIN (its own
default chain when None), and return their `Outcome`s in HOSTS' order (None
for a host not started).  CHAINS, a list as long as HOSTS, gives each host
a chain of its own instead (the connections of a Fabric group).  JOBS hosts
are deployed at once (default: as many as there are hosts, at most 10; 1 is
one after another).  MAX-FAIL (N, or
\"N%\" of the hosts) stops starting hosts once that many have failed;
SERIAL (N or \"N%\") deploys them in batches of that many, each batch
finishing before the next starts.  The other arguments are `deploy*`'s
(OPTIONS, a `consfig.options.RunOptions`, or VERBOSITY, UNAPPLY, CHECK and
DIFF that make one).

The hostattrs of every host are computed before anything connects, and
what a host would ask for (a sudo password, a `:prompt` data item) is
asked for once, before the hosts start.  A host whose chain cannot be
established fails on its own; the others carry on."
  (setv options (run-options options :verbosity verbosity :unapply unapply :check check
                             :diff diff)
        deployments (with [_ (site-facts-scope)]
                      ;; Every host's hostattrs computed once, however many read them.
                      (lfor [h c] (zip hosts (or chains (* [chain] (len hosts))))
                            (prepare-deployment c h :propspec propspec
                                                :additional additional)))
        n (len deployments)
        jobs (if (is jobs None) (max 1 (min DEFAULT-JOBS n)) (parse-count jobs n "--jobs"))
        max-fail (parse-count max-fail n "--max-fail")
        serial (parse-count serial n "--serial")
        secrets (if (> n 1) (ask-beforehand deployments) {})
        reporter (when (is sink None) (Reporter :options options))
        sink (or sink reporter)
        scheduler (_Scheduler (fn [d] (_deploy-one d sink secrets options)) jobs max-fail))
  (when (hasattr sink "grouping")
    ;; Hosts running side by side: each one's lines are printed together.
    (.grouping sink (and (> jobs 1) (> n 1) (!= serial 1))))
  (try
    (for [batch (_batches (list (enumerate deployments)) serial)]
      (when (.stopped? scheduler) (break))
      (.run-batch scheduler batch))
    (for [[i d] (enumerate deployments)]
      (when (not-in i scheduler.outcomes)
        (sink {#** (summary-event "not-started" 0 0 options.check) "host" d.hostname "depth" 0})))
    (lfor i (range n) (.get scheduler.outcomes i))
    (finally
      (when reporter
        (.finish reporter)
        (.close reporter)))))

(defn fleet-exit-code [outcomes [detailed False]]
  "The exit status of a deployment of several hosts: 1 if any failed or was
not started; DETAILED: else 2 if any changed, else 0."
  (cond (any (gfor o outcomes (or (is o None) (= o.status "failed")))) 1
        (and detailed (any (gfor o outcomes (= o.status "changed")))) 2
        True 0))

(export :objects [deploy-hosts* select-hosts host-groups fleet-exit-code])
