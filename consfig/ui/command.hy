"What the `consfig` command and an image's command line share: a parser
whose usage errors exit 64, the options of a deployment's report and exit
status, the sink they ask for, and how a command's errors end it."

(import argparse
        sys
        traceback
        consfig.errors [ConsfigError]
        consfig.deployer.report [JsonSink Reporter error json-error]
        consfig.options [RunOptions])

(setv EX-USAGE 64)

(defclass Parser [argparse.ArgumentParser]
  "An argument parser whose usage errors exit 64 (sysexits' EX_USAGE):
argparse's 2 is what --detailed-exitcode means by \"changes made\"."
  (defn error [self message]
    (.print-usage self sys.stderr)
    (.exit self EX-USAGE f"{self.prog}: error: {message}\n")))

(setv EXIT-STATUS (+ "Exit status: 0 success, 1 failures or an error; with "
                     "--detailed-exitcode: 0 no changes, 2 changes made, 1 failures; "
                     "64 a usage error."))

(defn output-options [sp]
  "Add the options of a deployment's report and exit status (-v, --check,
--diff, --json, --detailed-exitcode) to the argument parser SP: `consfig
deploy`'s, and an image's."
  (.add-argument sp "-v" "--verbose" :action "count" :default 0
                 :help "-v: commands' output, diffs, tracebacks, durations; -vv, -vvv: more")
  (.add-argument sp "--check" :action "store_true"
                 :help "report what holds and what would change; change nothing")
  (.add-argument sp "--diff" :action "store_true"
                 :help "show the diffs of files that change (or would, with --check)")
  (.add-argument sp "--json" :action "store_true"
                 :help "write the events as JSON lines instead of a report")
  (.add-argument sp "--detailed-exitcode" :action "store_true"
                 :help "exit 0 for no changes, 2 for changes, 1 for failures"))

(defn run-options-of [args]
  "The run's `RunOptions`, as the parsed options ARGS (`output-options`) say."
  (RunOptions :check args.check :diff args.diff :verbosity args.verbose))

(defn output-sink [args]
  "The sink the parsed options ARGS (`output-options`) ask for: JSON lines
or a report."
  (if args.json
      (JsonSink)
      (Reporter :options (run-options-of args))))

(defn guarded [args command]
  "(COMMAND ARGS), its value the exit status; a `ConsfigError` printed as an
error (with its traceback at -v) is status 1, an interrupt 130."
  (try
    (command args)
    (except [e ConsfigError]
      (when (and (>= (getattr args "verbose" 0) 1) (not e.expected))
        (traceback.print-exc))
      ((if (getattr args "json" False) json-error error) e)
      1)
    (except [KeyboardInterrupt]
      ;; A converging agent's interrupted run has said it with `stopped`.
      (cond (not (getattr args "json" False)) (error "interrupted")
            (!= (getattr args "command" None) "converge") (json-error "interrupted"))
      130)))

(export :objects [EX-USAGE EXIT-STATUS Parser output-options output-sink
                  run-options-of guarded])
