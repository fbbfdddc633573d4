"Running commands."

(require consfig.property [defprop])
(import consfig.connection [run remote-exists? command->script])

(defprop single :posix [#* cmd [env None] [input None] [cwd None] [creates None]]
  "Run CMD (one string: a shell script; several: an argv, each quoted) with
ENV, INPUT on standard input and CWD.  It always counts as a change, unless
CREATES is given: then it runs only while the path CREATES does not exist."
  (:desc (+ "Ran " (command->script cmd)))
  (:check (and creates (remote-exists? creates)))
  (:apply
    (run #* cmd :env env :input input :cwd cwd)
    :changed))

(export :objects [single])
