"The `consfig` command.

  consfig deploy [--consfig FILE] HOST… [--via CHAIN] [--dry-run] [-v] [--detailed-exitcode]
  consfig deploy-these [--consfig FILE] HOST PROPSPEC [--via CHAIN] [-v] [--detailed-exitcode]
  consfig hosts [--consfig FILE]
  consfig repl [FILE]

Exit status: 0 success (with or without changes), 1 failures or an error;
with --detailed-exitcode: 0 no changes, 2 changes made, 1 failures or an error."

(import argparse
        sys
        traceback
        consfig.connection [chain->data parse-chain]
        consfig.deployment [deploy*]
        consfig.errors [ConsfigError]
        consfig.host [find-host hosts preprocess-host]
        consfig.propspec [form->propspec propspec->string read-propspec]
        consfig.report [error]
        consfig.site [find-default-consfig load-consfig])

(defn _parser []
  (setv p (argparse.ArgumentParser
            :prog "consfig"
            :description "Declarative configuration management and deployment in Hy."
            :epilog (+ "Exit status: 0 success, 1 failures or an error; with "
                       "--detailed-exitcode: 0 no changes, 2 changes made, 1 failures.")))
  (setv sub (.add-subparsers p :dest "command" :metavar "COMMAND"))
  (setv sub.required True)

  (defn consfig-option [sp]
    (.add-argument sp "--consfig" :metavar "FILE"
                   :help "the site consfig (default: $CONSFIG, ./consfig.hy, or the demo)"))

  (defn deploy-options [sp]
    (.add-argument sp "--via" :metavar "CHAIN"
                   :help "connection chain as Hy data, e.g. ':local' or '[[:ssh :user \"root\"] :python]' (default: the host's :deploy)")
    (.add-argument sp "-v" "--verbose" :action "count" :default 0
                   :help "show diffs and tracebacks (repeat for more)")
    (.add-argument sp "--detailed-exitcode" :action "store_true"
                   :help "exit 0 for no changes, 2 for changes, 1 for failures"))

  (setv d (.add-parser sub "deploy" :help "deploy hosts"))
  (consfig-option d)
  (.add-argument d "hosts" :nargs "+" :metavar "HOST")
  (deploy-options d)
  (.add-argument d "--dry-run" :action "store_true"
                 :help "compute hostattrs and print what would be applied; connect to nothing")

  (setv t (.add-parser sub "deploy-these" :help "apply just the given properties to a host"))
  (consfig-option t)
  (.add-argument t "host" :metavar "HOST")
  (.add-argument t "propspec" :metavar "PROPSPEC"
                 :help "propapps as Hy, e.g. '(file.has-content \"/etc/motd\" \"hi\\n\")'")
  (deploy-options t)

  (setv h (.add-parser sub "hosts" :help "list the hosts a consfig defines"))
  (consfig-option h)

  (setv r (.add-parser sub "repl" :help "a Hy REPL with consfig loaded"))
  (.add-argument r "file" :nargs "?" :metavar "FILE" :help "a consfig to load")
  p)

(defn _load [args]
  (load-consfig (or args.consfig (find-default-consfig))))

(defn read-chain [text]
  "A connection chain written as Hy on the command line."
  (try
    (setv chain (form->propspec (hy.read text)))
    (except [e Exception]
      (raise (ConsfigError f"--via: cannot read {text !r} as a chain: {e}"))))
  (parse-chain chain)
  chain)

(defn _combine [outcomes detailed]
  (max (gfor o outcomes (.exit-code o detailed)) :default 0))

(defn _deploy [args]
  (setv module (_load args)
        chain (when args.via (read-chain args.via))
        targets (lfor h args.hosts (find-host h)))
  (when args.dry-run
    (for [host targets]
      (_dry-run host chain))
    (return 0))
  (_combine (lfor host targets (deploy* chain host :verbosity args.verbose))
            args.detailed-exitcode))

(defn _dry-run [host chain]
  (setv prepared (preprocess-host host)
        via (or chain host.deploy))
  (print f"{host.hostname}")
  (print f"  chain: {(if via (hy.repr (chain->data (parse-chain via))) "(none)")}")
  (print "  hostattrs:")
  (for [[k v] (.items prepared.hostattrs)]
    (print f"    :{k} {(hy.repr v)}"))
  (print f"  propspec: {(propspec->string prepared.propspec)}"))

(defn _deploy-these [args]
  (setv module (_load args)
        chain (when args.via (read-chain args.via))
        host (find-host args.host)
        propspec (read-propspec args.propspec (vars module)))
  (_combine [(deploy* chain host :propspec propspec :verbosity args.verbose)]
            args.detailed-exitcode))

(defn _hosts [args]
  (_load args)
  (for [name (sorted hosts)]
    (setv host (get hosts name)
          chain (if host.deploy (hy.repr (chain->data (parse-chain host.deploy))) "-"))
    (print f"{name}\t{chain}\t{(or host.desc "")}"))
  0)

(defn _repl [args]
  (import consfig.repl [run-repl])
  (run-repl args.file))

(setv COMMANDS {"deploy" _deploy "deploy-these" _deploy-these "hosts" _hosts "repl" _repl})

(defn main [[argv None]]
  "Run the consfig command with ARGV; return the exit status."
  (setv args (.parse-args (_parser) argv))
  (try
    ((get COMMANDS args.command) args)
    (except [e ConsfigError]
      (when (>= (getattr args "verbose" 0) 1)
        (traceback.print-exc))
      (error e)
      1)
    (except [KeyboardInterrupt]
      (error "interrupted")
      130)))

(defn run []
  (sys.exit (main)))

(export :objects [main run read-chain])
