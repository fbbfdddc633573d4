"The `consfig` command.

  consfig deploy [--consfig FILE] PATTERN… [--limit PATTERN] [--via CHAIN]
                 [-j N] [--max-fail N|N%] [--serial N|N%]
                 [--check [--diff]] [--dry-run] [-v…] [--json] [--detailed-exitcode]
  consfig deploy-these [--consfig FILE] PATTERN PROPSPEC [--limit PATTERN] [--via CHAIN]
                 [-j N] [--max-fail N|N%] [--serial N|N%]
                 [--check [--diff]] [-v…] [--json] [--detailed-exitcode]
  consfig hosts [--consfig FILE] [PATTERN…] [--limit PATTERN]
  consfig repl [FILE]
  consfig --version

A PATTERN chooses hosts: a hostname or its first label, a glob ('web*'), a
group (@web), or terms joined by ':' that must all hold, '!' negating one
(@web:!@eu: in web, not in eu); several patterns are a union (see
`consfig.fleet`).

Exit status: 0 success (with or without changes), 1 failures (on any host)
or an error; with --detailed-exitcode: 0 no changes, 2 changes made (or,
with --check, changes that would be made) and no failures, 1 failures or an
error.  A usage error exits 64."

(import argparse
        os
        sys
        traceback
        consfig.chain [chain->data parse-chain]
        consfig.data [resolve-data]
        consfig.engine [SinkFailed]
        consfig.errors [ConsfigError]
        consfig.fleet [DEFAULT-JOBS deploy-hosts* fleet-exit-code host-groups select-hosts]
        consfig.host [hosts preprocess-host]
        consfig.propspec [eseqprops-of form->propspec propspec->tree read-propspec-forms]
        consfig.report [JsonSink Reporter error]
        consfig.site [demo-consfig find-default-consfig load-consfig])

(setv EX-USAGE 64)

(defclass _Parser [argparse.ArgumentParser]
  ;; argparse exits 2 on a usage error, which --detailed-exitcode means as
  ;; "changes made": use sysexits' EX_USAGE instead, after the usage of the
  ;; subcommand that was mistyped.
  (defn error [self message]
    (.print-usage self sys.stderr)
    (.exit self EX-USAGE f"{self.prog}: error: {message}\n")))

(defn _version []
  (import importlib.metadata)
  (try (importlib.metadata.version "consfig")
       (except [importlib.metadata.PackageNotFoundError] "unknown")))

(defclass _VersionAction [argparse.Action]
  ;; --version: the installed version is looked up (importlib.metadata, a
  ;; few tens of ms) only when asked for, not by every command.
  (defn __init__ [self option-strings [dest argparse.SUPPRESS] [default argparse.SUPPRESS]
                  [help "show the version and exit"]]
    (.__init__ (super) :option-strings option-strings :dest dest :default default
               :nargs 0 :help help))
  (defn __call__ [self parser namespace values [option-string None]]
    (print f"consfig {(_version)}")
    (.exit parser)))

(defn _parser []
  (setv p (_Parser
            :prog "consfig"
            :description "Declarative configuration management and deployment in Hy."
            :epilog (+ "Exit status: 0 success, 1 failures or an error; with "
                       "--detailed-exitcode: 0 no changes, 2 changes made, 1 failures; "
                       "64 a usage error.")))
  (.add-argument p "--version" :action _VersionAction)
  (setv sub (.add-subparsers p :dest "command" :metavar "COMMAND"))
  (setv sub.required True)

  (defn consfig-option [sp]
    (.add-argument sp "--consfig" :metavar "FILE"
                   :help "the site consfig (default: $CONSFIG, ./consfig.hy, or the demo)"))

  (defn limit-option [sp]
    (.add-argument sp "--limit" :metavar "PATTERN"
                   :help "narrow the selection to the hosts PATTERN also matches"))

  (defn deploy-options [sp]
    (limit-option sp)
    (.add-argument sp "-j" "--jobs" :metavar "N" :type int
                   :help f"deploy N hosts at once (default: all of them, at most {DEFAULT-JOBS}; 1: one after another)")
    (.add-argument sp "--max-fail" :metavar "N|N%"
                   :help "start no more hosts once N (or N%% of them) have failed")
    (.add-argument sp "--serial" :metavar "N|N%"
                   :help "deploy in batches of N hosts (or N%% of them), each finishing before the next starts")
    (.add-argument sp "--via" :metavar "CHAIN"
                   :help "connection chain as Hy data, e.g. ':local' or '[[:ssh :user \"root\"] :python]' (default: the host's :deploy)")
    (.add-argument sp "-v" "--verbose" :action "count" :default 0
                   :help "-v: commands' output, diffs, tracebacks, durations; -vv, -vvv: more")
    (.add-argument sp "--check" :action "store_true"
                   :help "connect and report what holds and what would change; change nothing")
    (.add-argument sp "--diff" :action "store_true"
                   :help "show the diffs of files that change (or would, with --check)")
    (.add-argument sp "--json" :action "store_true"
                   :help "write the events as JSON lines instead of a report")
    (.add-argument sp "--detailed-exitcode" :action "store_true"
                   :help "exit 0 for no changes, 2 for changes, 1 for failures"))

  (setv d (.add-parser sub "deploy" :help "deploy hosts"))
  (consfig-option d)
  (.add-argument d "hosts" :nargs "+" :metavar "PATTERN"
                 :help "hosts to deploy: a name, a glob ('web*'), a group (@web), @web:!@eu")
  (deploy-options d)
  (.add-argument d "--dry-run" :action "store_true"
                 :help "compute hostattrs and print what would be applied; connect to nothing")

  (setv t (.add-parser sub "deploy-these" :help "apply just the given properties to a host"))
  (consfig-option t)
  (.add-argument t "host" :metavar "PATTERN" :help "the host (or hosts: a glob, @group…)")
  (.add-argument t "propspec" :metavar "PROPSPEC"
                 :help "propapps as Hy, e.g. '(file.has-content \"/etc/motd\" \"hi\\n\")'")
  (deploy-options t)

  (setv h (.add-parser sub "hosts" :help "list the hosts a consfig defines, or those chosen"))
  (consfig-option h)
  (.add-argument h "patterns" :nargs "*" :metavar "PATTERN")
  (limit-option h)

  (setv r (.add-parser sub "repl" :help "a Hy REPL with consfig loaded"))
  (.add-argument r "file" :nargs "?" :metavar "FILE" :help "a consfig to load")
  p)

