"Running commands."

(eval-when-compile (require consfig.property [defprop]))
(import posixpath
        consfig.actions [Script run remote-exists?]
        consfig.hop [command->script]
        consfig.types *)

(defn _created [creates cwd]
  (if (and cwd (not (posixpath.isabs creates)))
      (posixpath.join cwd creates)
      creates))

(defn _ran [cmd env input cwd timeout]
  (run cmd :env env :input input :cwd cwd :timeout timeout)
  :changed)

(defprop single :posix [#^ text #* cmd #^ (dict-of shell-identifier text) [env None]
                        #^ (one-of string byte-string) [input None] #^ abs-path [cwd None]
                        #^ path [creates None] #^ seconds [timeout None]]
  "Run the argv CMD — each argument one word, quoted, however many there are:
`(cmd.single \"systemctl\" \"reload\" \"nginx\")`, `(cmd.single path)` — with
ENV, INPUT on standard input and CWD.  For shell code, use `cmd.script`.  It
always counts as a change, unless CREATES is given: then it runs only while
the path CREATES (relative to CWD, if CWD is given) does not exist.  A
command running past TIMEOUT seconds is stopped, and the property fails; by
default, the bound of the enclosing `with-command-timeout`, else the chain's
:command-timeout, else none."
  (:invariant cmd "needs a command to run")
  (:desc (+ "Ran " (command->script cmd)))
  (:check (and creates (remote-exists? (_created creates cwd))))
  (:apply (_ran (list cmd) env input cwd timeout)))

(defprop script :posix [#^ non-empty-string code #^ text #* args
                        #^ (dict-of shell-identifier text) [env None]
                        #^ (one-of string byte-string) [input None] #^ abs-path [cwd None]
                        #^ path [creates None] #^ seconds [timeout None]]
  "Run the shell code CODE with ARGS as its positional parameters (`$1`…),
as `sh -c CODE sh ARG…`: `(cmd.script \"date >> \\\"$1\\\"\" log-path)`.  Put
values in ARGS, never into CODE.  ENV, INPUT, CWD, CREATES and TIMEOUT as
for `cmd.single`."
  (:desc (+ "Ran " (command->script (Script code #* args))))
  (:check (and creates (remote-exists? (_created creates cwd))))
  (:apply (_ran (Script code #* args) env input cwd timeout)))

(export :objects [single script])
