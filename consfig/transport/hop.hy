"The hop protocol: what every connection in a chain implements.

A hop is a connection built on the one before it (the controller itself for
the first hop).  A POSIX hop only has to say how to run a shell script, given
as a string, with bytes on standard input: `(.run-script conn script input
timeout)` returning `#(exit-code stdout-bytes stderr-bytes)`.  Running
commands, reading, writing and testing files are built on that here, once,
so that every hop — ssh, sudo, su, chroot, and any chain of them — does them
the same way.  A connection that runs in a Python process on the target
(`:local`, and everything after a `:python` hop) overrides the file
operations with direct system calls.

A command is either an argv — a list whose every element is quoted, however
many there are — or a `Script`, shell code run on purpose, with its own
positional arguments.  A plain string is neither, and is refused.

What a command prints is kept whole up to `OUTPUT-LIMIT` (16 MiB) per
stream, and past that only its head and tail (`consfig.transport.frames.OutputBuffer`),
so that a command printing gigabytes cannot exhaust the controller's memory;
`read-file` alone asks for the whole, however large.

A hop type is described by a `Hop`: its name, the arguments it takes and
their types (checked when a chain is parsed, before anything connects), and
the function that establishes it."

(import posixpath
        shlex
        time
        consfig.transport.frames [OUTPUT-LIMIT]
        consfig.errors [AbortedChange CannotStartProcess CommandFailed CommandTimedOut
                        SymlinkNotFollowed UnsafePath]
        consfig.types [Type abs-path boolean int-range named path seconds]
        consfig.util [bytes->text text->bytes])

;; How long a hop may take to answer a question asked while it is being
;; established (is there sudo? may we su? is this a directory?).
(setv PROBE-TIMEOUT 60)

;; A temporary file of ours not modified for this many minutes was left by
;; a write that was killed: a write under way keeps its own fresh.
(setv STALE-MINUTES 10)

;; The longest command consfig sends, in bytes.  Linux takes no single
;; argument over 128 KiB, and each hop wrapping the script in its own command
;; line (sudo, su, chroot) quotes it once more; past this, data belongs on
;; standard input or in a file.
(setv MAX-COMMAND 65536)

;; How much longer than a command's timeout the controller waits for the
;; target to stop it, before it gives up on the connection itself.
(setv TIMEOUT-GRACE 10)

