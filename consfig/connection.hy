"Connections: the protocol every hop implements, chain parsing, and the
helpers properties call to act on the current connection.

A hop is a connection built on the one before it (the controller itself
for the first hop).  A POSIX hop only has to say how to run a shell script,
given as a string, with bytes on standard input: `(._run-script conn script
input timeout)` returning `#(exit-code stdout-bytes stderr-bytes)`.  Reading,
writing and testing files are built from that here, once, so that every hop
— ssh, sudo, su, chroot, and any chain of them — does them the same way.
A connection that runs in a Python process on the target (`:local`, and
everything after a `:python` hop) overrides them with direct system calls."

(import contextlib
        contextvars
        importlib
        keyword
        posixpath
        shlex
        time
        hy.models [Keyword]
        consfig.errors [ChainError CommandFailed CommandTimedOut ConnectionFailed
                                ConsfigError])

(setv NO-CHANGE (Keyword "no-change"))

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

(defn command->script [cmd]
  "A single string is a shell script as written; a list, or several strings,
is an argv whose every element is quoted."
  (cond (isinstance cmd str) cmd
        (and (= (len cmd) 1) (isinstance (get cmd 0) str)) (get cmd 0)
        True (shlex.join (lfor c cmd (str c)))))

;; How much longer than a command's timeout the controller waits for the
;; target to stop it, before it gives up on the connection itself.
(setv TIMEOUT-GRACE 10)

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

(defn _decode [b]
  (if (isinstance b bytes) (.decode b "utf-8" "replace") (or b "")))

(defn _encode [s]
  (cond (is s None) None
        (isinstance s bytes) s
        True (.encode s "utf-8")))

