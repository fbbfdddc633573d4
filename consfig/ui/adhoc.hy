"Ad-hoc commands over a fleet: `consfig run` and `consfig facts`.

  consfig run 'web*' -- uptime                      one command on each host, over its chain
  consfig run @db -j 2 -- sh -c 'df -h /var | tail -n 1'
  consfig facts web1 os packages                    facts as JSON
  consfig facts web1 '(fact.unit-active \"nginx.service\")'

`consfig run` deploys `(cmd.reported CMD…)` to each chosen host instead of
its propspec: over the host's chain (or --via), several hosts at once (-j,
--max-fail as for deploy), each host's output shown under it, and a recap
of every host's exit status at the end.  The command is an argv, each word
its own argument; for shell code, run `sh -c CODE`.  Exit status: 0 when the
command exited 0 on every host, 1 otherwise.

`consfig facts` deploys `(inventory.reported …)` the same way and prints
one JSON object, each host's facts under its name (see
`consfig.props.inventory`); a host that could not be reached is an error on
standard error and exit status 1."

(import json
        shlex
        consfig.deployer.fleet [deploy-hosts* fleet-exit-code select-hosts]
        consfig.deployer.report [JsonSink Reporter error]
        consfig.errors [ConsfigError]
        consfig.model.fact [fact-application?]
        consfig.model.propspec [form->propspec read-propspec-forms])

(defclass _Collect []
  ;; Passes events on to SINK (when there is one) and keeps, per host, the
  ;; exit status its command reported, its facts and its first failure.
  (defn __init__ [self [sink None]]
    (setv self.sink sink
          self.exits {}
          self.facts {}
          self.failures {}))
  (defn __call__ [self event]
    (setv host (.get event "host"))
    (cond (in "exit-code" event) (setv (get self.exits host) (get event "exit-code"))
          (= (.get event "event") "facts") (setv (get self.facts host) (get event "facts"))
          (and (= (.get event "event") "end") (= (.get event "status") "failed")
               (in "message" event))
          (.setdefault self.failures host (get event "message")))
    (when self.sink (self.sink event)))
  (defn finish [self] (when self.sink (.finish self.sink)))
  (defn close [self] (when self.sink (.close self.sink))))

(defn _first-line [text]
  (get (+ (.splitlines (str text)) [""]) 0))

(defn recap-lines [hosts collected]
  "The recap of `consfig run` over HOSTS (hostnames, in order), from the
_Collect COLLECTED: a line per host with its exit status, or why the
command did not run there."
  (setv width (max (gfor h hosts (len h)) :default 4))
  (lfor h hosts
        (+ (.ljust h width) "  "
           (cond (in h collected.exits)
                 (+ f"exit {(get collected.exits h)}"
                    (if (= (get collected.exits h) 0) "" " (failed)"))
                 (in h collected.failures)
                 f"not run: {(_first-line (get collected.failures h))}"
                 True "not run"))))

(defn run-command [args chain]
  "`consfig run`: ARGS as parsed, with `command-argv` the argv to run, over
CHAIN (None: each host's own)."
  (import consfig.props [cmd])  ; start-up: 12 ms
  (setv targets (select-hosts args.hosts args.limit)
        propspec (cmd.reported #* args.command-argv :timeout args.timeout)
        collected (_Collect (if args.json (JsonSink) (Reporter :verbosity args.verbose))))
  (try
    (setv outcomes (deploy-hosts* chain targets :propspec propspec :sink collected
                                  :verbosity args.verbose :jobs args.jobs
                                  :max-fail args.max-fail))
    (.finish collected)
    (finally (.close collected)))
  (when (not args.json)
    (print f"Ran {(shlex.join args.command-argv)} on {(len targets)} host{(if (= (len targets) 1) "" "s")}:")
    (for [line (recap-lines (lfor t targets t.hostname) collected)]
      (print (+ "  " line))))
  (fleet-exit-code outcomes))

(defn read-facts [words namespace]
  "The FACT arguments of `consfig facts`: `#(names applications)`, the
names of inventory facts and the fact applications (Hy forms) among WORDS,
read in NAMESPACE (the site's)."
  (import consfig.props.inventory [GATHERERS])  ; start-up: 1 ms
  (setv names [] applications [])
  (for [w words]
    (if (.startswith (.lstrip w) "(")
        (for [f (read-propspec-forms w)]
          (setv p (form->propspec f namespace))
          (when (not (fact-application? p))
            (raise (ConsfigError (+ f"{w}: not a fact application; give a fact such as "
                                    "(fact.file-exists \"/etc/motd\"), or one of: "
                                    (.join ", " GATHERERS)))))
          (.append applications p))
        (if (in w GATHERERS)
            (.append names w)
            (raise (ConsfigError (+ f"{w !r} is not a fact; the facts are "
                                    (.join ", " GATHERERS)
                                    ", or a fact application in parentheses"))))))
  #(names applications))

(defn facts-command [args module chain]
  "`consfig facts`: ARGS as parsed; MODULE the loaded site; CHAIN as for
`run-command`."
  (import consfig.props [inventory])  ; start-up: 1 ms
  (setv targets (select-hosts [args.host] args.limit)
        #(names applications) (read-facts args.facts (vars module))
        collected (_Collect (when args.verbose (Reporter :verbosity args.verbose))))
  (try
    (setv outcomes (deploy-hosts* chain targets
                                  :propspec (inventory.reported names applications)
                                  :sink collected :verbosity args.verbose :jobs args.jobs))
    (.finish collected)
    (finally (.close collected)))
  (print (json.dumps (dfor t targets :if (in t.hostname collected.facts)
                           t.hostname (get collected.facts t.hostname))
                     :indent 1 :sort-keys True :ensure-ascii False))
  (for [t targets :if (not-in t.hostname collected.facts)]
    (error f"{t.hostname}: no facts: {(_first-line (.get collected.failures t.hostname "it did not run"))}"))
  (fleet-exit-code outcomes))

(export :objects [run-command facts-command read-facts recap-lines])
