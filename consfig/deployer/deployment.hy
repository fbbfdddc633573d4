"Deployments: a connection chain and a host.

`deploy*` and `deploy-these*` are the functions (usable from Python too);
`deploy` and `deploy-these` are the macros that take an unevaluated propspec
and a bare hostname symbol."

(eval-when-compile (require consfig.model.property [defprop]))
(import hy.models [Keyword String]
        consfig.transport.chain [parse-chain establish-chain close-chain chain->data hop-spec]
        consfig.model.context [applying connection current-host establishing-for]
        consfig.data.items [resolve-data]
        consfig.apply.engine [NO-CHANGE Reported announce-action announced-count apply-deployment apply-host
                              check-propspec-fits checking? current-run inform watching-events]
        consfig.errors [ConnectionFailed ConsfigError FailedChange]
        consfig.model.host [Host find-host preprocess-host]
        consfig.python_hop.keep [chain-alive? chain-key idle-limit keepable? keep-chain take-kept]
        consfig.apply.rebooting [RebootWatch await-return await-return-reported back-after back-line
                                 probe-chain reboot-note]
        consfig.apply.lock [holding-target-lock lock-held? lock-request]
        consfig.model.propspec [dotted->name propspec-digest walk-body]
        consfig.apply.combinators [seqprops])

(defn _chain-for [chain host]
  (when (is chain None)
    (setv chain host.deploy))
  (when (is chain None)
    (raise (ConsfigError (+ f"host {host.hostname} has no default chain (:deploy in its defhost options); "
                            "give one, e.g. (deploy :local " (get (.split host.hostname ".") 0) ")"))))
  (parse-chain chain))

(defclass Prepared []
  "A deployment ready to connect: the preprocessed HOST (hostattrs computed)
and its parsed CHAIN.  `prepare-deployment` makes one; `run-prepared`
establishes the chain and applies it."
  (defn __init__ [self host chain]
    (setv self.host host
          self.chain chain))
  (defn [property] hostname [self] self.host.hostname))

(defn prepare-deployment [chain host * [propspec None] [additional None]]
  "Everything about deploying HOST (a Host or hostname) over CHAIN (its
default chain when None) that can be checked on the controller — the chain,
the propspec's arguments, every :hostattrs, the prerequisite data they
declare — checked, before connecting: a `Prepared`.  PROPSPEC replaces the
host's propspec; ADDITIONAL is applied after it."
  (setv host (find-host host)
        parsed (_chain-for chain host)
        propspec (or propspec host.propspec))
  (when additional
    (setv propspec (seqprops propspec additional)))
  (setv prepared (preprocess-host host propspec))
  (resolve-data prepared)
  (_carry-hop-data prepared parsed True)
  (check-propspec-fits prepared.propspec
                       (or (any (gfor [name _] parsed (= name "python")))
                           (all (gfor [name _] parsed (= name "local"))))
                       (hy.repr (chain->data parsed)))
  (Prepared prepared parsed))

(defn run-prepared [deployment sink * [unapply False] [check False] [verbosity 0]
                    [secrets None] [keep None]]
  "Establish the chain of the `Prepared` DEPLOYMENT and apply its host,
sending events to SINK; return an `Outcome`.  SECRETS seeds the
deployment's cache (passwords asked for beforehand, see `consfig.deployer.fleet`).
KEEP: seconds to keep the chain open afterwards for the next deployment
of the host over it, when it is one `consfig.python_hop.keep` can keep.  A host that
scheduled a reboot at the end of its deployment (`reboot.at-end`) is waited
for, when the chain leaves this machine, before the deployment's summary is
sent (`consfig.apply.rebooting`)."
  (setv watch (RebootWatch sink deployment.hostname)
        kept (and keep (keepable? deployment.chain)))
  (try
    (setv outcome (if kept
                      (_run-kept deployment watch keep :unapply unapply :check check
                                 :verbosity verbosity :secrets secrets)
                      (_run-fresh deployment watch :unapply unapply :check check
                                  :verbosity verbosity :secrets secrets)))
    (except [BaseException]
      (.release watch)
      (raise)))
  (when (not watch.note)
    (return outcome))
  (when kept
    ;; What was kept went down with the host.
    (close-chain (or (take-kept (chain-key deployment.chain deployment.hostname)) [])))
  (setv back True)
  (when (probe-chain deployment.chain)
    (with [_ (establishing-for deployment.host :seed secrets)]
      (setv back (await-return-reported deployment.chain watch.note watch.sink
                                        deployment.hostname))))
  (when (not back) (+= outcome.failures 1))
  (.release watch (not back))
  outcome)

