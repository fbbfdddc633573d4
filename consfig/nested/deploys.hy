"Nested deployments: a host deploying others as part of its own
deployment (`deploys`, `deploys-these`, and `deploy-nested` for the
properties that make chroots, containers and disks), on whichever side of
the wire applies it; and `apply-on-target`, the one place that chooses
between applying on this side and over a `:python` hop, which a deployment
from the controller (`consfig.deployer.deployment`) uses too.

May import: the ground, transport, model, apply and data."

(eval-when-compile (require consfig.model.property [defprop]))
(import consfig.transport.chain [parse-chain hop-spec with-chain]
        consfig.model.context [applying connection current-host establishing-for]
        consfig.data.items [resolve-data]
        consfig.apply.engine [NO-CHANGE Reported announce-action apply-deployment
                              check-propspec-fits checking? current-run inform watching-events]
        consfig.errors [ConsfigError FailedChange]
        consfig.model.host [Host find-host preprocess-host]
        consfig.apply.rebooting [await-return back-after back-line probe-chain reboot-note]
        consfig.apply.lock [holding-target-lock lock-held? lock-request]
        consfig.model.propspec [propspec-digest]
        consfig.apply.combinators [seqprops]
        dataclasses [replace])

(defn chain-for [chain host]
  "CHAIN parsed; HOST's default chain when it is None (a `ConsfigError`
when HOST has none)."
  (when (is chain None)
    (setv chain host.deploy))
  (when (is chain None)
    (raise (ConsfigError (+ f"host {host.hostname} has no default chain (:deploy in its defhost options); "
                            "give one, e.g. (deploy :local " (get (.split host.hostname ".") 0) ")"))))
  (parse-chain chain))

(defn apply-on-target [target prepared sink apply-here options * [within None]
                       [remote-outcome None]]
  "Apply the preprocessed host PREPARED on TARGET, the last connection of
its established chain, as OPTIONS (a `consfig.options.RunOptions`) say,
under the target's deployment lock (`consfig.apply.lock`):
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
        (.apply-remotely target prepared sink options
                         :lock (when (not (lock-held? target :within within))
                                 (lock-request prepared.hostname
                                               (_pushed-digest prepared options.unapply)
                                               :check options.check))))
      (with [_ (holding-target-lock target prepared.hostname :within within
                                    :digest (_pushed-digest prepared options.unapply)
                                    :check options.check
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
      (do (setv host (Host (get data "hostname") (get data "propspec") :deploy (get data "deploy"))
                host.own-propspec (.get data "own-propspec"))
          #(host (get data "these")))
      #((find-host data) None)))

(defn _hostname [data]
  (if (isinstance data dict) (get data "hostname") (str data)))

(defn _prepare-nested [chain data additional]
  (setv #(host these) (_data->host data)
        parsed (chain-for chain host)
        propspec these)
  (when additional
    (setv propspec (seqprops (or propspec host.propspec) additional)))
  (setv prepared (preprocess-host host propspec)
        outer (.get current-host None))
  (resolve-data prepared)
  ;; What the host deploying this one carries over a :python hop, for the
  ;; deployment made from its target.
  (when outer
    (carry-hop-data outer parsed False)
    (.update outer.nested-data prepared.nested-data)
    (.update outer.nested-data prepared.data))
  #(parsed prepared))

(defn carry-hop-data [host chain top]
  "Carry with HOST what the hops of CHAIN established on a target need from
here (a [:sudo :from …] hop's password), as `Hop` CARRIED-DATA: a hop after
the :python hop of a TOP chain, or anywhere in a nested deployment's, has no
terminal of ours."
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
        notes [])
  (defn noted [event]
    (when (= (.get event "host") prepared.hostname)
      (setv r (reboot-note event))
      (when r (.append notes r))))
  (with [_ (establishing-for prepared)]
    (with [_ (watching-events noted)
           conns (with-chain parsed upstream)]
      (setv target (get conns -1))
      (defn apply-here []
        (check-propspec-fits prepared.propspec target.python? target.where)
        (with [(applying prepared target :parent parent)]
          (apply-deployment prepared.propspec unapply)))
      (defn remote-outcome [outcome]
        ;; Its failures were reported as they happened, nested here.
        (when outcome.failures
          (raise (Reported (FailedChange f"deploying {prepared.hostname} failed"))))
        (if outcome.changes :changed NO-CHANGE))
      ;; As the deployment it is part of, but for UNAPPLY and `:noop`.
      (setv result (apply-on-target target prepared (_forwarding-sink) apply-here
                                    (replace (. (.get current-run) options) :unapply unapply
                                             :check (checking?) :converge None)
                                    :within upstream :remote-outcome remote-outcome)))
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

(export :objects [deploys deploys-these deploy-nested apply-on-target])
