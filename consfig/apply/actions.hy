"What properties call to act on the target, through the current connection.

  (run \"apt-get\" \"-q\" \"update\" :timeout 600)   ; an argv: each argument quoted
  (run-script \"cat -- \\\"$1\\\" | wc -l\" path)      ; shell code, arguments as $1…
  (run-ok? \"test\" \"-d\" path)                    ; did it exit 0?
  (output \"stat\" \"-c\" \"%a\" \"--\" path)          ; its standard output
  (read-remote-file path) (write-remote-file path text) (remote-exists? path)

`run`, `run-ok?` and `output` take an argv, however many arguments (one
argument is a program, never a script), or a single `Script` value.  Shell
code runs only when asked for by `run-script` or `Script`, and what comes
from users goes in as its positional arguments, never into the code."

(import consfig.model.context [connection command-timeout]
        consfig.apply.engine [NO-CHANGE checking? emit]
        consfig.apply.events [output-event]
        consfig.transport.hop [Script command->script]
        consfig.util [bytes->text text->bytes])

(defn _command [cmd]
  ;; `(run \"ls\" \"-l\")`, `(run [\"ls\" \"-l\"])` and `(run (Script …))`.
  (if (and (= (len cmd) 1) (isinstance (get cmd 0) #(list tuple Script)))
      (get cmd 0)
      (list cmd)))

(defn run [#* cmd [input None] [env None] [cwd None] [timeout None] [check True]]
  "Run a command on the current connection: the argv CMD (each argument
quoted, whatever their number), or a single `Script`.  Return the
`CommandResult`; a non-zero exit raises `CommandFailed` unless CHECK is false.
A command running past TIMEOUT seconds is stopped and raises
`CommandTimedOut`; with no TIMEOUT, the bound is that of the innermost
`with-command-timeout`, else the chain's :command-timeout, else none."
  (setv command (_command cmd))
  (when (is timeout None) (setv timeout (command-timeout)))
  ;; Shown at -vv: what runs, as a person would type it.
  (emit (output-event (+ "$ " (command->script command)) "run"))
  (.run (connection) command
        :input input :env env :cwd cwd :timeout timeout :check check))

(defn run-script [code #* args #** kw]
  "Run the shell code CODE with ARGS as its positional parameters ($1…),
as `sh -c CODE sh ARG…`; keywords as for `run`."
  (run (Script code #* args) #** kw))

(defn run-ok? [#* cmd #** kw]
  "Whether the command (as for `run`) exits zero."
  (. (run #* cmd :check False #** kw) ok?))

(defn output [#* cmd #** kw]
  "The standard output of a command (as for `run`) that must succeed."
  (. (run #* cmd #** kw) stdout))

(defn read-remote-file [path [default None]]
  "The text of PATH on the target, or DEFAULT when it does not exist."
  (try (bytes->text (.read-file (connection) path))
       (except [FileNotFoundError] default)))

(defn write-remote-file [path content #** kw]
  "Atomically replace PATH on the target with CONTENT (str or bytes).  In
check mode this is a bug in the property that called it, and refused."
  (when (checking?)
    (raise (RuntimeError (+ f"a property wrote {path} in check mode: it is marked "
                            ":simulates but does not ask `checking?` before writing"))))
  (.write-file (connection) path (text->bytes content) #** kw))

(defn set-remote-mode [path mode * [follow False]]
  "Give PATH on the target the permission bits MODE.  A symlink at PATH is
refused unless FOLLOW (docs/security.md)."
  (.set-mode (connection) path mode :follow follow))

(defn set-remote-owner [path owner group * [follow False]]
  "Give PATH on the target OWNER and GROUP (names or ids; None keeps one).
A symlink at PATH is itself given them unless FOLLOW."
  (.set-owner (connection) path (_text-id owner) (_text-id group) :follow follow))

(defn remove-remote [paths * [recursive False] [timeout None]]
  "Remove those of PATHS on the target that exist, as `rm -f` does (a
symlink is itself removed, never what it leads to); with RECURSIVE,
directories too, with everything in them, never crossing into another file
system.  Every path is walked safely first (docs/security.md): on a Python
target the removal goes through descriptors all the way down."
  (.remove (connection) (list paths) :recursive recursive :timeout timeout))

(defn make-remote-directory [path * [timeout None]]
  "Make the directory PATH on the target, with its parents (`mkdir -p`),
by the safe walk (docs/security.md)."
  (.make-directory (connection) path :timeout timeout))

(defn make-remote-symlink [target path * [timeout None]]
  "Make PATH on the target a symlink to TARGET, replacing a link or file
there (`ln -sfT`), by the safe walk to PATH's directory (docs/security.md)."
  (.make-symlink (connection) target path :timeout timeout))

(defn _text-id [x] (when (is-not x None) (str x)))

(defn remote-exists? [path]
  "Whether anything (even a dangling symlink) is at PATH on the target."
  (.exists? (connection) path))

(defn change-if-changes-file [path thunk]
  "Call THUNK; return `:no-change` if the content of PATH is the same after
it as before, whatever THUNK returned."
  (setv before (try (.read-file (connection) path) (except [FileNotFoundError] None)))
  (thunk)
  (setv after (try (.read-file (connection) path) (except [FileNotFoundError] None)))
  (if (= before after) NO-CHANGE None))

(export :objects [NO-CHANGE Script run run-script run-ok? output read-remote-file
                  set-remote-mode set-remote-owner remove-remote make-remote-directory
                  make-remote-symlink
                  write-remote-file remote-exists? change-if-changes-file])
