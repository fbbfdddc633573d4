"Applying a host in a Python on the target: the bootstrap, the code bundle
and the wire protocol between the controller and that Python.

The controller starts `python3 -E -S -c BOOTSTRAP` at the end of the chain
(see `consfig.connections.python`) and the two sides exchange frames over the
child's stdin and stdout.  A frame is two big-endian 32-bit lengths, a JSON
message of the first length and a binary payload of the second (usually
empty; the bundle travels as one raw payload, not as base64).

  controller → target   {op hello protocol bundle}        the bundle's hash
                        {op apply host unapply chain …}   sent at once, no wait
  target → controller   {op hello protocol python have}   have: bundle cached
  controller → target   {op bundle} + tar.gz payload      only if not have
  target → controller   {op events events [...]}          as they happen
                        {op tick}                         every few seconds
                        {op done changes failures}        or {op error …}

The bundle is everything the target imports — hy, funcparserlib, consfig
with its props and connections, and the site's modules that define the
properties in the propspec — named by a hash of its files, and unpacked in
the target user's cache, `~/.cache/consfig/bundles/HASH` (mode 0700), where
Python also caches the compiled bytecode.  An unchanged bundle is therefore
sent once and compiled once."

(import hashlib
        importlib
        io
        json
        os
        queue
        shutil
        signal
        struct
        sys
        tarfile
        threading
        time
        traceback
        consfig.errors [ConnectionFailed ConsfigError])

(setv PROTOCOL 1)