(defn _run-fresh [deployment sink * unapply check verbosity secrets]
  (setv prepared deployment.host
        conns [])
  (with [_ (establishing-for prepared :seed secrets)]
    (try
      (setv conns (establish-chain deployment.chain)
            target (get conns -1))
      (apply-on-target target prepared sink
                       (fn [] (apply-host prepared target sink :unapply unapply :check check))
                       :unapply unapply :check check :verbosity verbosity)
      (finally
        (close-chain conns)))))

(defn _run-kept [deployment sink idle * unapply check verbosity secrets]
  ;; Over the chain kept from the last deployment of this host, if it is
  ;; still there; else over a fresh one, kept afterwards.  A kept one that
  ;; turns out to have ended before the host reached it is replaced, once.
  (import consfig.python_hop.controller [Keeper KeptSessionLost])  ; start-up: 2 ms, for :python hops alone
  (setv prepared deployment.host
        key (chain-key deployment.chain prepared.hostname))
  (with [_ (establishing-for prepared :seed secrets)]
    (while True
      (setv conns (take-kept key)
            reused (bool conns))
      (when (not reused)
        (setv conns (establish-chain deployment.chain))
        (when (.apply-remotely? (get conns -1))
          (setv (. (get conns -1) keeper) (Keeper))))
      (setv target (get conns -1))
      (try
        (setv outcome (_apply-kept conns reused prepared sink
                                   :unapply unapply :check check :verbosity verbosity))
        (except [KeptSessionLost]
          (close-chain conns)
          (if reused (continue) (raise)))
        (except [BaseException]
          (close-chain conns)
          (raise)))
      (keep-chain key conns idle)
      (return outcome))))

(defn _apply-kept [conns reused prepared sink * unapply check verbosity]
  ;; As over a fresh chain.  Taking the lock is the first thing sent over a
  ;; POSIX chain: when that fails because a REUSED chain has died
  ;; meanwhile, nothing was applied and a fresh chain may be tried.
  (import consfig.python_hop.controller [KeptSessionLost])  ; start-up: 2 ms, for :python hops alone
  (setv target (get conns -1)
        locked False)
  (defn apply-here []
    (nonlocal locked)
    (setv locked True)
    (apply-host prepared target sink :unapply unapply :check check))
  (try
    (apply-on-target target prepared sink apply-here :unapply unapply :check check
                     :verbosity verbosity)
    (except [e ConnectionFailed]
      (if (and reused (not locked) (not (.apply-remotely? target)) (not (chain-alive? conns)))
          (raise (KeptSessionLost (str e) target.where) :from e)
          (raise)))))

(defn apply-on-target [target prepared sink apply-here * [unapply False] [check False]
                       [verbosity 0] [within None] [remote-outcome None]]
  "Apply the preprocessed host PREPARED on TARGET, the last connection of
its established chain, under the target's deployment lock (`consfig.apply.lock`):
the one place that chooses between applying here and over there.  When
TARGET applies remotely (after a `:python` hop) the target's Python does it
and takes the lock itself, as it applies: no round trip to start a holder
first, and its commands are its own children, which it ends before it
exits.  Its events go to SINK, and its `Outcome` is returned, through
REMOTE-OUTCOME when given.  Otherwise APPLY-HERE (a function of no
arguments) is called, under the lock held through TARGET, and what it
returns is returned.  WITHIN: the connection a nested deployment is made
from, whose lock may cover TARGET already (`consfig.apply.lock.lock-held?`)."
  (if (.apply-remotely? target)
      ((or remote-outcome (fn [o] o))
        (.apply-remotely target prepared sink :unapply unapply :verbosity verbosity :check check
                         :lock (when (not (lock-held? target :within within))
                                 (lock-request prepared.hostname (_pushed-digest prepared unapply)
                                               :check check))))
      (with [_ (holding-target-lock target prepared.hostname :within within
                                    :digest (_pushed-digest prepared unapply) :check check
                                    :say (fn [text]
                                           (sink {"event" "output" "stream" "note" "text" text
                                                  "host" prepared.hostname "depth" 0})))]
        (apply-here))))

(defn _pushed-digest [prepared unapply]
  ;; What a converging agent on the target learns from the lock's holder:
  ;; the host's whole propspec is deployed, in this version (a deploy-these
  ;; or an unapply says nothing).
  ;; PREPARED: a `Prepared`, or (a nested deployment's) its host.
  (setv host (getattr prepared "host" prepared))
  (when (not (or unapply host.partial))
    (propspec-digest host.propspec)))

