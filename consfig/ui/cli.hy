"The `consfig` command.

  consfig deploy [--consfig FILE] PATTERN… [--limit PATTERN] [--via CHAIN]
                 [-j N] [--max-fail N|N%] [--serial N|N%]
                 [--check [--diff]] [--dry-run] [-v…] [--json] [--detailed-exitcode]
  consfig deploy-these [--consfig FILE] PATTERN PROPSPEC [--limit PATTERN] [--via CHAIN]
                 [-j N] [--max-fail N|N%] [--serial N|N%]
                 [--check [--diff]] [-v…] [--json] [--detailed-exitcode]
  consfig hosts [--consfig FILE] [PATTERN…] [--limit PATTERN]
  consfig image [--consfig FILE] HOST -o FILE [--no-secrets]
  consfig image [--consfig FILE] HOST --disk FILE [--qcow2 FILE] [--tarball FILE]
                 [--bootloader grub-bios|grub-efi|grub-hybrid|none] [--via CHAIN] [-v…] [--check]
  consfig status [--consfig FILE] HOST [--via CHAIN] [--json]
  consfig keygen -o KEYFILE [--comment TEXT] [--from OLDKEY]
  consfig publish [--consfig FILE] PATTERN… --to DIR --signing-key KEYFILE [--legacy-key OLDKEY]
                 [--limit PATTERN] [--with-secrets]
  consfig converge [--consfig FILE] HOST [--via CHAIN] [--noop] [--interval S]
                 [--limit R] [--burst N] [--log-directory DIR] [--alongside]
                 [--follow [--lines N]] [--diff] [-v…] [--json]
  consfig run [--consfig FILE] PATTERN… [--limit PATTERN] [--via CHAIN] [-j N]
                 [--max-fail N|N%] [--timeout S] [-v…] [--json] -- CMD…
  consfig facts [--consfig FILE] PATTERN [FACT…] [--limit PATTERN] [--via CHAIN] [-j N] [-v…]
  consfig dataspace [--consfig FILE] serve|ls|watch|tls|grant …
  consfig repl [FILE]
  consfig doc [--consfig FILE] PROPERTY
  consfig doc [--consfig FILE] --list [PATTERN]
  consfig --version

A PATTERN chooses hosts: a hostname or its first label, a glob ('web*'), a
group (@web), or terms joined by ':' that must all hold, '!' negating one
(@web:!@eu: in web, not in eu); several patterns are a union (see
`consfig.deployer.fleet`).

Exit status: 0 success (with or without changes), 1 failures (on any host)
or an error; with --detailed-exitcode: 0 no changes, 2 changes made (or,
with --check, changes that would be made) and no failures, 1 failures or an
error.  A usage error exits 64."

(import argparse
        consfig.ui.adhoc [facts-command run-command]
        consfig.ui.repl [run-repl]
        json
        consfig.image.build [format-status host-status make-image write-image]
        os
        signal
        sys
        consfig.transport.chain [chain->data parse-chain]
        consfig.data.items [resolve-data]
        consfig.apply.engine [SinkFailed describe-meta]
        consfig.apply.meta [effective-meta]
        consfig.apply.events [converge-event drift-summary-event]
        consfig.errors [ConsfigError]
        consfig.deployer.fleet [DEFAULT-JOBS deploy-hosts* fleet-exit-code host-groups select-hosts]
        consfig.model.host [find-host hosts preprocess-host Host]
        consfig.model.property [propapp-desc]
        consfig.model.propspec [eseqprops-of form->propspec propspec->tree read-propspec-forms]
        consfig.site.load [demo-consfig find-default-consfig load-consfig]
        consfig.converge.controller [converge-host follow-host]
        consfig.ui.command [EXIT-STATUS Parser guarded output-options output-sink
                            run-options-of])

