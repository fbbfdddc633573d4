"Deployments from the controller: a connection chain and a host.

`deploy*` and `deploy-these*` are the functions (usable from Python too);
`deploy` and `deploy-these`, the macros that take an unevaluated propspec
and a bare hostname symbol, are `consfig.model.deploying`'s.  A deployment
made from a host as part of its own is `consfig.nested.deploys`'s."

(import consfig.transport.chain [establish-chain close-chain chain->data with-chain]
        consfig.deployer.report [Reporter]
        consfig.python_hop.controller [Keeper KeptSessionLost]
        consfig.model.context [establishing-for]
        consfig.data.items [resolve-data]
        consfig.apply.engine [announced-count apply-host check-propspec-fits]
        consfig.errors [ConnectionFailed]
        consfig.model.host [find-host preprocess-host]
        consfig.nested.deploys [apply-on-target carry-hop-data chain-for]
        consfig.python_hop.keep [chain-alive? chain-key idle-limit keepable? keep-chain take-kept]
        consfig.apply.rebooting [RebootWatch await-return-reported probe-chain]
        consfig.deployer.fetch [FetchWatch]
        consfig.apply.combinators [seqprops]
        consfig.options [RunOptions run-options])

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
        parsed (chain-for chain host)
        propspec (or propspec host.propspec))
  (when additional
    (setv propspec (seqprops propspec additional)))
  (setv prepared (preprocess-host host propspec))
  (resolve-data prepared)
  (carry-hop-data prepared parsed True)
  (check-propspec-fits prepared.propspec
                       (or (any (gfor [name _] parsed (= name "python")))
                           (all (gfor [name _] parsed (= name "local"))))
                       (hy.repr (chain->data parsed)))
  (Prepared prepared parsed))

(defn run-prepared [deployment sink [options None] * [secrets None] [keep None]]
  "Establish the chain of the `Prepared` DEPLOYMENT and apply its host as
OPTIONS (a `RunOptions`; default: apply) say, sending events to SINK;
return an `Outcome`.  SECRETS seeds the
deployment's cache (passwords asked for beforehand, see `consfig.deployer.fleet`).
KEEP: seconds to keep the chain open afterwards for the next deployment
of the host over it, when it is one `consfig.python_hop.keep` can keep.  A host that
scheduled a reboot at the end of its deployment (`reboot.at-end`) is waited
for, when the chain leaves this machine, before the deployment's summary is
sent (`consfig.apply.rebooting`)."
  (setv options (or options (RunOptions))
        watch (RebootWatch sink deployment.hostname)
        fetch (FetchWatch watch deployment.hostname)
        kept (and keep (keepable? deployment.chain)))
  (try
    (setv outcome (if kept
                      (_run-kept deployment fetch options keep secrets)
                      (_run-fresh deployment fetch options secrets)))
    (except [BaseException]
      (.release watch)
      (raise)))
  (+= outcome.failures fetch.failures)
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

(defn _run-fresh [deployment sink options secrets]
  (setv prepared deployment.host)
  (with [_ (establishing-for prepared :seed secrets)
         conns (with-chain deployment.chain)]
    (setv target (get conns -1))
    (apply-on-target target prepared sink (fn [] (apply-host prepared target sink options))
                     options)))

(defn _run-kept [deployment sink options idle secrets]
  ;; Over the chain kept from the last deployment of this host, if it is
  ;; still there; else over a fresh one, kept afterwards.  A kept one that
  ;; turns out to have ended before the host reached it is replaced, once.
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
        (setv outcome (_apply-kept conns reused prepared sink options))
        (except [KeptSessionLost]
          (close-chain conns)
          (if reused (continue) (raise)))
        (except [BaseException]
          (close-chain conns)
          (raise)))
      (keep-chain key conns idle)
      (return outcome))))

(defn _apply-kept [conns reused prepared sink options]
  ;; As over a fresh chain.  Taking the lock is the first thing sent over a
  ;; POSIX chain: when that fails because a REUSED chain has died
  ;; meanwhile, nothing was applied and a fresh chain may be tried.
  (setv target (get conns -1)
        locked False)
  (defn apply-here []
    (nonlocal locked)
    (setv locked True)
    (apply-host prepared target sink options))
  (try
    (apply-on-target target prepared sink apply-here options)
    (except [e ConnectionFailed]
      (if (and reused (not locked) (not (.apply-remotely? target)) (not (chain-alive? conns)))
          (raise (KeptSessionLost (str e) target.where) :from e)
          (raise)))))

(defn deploy* [chain host * [propspec None] [additional None] [sink None]
               [verbosity 0] [unapply False] [check False] [diff False] [persist None]
               [options None]]
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
`consfig repl`) or not (elsewhere).  `(disconnect)` closes them.

VERBOSITY, UNAPPLY, CHECK and DIFF make the run's `consfig.options.RunOptions`;
or give OPTIONS, one made already, instead of them."
  (setv options (run-options options :verbosity verbosity :unapply unapply :check check
                             :diff diff)
        deployment (prepare-deployment chain host :propspec propspec :additional additional)
        reporter (when (is sink None) (Reporter :options options))
        sink (or sink reporter))
  (when (hasattr sink "expect")
    (.expect sink deployment.hostname (announced-count deployment.host.propspec)))
  (try
    (run-prepared deployment sink options :keep (idle-limit persist))
    (finally
      (when reporter
        (.finish reporter)
        (.close reporter)))))

(defn deploy-these* [chain host propspec #** kwargs]
  "Apply just PROPSPEC to HOST over CHAIN (with HOST's hostattrs)."
  (deploy* chain host :propspec propspec #** kwargs))

(export :objects [deploy* deploy-these* Prepared prepare-deployment run-prepared])