(defn deploy* [chain host * [propspec None] [additional None] [sink None]
               [verbosity 0] [unapply False] [check False] [diff False] [persist None]]
  "Deploy HOST (a Host or hostname) over CHAIN (its default chain when None)
and return an `Outcome`.  PROPSPEC replaces the host's propspec; ADDITIONAL
is applied after it.  With CHECK, change nothing: connect, run every check
and report what would change (DIFF: with the diffs of files).  Events go to
SINK, by default a rich `Reporter`; a sink that has an `expect` method is
told the hostname and how many announced properties are coming.

Everything that can be checked on the controller — the chain, the
propspec's arguments, every :hostattrs — is checked before connecting.
`consfig.deployer.fleet.deploy-hosts*` deploys several hosts at once.

PERSIST keeps the chain open afterwards, so that the next deployment of
HOST over it starts at once (a chain with a `:python` hop, or of `:ssh`
and user hops: see `consfig.python_hop.keep`): True for
`consfig.python_hop.keep.IDLE-LIMIT` seconds without a deployment, a number for that
many, False never; None (the default) does what the REPL says, keep (in
`consfig repl`) or not (elsewhere).  `(disconnect)` closes them."
  (setv deployment (prepare-deployment chain host :propspec propspec :additional additional)
        reporter (when (is sink None)
                   ;; Imported here, not at the top: a target applying a host
                   ;; after a :python hop has no rich, and needs none.
                   (import consfig.deployer.report [Reporter])  ; start-up: 1 ms
                   (Reporter :verbosity verbosity :check check :diff diff))
        sink (or sink reporter))
  (when (hasattr sink "expect")
    (.expect sink deployment.hostname (announced-count deployment.host.propspec)))
  (try
    (run-prepared deployment sink :unapply unapply :check check :verbosity verbosity
                  :keep (idle-limit persist))
    (finally
      (when reporter
        (.finish reporter)
        (.close reporter)))))

(setv Host.deployer deploy*)

