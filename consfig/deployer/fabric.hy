"Deploying consfig hosts from Fabric: a task of your fabfile deploys over
your own `Connection` or `Group`.

    from fabric import task
    from consfig.deployer.fabric import deploy

    @task
    def converge(c):
        deploy(c, consfig=\"site/consfig.hy\")

`fab -H web1,web2 converge` deploys, over the connection Fabric made for
each host, the consfig host named like it (`web1` is `web1.example.org`
if that is the one host of the consfig whose first label it is).  The
chain is the `:fabric` hop on that connection, then what follows the
`:ssh` hops of the host's own `:deploy` chain (`[[:ssh :user \"root\"]
:python]` gives `[:python]`), or `via`.  A failure raises
`DeploymentFailed`, which `fab` reports as one line and exit status 1."

(import os
        fabric [Connection SerialGroup]
        invoke.exceptions [Exit]
        hy.models [Keyword]
        consfig.transport.chain [chain->data parse-chain]
        consfig.errors [ConsfigError]
        consfig.deployer.fleet [deploy-hosts*]
        consfig.options [RunOptions]
        consfig.model.host [find-host]
        consfig.model.propspec [form->propspec]
        consfig.site.load [load-consfig])

(defclass DeploymentFailed [Exit]
  "A deployment made from Fabric failed, or could not start.  An invoke
`Exit`: `fab` prints the message, without a traceback, and exits 1.
OUTCOMES maps each host's name to its `Outcome` (None: not started)."
  (defn __init__ [self message [outcomes None]]
    (.__init__ (super) message 1)
    (setv self.outcomes (or outcomes {}))))

(setv _loaded {})

(defn _load [path]
  ;; Once per process: a task run for each of several hosts (`fab -H a,b`)
  ;; loads the consfig once.
  (setv path (os.path.abspath path))
  (when (not-in path _loaded)
    (setv (get _loaded path) (load-consfig path)))
  (get _loaded path))

(defn _read-chain [via]
  (setv chain (if (isinstance via str) (form->propspec (hy.read via)) via))
  (if (or (isinstance chain Keyword) (not (isinstance chain #(list tuple))))
      [chain]
      (list chain)))

(defn after-ssh [host]
  "What follows the `:ssh` hops of HOST's `:deploy` chain, as chain data;
`[:python]` when it has none."
  (setv chain (if (is host.deploy None) [] (parse-chain host.deploy))
        ssh (lfor [i [name _]] (enumerate chain) :if (= name "ssh") i))
  (if ssh
      (chain->data (cut chain (+ (get ssh -1) 1) None))
      [(Keyword "python")]))

(defn _connections [target host]
  (setv connections (if (isinstance target Connection) [target] (list target)))
  (when (not connections)
    (raise (ConsfigError "the group has no connection to deploy over")))
  (when (and (is-not host None) (> (len connections) 1))
    (raise (ConsfigError (+ "a group deploys, over each connection, the host named like it; "
                            "give `host` only with a single Connection"))))
  connections)

(defn deploy [target [host None] * [consfig None] [via None] [check False] [diff False]
              [verbosity 0] [jobs None] [warn False]]
  "Deploy over TARGET, a `fabric.Connection` or a `fabric.Group`: over each
connection, HOST (a Host or hostname; by default the consfig host named like
the connection's host, as given to Fabric).  CONSFIG is the site's consfig
file, loaded once; without it, the hosts must be defined already.  VIA is
the chain after the connection (`[:sudo :python]`, as Hy text or data); by
default, what follows the `:ssh` hops of the host's `:deploy` chain.  The
hosts of a `SerialGroup` are deployed one after another, those of other
groups side by side (JOBS at once).  CHECK, DIFF and VERBOSITY are
`deploy*`'s.

Return the `Outcome` of a Connection, or of a group a dict of each host's,
by hostname.  When one failed, raise `DeploymentFailed`, unless WARN."
  (try
    (when consfig (_load consfig))
    (setv connections (_connections target host)
          hosts (lfor c connections (find-host (if (is host None) c.original-host host))))
    (_each-host-once connections hosts)
    (setv chains (lfor [c h] (zip connections hosts)
                       [[(Keyword "fabric") (Keyword "connection") c]
                        #* (if (is via None) (after-ssh h) (_read-chain via))])
          outcomes (deploy-hosts* None hosts :chains chains
                                  :options (RunOptions :check check :diff diff
                                                       :verbosity verbosity)
                                  :jobs (if (isinstance target SerialGroup) 1 jobs)))
    (except [e ConsfigError]
      (raise (DeploymentFailed (+ "consfig: " (str e))) :from e)))
  (setv by-host (dfor [h o] (zip hosts outcomes) h.hostname o)
        failed (lfor [c h o] (zip connections hosts outcomes)
                     :if (or (is o None) (= o.status "failed"))
                     f"{h.hostname} over {c.original-host}"))
  (when (and failed (not warn))
    (raise (DeploymentFailed (+ "consfig: the deployment failed: " (.join ", " failed))
                             by-host)))
  (if (isinstance target Connection) (get outcomes 0) by-host))

(defn _each-host-once [connections hosts]
  (setv seen {})
  (for [[c h] (zip connections hosts)]
    (when (in h.hostname seen)
      (raise (ConsfigError (+ f"the group reaches {h.hostname} twice, over "
                              f"{(get seen h.hostname)} and {c.original-host}; "
                              "a host is deployed once at a time"))))
    (setv (get seen h.hostname) c.original-host)))

(export :objects [deploy after-ssh DeploymentFailed])
