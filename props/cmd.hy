"Running commands."

(eval-when-compile (require consfig.model.property [defprop]))
(import posixpath
        re
        shlex
        consfig.apply.actions [Script run remote-exists?]
        consfig.apply.engine [emit]
        consfig.apply.events [output-event]
        consfig.errors [FailedChange]
        consfig.transport.hop [command->script]
        consfig.types *)

(defn _created [creates cwd]
  (if (and cwd (not (posixpath.isabs creates)))
      (posixpath.join cwd creates)
      creates))

(defn command-line-problem [cmd]
  "What is wrong with CMD, an argv, when its program is a whole command
line in one string (`\"apt-get update\"`, as Consfigurator's `cmd:single`
takes it); None when nothing is.  A program looked up in PATH never has
whitespace in its name; a path may, and is left alone when its first word
holds the /: `\"/opt/My Tools/run\"` is a program, `\"touch /tmp/x\"` is not."
  (setv program (get cmd 0))
  (setv first-word (get (+ (.split program) [""]) 0))
  (when (or (not (re.search r"\s" program)) (in "/" first-word))
    (return None))
  (setv shown (hy.repr program)
        words (try (shlex.split program) (except [ValueError] None)))
  (+ f"{shown} is not a command line: cmd.single runs it as the name of one program, spaces and all; "
     (if (and words (not (re.search r"[|&;<>()$`\\\"'*?\[\]#~=%{}]" program)))
         (+ "write "
            f"({(.join " " ["cmd.single" #* (map hy.repr words) #* (map hy.repr (cut cmd 1 None))])}), "
            "one argument per word, or use cmd.script for shell code")
         f"for shell code, write (cmd.script {shown}); for a command, one argument per word")))

(defn _ran [cmd env input cwd timeout]
  (run cmd :env env :input input :cwd cwd :timeout timeout)
  :changed)

(defprop single :posix [#^ text #* cmd #^ (dict-of shell-identifier text) [env None]
                        #^ (one-of string byte-string) [input None] #^ abs-path [cwd None]
                        #^ path [creates None] #^ seconds [timeout None]]
  "Run the argv CMD — each argument one word, quoted, however many there are:
`(cmd.single \"systemctl\" \"reload\" \"nginx\")`, `(cmd.single path)` — with
ENV, INPUT on standard input and CWD.  For shell code, use `cmd.script`.  A
program name with whitespace whose first word has no / (`(cmd.single \"apt-get
update\")`, `(cmd.single \"touch /tmp/x\")`) is a command line in one string,
refused where it is written.  It always counts as a change, unless CREATES is given: then it runs only while
the path CREATES (relative to CWD, if CWD is given) does not exist.  A
command running past TIMEOUT seconds is stopped, and the property fails; by
default, the bound of the enclosing `with-command-timeout`, else the chain's
:command-timeout, else none."
  (:action "runs its command at each deployment, unless :creates names what it makes")
  (:invariant cmd "needs a command to run")
  (:invariant (not (command-line-problem cmd)) (command-line-problem cmd))
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
  (:action "runs its shell code at each deployment, unless :creates names what it makes")
  (:desc (+ "Ran " (command->script (Script code #* args))))
  (:check (and creates (remote-exists? (_created creates cwd))))
  (:apply (_ran (Script code #* args) env input cwd timeout)))

(defn _reported [cmd env input cwd timeout]
  (setv r (run cmd :env env :input input :cwd cwd :timeout timeout :check False)
        text (+ r.stdout (if (and r.stdout r.stderr (not (.endswith r.stdout "\n"))) "\n" "") r.stderr))
  ;; A note (shown at any verbosity), with the exit status as data for
  ;; `consfig run`'s recap and for --json readers.
  (emit {#** (output-event (or (.rstrip text "\n") "(no output)")) "exit-code" r.exit-code})
  (when (not r.ok?)
    (raise (FailedChange f"exited {r.exit-code}")))
  :changed)

(defprop reported :posix [#^ text #* cmd #^ (dict-of shell-identifier text) [env None]
                          #^ (one-of string byte-string) [input None] #^ abs-path [cwd None]
                          #^ seconds [timeout None]]
  "Run the argv CMD, as `single` runs it, and report what it printed
(standard output, then standard error) and its exit status: a non-zero
status is a failure.  What `consfig run HOST… -- CMD…` applies.  An action:
it always runs (in check mode it says that it would), and always counts as
a change, since what the command did cannot be told."
  (:action "runs its command and reports what it printed, each time")
  (:invariant cmd "needs a command to run")
  (:invariant (not (command-line-problem cmd)) (command-line-problem cmd))
  (:desc (+ "Ran " (command->script cmd)))
  (:apply (_reported (list cmd) env input cwd timeout)))

(export :objects [single script reported command-line-problem])
