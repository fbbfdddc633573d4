"Running commands."

(require consfig.property [defprop])
(import posixpath
        consfig.connection [run remote-exists? command->script]
        consfig.types *)

(defn _created [creates cwd]
  (if (and cwd (not (posixpath.isabs creates)))
      (posixpath.join cwd creates)
      creates))

(defprop single :posix [#^ text #* cmd #^ (dict-of shell-identifier text) [env None]
                        #^ (one-of string byte-string) [input None] #^ abs-path [cwd None]
                        #^ path [creates None]]
  "Run CMD (one string: a shell script; several: an argv, each quoted) with
ENV, INPUT on standard input and CWD.  It always counts as a change, unless
CREATES is given: then it runs only while the path CREATES (relative to CWD,
if CWD is given) does not exist."
  (:desc (+ "Ran " (command->script cmd)))
  (:check (and creates (remote-exists? (_created creates cwd))))
  (:apply
    (run #* cmd :env env :input input :cwd cwd)
    :changed))

(export :objects [single])