;; Python 3.9 is what the target needs; everything before the version check
;; must also parse, and fail politely, in an older Python.  Exit code 97
;; says "too old", 3 "the controller went away before we started".
(setv BOOTSTRAP (.strip "
import sys,os
V=sys.version_info
if V<(3,9):
 sys.stderr.write('consfig: %s is Python %d.%d.%d; consfig needs Python 3.9 or later\\n'%(sys.executable,V[0],V[1],V[2]));sys.exit(97)
import json,struct,pwd,io,tarfile,shutil
sys.dont_write_bytecode=False
sys.path[:]=[p for p in sys.path if p]
R=sys.stdin.buffer;W=sys.stdout.buffer
def rf():
 h=R.read(8)
 if len(h)<8:os._exit(3)
 a,b=struct.unpack('>II',h);m=json.loads(R.read(a));m['_payload']=R.read(b);return m
m=rf();H=m['bundle'];u=os.geteuid();C=os.environ.get('XDG_CACHE_HOME','')
if not(os.path.isabs(C)and(not os.path.exists(C)or os.stat(C).st_uid==u)):C=os.path.join(pwd.getpwuid(u).pw_dir,'.cache')
B=os.path.join(C,'consfig','bundles');D=os.path.join(B,H)
os.makedirs(B,0o700,True)
for d in(os.path.dirname(B),B):os.chmod(d,0o700)
N=not os.path.isdir(D)
import importlib.util as I
j=json.dumps({'op':'hello','protocol':1,'python':list(V[:3]),'executable':sys.executable,'have':not N,'tag':sys.implementation.cache_tag,'magic':I.MAGIC_NUMBER.hex()}).encode()
W.write(struct.pack('>II',len(j),0)+j);W.flush();P=[]
if N:
 while 1:
  m=rf()
  if m['op']=='bundle':break
  P.append(m)
 T='%s.tmp%d'%(D,os.getpid())
 tarfile.open(fileobj=io.BytesIO(m['_payload'])).extractall(T,**({'filter':'data'}if hasattr(tarfile,'data_filter')else{}))
 try:os.rename(T,D)
 except OSError:shutil.rmtree(T,True)
else:os.utime(D)
sys.path.insert(0,D)
import hy,consfig.remote
consfig.remote.serve(R,W,P,D,N)
"))

;; Frames

(setv _HEADER (struct.Struct ">II"))

(defn frame [msg [payload b""]]
  "The bytes of one frame: MSG (JSON data) and a binary PAYLOAD."
  (setv j (.encode (json.dumps msg :default str :separators #("," ":"))))
  (+ (.pack _HEADER (len j) (len payload)) j payload))

(defn _read-exactly [stream n]
  (setv data (.read stream n))
  (if (and data (< (len data) n))
      ;; A raw stream (a socket, a channel) may return less than asked.
      (do (setv parts [data] got (len data))
          (while (< got n)
            (setv more (.read stream (- n got)))
            (when (not more) (return None))
            (.append parts more)
            (+= got (len more)))
          (.join b"" parts))
      (if (= (len (or data b"")) n) data None)))

(defn read-frame [stream]
  "The next frame's message, with its payload as `_payload`; None at the end
of the stream (or in the middle of a frame)."
  (setv header (_read-exactly stream _HEADER.size))
  (when (is header None) (return None))
  (setv #(a b) (.unpack _HEADER header)
        body (_read-exactly stream a))
  (when (is body None) (return None))
  (setv msg (json.loads body)
        payload (if b (_read-exactly stream b) b""))
  (when (is payload None) (return None))
  (setv (get msg "_payload") payload)
  msg)

;; The bundle

(setv CORE-PACKAGES #("hy" "funcparserlib" "consfig" "consfig.props" "consfig.connections"))
(setv _SHIPPED-ROOTS #("hy" "funcparserlib" "hyrule" "consfig"))

;; Modules shipped whatever the propspec, declared by a consfig.
(setv _declared (set))

(defn ship-modules [#* names]
  "Ship the modules NAMES to every target of a :python hop, besides those
that define the properties a host uses: modules those import, say."
  (.update _declared names))

;; Set on a target: the bundle it runs from, and so passes on to further hops.
(setv _running-from None)

;; abspath -> #(mtime-ns size digest), so that an unchanged file is hashed once.
(setv _digests {})

(defn _digest [path]
  (setv st (os.stat path)
        key #(st.st_mtime_ns st.st_size)
        known (.get _digests path))
  (if (and known (= (cut known 0 2) key))
      (get known 2)
      (do (with [f (open path "rb")]
            (setv d (.hexdigest (hashlib.sha256 (.read f)))))
          (setv (get _digests path) #(#* key d))
          d)))

(defclass Bundle []
  "The files a target imports, by their path inside the bundle, and the hash
that names them."
  (defn __init__ [self files]
    (setv self.files files
          self._archive None)
    (setv h (hashlib.sha256))
    (for [rel (sorted files)]
      (.update h (.encode f"{rel}\x00{(_digest (get files rel))}\n")))
    (setv self.hash (cut (.hexdigest h) 0 32)))

  (defn archive [self]
    "The bundle as a gzipped tar, made once."
    (when (is self._archive None)
      (setv self._archive (_tar self.files)))
    self._archive))

;; Compiling hy and consfig takes a second or two; a controller whose Python
;; makes the same bytecode as the target's sends it compiled, from a cache
;; of its own, so that a target's first deployment is not much slower than
;; the next ones.  What it compiles is exactly the bundle's files, unpacked
;; with their timestamps, so the target's Python finds the bytecode current.
(setv _COMPILE (.strip "
import os,sys,importlib.machinery as M
sys.dont_write_bytecode=False
r=sys.argv[1];W=set(sys.argv[2:]);sys.path.insert(0,r)
import hy
for d,ds,fs in os.walk(r):
 ds.sort()
 for f in sorted(fs):
  if f.endswith(('.py','.hy')):
   p=os.path.join(d,f);n=os.path.relpath(p,r)[:-3].replace(os.sep,'.')
   if n.endswith('__init__'):n=n[:-9]
   if n in W:
    try:M.SourceFileLoader(n,p).get_code(n)
    except Exception as e:sys.stderr.write('%s: %s\\n'%(n,e))
"))

(defn _bytecode-matches? [hello]
  (import importlib.util)
  (and (= (.get hello "tag") sys.implementation.cache-tag)
       (= (.get hello "magic") (.hex importlib.util.MAGIC-NUMBER))))

;; Hosts deployed side by side need the same bundle at the same moment: one
;; of them compiles it, the others wait for it rather than compile it too.
(setv _compiling (threading.Lock))

(defn compiled-archive [bundle]
  "BUNDLE as a gzipped tar with this Python's bytecode beside the sources,
from the controller's cache, made there the first time; None if compiling
failed (the target then compiles for itself)."
  (with [_compiling]
    (_compiled-archive bundle)))

(defn _compiled-archive [bundle]
  (when _running-from
    ;; A target passing its bundle on to a further Python (a hop after
    ;; :python) has the bytecode already, made by this very interpreter.
    (setv files {})
    (for [[d dirs names] (os.walk _running-from)]
      (for [n names]
        (when (or (_source? n) (.endswith n f".{sys.implementation.cache-tag}.pyc"))
          (setv (get files (os.path.relpath (os.path.join d n) _running-from))
                (os.path.join d n)))))
    (return (_tar files)))
  (setv directory (os.path.join (os.path.dirname (cache-directory)) "compiled")
        path (os.path.join directory f"{bundle.hash}-{sys.implementation.cache-tag}.tar.gz"))
  (when (os.path.exists path)
    (os.utime path)
    (with [f (open path "rb")] (return (.read f))))
  (import subprocess tempfile)
  (os.makedirs directory 0o700 :exist-ok True)
  (setv scratch (tempfile.mkdtemp :prefix "consfig-compile-"))
  (try
    (setv root (os.path.join scratch "b"))
    (with [tar (tarfile.open :fileobj (io.BytesIO (.archive bundle)))]
      (.extractall tar root))
    ;; Only what this controller has imported: the rest of the property
    ;; library is compiled by a target that uses it, when it does.
    (setv r (subprocess.run [sys.executable "-E" "-S" "-c" _COMPILE root
                             #* (sorted (gfor n (_module-names bundle.files)
                                              :if (in n sys.modules) n))]
                            :capture-output True :timeout 300))
    (when (!= r.returncode 0) (return None))
    (setv files {})
    (for [[d dirs names] (os.walk root)]
      (for [n names]
        (setv (get files (os.path.relpath (os.path.join d n) root)) (os.path.join d n))))
    (setv data (_tar files))
    (setv tmp (+ path f".tmp{(os.getpid)}"))
    (with [f (open tmp "wb")] (.write f data))
    (os.replace tmp path)
    (prune-bundles directory path :keep-newest 6 :min-age 0)
    data
    (except [e [OSError subprocess.SubprocessError tarfile.TarError]]
      None)
    (finally (shutil.rmtree scratch True))))

(defn _module-names [files]
  (gfor rel files
        :setv n (.replace (get (os.path.splitext rel) 0) "/" ".")
        (if (.endswith n ".__init__") (cut n 0 -9) n)))

(defn _tar [files]
  (setv buf (io.BytesIO))
  (with [tar (tarfile.open :fileobj buf :mode "w:gz" :compresslevel 6)]
    (for [rel (sorted files)]
      (setv info (.gettarinfo tar (get files rel) rel))
      ;; Whoever unpacks it owns it; as root, tarfile would chown to these.
      (setv info.uid 0 info.gid 0 info.uname "" info.gname "" info.mode 0o600)
      (with [f (open (get files rel) "rb")]
        (.addfile tar info f))))
  (.getvalue buf))

(defn _source? [name]
  (or (.endswith name ".py") (.endswith name ".hy")))

(defn _add-tree [files directory prefix]
  (for [[root dirs names] (os.walk directory)]
    (setv (cut dirs) (lfor d (sorted dirs)
                           :if (not (or (.startswith d ".") (= d "__pycache__")))
                           d)
          rel (os.path.relpath root directory))
    (for [n names]
      (when (_source? n)
        (setv (get files (os.path.normpath (os.path.join prefix rel n)))
              (os.path.join root n))))))

(defn _add-package [files name]
  (setv module (importlib.import-module name))
  (for [d module.__path__]
    (_add-tree files d (.replace name "." "/"))))

(defn _module-file [name]
  (when (= name "__main__")
    (raise (ConsfigError
             (+ "a property used here is defined in __main__ (a REPL or a script), "
                "which cannot be shipped to the target; define it in a consfig file or a module"))))
  (setv module (.get sys.modules name))
  (when (is module None)
    (try (setv module (importlib.import-module name))
         (except [e ImportError]
           (raise (ConsfigError f"cannot ship module {name} to the target: {e}") :from e))))
  (setv path (getattr module "__file__" None))
  (when (not (and path (_source? path)))
    (raise (ConsfigError f"cannot ship module {name} to the target: it has no .hy or .py source file ({path})")))
  path)

(defn _add-module [files name]
  (setv path (_module-file name)
        base (os.path.basename path))
  (if (.startswith base "__init__.")
      (_add-package files name)
      (setv (get files (+ (.replace name "." "/") (get (os.path.splitext path) 1)))
            path))
  ;; A regular parent package needs its __init__ to be importable.
  (setv parts (.split name "."))
  (for [i (range 1 (len parts))]
    (setv parent (.join "." (cut parts 0 i))
          pm (.get sys.modules parent)
          pf (and pm (getattr pm "__file__" None)))
    (when (and pf (_source? pf))
      (setv (get files (+ (.replace parent "." "/") "/" (os.path.basename pf))) pf))))

(defn _propapp-names [x out]
  (import consfig.property [Propapp])
  (cond (isinstance x Propapp) (do (.add out x.name)
                                   (for [a x.args] (_propapp-names a out)))
        (isinstance x #(list tuple)) (for [a x] (_propapp-names a out))
        ;; A host in a `deploys`, as data.
        (and (isinstance x dict) (isinstance (.get x "propapp") str))
        (do (.add out (get x "propapp"))
            (_propapp-names (.get x "args") out))
        (isinstance x dict) (for [[k v] (.items x)]
                              (_propapp-names k out)
                              (_propapp-names v out)))
  out)

(defn site-modules [propspec [extra #()]]
  "The modules outside consfig and hy that a target applying PROPSPEC must
import: those defining its properties, plus EXTRA and those declared with
`ship-modules`."
  (setv names (set extra))
  (.update names _declared)
  (for [p (_propapp-names propspec (set))]
    (.add names (get (.rpartition p ".") 0)))
  (sorted (gfor n names
                :if (and n (not-in (get (.split n ".") 0) _SHIPPED-ROOTS))
                n)))

(defn _uses-hyrule? [paths]
  (for [p paths]
    (when (.endswith p ".hy")
      (with [f (open p "rb")]
        (when (in b"hyrule" (.read f))
          (return True)))))
  False)

(defn bundle-for [propspec [extra #()]]
  "The bundle a target needs to apply PROPSPEC.  On a target, passing a host
on to a further hop, it is the bundle this process runs from."
  (when _running-from
    (setv files {})
    (_add-tree files _running-from "")
    (return (Bundle files)))
  (setv files {})
  (for [p CORE-PACKAGES] (_add-package files p))
  (setv site {})
  (for [m (site-modules propspec extra)] (_add-module site m))
  (when (_uses-hyrule? (.values site))
    (_add-package files "hyrule"))
  (.update files site)
  (Bundle files))

(defn cache-directory []
  "Where bundles are cached for the user this process runs as."
  (import pwd)
  (setv u (os.geteuid)
        c (os.environ.get "XDG_CACHE_HOME" ""))
  (when (not (and (os.path.isabs c) (or (not (os.path.exists c)) (= (. (os.stat c) st_uid) u))))
    (setv c (os.path.join (. (pwd.getpwuid u) pw_dir) ".cache")))
  (os.path.join c "consfig" "bundles"))

(defn prune-bundles [directory keep * [keep-newest 3] [min-age 86400]]
  "Remove cached bundles in DIRECTORY other than KEEP, keeping the
KEEP-NEWEST most recently used and any used within MIN-AGE seconds (another
deployment may be running from it)."
  (setv now (time.time)
        entries [])
  (for [e (os.scandir directory)]
    (when (!= e.path keep)
      (.append entries #((. (.stat e :follow-symlinks False) st_mtime) e.path))))
  (for [[i [mtime path]] (enumerate (sorted entries :reverse True))]
    (setv tmp? (in ".tmp" (os.path.basename path)))
    (when (and (or tmp? (>= i (- keep-newest 1))) (> (- now mtime) min-age))
      (if (os.path.isdir path)
          (shutil.rmtree path True)
          (try (os.unlink path) (except [OSError] None))))))

;; Counters, for tests and the benchmark: what this controller sent.
(setv stats {"sessions" 0 "bundles-sent" 0 "bundle-bytes" 0 "bytes-sent" 0})

;; The target's side

(setv HEARTBEAT 5)
(setv _finished (threading.Event))

(defn _die [[code 1]]
  ;; The controller is gone: whatever we started must go too, now.
  (when (not (.is-set _finished))
    (import consfig.connections.local [kill-running])
    (kill-running)
    (os._exit code)))

(defclass _Writer []
  "Sends frames to the controller from a thread of its own, so that the
engine never waits on the connection, events go out in batches when they
come fast and at once when they come slowly, and a tick goes out when
nothing has happened for a while."
  (defn __init__ [self stream]
    (setv self.stream stream
          self.queue (queue.SimpleQueue)
          self.thread (threading.Thread :target self._loop :daemon True :name "consfig-writer"))
    (.start self.thread))

  (defn event [self event] (.put self.queue event))
  (defn message [self msg] (.put self.queue #(msg)))

  (defn close [self]
    (.put self.queue None)
    (.join self.thread 60))

  (defn _loop [self]
    (setv q self.queue)
    (while True
      (try (setv items [(.get q :timeout HEARTBEAT)])
           (except [queue.Empty] (setv items [#({"op" "tick"})])))
      (try (while True (.append items (.get-nowait q)))
           (except [queue.Empty] None))
      (setv events [] out [] end False)
      (for [i items]
        (cond (is i None) (setv end True)
              (isinstance i tuple)
              (do (when events (.append out (frame {"op" "events" "events" events})))
                  (setv events [])
                  (.append out (frame (get i 0))))
              True (.append events i)))
      (when events (.append out (frame {"op" "events" "events" events})))
      (try
        (.write self.stream (.join b"" out))
        (.flush self.stream)
        (except [OSError] (_die)))
      (when end (return)))))

(defn _watch-controller [stream]
  ;; The controller says nothing more once it has sent what to apply; end of
  ;; file on stdin means it, or the connection, has gone away.
  (while (is-not (read-frame stream) None))
  (_die))

(defn _next-apply [stream pending]
  (for [m pending]
    (when (= (get m "op") "apply") (return m)))
  (while True
    (setv m (read-frame stream))
    (when (is m None) (_die 3))
    (when (= (get m "op") "apply") (return m))))

(defn _apply-here [host msg sink]
  (import consfig.chain [establish-chain close-chain]
          consfig.connections.local [LocalConnection]
          consfig.engine [apply-host]
          consfig.propspec [data->propspec])
  (setv unapply (.get msg "unapply" False)
        check (.get msg "check" False)
        chain (lfor [name kwargs] (.get msg "chain" []) #(name (data->propspec kwargs)))
        here (LocalConnection))
  ;; Started inside a chroot (say), this Python runs in a system where no
  ;; service may start, as the hops before it knew.
  (when (.get msg "no-services")
    (setv (get here.connattrs "no-services") (get msg "no-services")))
  (when (not chain)
    (return (apply-host host here sink :unapply unapply :check check)))
  ;; Hops after :python (sudo, su, …) lead to a further Python, started
  ;; from this bundle as the hop's user sees it.
  (when (!= (get (get chain -1) 0) "python")
    (.append chain #("python" {"interpreter" sys.executable})))
  (setv conns (establish-chain chain here))
  (try
    (.apply-remotely (get conns -1) host sink :unapply unapply :check check
                     :verbosity (.get msg "verbosity" 0))
    (finally (close-chain conns))))

(defn _error-message [e]
  {"op" "error"
   "type" (. (type e) __name__)
   "message" (if (isinstance e ConsfigError) (str e) f"{(. (type e) __name__)}: {e}")
   "traceback" (traceback.format-exc)})

(defn serve [in out pending bundle-dir new]
  "The target's main loop, called by the bootstrap once the bundle is in
BUNDLE-DIR: apply the host the controller sends and stream the events back."
  (global _running-from)
  (setv _running-from bundle-dir)
  ;; After the bundle, so that nothing installed on the target shadows it,
  ;; but there for :python properties that use the target's own libraries.
  (import site)
  (.extend sys.path (gfor p (.getsitepackages site) :if (os.path.isdir p) p))
  (setv msg (_next-apply in pending)
        writer (_Writer out))
  (for [s [signal.SIGTERM signal.SIGHUP]]
    (signal.signal s (fn [#* _] (_die))))
  (.start (threading.Thread :target _watch-controller :args #(in) :daemon True
                            :name "consfig-watcher"))
  (import consfig.host [Host])
  (try
    (setv host (Host.<-data (get msg "host"))
          outcome (_apply-here host msg writer.event))
    (.message writer {"op" "done" "changes" outcome.changes "failures" outcome.failures})
    (except [e Exception]
      (.message writer (_error-message e))))
  (.set _finished)
  (.close writer)
  (when new
    (try (prune-bundles (os.path.dirname bundle-dir) bundle-dir)
         (except [OSError] None)))
  ;; Not a normal exit: that would wait for the thread still reading stdin
  ;; (and then fail to take its lock), which is both slow and noisy.
  (.flush sys.stderr)
  (os._exit 0))

;; The controller's side

(defclass Session []
  "The controller's end of a conversation with a target: frames in and out
on threads of their own, so that every wait here has a timeout."
  (defn __init__ [self process]
    (setv self.process process
          self.inbox (queue.SimpleQueue)
          self.outbox (queue.SimpleQueue)
          self.stderr-tail (bytearray))
    (setv self.threads (lfor [target name] [[self._read "reader"] [self._write "writer"]
                                            [self._drain "stderr"]]
                             (threading.Thread :target target :daemon True
                                               :name f"consfig-{name}")))
    (for [t self.threads] (.start t)))

  (defn _read [self]
    (try
      (while True
        (setv m (read-frame self.process.stdout))
        (.put self.inbox m)
        (when (is m None) (return)))
      (except [Exception]
        (.put self.inbox None))))

  (defn _write [self]
    (try
      (while True
        (setv data (.get self.outbox))
        (when (is data None) (break))
        (.write self.process.stdin data)
        (.flush self.process.stdin)
        (+= (get stats "bytes-sent") (len data)))
      (except [OSError] None))
    ;; The far end may be gone already, and a channel says so with errors
    ;; of its own.
    (try (.close self.process.stdin) (except [Exception] None)))

  (defn _drain [self]
    (setv stream self.process.stderr
          read (getattr stream "read1" stream.read))
    (try
      (while True
        (setv chunk (read 65536))
        (when (not chunk) (return))
        (.extend self.stderr-tail chunk)
        (del (cut self.stderr-tail 0 (max 0 (- (len self.stderr-tail) 16384)))))
      (except [Exception] None)))

  (defn send [self msg [payload b""]]
    (.put self.outbox (frame msg payload)))

  (defn receive [self timeout]
    "The next message; None at end of file; `queue.Empty` after TIMEOUT s."
    (.get self.inbox :timeout timeout))

  (defn stderr-text [self [wait 1]]
    ;; Give the stderr thread a moment to catch the last words.
    (setv deadline (+ (time.monotonic) wait))
    (while (and (is (.wait self.process 0) None) (< (time.monotonic) deadline))
      (time.sleep 0.02))
    (time.sleep 0.05)
    (.strip (.decode (bytes self.stderr-tail) "utf-8" "replace")))

  (defn close [self]
    "Close the target's stdin and give it a few seconds to finish, then kill it."
    (.put self.outbox None)
    (when (is (.wait self.process 5) None)
      (.kill self.process)
      (.wait self.process 5))
    ;; A target that has finished exits without waiting for the end of its
    ;; input; the writer may still be closing it.  Let it, rather than leave
    ;; it to die with the interpreter, noisily.
    (.join (get self.threads 1) 5)))

(defn _indent [text]
  (.join "\n" (gfor l (.splitlines text) (+ "    " l))))

(defn _no-python [hostname where interpreter code stderr]
  (setv found (cond (= code 97) (or stderr "a Python older than 3.9")
                    (in code #(126 127)) f"{interpreter} was not found, or cannot run"
                    (is code None) f"{interpreter} was not found, or cannot run"
                    True (+ f"{interpreter} exited with code {code} before it could start"
                            (if stderr f":\n{(_indent stderr)}" ""))))
  (ConnectionFailed
    (+ f"{hostname}: no usable Python on the target ({where}): {found}\n"
       (if (and stderr (in code #(126 127))) f"{(_indent stderr)}\n" "")
       "  consfig needs Python 3.9 or later there: install it, name it with "
       "[:python :interpreter \"/path/to/python3\"], or use [:python :install True].")))

(defn apply-remotely [upstream host sink * [interpreter "python3"] [chain #()]
                      [unapply False] [check False] [verbosity 0] [timeout 60] [modules #()]
                      [where None]]
  "Apply the preprocessed HOST in a Python started through UPSTREAM, passing
each event to SINK as it arrives, and return an `Outcome`.  CHAIN (parsed
hops) is established on the target first.  TIMEOUT is how many seconds the
target may stay silent before the deployment is given up."
  (import consfig.engine [Outcome]
          consfig.noservices [no-services-reason]
          consfig.propspec [propspec->data])
  (setv where (or where upstream.where)
        name host.hostname
        bundle (bundle-for host.propspec modules))
  (try
    (setv process (.start-process upstream [interpreter "-E" "-S" "-c" BOOTSTRAP]))
    (except [e OSError]
      (raise (_no-python name where interpreter None (str e)) :from e)))
  (+= (get stats "sessions") 1)
  (setv session (Session process))
  (try
    (.send session {"op" "hello" "protocol" PROTOCOL "bundle" bundle.hash})
    (.send session {"op" "apply"
                    "host" (.->data host)
                    "unapply" unapply
                    "check" check
                    "verbosity" verbosity
                    "no-services" (no-services-reason upstream)
                    "chain" (lfor [n kw] chain [n (propspec->data kw)])})
    (setv hello (_receive session timeout name where "start"))
    (when (is hello None)
      (setv code (.wait process 2))
      (raise (_no-python name where interpreter code (.stderr-text session))))
    (when (!= (.get hello "protocol") PROTOCOL)
      (raise (ConnectionFailed (+ f"{name}: the target ({where}) speaks consfig protocol "
                                  f"{(.get hello "protocol")}, this controller {PROTOCOL}"))))
    (setv wait timeout)
    (when (not (get hello "have"))
      (setv data (or (and (_bytecode-matches? hello) (compiled-archive bundle))
                     (.archive bundle)))
      (.send session {"op" "bundle" "hash" bundle.hash} data)
      (+= (get stats "bundles-sent") 1)
      (+= (get stats "bundle-bytes") (len data))
      ;; Until it has imported consfig, a target that compiles it (a slow
      ;; machine, another Python) cannot say it is alive.
      (setv wait (max timeout 300)))
    (while True
      (setv m (_receive session wait name where "apply")
            wait timeout)
      (when (is m None)
        (setv code (.wait process 2)
              lost (getattr process "lost" None))
        (when lost
          (raise (ConnectionFailed f"{name}: {lost}; the deployment did not finish")))
        (raise (ConnectionFailed
                 (+ f"{name}: the Python on the target ({where}) ended before the deployment finished"
                    (if (is code None) "" f" (exit code {code})")
                    (let [err (.stderr-text session)] (if err f":\n{(_indent err)}" ""))))))
      (setv op (get m "op"))
      (cond
        (= op "events") (for [e (get m "events")] (sink e))
        (= op "done") (return (Outcome name (get m "changes") (get m "failures")))
        (= op "error")
        (raise (ConsfigError
                 (+ f"{name}: on the target ({where}): {(get m "message")}"
                    (if (and verbosity (get m "traceback"))
                        (+ "\n" (_indent (get m "traceback")))
                        ""))))))
    (finally (.close session))))

(defn _receive [session timeout name where stage]
  (try (.receive session timeout)
       (except [queue.Empty]
         (raise (ConnectionFailed
                  (+ f"{name}: no word from the Python on the target ({where}) for {timeout} s"
                     (if (= stage "start") " while starting it" "")
                     "; gave up (the connection may have dropped)"))))))

(export :objects [PROTOCOL BOOTSTRAP frame read-frame Bundle bundle-for site-modules
                  ship-modules cache-directory prune-bundles serve Session
                  apply-remotely stats])