(defclass Script []
  "Shell code to run as written, with ARGS as its positional parameters:
`(Script \"cat -- \\\"$1\\\" | wc -l\" path)`.  The arguments are quoted; the
code is not, so it must never be built from user data — pass that as ARGS."
  (defn __init__ [self code #* args]
    (when (not (isinstance code str))
      (raise (TypeError f"a Script's code is a string, not {(hy.repr code)}")))
    (setv self.code code
          self.args (lfor a args (str a))))

  (defn shell [self]
    "The script as one shell script: `sh -c CODE sh ARG…` when it has ARGS."
    (if self.args
        (shlex.join ["exec" "/bin/sh" "-c" self.code "sh" #* self.args])
        self.code))

  (defn __eq__ [self other]
    (and (isinstance other Script) (= #(self.code self.args) #(other.code other.args))))

  (defn __repr__ [self]
    f"<Script {(self.shell) !r}>"))

(defn command->script [cmd]
  "The shell script that runs CMD: an argv (list or tuple) quoted element by
element, whatever its length, or a `Script`'s code with its arguments.  A
string is refused: whether it meant a program or shell code cannot be told."
  (cond (isinstance cmd Script) (.shell cmd)
        (and (isinstance cmd #(list tuple)) cmd) (shlex.join (lfor c cmd (str c)))
        True (raise (TypeError (+ "a command is an argv (a non-empty list of strings) or a "
                                  f"Script, not {(hy.repr cmd)}")))))

(defclass CommandResult []
  "What a command did: its exit code and output (decoded as UTF-8)."
  (defn __init__ [self command exit-code stdout stderr]
    (setv self.command command
          self.exit-code exit-code
          self.stdout stdout
          self.stderr stderr))
  (defn [property] ok? [self] (= self.exit-code 0))
  (defn __repr__ [self]
    f"<CommandResult {self.exit-code} {self.command !r}>"))

(defn check-sendable [script]
  "Refuse, before it is sent, a command no hop can carry: one with a NUL
byte (no argument can hold one; over SSH it would break the connection) or
one longer than `MAX-COMMAND`.  The property fails; the connection lives on."
  (when (in "\0" script)
    (raise (AbortedChange f"a command cannot contain a NUL byte: {(_abridged script)}")))
  (setv n (len (.encode script "utf-8" "surrogateescape")))
  (when (> n MAX-COMMAND)
    (raise (AbortedChange (+ f"command too long to send ({n} bytes; at most {MAX-COMMAND}): "
                             (_abridged script)
                             "\n  Pass large data on standard input (:input) or in a file.")))))

(defn check-path [path]
  "Refuse a path with a NUL byte, which no file name can hold."
  (when (in "\0" (str path))
    (raise (AbortedChange f"a path cannot contain a NUL byte: {(repr path)}"))))

(defn _abridged [text [n 200]]
  (setv r (repr text))
  (if (> (len r) n) (+ (cut r n) f"… ({(len text)} characters)") r))

(defn _with-timeout [script timeout]
  ;; The timeout is enforced where the script runs, innermost in the chain:
  ;; only there can the whole process group be killed, even when it runs as
  ;; another user (a sudo hop) or in a chroot.  timeout(1) puts the script
  ;; in a process group of its own and kills all of it; where there is no
  ;; timeout(1), the controller's wait still ends after the grace period.
  (setv t (format timeout "g"))
  (+ "if command -v timeout >/dev/null 2>&1; then "
     f"exec timeout -k 2 {t} /bin/sh -c {(shlex.quote script)}; fi\n"
     script))

(defn _prefix-script [script env cwd]
  (setv parts [])
  (when cwd (.append parts f"cd -- {(shlex.quote (str cwd))} || exit 1"))
  (for [[k v] (.items (or env {}))]
    (.append parts f"{k}={(shlex.quote (str v))}; export {k}"))
  (if parts (.join "\n" [#* parts script]) script))

;; The safe walk, for a POSIX hop (a `:python` target walks with descriptors
;; instead: `consfig.transport.safepath`).  A shell can only look before it
;; leaps: it cannot hold a directory it has checked.  So it may only cross
;; directories that no one but root and the user it runs as can change, and
;; is refused (exit 78) anywhere else: `cf_walk PATH FOLLOW` goes down PATH
;; a component at a time, following symlinks itself, and refuses
;;
;;   - a directory on the way owned by another user (systemd-tmpfiles'
;;     "unsafe path transition"), or that a group other than root's, or any
;;     user, may write to without the sticky bit (they could rename what is
;;     in it);
;;   - a symlink on the way (and at PATH itself when FOLLOW is 1) owned by
;;     another user.
;;
;; In a sticky directory (/tmp) others can neither rename nor remove what
;; root owns, and what they own there is refused as above.  What is missing
;; on the way stops the walk: the command after it makes it, as root, in a
;; directory the walk found safe.  Everything is checked before anything is
;; done, and nothing checked can change before it is used.
(setv SAFE-WALK (.join "\n" [
  "cf_walk() {"
  "  [ \"${CF_WALK_ALONE:-}\" != 1 ] || return 0"
  "  cf_me=$(id -u) cf_path=$1 cf_follow=$2 cf_rest=$1 cf_cur= cf_links=0"
  "  set --"
  "  while :; do"
  "    cf_rest=${cf_rest#\"${cf_rest%%[!/]*}\"}"
  "    [ -n \"$cf_rest\" ] || break"
  "    cf_c=${cf_rest%%/*}"
  "    case $cf_rest in */*) cf_rest=${cf_rest#*/} ;; *) cf_rest= ;; esac"
  "    cf_rest=${cf_rest#\"${cf_rest%%[!/]*}\"}"
  "    case $cf_c in .) continue ;; ..) cf_cur=${cf_cur%/*}; continue ;; esac"
  "    cf_p=$cf_cur/$cf_c"
  "    if [ -L \"$cf_p\" ]; then"
  "      if [ -z \"$cf_rest\" ] && [ \"$cf_follow\" != 1 ]; then break; fi"
  "      cf_o=$(stat -c '%u' -- \"$cf_p\") || exit 78"
  "      if [ \"$cf_o\" != 0 ] && [ \"$cf_o\" != \"$cf_me\" ]; then"
  "        echo \"$cf_p is a symlink owned by $(stat -c '%U (uid %u)' -- \"$cf_p\")\" >&2; exit 78"
  "      fi"
  "      cf_links=$((cf_links + 1))"
  "      if [ \"$cf_links\" -gt 40 ]; then echo \"too many symlinks on the way to $cf_path\" >&2; exit 78; fi"
  "      cf_t=$(readlink -n -- \"$cf_p\"; echo .) && cf_t=${cf_t%.}"
  "      case $cf_t in /*) cf_cur= ;; esac"
  "      cf_rest=$cf_t/$cf_rest"
  "      continue"
  "    fi"
  "    [ -n \"$cf_rest\" ] && [ -d \"$cf_p\" ] || break"
  "    set -- \"$@\" \"$cf_p\""
  "    cf_cur=$cf_p"
  "  done"
  "  [ $# -gt 0 ] || return 0"
  "  cf_st=$(stat -c '%u %g %a' -- \"$@\") || exit 78"
  "  while read -r cf_u cf_g cf_a; do"
  "    cf_a=$((0$cf_a))"
  "    if [ \"$cf_u\" != 0 ] && [ \"$cf_u\" != \"$cf_me\" ]; then"
  "      echo \"$1 is owned by $(stat -c '%U (uid %u)' -- \"$1\")\" >&2; exit 78"
  "    fi"
  "    if [ $((cf_a & 01000)) = 0 ] && { [ $((cf_a & 02)) != 0 ] || { [ $((cf_a & 020)) != 0 ] && [ \"$cf_g\" != 0 ]; }; }; then"
  "      echo \"$1 may be written by $(if [ $((cf_a & 02)) != 0 ]; then echo any user; else stat -c 'the group %G (gid %g)' -- \"$1\"; fi)\" >&2; exit 78"
  "    fi"
  "    shift"
  "  done <<cf_EOF"
  "$cf_st"
  "cf_EOF"
  "}"
  ""]))

;; A connection whose files no user but root can reach at all (a chroot in
;; a directory only root may enter, with no other user's process inside:
;; `Connection.others-excluded?`) has nothing to check: its commands carry
;; CF_WALK_ALONE=1 (and every other connection's, 0).

;; Why a POSIX hop refuses a path (exit 78), after what the walk found.
(setv NEEDS-PYTHON (+ "over a chain with no Python, consfig acts only in directories that no "
                      "user but root and itself can change, since a shell cannot hold what it "
                      "checked; add :python to the chain (a Python on the target then walks "
                      "the path with descriptors) (docs/security.md)"))

(defn _flag [b] (if b "1" "0"))

(defn _walked-script [code path follow #* args]
  ;; CODE runs after the walk, with $1 = PATH, $2 = FOLLOW (1 or 0) and ARGS
  ;; from $3 on.
  (.shell (Script (+ SAFE-WALK "cf_walk \"$1\" \"$2\"\n" code) path (_flag follow) #* args)))

(defn walk-refusal [code err path where]
  "The `UnsafePath` a walked script's exit CODE (78) and standard error ERR
say, or None."
  (when (= code 78)
    (setv err (if (isinstance err bytes) (bytes->text err) (or err "")))
    (UnsafePath path (.strip err) where :rule NEEDS-PYTHON)))

(defn _raise-walk-failure [code err path where]
  "Raise what a file operation's exit CODE says, if it is one of the walk's."
  (setv refusal (walk-refusal code err path where))
  (cond refusal (raise refusal)
        (= code 67) (raise (SymlinkNotFollowed path where))
        (= code 66) (raise (FileNotFoundError path))))

(defclass Connection []
  "One established hop.  `upstream` is the connection it runs inside
(None for a hop that runs on the controller).  `connattrs` is state that
lives as long as the connection, for properties (see `consfig.model.context`).

Every member the rest of consfig uses on a connection is declared here.  A
POSIX hop implements `run-script`, and `start-process` if it can (else it
can carry no `:python` hop, and its target is deployed without the lock of
`consfig.apply.lock`, whose holder is such a process).  The attributes:

  python?          whether commands run in a Python on the target (`:local`,
                   and what comes after a `:python` hop): file operations
                   are then system calls
  hop-name         the hop's name, for messages
  command-timeout  seconds that bound each command run here with no timeout
                   of its own (the hop's :command-timeout), or None; see
                   `chain-command-timeout`
  keeper           a `consfig.python_hop.controller.Keeper` while a chain is kept between
                   deployments (`consfig.python_hop.keep`) and this connection applies
                   remotely, else None
  deployment-token set by the deployment lock: the commands run here carry
                   it in their environment, so that the lock's holder can
                   end them all if the deployment ends before they do

and the methods besides the file operations: `alive?` (for a kept chain),
`apply-remotely?` and `apply-remotely`, `explain-start-failure`, `close`."

  (setv python? False
        hop-name "connection"
        command-timeout None
        keeper None)

  (defn __init__ [self [upstream None]]
    (setv self.upstream upstream
          self.connattrs {}
          self.deployment-token None))

  (defn [property] where [self]
    "Where this connection's commands run, for messages: `ssh:root@db1 > sudo`."
    (if self.upstream
        f"{self.upstream.where} > {(self.describe)}"
        (self.describe)))

  (defn describe [self] self.hop-name)

  (defn others-excluded? [self]
    "Whether no user but root can reach the files this connection's
commands see, so that the safe walk has nobody to guard against (a chroot
in a directory only root may enter: `consfig.connections.chroot`)."
    False)

  (defn chain-command-timeout [self]
    "The :command-timeout of this hop or of the nearest hop before it that
has one (`[[:ssh :command-timeout 600] :sudo]`), or None.  It bounds every
command run through this connection with no timeout of its own, the
commands of a Python a `:python` hop starts after it included."
    (setv conn self)
    (while conn
      (setv t conn.command-timeout)
      (when t (return t))
      (setv conn conn.upstream))
    None)

  (defn run-script [self script input timeout * [limit OUTPUT-LIMIT]]
    "Run the shell script SCRIPT (a string) where this connection's commands
run, with the bytes INPUT (or nothing) on standard input, giving up after
TIMEOUT seconds (None: never).  Return `#(exit-code stdout stderr)`, the
outputs as bytes, each kept whole up to LIMIT bytes and past that as its
head and tail (`OutputBuffer`; None: whole).  The one method a POSIX hop
must implement; a hop that wraps its upstream passes LIMIT on."
    (raise (NotImplementedError
             f"{(. (type self) __name__)} does not implement run-script")))

  (defn run [self cmd * [input None] [env None] [cwd None] [timeout None]
             [check True]]
    "Run CMD (an argv list, or a `Script`) and return a `CommandResult`.
Raise `CommandFailed` on a non-zero exit when CHECK, and `CommandTimedOut`
when it runs for longer than TIMEOUT seconds (by default, the chain's
:command-timeout).  The timeout is enforced where the command runs, so that
nothing of it is left running there."
    (setv script (command->script cmd)
          #(code out err) (self._run-bytes script :input (text->bytes input) :env env :cwd cwd
                                           :timeout timeout)
          result (CommandResult script code (bytes->text out) (bytes->text err)))
    ;; Not kept alive, with the text, by a failure's traceback.
    (del out err)
    (when (and check (!= code 0))
      (raise (CommandFailed script code result.stdout result.stderr self.where)))
    result)

  (defn _run-bytes [self script * [input None] [env None] [cwd None] [timeout None]
                    [limit OUTPUT-LIMIT]]
    ;; What `run` does, with its outputs as bytes each kept up to LIMIT
    ;; (None: whole): every command consfig runs here, file operations
    ;; included, is bounded by the chain's timeout and carries the
    ;; deployment's token, so that the lock's holder can end it.
    (when (is timeout None) (setv timeout (self.chain-command-timeout)))
    (setv full (_prefix-script script
                               {#** (if self.deployment-token
                                        {"CONSFIG_DEPLOYMENT" self.deployment-token}
                                        {})
                                #** (if self.python? {} {"CF_WALK_ALONE" (if (self.others-excluded?) "1" "0")})
                                #** (or env {})}
                               cwd)
          started (time.monotonic))
    (check-sendable full)
    (if (and timeout (not self.python?))
        (do (setv #(code out err) (self.run-script (_with-timeout full timeout) input
                                                   (+ timeout TIMEOUT-GRACE) :limit limit))
            (when (and (in code #(124 137)) (>= (- (time.monotonic) started) timeout))
              (raise (CommandTimedOut script timeout (bytes->text out) (bytes->text err)
                                      self.where))))
        (setv #(code out err) (self.run-script full input timeout :limit limit)))
    #(code out err))

  (defn read-file [self path * [follow False] [limit None]]
    "The bytes of the file at PATH; `FileNotFoundError` when there is none.
A symlink at PATH is not read through (`SymlinkNotFollowed`, a kind of
`FileNotFoundError`) unless FOLLOW, and the walk to it is the safe one
(`SAFE-WALK`).  What is not a regular file (a FIFO, a device) is never
read: the file is opened without blocking, and without following a link
unless FOLLOW.  LIMIT: read no more than that many bytes."
    (check-path path)
    (setv #(code out err)
          (self._run-bytes (_walked-script (+ "[ \"$2\" = 1 ] || [ ! -L \"$1\" ] || exit 67\n"
                                              "test -f \"$1\" || exit 66\n"
                                              "if [ \"$2\" = 1 ]; then f=nonblock; else f=nonblock,nofollow; fi\n"
                                              (if (is limit None)
                                                  "exec dd if=\"$1\" iflag=\"$f\" bs=65536 status=none"
                                                  (+ "exec dd if=\"$1\" iflag=\"$f,count_bytes\" bs=65536 "
                                                     f"count={(int limit)} status=none")))
                                           path follow)
                           :limit None))
    (_raise-walk-failure code err path self.where)
    (when (!= code 0)
      (raise (CommandFailed f"dd if={(shlex.quote path)}" code "" (bytes->text err) self.where)))
    out)

  (defn write-file [self path content * [mode None] [owner None] [group None] [follow False]]
    "Replace the file at PATH with CONTENT (bytes) atomically: a temporary
file in the same directory is written, synced and renamed over PATH.  The
existing file's mode and ownership are kept unless MODE, OWNER or GROUP say
otherwise; a new file gets the mode the umask allows.  A symlink at PATH is
replaced by the new file, unless FOLLOW: then the file it leads to is."
    (check-path path)
    (try
      (self.run (Script (self.write-script path (len content) :mode mode :owner owner
                                           :group group :follow follow))
                :input content)
      (except [e CommandFailed]
        (_raise-walk-failure e.exit-code e.stderr path self.where)
        (raise)))
    None)

  (defn write-script [self path size * [mode None] [owner None] [group None] [follow False]]
    "The shell script `write-file` runs to put SIZE bytes from its standard
input at PATH.  Input that ends early (the controller or the connection
died) leaves PATH as it was: the script counts what it received and renames
only a complete file.  Its temporary is removed however it ends, but for a
KILL; so, first, it removes temporaries of its own in the same directory
that a killed write left (see `STALE-MINUTES`).  The old file's mode and
owner are read from PATH itself, never through a symlink there."
    (setv q shlex.quote
          lines [SAFE-WALK
                 "set -e"
                 f"path={(q path)}"
                 f"cf_walk \"$path\" {(_flag follow)}"])
    (when follow
      ;; The walk has checked every link on the way; write where they lead.
      (.append lines "if [ -L \"$path\" ]; then path=$(readlink -f -- \"$path\"); fi"))
    (.extend lines
      ["dir=${path%/*}; [ -n \"$dir\" ] || dir=/"
       f"find \"$dir\" -maxdepth 1 -type f -name '.consfig-????????' -user \"$(id -u)\" -mmin +{STALE-MINUTES} -exec rm -f -- {{}} + 2>/dev/null || true"
       "tmp=$(mktemp \"$dir/.consfig-XXXXXXXX\")"
       "trap 'rm -f \"$tmp\"' EXIT"
       ;; A signal ends the script through its EXIT trap.
       "trap 'exit 129' HUP INT TERM PIPE"
       "cat >\"$tmp\""
       "got=$(( $(wc -c <\"$tmp\") ))"
       f"if [ \"$got\" -ne {size} ]; then"
       f"  echo \"consfig: received $got of {size} bytes for \"{(q path)}\"; left it as it was\" >&2"
       "  exit 1"
       "fi"
       "if [ -f \"$path\" ] && [ ! -L \"$path\" ]; then"
       "  set -- $(stat -c '%a %u %g' -- \"$path\")"
       "  chmod \"$1\" \"$tmp\""
       "  chown \"$2:$3\" \"$tmp\" 2>/dev/null || true"
       "else"
       "  chmod \"$(printf '%o' $(( 0666 & ~0$(umask) )))\" \"$tmp\""
       "fi"])
    (when (is-not mode None)
      (.append lines f"chmod {(format mode "o")} \"$tmp\""))
    (when (or owner group)
      (.append lines f"chown {(q (+ (str (or owner "")) (if group f":{group}" "")))} \"$tmp\""))
    (.extend lines ["sync -- \"$tmp\" 2>/dev/null || true"
                    "mv -f -T -- \"$tmp\" \"$path\""
                    "trap - EXIT"])
    (.join "\n" lines))

  (defn set-mode [self path mode * [follow False]]
    "Give PATH the permission bits MODE.  A symlink at PATH is refused
(`UnsafePath`) unless FOLLOW, and the walk to PATH is the safe one."
    (check-path path)
    (self._run-walked "chmod" path follow
                      "[ \"$2\" = 1 ] || [ ! -L \"$1\" ] || exit 67\nexec chmod \"$3\" -- \"$1\""
                      (format mode "o")))

  (defn set-owner [self path owner group * [follow False]]
    "Give PATH the owner OWNER and group GROUP (names or numbers as text;
None leaves one as it is).  A symlink at PATH is itself given them, unless
FOLLOW, and the walk to PATH is the safe one."
    (check-path path)
    (setv spec (+ (str (or owner "")) (if (is-not group None) f":{group}" "")))
    (self._run-walked "chown" path follow
                      "if [ \"$2\" = 1 ]; then exec chown -- \"$3\" \"$1\"; fi\nexec chown -h -- \"$3\" \"$1\""
                      spec))

  (defn _run-walked [self program path follow code arg]
    (setv #(exit-code out err) (self._run-bytes (_walked-script code path follow arg)))
    (when (= exit-code 67)
      ;; A link's own mode means nothing; changing it was asked of what it leads to.
      (raise (AbortedChange (str (SymlinkNotFollowed path self.where)))))
    (_raise-walk-failure exit-code err path self.where)
    (when (!= exit-code 0)
      (raise (CommandFailed (shlex.join [program arg "--" path])
                            exit-code "" (bytes->text err) self.where)))
    None)

  (defn remove [self paths * [recursive False] [timeout None]]
    "Remove those of PATHS (a list) that exist, as `rm -f` does: a symlink
is itself removed, never what it leads to.  With RECURSIVE a directory is
removed too, with everything in it, never crossing into another file
system (`rm -rf --one-file-system`); without, a directory is a failure.
Every path is walked safely before anything is removed."
    (for [p paths] (check-path p))
    (setv rm (if recursive "rm -rf --one-file-system" "rm -f"))
    (self._walked-command paths (+ "for p; do cf_walk \"$p\" 0; done\n" f"exec {rm} -- \"$@\"")
                          paths f"{rm} -- {(shlex.join paths)}" :timeout timeout))

  (defn make-directory [self path * [timeout None]]
    "Make the directory PATH and its missing parents, as `mkdir -p` does,
after a safe walk of every one that exists."
    (check-path path)
    (self._walked-command [path] "cf_walk \"$1\" 1\nexec mkdir -p -- \"$1\"" [path]
                          (shlex.join ["mkdir" "-p" "--" path]) :timeout timeout))

  (defn make-symlink [self target path * [timeout None]]
    "Make PATH a symlink to TARGET, replacing a link or file there (not a
directory), as `ln -sfT` does, after a safe walk to PATH's directory."
    (check-path path)
    (check-path target)
    (self._walked-command [path] "cf_walk \"$2\" 0\nexec ln -sfT -- \"$1\" \"$2\"" [target path]
                          (shlex.join ["ln" "-sfT" "--" target path]) :timeout timeout))

  (defn _walked-command [self paths code args shown * [timeout None]]
    ;; CODE after SAFE-WALK, with ARGS as $1…; SHOWN is the command for a
    ;; failure's message.
    (setv #(exit-code out err) (self._run-bytes (.shell (Script (+ SAFE-WALK code) #* args))
                                                :timeout timeout)
          refusal (walk-refusal exit-code err (.join ", " paths) self.where))
    (when refusal (raise refusal))
    (when (!= exit-code 0)
      (raise (CommandFailed shown exit-code (bytes->text out) (bytes->text err) self.where)))
    None)

  (defn exists? [self path]
    "Whether anything (even a dangling symlink) is at PATH."
    (check-path path)
    (= 0 (get (self._run-bytes (+ "test -e " (shlex.quote path) " || test -L "
                                  (shlex.quote path)))
              0)))

  (defn start-process [self argv]
    "Start ARGV (a list of strings, not a shell script) where this
connection's commands run, and return at once a process object to talk to it
while it runs, as a `:python` hop must:

  .stdin .stdout .stderr   binary file objects (write and flush; read(n)
                           blocks until n bytes or end of file)
  (.wait p timeout)        the exit code, or None if still running after
                           TIMEOUT seconds
  (.kill p)                end it (and what it started) now
  .lost                    optional: None, or why the connection it ran on
                           dropped (the exit code is then meaningless)

The process gets no terminal.  Closing its stdin, or the connection dropping,
must give it end of file on stdin: that is how it learns to stop.  A hop that
wraps a command (`sudo …`, `ssh host …`) implements this by starting its
own command line through `(.start-process self.upstream …)`, quoting ARGV
where a shell will read it; a missing program shows as exit code 127."
    (raise (CannotStartProcess
             (+ f"hop :{self.hop-name} cannot start a streaming process ({self.where}), "
                "which a :python hop after it needs"))))

  (defn explain-start-failure [self]
    "Called when a process started here (a `:python` hop's Python) ended
before it said anything: raise a `ConnectionFailed` saying why, if this
connection can tell (a hop that left its own check to that start, as
`:sudo` does before `:python`); else return None."
    None)

  (defn apply-remotely? [self]
    "Whether this connection applies a host itself, in a Python on the
target (`apply-remotely`), rather than letting the controller apply it
through `run` and the file operations."
    False)

  (defn apply-remotely [self host sink options * [lock None]]
    "Apply the preprocessed HOST on the target as OPTIONS say (a
`consfig.options.RunOptions`: check, unapply, verbosity; with its CONVERGE,
the target's Python stays and keeps the host converged, `consfig converge`),
feeding its events to SINK, and return the `Outcome`: for a connection that
is `apply-remotely?`.  LOCK: None, or a `consfig.apply.lock.lock-request`
for the target to take the deployment lock itself."
    (raise (NotImplementedError f"{(. (type self) __name__)} does not apply remotely")))

  (defn alive? [self]
    "Whether this connection still works, as far as can be told without a
round trip (a kept chain is checked so before it is used again)."
    True)

  (defn close [self]
    "Tear the hop down.  Closing an upstream is its owner's business."
    None))

;; Hop argument types: `consfig.types` types, each checking a value a user
;; wrote in a chain, and normalising it, so that no hop validates its own
;; arguments.

(defn ArgType [description convert]
  "A hop argument type described by DESCRIPTION (for messages), whose
CONVERT returns an accepted value normalised or raises `ValueError`: a
`consfig.types.Type`, for a site's own hop."
  (defn accepted? [v]
    (try (convert v) True (except [ValueError] False)))
  (Type description description accepted? :normalise convert))

(defn _port [v]
  (if (isinstance v str) (int v) v))

(setv STRING (named "STRING" path "a non-empty string")
      STRINGS (Type "STRINGS" "a string or a list of strings"
                    (fn [v] (or (and (isinstance v str) v)
                                (and (isinstance v #(list tuple))
                                     (all (gfor s v (and (isinstance s str) s))))))
                    :normalise (fn [v] (if (isinstance v str) [v] (list v))))
      PORT (Type "PORT" "a port number (1-65535)"
                 (fn [v] (or (.accepts (int-range 1 65535) v)
                             (and (isinstance v str) (.isdigit v) (.isascii v)
                                  (<= 1 (int v) 65535))))
                 :normalise _port)
      SECONDS (named "SECONDS" seconds)
      BOOLEAN (named "BOOLEAN" boolean "true or false")
      ABSOLUTE-PATH (Type "ABSOLUTE-PATH" "an absolute path" (fn [v] (.accepts abs-path v))
                          :normalise (fn [v] (.rstrip (posixpath.normpath v) "/"))))

(defn choice-of [#* choices]
  "A hop argument type accepting the strings CHOICES (any case) and the booleans."
  (setv phrase (+ "one of " (.join ", " (gfor c choices (hy.repr c))) ", true or false"))
  (Type phrase phrase
        (fn [v] (or (isinstance v bool) (and (isinstance v str) (in (.lower v) choices))))))

(defclass Hop []
  "What a hop type offers: its name, the arguments it accepts (a dict of
argument name → `consfig.types.Type`), which of them it requires, and the function that
establishes it on top of an upstream connection.  A hop that TAKES-REST
(`:python`) receives the rest of the chain and establishes it itself.

A hop that may ask the user something (a password) has ASK-BEFOREHAND, called
with WHERE (the hosts concerned) and the hop's arguments before several
hosts are deployed at once: it asks on the controller's main thread and
keeps the answer in the `deployment-cache`, where the hop finds it.

A hop may have ESTABLISH-BEFORE-PYTHON, used instead of ESTABLISH when a
`:python` hop comes next: it may leave a check that costs a round trip to
the start of the target's Python, and explain a failed start afterwards
(`Connection.explain-start-failure`).

A hop established on a target, after a `:python` hop, has no terminal of
the controller's to ask on.  CARRIED-DATA, called on the controller with the
hop's arguments (a dict), returns the prerequisite data items (`DataItem`s)
it will need there, which are sent with the host: `[:sudo :from …]` carries
its password so.

A USER-HOP only changes the user commands run as (`:sudo`, `:su`, `:as`):
a chain of `:ssh` hops and user hops can be kept between deployments
(`consfig.python_hop.keep`)."
  (defn __init__ [self name arguments establish * [required #()] [takes-rest False]
                  [ask-beforehand None] [establish-before-python None]
                  [carried-data None] [user-hop False]]
    (setv self.carried-data carried-data
          self.user-hop user-hop)
    (setv self.name name
          self.arguments (dict arguments)
          self.required (frozenset required)
          self.establish establish
          self.takes-rest takes-rest
          self.ask-beforehand ask-beforehand
          self.establish-before-python (or establish-before-python establish))))

(export :objects [Connection CommandResult Script Hop ArgType command->script choice-of
                  STRING STRINGS PORT SECONDS BOOLEAN ABSOLUTE-PATH PROBE-TIMEOUT
                  STALE-MINUTES MAX-COMMAND SAFE-WALK NEEDS-PYTHON walk-refusal check-path
                  check-sendable])