(defn deploy-these* [chain host propspec #** kwargs]
  "Apply just PROPSPEC to HOST over CHAIN (with HOST's hostattrs)."
  (deploy* chain host :propspec propspec #** kwargs))

(defn _host-form [host]
  (setv name (dotted->name host))
  (if (and name (in "." name)) (String name) host))

(defn _chain-form [chain]
  ;; A bare `:local` in a function call would mark a keyword argument.
  (if (isinstance chain Keyword) `(quote ~chain) chain))

(setv _DEPLOY-OPTIONS #{"check" "diff" "verbosity" "unapply" "sink" "persist"})

(defn _split-options [forms]
  ;; `(deploy :ssh athena :check True (extra …))`: the keywords that name
  ;; an option of `deploy*` take the form after them; a propapp is never a
  ;; bare keyword, so what is left is the propspec.
  (setv options [] propapps [] forms (list forms) i 0)
  (while (< i (len forms))
    (setv f (get forms i))
    (if (and (isinstance f Keyword) (in f.name _DEPLOY-OPTIONS) (< (+ i 1) (len forms)))
        (do (.extend options [f (get forms (+ i 1))])
            (+= i 2))
        (do (.append propapps f)
            (+= i 1))))
  #(options propapps))

(defmacro deploy [_hy_compiler chain host #* additional]
  "Deploy HOST over CHAIN, then apply ADDITIONAL (an unevaluated propspec):
`(deploy [:ssh :python] athena)`, `(deploy :local athena.example.com)`.
Options of `deploy*` may come among them: `(deploy :ssh athena :check True)`."
  (setv #(options additional) (_split-options additional))
  `(hy.I.consfig/deployer/deployment.deploy* ~(_chain-form chain) ~(_host-form host)
     ~@options
     :additional ~(when additional
                    `(hy.I.consfig/model/propspec.eseqprops-of
                       [~@(walk-body additional _hy_compiler)]))))

(defmacro deploy-these [_hy_compiler chain host #* propapps]
  "Apply just PROPAPPS (an unevaluated propspec) to HOST over CHAIN:
`(deploy-these :ssh athena (cmd.single \"apt-get\" \"update\"))`.  Options
of `deploy*` may come among them: `:check True`."
  (setv #(options propapps) (_split-options propapps))
  `(hy.I.consfig/deployer/deployment.deploy-these* ~(_chain-form chain) ~(_host-form host)
     (hy.I.consfig/model/propspec.eseqprops-of [~@(walk-body propapps _hy_compiler)])
     ~@options))

;; Deployments as properties: a host deploying others

(defn _host->data [host propspec]
  ;; A propspec is data, and the host must be known on whichever side
  ;; applies this property: carry its hostname, chain and propspec.
  (if (isinstance host dict)
      host
      (do (setv host (find-host host))
          {"hostname" host.hostname
           "deploy" host.deploy
           "propspec" host.propspec
           "these" propspec})))

(defn _data->host [data]
  (if (isinstance data dict)
      #((Host (get data "hostname") (get data "propspec") :deploy (get data "deploy"))
        (get data "these"))
      #((find-host data) None)))

(defn _hostname [data]
  (if (isinstance data dict) (get data "hostname") (str data)))

(defn _prepare-nested [chain data additional]
  (setv #(host these) (_data->host data)
        parsed (_chain-for chain host)
        propspec these)
  (when additional
    (setv propspec (seqprops (or propspec host.propspec) additional)))
  (setv prepared (preprocess-host host propspec)
        outer (.get current-host None))
  (resolve-data prepared)
  ;; What the host deploying this one carries over a :python hop, for the
  ;; deployment made from its target.
  (when outer
    (_carry-hop-data outer parsed False)
    (.update outer.nested-data prepared.nested-data)
    (.update outer.nested-data prepared.data))
  #(parsed prepared))

(defn _carry-hop-data [host chain top]
  ;; A hop established on a target (after the :python hop of a TOP chain,
  ;; anywhere in a nested deployment's) has no terminal of ours: what it
  ;; needs from here (a [:sudo :from …] hop's password) is sent with the
  ;; host (`Hop` CARRIED-DATA).
  (setv remote (not top))
  (for [[name kwargs] chain]
    (setv spec (hop-spec name))
    (when (and remote spec.carried-data)
      (for [item (spec.carried-data kwargs)]
        (setv (get host.nested-data #(item.iden1 item.iden2)) item)))
    (when spec.takes-rest (setv remote True))))

(defn _forwarding-sink []
  ;; Events of a deployment applied by another Python, nested under this
  ;; property's line and counted in this run; its summary is this
  ;; property's outcome.
  (setv run (.get current-run) offset run.depth)
  (fn [event]
    (when (!= (get event "event") "summary")
      (setv (get event "depth") (+ offset (.get event "depth" 0)))
      (.record run event))))

(defn deploy-nested [chain data additional [unapply False]]
  "Deploy the host DATA describes over CHAIN established from the current
connection, as part of the current deployment; return its result."
  (setv #(parsed prepared) (_prepare-nested chain data additional)
        parent (.get current-host None)
        upstream (connection)
        conns []
        notes [])
  (defn noted [event]
    (when (= (.get event "host") prepared.hostname)
      (setv r (reboot-note event))
      (when r (.append notes r))))
  (with [_ (establishing-for prepared)]
    (try
      (with [_ (watching-events noted)]
        (setv conns (establish-chain parsed upstream)
              target (get conns -1))
        (defn apply-here []
          (check-propspec-fits prepared.propspec target.python? target.where)
          (with [(applying prepared target :parent parent)]
            (apply-deployment prepared.propspec unapply)))
        (defn remote-outcome [outcome]
          ;; Its failures were reported as they happened, nested here.
          (when outcome.failures
            (raise (Reported (FailedChange f"deploying {prepared.hostname} failed"))))
          (if outcome.changes :changed NO-CHANGE))
        (setv result (apply-on-target target prepared (_forwarding-sink) apply-here
                                      :unapply unapply :check (checking?) :within upstream
                                      :remote-outcome remote-outcome)))
      (finally
        (close-chain (cut conns 1 None))))
    ;; It rebooted at the end of its deployment: carry on once it is back.
    (when (and notes (probe-chain parsed))
      (announce-action (back-line prepared.hostname)
                       (fn []
                         (inform (back-after (await-return parsed (get notes -1)
                                                           :upstream upstream)))
                         NO-CHANGE))))
  result)

(defprop deploys :posix [chain host [additional None]]
  "Deploy HOST over CHAIN as part of this deployment, then apply ADDITIONAL.
CHAIN starts where this host is applied, so `(deploys* [:ssh] db1.example.com
…)` connects from this host to db1; None means HOST's default chain.  The
dotted form takes ADDITIONAL as its trailing forms."
  (:desc f"Deployed {(_hostname host)}")
  (:opaque-type True)
  (:simulates True)
  (:preprocess [chain (_host->data host None) additional])
  ;; Checks HOST's hostattrs (a veto stops this deployment before anything
  ;; connects) without letting them become this host's.
  (:hostattrs (_prepare-nested chain host additional) None)
  (:apply (deploy-nested chain host additional))
  (:unapply (deploy-nested chain host additional True)))

(defprop deploys-these :posix [chain host propspec]
  "Apply just PROPSPEC to HOST over CHAIN as part of this deployment (with
HOST's hostattrs).  The dotted form takes PROPSPEC as its trailing forms."
  (:desc f"Deployed {(_hostname host)}")
  (:opaque-type True)
  (:simulates True)
  (:preprocess [chain (_host->data host propspec) None])
  (:hostattrs (_prepare-nested chain host None) None)
  (:apply (deploy-nested chain host None))
  (:unapply (deploy-nested chain host None True)))

(export :objects [deploy* deploy-these* deploys deploys-these deploy-nested
                  Prepared prepare-deployment run-prepared apply-on-target]
        :macros [deploy deploy-these])