(defn _consfig-path [given]
  ;; The consfig named, else the default one; say so when that is the demo,
  ;; so that nobody wonders where their hosts went.
  (setv path (or given (find-default-consfig)))
  (when (and (not given) (= path (demo-consfig)))
    (print "consfig: no --consfig, $CONSFIG or ./consfig.hy here: using the demo consfig"
           :file sys.stderr))
  path)

(defn _load [args]
  (load-consfig (_consfig-path args.consfig)))

(defn read-chain [text]
  "A connection chain written as Hy on the command line."
  (when (not (.strip text))
    (raise (ConsfigError "--via: the chain is empty; give at least one hop, e.g. --via :local")))
  (try
    (setv chain (form->propspec (hy.read text)))
    (except [e Exception]
      (raise (ConsfigError f"--via: cannot read {text !r} as a chain: {e}"))))
  (parse-chain chain "--via")
  chain)

(defn _sink [args]
  (if args.json
      (JsonSink)
      (Reporter :verbosity args.verbose :check args.check :diff args.diff)))

(defn _deploy-all [args targets [propspec None]]
  ;; One sink for all hosts, so that the end of the run can recap them.
  (setv chain (when (is-not args.via None) (read-chain args.via))
        sink (_sink args))
  (try
    (setv outcomes (deploy-hosts* chain targets :propspec propspec :sink sink
                                  :verbosity args.verbose :check args.check
                                  :jobs args.jobs :max-fail args.max-fail
                                  :serial args.serial))
    (.finish sink)
    (finally (.close sink)))
  (fleet-exit-code outcomes args.detailed-exitcode))

(defn _deploy [args]
  (_load args)
  (setv targets (select-hosts args.hosts args.limit))
  (when args.dry-run
    (setv chain (when (is-not args.via None) (read-chain args.via)))
    (for [host targets]
      (_dry-run host chain))
    (return 0))
  (_deploy-all args targets))

(defn _dry-run [host chain]
  (setv prepared (preprocess-host host)
        via (or chain host.deploy))
  (print f"{host.hostname}")
  (print f"  chain: {(if via (hy.repr (chain->data (parse-chain via))) "(none)")}")
  (print "  hostattrs:")
  (for [[k v] (.items prepared.hostattrs)]
    (print f"    :{k} {(hy.repr v)}"))
  ;; Resolved as a deployment would, so that a missing item shows here too;
  ;; identifiers and versions only, never content.
  (when (resolve-data prepared)
    (print "  data:")
    (for [item (.values prepared.data)]
      (print (+ f"    ({(hy.repr item.iden1)} {(hy.repr item.iden2)}) version {item.version}"
                (if item.secret " (secret)" "") f" from {item.source}"))))
  (print "  propspec:")
  (for [line (.splitlines (propspec->tree prepared.propspec))]
    (print (+ "    " line))))

(defn read-propspecs [text namespace]
  "The propspec written on the command line: one form, or several applied
in order (an implicit `eseqprops`)."
  (setv forms (read-propspec-forms text))
  (when (not forms)
    (raise (ConsfigError "the propspec is empty: give one or more propapps")))
  (setv propapps (lfor f forms (form->propspec f namespace)))
  (if (= (len propapps) 1)
      (get propapps 0)
      (eseqprops-of propapps)))

(defn _deploy-these [args]
  (setv module (_load args)
        targets (select-hosts [args.host] args.limit))
  (_deploy-all args targets (read-propspecs args.propspec (vars module))))

(defn _hosts [args]
  (_load args)
  (setv chosen (if (or args.patterns args.limit)
                    (select-hosts (or args.patterns ["*"]) args.limit)
                    (.values hosts))
        rows (lfor host (sorted chosen :key (fn [h] h.hostname))
                   [host.hostname
                    (if host.deploy (hy.repr (chain->data (parse-chain host.deploy))) "-")
                    (or (.join "," (host-groups host)) "-")
                    (or host.desc "")])
        widths (lfor i (range 3) (max (gfor r rows (len (get r i))) :default 0)))
  (for [r rows]
    (print (.rstrip (.join "  " (+ (lfor [i w] (enumerate widths) (.ljust (get r i) w))
                                   [(get r 3)])))))
  0)

(defn _repl [args]
  (import consfig.repl [run-repl])
  (run-repl (_consfig-path args.file)))

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
  "The console script: exit with `main`'s status."
  (try
    (setv status (main))
    (.flush sys.stdout)
    (except [e #(BrokenPipeError SinkFailed)]
      (when (and (isinstance e SinkFailed) (not (isinstance e.cause BrokenPipeError)))
        (raise))
      ;; The reader went away (`consfig hosts | head`): stop quietly, and
      ;; keep Python from complaining again when it flushes stdout at exit.
      (os.dup2 (os.open os.devnull os.O_WRONLY) (.fileno sys.stdout))
      (setv status 141)))
  (sys.exit status))

(export :objects [main run read-chain read-propspecs])