(defn _version []
  (import importlib.metadata)  ; lazy: 5 ms or more, for --version alone
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

(defn via-option [sp]
  "Add --via, a connection chain replacing the host's :deploy, to the
argument parser SP."
  (.add-argument sp "--via" :metavar "CHAIN"
                 :help "connection chain as Hy data, e.g. ':local' or '[[:ssh :user \"root\"] :python]' (default: the host's :deploy)"))

(defn _consfig-option [sp]
  (.add-argument sp "--consfig" :metavar "FILE"
                 :help "the site consfig (default: $CONSFIG, ./consfig.hy, or the demo)"))

(defn _limit-option [sp]
  (.add-argument sp "--limit" :metavar "PATTERN"
                 :help "narrow the selection to the hosts PATTERN also matches"))

(defn _deploy-options [sp]
  (_limit-option sp)
  (.add-argument sp "-j" "--jobs" :metavar "N" :type int
                 :help f"deploy N hosts at once (default: all of them, at most {DEFAULT-JOBS}; 1: one after another)")
  (.add-argument sp "--max-fail" :metavar "N|N%"
                 :help "start no more hosts once N (or N%% of them) have failed")
  (.add-argument sp "--serial" :metavar "N|N%"
                 :help "deploy in batches of N hosts (or N%% of them), each finishing before the next starts")
  (via-option sp)
  (output-options sp))

(defn _deploy-command [sub]
  (setv d (.add-parser sub "deploy" :help "deploy hosts"))
  (_consfig-option d)
  (.add-argument d "hosts" :nargs "+" :metavar "PATTERN"
                 :help "hosts to deploy: a name, a glob ('web*'), a group (@web), @web:!@eu")
  (_deploy-options d)
  (.add-argument d "--dry-run" :action "store_true"
                 :help "compute hostattrs and print what would be applied; connect to nothing"))

(defn _deploy-these-command [sub]
  (setv t (.add-parser sub "deploy-these" :help "apply just the given properties to a host"))
  (_consfig-option t)
  (.add-argument t "host" :metavar "PATTERN" :help "the host (or hosts: a glob, @group…)")
  (.add-argument t "propspec" :metavar "PROPSPEC" :nargs "+"
                 :help (+ "propapps as Hy, e.g. '(file.has-content \"/etc/motd\" \"hi\\n\")'; "
                          "several (in one argument or several) apply in order"))
  (_deploy-options t))

(defn _hosts-command [sub]
  (setv h (.add-parser sub "hosts" :help "list the hosts a consfig defines, or those chosen"))
  (_consfig-option h)
  (.add-argument h "patterns" :nargs "*" :metavar "PATTERN")
  (_limit-option h))

(defn _image-command [sub]
  (setv i (.add-parser sub "image" :help "write a host's self-applying image"
                      :description (+ "Write the image of HOST: one file that applies HOST's configuration "
                                      "to the machine it runs on, with `python3 FILE` (see docs/images.md).")))
  (_consfig-option i)
  (.add-argument i "host" :metavar "HOST" :help "the host (a hostname, or its first label)")
  (.add-argument i "-o" "--output" :metavar "FILE" :help "where to write the image")
  (.add-argument i "--no-secrets" :action "store_true"
                 :help "leave out the properties that hold a secret (on the host they fail, saying so)")
  (.add-argument i "--disk" :metavar "FILE"
                 :help (+ "instead, build a bootable raw disk image of HOST at FILE (an absolute path), "
                          "from its volumes (disk.raw-image-built-for; see docs/machines.md), here "
                          "or where --via leads"))
  (.add-argument i "--qcow2" :metavar "FILE" :help "with --disk: also convert the disk image to qcow2 at FILE")
  (.add-argument i "--tarball" :metavar "FILE"
                 :help "with --disk: unpack this tarball of a bootstrapped tree instead of running debootstrap")
  (.add-argument i "--bootloader" :choices ["grub-bios" "grub-efi" "grub-hybrid" "none"] :default None
                 :help (+ "with --disk: the bootloader to install (default: grub-hybrid when the host's "
                          "volumes hold an EFI system partition and a BIOS boot partition, grub-efi when "
                          "they hold an EFI system partition alone, else grub-bios)"))
  (via-option i)
  (output-options i))

(defn _status-command [sub]
  (setv s (.add-parser sub "status" :help "what the last run of a host's image recorded there"
                       :description (+ "Read back, over the host's chain, what the last run of its image "
                                       "recorded on it.  Exit status: 0 the last run succeeded, 1 it "
                                       "failed (or reading failed), 3 the image never ran there.")))
  (_consfig-option s)
  (.add-argument s "host" :metavar "HOST" :help "the host (a hostname, or its first label)")
  (via-option s)
  (.add-argument s "--json" :action "store_true" :help "print the recorded state as JSON"))

(defn _keygen-command [sub]
  (setv k (.add-parser sub "keygen" :help "make an OpenSSH key pair to sign published images"
                       :description (+ "Make an OpenSSH Ed25519 key pair with ssh-keygen: the private key "
                                       "KEYFILE (mode 0600, no passphrase) and KEYFILE.pub, the line hosts "
                                       "are given to trust (image.pulled-from :public-key).  Any SSH key "
                                       "you already have signs as well.  An existing KEYFILE is never "
                                       "overwritten.")))
  (.add-argument k "-o" "--output" :metavar "KEYFILE" :required True :help "where to write the private key")
  (.add-argument k "--comment" :metavar "TEXT" :help "a name for the key in KEYFILE.pub (default: KEYFILE's name)")
  (.add-argument k "--from" :metavar "OLDKEY" :dest "old"
                 :help "write the key of consfig's old format in OLDKEY as an OpenSSH pair: the same key"))

(defn _publish-command [sub]
  (setv u (.add-parser sub "publish" :help "write hosts' signed images where they pull them from"
                       :description (+ "Build the image of each chosen host and write it, signed, to DIR "
                                       "(DIR/HOST, DIR/HOST.sig, DIR/index.json), for any static file "
                                       "server to serve to hosts with image.pulled-from.  Files are "
                                       "replaced whole (written aside, then renamed); an unchanged image "
                                       "is left untouched.  Images are built without secrets unless "
                                       "--with-secrets (see docs/images.md).")))
  (_consfig-option u)
  (.add-argument u "hosts" :nargs "+" :metavar "PATTERN" :help "hosts to publish: a name, a glob, @group…")
  (_limit-option u)
  (.add-argument u "--to" :metavar "DIR" :required True :help "the directory a server serves")
  (.add-argument u "--signing-key" :metavar "KEYFILE" :required True
                 :help (+ "an OpenSSH private key (yours, or from consfig keygen), or a public key "
                          "whose private half ssh-agent holds"))
  (.add-argument u "--legacy-key" :metavar "OLDKEY"
                 :help (+ "also sign each image with this key of consfig's old format, as HOST.sig, "
                          "for hosts whose puller predates OpenSSH signatures (docs/images.md)"))
  (.add-argument u "--valid-for" :metavar "DAYS" :type float :default 7
                 :help (+ "how long hosts accept each signed statement (default 7 days); "
                          "publish at least twice as often, or hosts refuse it as stale"))
  (.add-argument u "--with-secrets" :action "store_true"
                 :help "keep secret values in the images (then mode 0600): only for a server that gives each host its own image alone"))

(defn _converge-command [sub]
  (setv c (.add-parser sub "converge"
                      :help "apply a host, then keep it converged: watch, repair drift"
                      :description (+ "Apply HOST over its chain (ending in a :python hop), then "
                                      "stay on it, re-checking and re-applying just the properties "
                                      "whose resources change, until interrupted (docs/converge.md).")))
  (_consfig-option c)
  (.add-argument c "host" :metavar "HOST" :help "the host (a hostname, or its first label)")
  (via-option c)
  (.add-argument c "--noop" :action "store_true"
                 :help "report drift, with its diff; repair nothing")
  (.add-argument c "--interval" :metavar "SECONDS" :type float
                 :help "how often to check a property that watches nothing (default 300)")
  (.add-argument c "--limit" :metavar "PER-SECOND" :type float
                 :help "repairs (and checks) of one property a second, where its :limit does not say (default 1)")
  (.add-argument c "--burst" :metavar "N" :type int
                 :help "how many of those in a row, where its :burst does not say (default 5)")
  (.add-argument c "--log-directory" :metavar "DIR"
                 :help "where the agent's event log goes on the target (default: consfig's state directory there)")
  (.add-argument c "--alongside" :action "store_true"
                 :help "run even while another agent keeps HOST (by default this one refuses to start)")
  (.add-argument c "--follow" :action "store_true"
                 :help "attach to the agent already running on HOST (a service) and show its events")
  (.add-argument c "--lines" :metavar "N" :type int :default 20
                 :help "with --follow: how many past events to show first (default 20)")
  (.add-argument c "-v" "--verbose" :action "count" :default 0 :help "more detail")
  (.add-argument c "--diff" :action "store_true" :help "show the diff of each drift")
  (.add-argument c "--json" :action "store_true" :help "write the events as JSON lines"))

(defn _run-command [sub]
  (setv x (.add-parser sub "run" :help "run one command on hosts, over their chains"
                      :usage "consfig run [options] PATTERN… -- CMD…"
                      :description (+ "Run the command CMD (an argv: for shell code, `sh -c CODE`) on each "
                                      "chosen host over its chain, several at once, showing each host's "
                                      "output and a recap of their exit statuses.  Exit status: 0 when it "
                                      "exited 0 everywhere, else 1.")))
  (_consfig-option x)
  (.add-argument x "hosts" :nargs "+" :metavar "PATTERN" :help "hosts: a name, a glob ('web*'), a group (@web)")
  (_limit-option x)
  (.add-argument x "-j" "--jobs" :metavar "N" :type int
                 :help f"run on N hosts at once (default: all of them, at most {DEFAULT-JOBS})")
  (.add-argument x "--max-fail" :metavar "N|N%" :help "start no more hosts once N (or N%%) have failed")
  (.add-argument x "--timeout" :metavar "SECONDS" :type float
                 :help "stop the command after SECONDS on a host, and count it failed there")
  (via-option x)
  (.add-argument x "-v" "--verbose" :action "count" :default 0 :help "more detail")
  (.add-argument x "--json" :action "store_true" :help "write the events as JSON lines, no recap"))

(defn _facts-command [sub]
  (setv f (.add-parser sub "facts" :help "print facts about hosts as JSON"
                       :description (+ "Gather facts on the chosen hosts over their chains and print them "
                                       "as one JSON object, each host's under its name.  A FACT is one of "
                                       "hostname, os, kernel, architecture, memory, addresses, packages, "
                                       "units (all of them when none is given), or a fact application in "
                                       "parentheses, e.g. '(fact.file-exists \"/etc/motd\")', printed as "
                                       "true or false.")))
  (_consfig-option f)
  (.add-argument f "host" :metavar "PATTERN" :help "the host (or hosts: a glob, @group…)")
  (.add-argument f "facts" :nargs "*" :metavar "FACT")
  (_limit-option f)
  (.add-argument f "-j" "--jobs" :metavar "N" :type int :help "gather on N hosts at once")
  (via-option f)
  (.add-argument f "-v" "--verbose" :action "count" :default 0
                 :help "also report the deployment that gathers them, on standard error"))

(defn _dataspace-command [sub]
  (setv ds (.add-parser sub "dataspace"
                       :help "run the site's etcd, and look into its dataspace (docs/dataspace.md)"))
  (_consfig-option ds)
  (setv dsub (.add-subparsers ds :dest "action" :metavar "ACTION"))
  (setv dsub.required True)
  (setv dss (.add-parser dsub "serve" :help "run a one-member etcd for the site's dataspace"))
  (.add-argument dss "--data-dir" :metavar "DIR"
                 :help "where etcd keeps its data (default: under consfig's state directory)")
  (setv dsc (.add-parser dsub "tls"
                        :help "make the site's CA (if need be) and certificates, in DIR"))
  (.add-argument dsc "directory" :metavar "DIR" :help "where the CA and certificates are kept")
  (.add-argument dsc "--member" :action "append" :default [] :metavar "NAME=IP"
                 :help "an etcd member's certificate, serving on IP")
  (.add-argument dsc "--host" :action "append" :default [] :metavar "HOSTNAME"
                 :help "a host's client certificate")
  (setv dsg (.add-parser dsub "grant"
                        :help (+ "make each HOSTNAME an etcd user that may write only its own "
                                 "records, with a password in DIR; turn etcd's authentication on")))
  (.add-argument dsg "directory" :metavar "DIR"
                 :help "the site's CA and certificates (consfig dataspace tls); passwords go here")
  (.add-argument dsg "hosts" :nargs "+" :metavar "HOSTNAME")
  (for [[name help] [["ls" "print the records now, as Hy, with their host and age"]
                     ["watch" "print the records, then each change as it comes"]]]
    (setv x (.add-parser dsub name :help help))
    (.add-argument x "type" :nargs "?" :metavar "TYPE" :help "only the records of this type")
    (.add-argument x "--json" :action "store_true" :help "one JSON object a line")))

(defn _doc-command [sub]
  (setv d (.add-parser sub "doc" :help "show a property's documentation, or list properties"
                       :description (+ "Show PROPERTY (file.has-content): its parameters with their "
                                       "types and defaults, its docstring, whether it can be "
                                       "unapplied, what the converging agent watches, and an example. "
                                       "With --list, each property whose name matches PATTERN (a "
                                       "glob, or any part of a name), with its first sentence. "
                                       "--consfig adds the site's own properties.")))
  (.add-argument d "--consfig" :metavar "FILE" :help "also the properties this consfig defines")
  (.add-argument d "--list" :action "store_true" :help "list properties (matching PATTERN)")
  (.add-argument d "name" :nargs "?" :metavar "PROPERTY|PATTERN"))

(defn _repl-command [sub]
  (setv r (.add-parser sub "repl" :help "a Hy REPL with consfig loaded"))
  (.add-argument r "file" :nargs "?" :metavar "FILE" :help "a consfig to load"))

;; Each subcommand of `consfig`, in the order --help lists them.
(setv _COMMAND-PARSERS [_deploy-command _deploy-these-command _hosts-command _image-command
                        _status-command _keygen-command _publish-command
                        _converge-command _run-command _facts-command _dataspace-command
                        _repl-command _doc-command])

(defn _parser []
  ;; The `consfig` command's parser: one subcommand each of _COMMAND-PARSERS.
  (setv p (Parser
            :prog "consfig"
            :description "Declarative configuration management and deployment in Hy."
            :epilog EXIT-STATUS))
  (.add-argument p "--version" :action _VersionAction)
  (setv sub (.add-subparsers p :dest "command" :metavar "COMMAND"))
  (setv sub.required True)
  (for [add _COMMAND-PARSERS] (add sub))
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

(defn _deploy-all [args targets [propspec None]]
  ;; One sink for all hosts, so that the end of the run can recap them.
  (setv chain (when (is-not args.via None) (read-chain args.via))
        sink (output-sink args))
  (try
    (setv outcomes (deploy-hosts* chain targets :propspec propspec :sink sink
                                  :options (run-options-of args) :jobs args.jobs
                                  :max-fail args.max-fail :serial args.serial))
    (when (and args.check args.json)
      ;; The last line, for monitoring: what drifted on each host.
      (sink (drift-summary-event outcomes)))
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
    (print (+ "    " line)))
  (setv metas (lfor [p m] (effective-meta prepared.propspec) :if m [p m]))
  (when metas
    (print "  meta-parameters:")
    (for [[p m] metas]
      (print f"    {(propapp-desc p)} ({(describe-meta m)})"))))

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
  (_deploy-all args targets (read-propspecs (.join "\n" args.propspec) (vars module))))

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

(defn _disk-image [args]
  ;; A deployment to the machine that builds (this one, or --via's end).
  (import consfig.props [disk])  ; lazy: 5 ms or more, for --disk alone
  (when (or args.output (not (os.path.isabs args.disk))
            (and args.qcow2 (not (os.path.isabs args.qcow2)))
            (and args.tarball (not (os.path.isabs args.tarball))))
    (.error (_parser) "--disk takes an absolute path (and --qcow2 and --tarball too), and no -o"))
  (_load args)
  (setv host (get (select-hosts [args.host] None) 0)
        options (dfor [k v] [["bootloader" (when args.bootloader (hy.models.Keyword args.bootloader))]
                             ["tarball" args.tarball] ["qcow2" args.qcow2]]
                      :if v (hy.models.Keyword k) v)
        args.via (or args.via ":local")
        args.jobs None args.max-fail None args.serial None)
  (_deploy-all args [(Host (+ "image-builder-for-" host.hostname) (eseqprops-of []))]
               (disk.raw-image-built-for options host.hostname args.disk)))

(defn _image [args]
  (when args.disk (return (_disk-image args)))
  (when (or (not args.output) args.qcow2 args.tarball)
    (.error (_parser) "the image command needs -o FILE (or --disk FILE, which --qcow2 and --tarball go with)"))
  (_load args)
  (setv image (write-image args.host args.output :no-secrets args.no-secrets))
  (print (+ f"{args.output}: the image of {image.hostname}, {(len image.data)} bytes, "
            f"sha256 {image.sha256}"))
  (when image.secrets
    (print (+ f"{args.output} holds secrets, so it is mode 0600: keep it as private as they "
              "are, or build it with --no-secrets.  Secret values in:")
           :file sys.stderr)
    (for [s image.secrets]
      (print f"  {s}" :file sys.stderr)))
  0)

(defn _status [args]
  (_load args)
  (setv host (find-host args.host)
        state (host-status host :via (when (is-not args.via None) (read-chain args.via))))
  (if args.json
      (print (json.dumps state :indent 1 :sort-keys True))
      (print (format-status host.hostname state)))
  (cond (not-in "status" state) 3
        (in (get state "status") #("failed" "error")) 1
        True 0))

(defn _keygen [args]
  (import consfig.image.publish [keygen keygen-from])  ; lazy: the controller's (cryptography)
  (setv line (if args.old
                 (keygen-from args.old args.output args.comment)
                 (keygen args.output args.comment)))
  (print f"{args.output}: private key (mode 0600; keep it off the hosts)")
  (print f"{args.output}.pub: give hosts this line to trust, as image.pulled-from's :public-key:")
  (print (.rstrip line))
  0)

(defn _publish [args]
  (import consfig.image.publish [load-legacy-key publish-images signing-key])  ; lazy: the controller's (cryptography)
  (_load args)
  (setv signer (signing-key args.signing-key)
        legacy (when args.legacy-key (load-legacy-key args.legacy-key))
        images (dfor host (select-hosts args.hosts args.limit)
                     host.hostname (make-image host :no-secrets (not args.with-secrets)))
        secret (sfor [h i] (.items images) :if i.secrets h))
  (when (<= args.valid-for 0)
    (raise (ConsfigError f"--valid-for must be a positive number of days, not {args.valid-for}")))
  (for [[host sha changed] (publish-images (dfor [h i] (.items images) h i.data) args.to signer
                                           :private secret :legacy-key legacy
                                           :valid-for (round (* args.valid-for 86400)))]
    (print (+ f"{host}: " (if changed "published" "unchanged")
              f", sha256 {sha}, {(len (. (get images host) data))} bytes")))
  (when secret
    (print (+ f"{(.join ", " (sorted secret))}: the image holds secrets, so its file is mode 0600; "
              "whoever can fetch it can read them")
           :file sys.stderr))
  0)

(defn _converge [args]
  (_load args)
  (setv chain (when (is-not args.via None) (read-chain args.via))
        [host #* more] (or (select-hosts [args.host]) [None]))
  (when more
    (raise (ConsfigError f"consfig converge: {args.host} names {(+ 1 (len more))} hosts; name one")))
  (setv args.check args.noop
        sink (output-sink args)
        tally (_AgentTally sink)
        ;; `kill`, or a service manager stopping it: as Ctrl-C, but asked
        ;; for, so a success.  The agent on the target finishes its repair
        ;; in progress either way (the controller's going away stops it).
        old-term (signal.signal signal.SIGTERM (fn [#* _] (raise (_Terminated)))))
  (defn say-stopped [why]
    ;; The controller stops reading: the agent's own `stopped` may never
    ;; come, so say it for it, once.
    (when (not tally.stopped)
      (sink {#** (converge-event "stopped" :repairs tally.repairs :failures tally.failures
                                 :why why)
             "host" host.hostname "depth" 0})))
  (try
    (if args.follow
        (follow-host host sink :chain chain :lines args.lines)
        (try
          (setv outcome (converge-host host tally :chain chain :noop args.noop
                                       :interval args.interval :verbosity args.verbose
                                       :limit args.limit :burst args.burst
                                       :log args.log-directory :alongside args.alongside))
          (except [KeyboardInterrupt]
            (say-stopped "interrupted")
            (.finish sink)
            (raise))))
    (.finish sink)
    (except [_Terminated]
      (when (not args.follow) (say-stopped "terminated (SIGTERM)"))
      (.finish sink)
      (return 0))
    (finally
      (signal.signal signal.SIGTERM old-term)
      (.close sink)))
  (if (and (not args.follow) (= outcome.status "failed")) 1 0))

(defclass _Terminated [BaseException]
  "SIGTERM to `consfig converge`, raised where the controller waits.")

(defclass _AgentTally []
  ;; A sink passing events on to SINK, counting the agent's repairs and
  ;; failures as its `stopped` event does, and noting whether that came.
  (defn __init__ [self sink]
    (setv self.sink sink self.repairs 0 self.failures 0 self.stopped False))
  (defn __call__ [self event]
    (when (= (.get event "event") "converge")
      (setv what (.get event "what"))
      (cond (= what "repaired") (+= self.repairs 1)
            (= what "failed") (+= self.failures 1)
            (= what "stopped") (setv self.stopped True)))
    (self.sink event)))

(defn _run [args]
  (_load args)
  (run-command args (when (is-not args.via None) (read-chain args.via))))

(defn _facts [args]
  (setv module (_load args))
  (facts-command args module (when (is-not args.via None) (read-chain args.via))))

(defn _split-command [argv]
  ;; `consfig run … -- CMD…`: the words after the first `--` are the
  ;; command, whatever they look like (`-l`, `--help`).
  (if (and argv (= (get argv 0) "run"))
      (if (in "--" argv)
          (let [i (.index argv "--")]
            #((cut argv 0 i) (cut argv (+ i 1) None)))
          #(argv None))
      #(argv None)))

(defn _repl [args]
  (run-repl (_consfig-path args.file)))

(defn _dataspace [args]
  (import consfig.ui.dataspace :as d)  ; lazy: the controller's
  (when (= args.action "tls")
    (import consfig.ui.dataspace_tls :as t)  ; lazy: the controller's
    (print (t.make-ca args.directory))
    (for [m args.member]
      (setv #(name _ ip) (.partition m "="))
      (when (not (and name ip))
        (raise (ConsfigError f"--member {m}: give NAME=IP, e.g. m0=10.0.0.1")))
      (print (t.issue args.directory name :server-ips [ip])))
    (for [h args.host] (print (t.issue args.directory h)))
    (return 0))
  (setv path (_consfig-path args.consfig))
  (load-consfig path)
  (setv config (d.site-config path))
  (when (= args.action "grant")
    (import consfig.ui.dataspace_tls :as t)  ; lazy: the controller's
    (for [f (t.grant-site config args.directory args.hosts)] (print f))
    (return 0))
  (cond (= args.action "serve") (d.serve config args.data-dir)
        (= args.action "ls") (d.ls config args.type args.json)
        True (d.watch config args.type args.json)))

(defn _doc [args]
  (import consfig.ui.doc [describe find-documented listing])  ; lazy: the controller's
  (when args.consfig (load-consfig args.consfig))
  (cond args.list (print (listing args.name))
        args.name (print (describe (find-documented args.name)))
        True (.error (_parser) "doc: name a property (consfig doc file.has-content), or --list"))
  0)

(setv COMMANDS {"deploy" _deploy "dataspace" _dataspace "deploy-these" _deploy-these "hosts" _hosts "image" _image
                "status" _status "keygen" _keygen "publish" _publish "repl" _repl
                "converge" _converge "run" _run "facts" _facts "doc" _doc})

(defn main [[argv None]]
  "Run the consfig command with ARGV; return the exit status."
  (setv #(argv command) (_split-command (if (is argv None) (cut sys.argv 1 None) (list argv)))
        parser (_parser)
        args (.parse-args parser argv))
  (when (= args.command "run")
    (when (not command)
      (.error parser "consfig run: give the command after --, e.g. consfig run web1 -- uptime"))
    (setv args.command-argv command))
  (guarded args (get COMMANDS args.command)))

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

(export :objects [main run read-chain read-propspecs via-option])
