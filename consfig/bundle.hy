"The bundle: the code a target of a `:python` hop imports.

The bundle is everything the target imports — hy, funcparserlib, consfig
with its props and connections, and the site's modules that define the
properties in the propspec — named by a hash of its files.  The target
unpacks it in its user's cache (`~/.cache/consfig/bundles/HASH`, see
`consfig/boot.py`); a controller whose Python makes the same bytecode as the
target's sends it compiled, from a cache of its own (`compiled-archive`).
Old bundles and archives are pruned (`prune-bundles`)."

(import importlib
        io
        os
        sys
        threading
        time
        consfig.boot [cache-directory :as _cache-directory]
        consfig.errors [ConsfigError]
        consfig.util [sha256-hex write-atomically])

;; A target imports this module (`consfig.serve`: `running-from`,
;; `prune-bundles`) and seldom makes or unpacks a bundle: tarfile, gzip and
;; shutil are imported where they are used.

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

(defn running-from [directory]
  "Say that this process (a target) runs from the bundle in DIRECTORY, which
it therefore passes on, as it is, to a further `:python` hop."
  (global _running-from)
  (setv _running-from directory))

;; abspath -> #(mtime-ns size digest), so that an unchanged file is hashed once.
(setv _digests {})

(defn _digest [path]
  (setv st (os.stat path)
        key #(st.st_mtime_ns st.st_size)
        known (.get _digests path))
  (if (and known (= (cut known 0 2) key))
      (get known 2)
      (do (with [f (open path "rb")]
            (setv d (sha256-hex (.read f))))
          (setv (get _digests path) #(#* key d))
          d)))

(defclass Bundle []
  "The files a target imports, by their path inside the bundle, and the hash
that names them."
  (defn __init__ [self files]
    (setv self.files files
          self._archive None)
    (setv lines (gfor rel (sorted files) f"{rel}\x00{(_digest (get files rel))}\n")
          self.hash (cut (sha256-hex (.encode (.join "" lines))) 0 32)))

  (defn archive [self]
    "The bundle as a gzipped tar, made once."
    (when (is self._archive None)
      (setv self._archive (_tar self.files)))
    self._archive))

(defn _source? [name]
  (or (.endswith name ".py") (.endswith name ".hy")))

(defn _tar [files]
  (import tarfile)
  (setv buf (io.BytesIO))
  (with [tar (tarfile.open :fileobj buf :mode "w:gz" :compresslevel 6)]
    (for [rel (sorted files)]
      (setv info (.gettarinfo tar (get files rel) rel))
      ;; Whoever unpacks it owns it; as root, tarfile would chown to these.
      (setv info.uid 0 info.gid 0 info.uname "" info.gname "" info.mode 0o600)
      (with [f (open (get files rel) "rb")]
        (.addfile tar info f))))
  (.getvalue buf))

(defn _tree-files [root [keep (fn [name] True)]]
  (dfor [d dirs names] (os.walk root)
        n names
        :if (keep n)
        (os.path.relpath (os.path.join d n) root) (os.path.join d n)))

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
  "Where bundles are cached for the user this process runs as: the same
place, found by the same code (`consfig.boot.cache-directory`), as on a
target.  A `ConsfigError` when no cache directory is safe to use."
  (import pwd)
  (setv uid (os.geteuid)
        #(path why) (_cache-directory os.environ uid (. (pwd.getpwuid uid) pw_dir)))
  (when (is path None)
    (raise (ConsfigError f"no safe cache directory for uid {uid}: {why}")))
  (os.path.join path "bundles"))

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

(defn bytecode-matches? [hello]
  "Whether the target whose HELLO message this is makes the same bytecode as
this Python."
  (import importlib.util)
  (and (= (.get hello "tag") sys.implementation.cache-tag)
       (= (.get hello "magic") (.hex importlib.util.MAGIC-NUMBER))))

(defn _module-names [files]
  (gfor rel files
        :setv n (.replace (get (os.path.splitext rel) 0) "/" ".")
        (if (.endswith n ".__init__") (cut n 0 -9) n)))

(defn _intact? [archive]
  ;; gzip's trailer holds the length and a CRC of the whole: a truncated or
  ;; damaged archive fails here, before it is sent.
  (import gzip)
  (try (gzip.decompress archive) True
       (except [#(OSError EOFError ValueError)] False)))

(defn _cached-archive [path note]
  (when (os.path.exists path)
    (with [f (open path "rb")] (setv data (.read f)))
    (when (_intact? data)
      (os.utime path)
      (return data))
    (note f"the compiled bundle {path} was damaged; compiling it again")
    (os.unlink path))
  None)

(defn _compile [bundle path]
  (import shutil subprocess tarfile tempfile)
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
    (setv data (_tar (_tree-files root)))
    (write-atomically path data :mode 0o600)
    data
    (except [e [OSError subprocess.SubprocessError tarfile.TarError]]
      None)
    (finally (shutil.rmtree scratch True))))

;; Hosts deployed side by side need the same bundle at the same moment: one
;; of them compiles it, the others wait for it rather than compile it too
;; (and race on one temporary file, named by this process's pid).
(setv _compiling (threading.Lock))

(defn compiled-archive [bundle [note (fn [text] None)]]
  "BUNDLE as a gzipped tar with this Python's bytecode beside the sources,
from the controller's cache, made there the first time (or again, saying so
to NOTE, when the cached one is damaged); None if compiling failed (the
target then compiles for itself)."
  (with [_compiling]
    (_compiled-archive bundle note)))

(defn _compiled-archive [bundle note]
  (when _running-from
    ;; A target passing its bundle on to a further Python (a hop after
    ;; :python) has the bytecode already, made by this very interpreter.
    (return (_tar (_tree-files _running-from
                               (fn [n] (or (_source? n)
                                           (.endswith n f".{sys.implementation.cache-tag}.pyc")))))))
  (try (setv directory (os.path.join (os.path.dirname (cache-directory)) "compiled"))
       (except [ConsfigError] (return None)))
  (setv path (os.path.join directory f"{bundle.hash}-{sys.implementation.cache-tag}.tar.gz"))
  (os.makedirs directory 0o700 :exist-ok True)
  (or (_cached-archive path note)
      (do (setv data (_compile bundle path))
          (when data (prune-bundles directory path :keep-newest 6 :min-age 0))
          data)))

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
          (do (import shutil)
              (shutil.rmtree path True))
          (try (os.unlink path) (except [OSError] None))))))

(export :objects [Bundle bundle-for site-modules ship-modules running-from
                  cache-directory compiled-archive bytecode-matches? prune-bundles])