(defclass Connection []
  "One established hop.  `upstream` is the connection it runs inside
(None for a hop that runs on the controller)."

  (setv python? False
        hop-name "connection")

  (defn __init__ [self [upstream None]]
    (setv self.upstream upstream
          self._attrs {}))

  (defn [property] where [self]
    "Where this connection's commands run, for messages: `ssh:root@db1 > sudo`."
    (if self.upstream
        f"{self.upstream.where} > {(self.describe)}"
        (self.describe)))

  (defn describe [self] self.hop-name)

  (defn _run-script [self script input timeout]
    (raise (NotImplementedError
             f"{(. (type self) __name__)} does not implement _run-script")))

  (defn run [self cmd * [input None] [env None] [cwd None] [timeout None]
             [check True]]
    "Run CMD (a shell script string, or an argv list) and return a
`CommandResult`.  Raise `CommandFailed` on a non-zero exit when CHECK, and
`CommandTimedOut` when it runs for longer than TIMEOUT seconds."
    (setv script (command->script cmd)
          full (self._prefix-script script env cwd)
          started (time.monotonic))
    (if (and timeout (not self.python?))
        (do (setv #(code out err) (self._run-script (_with-timeout full timeout)
                                                    (_encode input)
                                                    (+ timeout TIMEOUT-GRACE)))
            (when (and (in code #(124 137)) (>= (- (time.monotonic) started) timeout))
              (raise (CommandTimedOut script timeout (_decode out) (_decode err) self.where))))
        (setv #(code out err) (self._run-script full (_encode input) timeout)))
    (setv result (CommandResult script code (_decode out) (_decode err)))
    (when (and check (!= code 0))
      (raise (CommandFailed script code result.stdout result.stderr self.where)))
    result)

  (defn _prefix-script [self script env cwd]
    (setv parts [])
    (when cwd (.append parts f"cd -- {(shlex.quote (str cwd))} || exit 1"))
    (for [[k v] (.items (or env {}))]
      (.append parts f"{k}={(shlex.quote (str v))}; export {k}"))
    (if parts (.join "\n" [#* parts script]) script))

  (defn read-file [self path]
    "The bytes of the file at PATH; `FileNotFoundError` when there is none."
    (setv #(code out err)
          (self._run-script (+ "test -f " (shlex.quote path)
                               " || exit 66; exec cat -- " (shlex.quote path))
                            None None))
    (cond (= code 66) (raise (FileNotFoundError path))
          (!= code 0) (raise (CommandFailed f"cat -- {(shlex.quote path)}"
                                            code "" (_decode err) self.where)))
    out)

  (defn write-file [self path content * [mode None] [owner None] [group None]]
    "Replace the file at PATH with CONTENT atomically: a temporary file in the
same directory is written, synced and renamed over PATH.  The existing file's
mode and ownership are kept unless MODE, OWNER or GROUP say otherwise; a new
file gets the mode the umask allows."
    (setv q shlex.quote
          d (or (posixpath.dirname path) ".")
          lines ["set -e"
                 f"tmp=$(mktemp {(q (posixpath.join d ".consfig-XXXXXXXX"))})"
                 "trap 'rm -f \"$tmp\"' EXIT"
                 "cat >\"$tmp\""
                 f"if [ -e {(q path)} ]; then"
                 f"  chmod --reference={(q path)} \"$tmp\""
                 f"  chown --reference={(q path)} \"$tmp\" 2>/dev/null || true"
                 "else"
                 "  chmod \"$(printf '%o' $(( 0666 & ~0$(umask) )))\" \"$tmp\""
                 "fi"])
    (when (is-not mode None)
      (.append lines f"chmod {(format mode "o")} \"$tmp\""))
    (when (or owner group)
      (.append lines f"chown {(q (+ (or owner "") (if group f":{group}" "")))} \"$tmp\""))
    (.extend lines ["sync -- \"$tmp\" 2>/dev/null || true"
                    f"mv -f -- \"$tmp\" {(q path)}"
                    "trap - EXIT"])
    (self.run (.join "\n" lines) :input (_encode content))
    None)

  (defn exists? [self path]
    "Whether anything (even a dangling symlink) is at PATH."
    (= 0 (get (self._run-script (+ "test -e " (shlex.quote path) " || test -L "
                                   (shlex.quote path))
                                None None)
              0)))

  (defn mktemp [self [directory False]]
    "Make a new private temporary file (or directory) and return its path."
    (.strip (. (self.run (if directory "mktemp -d" "mktemp")) stdout)))

  (defn upload [self local-path remote-path * [mode None]]
    "Copy the controller's file LOCAL-PATH to REMOTE-PATH."
    (with [f (open local-path "rb")]
      (self.write-file remote-path (.read f) :mode mode)))

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
    (raise (ConnectionFailed
             (+ f"hop :{self.hop-name} cannot start a streaming process ({self.where}), "
                "which a :python hop after it needs"))))

  (defn apply-host [self host sink * [unapply False] [verbosity 0]]
    "Apply the preprocessed HOST at the far end of this connection, feeding
its events to SINK, and return the `Outcome`; or return None, as here, to
have the deployment apply it in this process through this connection.  A
`:python` hop's connection overrides this: its target applies the host."
    None)

  (defn close [self]
    "Tear the hop down.  Closing an upstream is its owner's business."
    None))

;; The connection and host properties act on; set by the engine.
(setv current-connection (contextvars.ContextVar "consfig-connection"))

(defn connection []
  "The connection the property being applied acts through."
  (try (.get current-connection)
       (except [LookupError]
         (raise (ConsfigError "no connection: properties act only while a deployment applies them")))))

(defn run [#* cmd [input None] [env None] [cwd None] [timeout None] [check True]]
  "Run a command on the current connection.  One string is a shell script;
several strings (or a list) are an argv, each element quoted.  Return the
`CommandResult`; a non-zero exit raises `CommandFailed` unless CHECK is false."
  (.run (connection) (if (= (len cmd) 1) (get cmd 0) cmd)
        :input input :env env :cwd cwd :timeout timeout :check check))

(defn run-ok? [#* cmd #** kw]
  "Whether the command exits zero."
  (. (run #* cmd :check False #** kw) ok?))

(defn output [#* cmd #** kw]
  "The standard output of a command that must succeed."
  (. (run #* cmd #** kw) stdout))

(defn read-remote-file [path [default None]]
  "The text of PATH on the target, or DEFAULT when it does not exist."
  (try (_decode (.read-file (connection) path))
       (except [FileNotFoundError] default)))

(defn write-remote-file [path content #** kw]
  "Atomically replace PATH on the target with CONTENT (str or bytes)."
  (.write-file (connection) path (_encode content) #** kw))

(defn remote-exists? [path]
  (.exists? (connection) path))

(defn change-if-changes-file [path thunk]
  "Call THUNK; return `:no-change` if the content of PATH is the same after
it as before, whatever THUNK returned."
  (setv before (try (.read-file (connection) path) (except [FileNotFoundError] None)))
  (thunk)
  (setv after (try (.read-file (connection) path) (except [FileNotFoundError] None)))
  (if (= before after) NO-CHANGE None))

;; Chains

(defn _hop-module [name]
  (try
    (importlib.import-module (+ "consfig.connections." (hy.mangle name)))
    (except [e ModuleNotFoundError]
      (when (not (.startswith (or e.name "") "consfig.connections"))
        (raise))
      None)))

(defn hop-spec [name]
  "The `HOP` description of the hop type NAME, or a `ChainError`."
  (setv mod (_hop-module name))
  (when (or (is mod None) (not (hasattr mod "HOP")))
    (raise (ChainError f"unknown hop type :{name} (consfig knows :local :ssh :sudo :su :as :chroot :python)")))
  mod.HOP)

(defclass Hop []
  "What a hop type offers: its name, the arguments it accepts and the
function that establishes it on top of an upstream connection."
  (defn __init__ [self name arguments establish * [takes-rest False]]
    (setv self.name name
          self.arguments (frozenset arguments)
          self.establish establish
          self.takes-rest takes-rest)))

(defn _keyword-name [x]
  (cond (isinstance x Keyword) x.name
        (isinstance x str) (.lstrip x ":")
        True None))

(defn parse-chain [chain]
  "Normalise CHAIN to a list of `#(name kwargs)` hops, validating every hop
type and argument before anything connects."
  (when (or (isinstance chain Keyword) (isinstance chain str))
    (setv chain [chain]))
  (when (and chain
             (isinstance (get chain 0) Keyword)
             (> (len chain) 1)
             (not (isinstance (get chain 1) Keyword))
             (not (isinstance (get chain 1) #(list tuple))))
    ;; `[:ssh :user "x"]` given alone is one hop with arguments.
    (setv chain [chain]))
  (when (not (isinstance chain #(list tuple)))
    (raise (ChainError f"a connection chain is a list of hops, not {(hy.repr chain)}")))
  (lfor hop chain (_parse-hop hop)))

(defn _parse-hop [hop]
  (setv items (if (isinstance hop #(list tuple)) (list hop) [hop])
        name (and items (_keyword-name (get items 0))))
  (when (not name)
    (raise (ChainError f"a hop is a keyword or a keyword-headed list, not {(hy.repr hop)}")))
  (setv spec (hop-spec name)
        rest (cut items 1 None)
        kwargs {})
  (when (% (len rest) 2)
    (raise (ChainError f"hop :{name}: arguments come in :keyword value pairs, got {(hy.repr rest)}")))
  (for [i (range 0 (len rest) 2)]
    (setv k (_keyword-name (get rest i)))
    (when (or (not (isinstance (get rest i) Keyword)) (not (in k spec.arguments)))
      (raise (ChainError (+ f"hop :{name} has no argument {(hy.repr (get rest i))}"
                            (if spec.arguments
                                (+ " (it takes " (.join " " (gfor a (sorted spec.arguments) f":{a}")) ")")
                                " (it takes none)")))))
    (setv (get kwargs k) (get rest (+ i 1))))
  #(name kwargs))

(defn establish-chain [chain [start None]]
  "Establish the parsed CHAIN hop by hop, starting from the controller (or
from the connection START: a host deploying another one).  Return the list
of connections made, innermost last; close them in reverse.  A hop that
takes the rest of the chain (`:python`) receives it and ends the walk."
  (import consfig.connections.local [LocalConnection])
  (setv conns [(or start (LocalConnection))])
  (try
    (for [[i [name kwargs]] (enumerate chain)]
      (setv spec (hop-spec name))
      (cond
        (= name "local") (continue)
        spec.takes-rest
        (do (.append conns (spec.establish (get conns -1) (cut chain (+ i 1) None)
                                      #** (_python-kwargs kwargs)))
            (break))
        True (.append conns (spec.establish (get conns -1) #** (_python-kwargs kwargs)))))
    (except [BaseException]
      (close-chain conns)
      (raise)))
  conns)

(defn _python-kwargs [kwargs]
  ;; `:strict-host-key-checking` names the parameter `strict_host_key_checking`,
  ;; and `:from`, a Python keyword, the parameter `from_`.
  (dfor [k v] (.items kwargs)
        (if (keyword.iskeyword (hy.mangle k)) (+ (hy.mangle k) "_") (hy.mangle k))
        v))

(setv chain-cache (contextvars.ContextVar "consfig-chain-cache"))

(defn [contextlib.contextmanager] establishing-for [host]
  "The context of one deployment of HOST, around establishing its chain and
applying through it: hops take their defaults from the host (`:ssh` connects
to its hostname) and a secret a hop asks the user for (a sudo password) is
asked for once, here and in the deployments nested in this one."
  (import consfig.host [current-host])
  (setv host-token (.set current-host host)
        cache-token (when (is (.get chain-cache None) None) (.set chain-cache {})))
  (try
    (yield)
    (finally
      (when cache-token (.reset chain-cache cache-token))
      (.reset current-host host-token))))

(defn deployment-cache []
  "A dict that lives as long as the outermost deployment being made (a
fresh one each call outside any)."
  (setv cache (.get chain-cache None))
  (if (is cache None) {} cache))

(defn close-chain [conns]
  "Close the connections of an established chain, innermost first."
  (for [c (reversed conns)]
    (try (.close c)
         (except [Exception] None))))

(defn chain->data [chain]
  "A parsed chain as printable Hy data: `[[:ssh :user \"x\"] :sudo]`."
  (lfor [name kwargs] chain
        (if kwargs
            [(Keyword name) #* (sum (gfor [k v] (.items kwargs) [(Keyword k) v]) [])]
            (Keyword name))))

(export :objects [NO-CHANGE CommandResult Connection Hop connection run run-ok?
                  output read-remote-file write-remote-file remote-exists?
                  change-if-changes-file parse-chain hop-spec chain->data
                  establish-chain close-chain establishing-for deployment-cache
                  command->script current-connection])
