"The bundle: the code a target of a `:python` hop imports, in layers.

The first layer holds the libraries — hy, funcparserlib, hyrule, consfig
with its props and connections — the same whatever the site, so that a
target receives and compiles it once per version of consfig and per Python;
the last holds the site's modules that define the properties in the
propspec, small and new after every edit of the site.  (An image adds a
layer between them for the report's libraries.)  Each layer is named by a
hash of its files; the target unpacks each in its user's cache
(`~/.cache/consfig/bundles/HASH`, see `consfig/boot.py`) and keeps it there
for the next deployment.  A controller whose Python makes the same bytecode
as the target's sends each layer compiled, from a cache of its own
(`compiled-archive`).  Old layers and archives are pruned
(`prune-bundles`)."

(import importlib
        importlib.util
        io
        os
        sys
        threading
        time
        consfig.boot [cache-directory :as _cache-directory]
        consfig.errors [ConsfigError]
        consfig.util [sha256-hex write-atomically]
        consfig.model.property [Propapp]
        pwd
        shutil
        subprocess
        consfig.python_hop.precompile
        consfig.python_hop.precompile [bytecode-for])

;; A target imports this module (`consfig.python_hop.target`: `running-from`,
;; `prune-bundles`) and seldom makes or unpacks a bundle: tarfile, gzip and
;; tempfile are imported where they are used.

(setv CORE-PACKAGES #("hy" "funcparserlib" "hyrule" "consfig" "consfig.props" "consfig.connections"
                      "jeepney"))
;; Small pure-Python libraries the converging agent imports on a target
;; (consfig.converge.watch): inotify and D-Bus.  Shipped, so that nothing need be
;; installed there; imported only by the agent.
(setv CORE-MODULES #("inotify_simple"))
(setv _SHIPPED-ROOTS #("hy" "funcparserlib" "hyrule" "consfig" "jeepney" "inotify_simple"))

;; Modules shipped whatever the propspec, declared by a consfig.
(setv _declared (set))

;; Module -> the distributions a target needs to import it, shipped in a
;; layer of their own only to hosts whose propspec uses that module's
;; properties (`ship-distributions-with`).
(setv _distributions {})

(defn ship-distributions-with [module #* names]
  "Ship the installed distributions NAMES (their Python files, the data
files among them such as certifi's CA bundle, and their metadata) to every
target whose propspec uses a property of MODULE: libraries that only some
hosts need (etcd3gw for the dataspace)."
  (setv (get _distributions module) (tuple names)))

(defn _add-distribution [files name]
  (import importlib.metadata)  ; start-up: 6 ms
  (setv dist (try (importlib.metadata.distribution name)
                  (except [importlib.metadata.PackageNotFoundError]
                    (raise (ConsfigError (+ f"cannot ship {name} to the target: it is not "
                                            "installed here (pip install consfig's dependencies)"))))))
  (for [f (or dist.files [])]
    (setv rel (str f)
          parts (.split rel "/"))
    (when (and (not (.startswith rel ".."))
               (not (in "__pycache__" parts))
               (not (in "tests" parts))
               (or (.endswith rel ".py") (.endswith rel ".pem")
                   (and (= (len parts) 2) (.endswith (get parts 0) ".dist-info")
                        (= (get parts 1) "METADATA"))))
      (setv (get files rel) (str (dist.locate-file f))))))

(defn ship-modules [#* names]
  "Ship the modules NAMES to every target of a :python hop, besides those
that define the properties a host uses: modules those import, say."
  (.update _declared names))

;; Set on a target: the bundle it runs from, and so passes on to further hops.
(setv _running-from None)

(defn running-from [directories]
  "Say that this process (a target) runs from the layers in DIRECTORIES,
which it therefore passes on, as they are, to a further `:python` hop."
  (global _running-from)
  (setv _running-from (list directories)))

;; abspath -> #(mtime-ns ctime-ns size digest), so that an unchanged file is
;; hashed once.  Not mtime and size alone: a site rewritten at its size
;; within a tick, or given back its mtime, must not keep its old name; any
;; write (or utime) moves the ctime, which nobody can set.
(setv _digests {})

(defn _digest [path]
  (setv st (os.stat path)
        key #(st.st_mtime_ns st.st_ctime_ns st.st_size)
        known (.get _digests path))
  (if (and known (= (cut known 0 3) key))
      (get known 3)
      (do (with [f (open path "rb")]
            (setv d (sha256-hex (.read f))))
          (setv (get _digests path) #(#* key d))
          d)))

(defclass Layer []
  "Files a target imports, by their path inside the layer, and the hash
that names them.  BELOW, the hashes of the layers this one is compiled
against, are part of its name: a site's bytecode holds the expansions of
the consfig that compiled it, and is not to be run with another."
  (defn __init__ [self files [below #()]]
    (setv self.files files
          self._archive None)
    (setv lines (gfor rel (sorted files) f"{rel}\x00{(_digest (get files rel))}\n")
          self.hash (cut (sha256-hex (.encode (+ (.join "" (gfor b below f"below\x00{b}\n"))
                                                  (.join "" lines))))
                         0 32)))

  (defn archive [self]
    "The layer as a gzipped tar, made once."
    (when (is self._archive None)
      (setv self._archive (_tar self.files)))
    self._archive))

(defclass Bundle []
  "The code a target imports, in layers, each unpacked on the target in a
directory of its own named by its hash: first the libraries (hy, hyrule,
consfig; the same for every site, so sent and compiled once per target and
Python), last the site's own modules (small, and new after every edit of
the site).  A running target Python can take a new site layer; any other
new layer needs another Python."
  (defn __init__ [self layers]
    (setv self.layers layers))

  (defn [property] hashes [self]
    "The names of the layers, in order."
    (lfor l self.layers l.hash))

  (defn [property] libraries [self]
    "The names of the layers before the site's."
    (cut self.hashes 0 -1))

  (defn layer [self hash]
    "The layer named HASH; a `ConsfigError` when there is none."
    (for [l self.layers]
      (when (= l.hash hash) (return l)))
    (raise (ConsfigError f"the target asked for code this controller did not offer ({hash})"))))

(defn _source? [name]
  (or (.endswith name ".py") (.endswith name ".hy")))

(defn _tar [files]
  (import tarfile)  ; start-up: 1 ms
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
  ;; Found by its spec, not imported: importing hyrule runs its macros'
  ;; `require`s, some 0.6 s of a controller's CPU for files it only reads.
  (setv spec (importlib.util.find-spec name))
  (when (or (is spec None) (not spec.submodule-search-locations))
    (raise (ConsfigError f"cannot ship package {name} to the target: it is not installed as a package")))
  (for [d spec.submodule-search-locations]
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

(defn bundle-for [propspec [extra #()] [libraries #()]]
  "The `Bundle` a target needs to apply PROPSPEC: the libraries (hy,
hyrule, consfig), the packages LIBRARIES (a layer of their own, when given)
and the site's modules (those defining the properties in PROPSPEC, EXTRA,
and those declared with `ship-modules`).  On a target, passing a host on to
a further hop, it is the bundle this process runs from."
  (when _running-from
    (setv layers [])
    (for [[i d] (enumerate _running-from)]
      (setv files {})
      (_add-tree files d "")
      (.append layers (Layer files (if (= i (- (len _running-from) 1))
                                       (lfor l layers l.hash)
                                       #()))))
    (return (Bundle layers)))
  (setv core {})
  (for [p CORE-PACKAGES] (_add-package core p))
  (for [m CORE-MODULES] (_add-module core m))
  (setv layers [(Layer core)])
  (setv modules (sfor p (_propapp-names propspec (set)) (get (.rpartition p ".") 0))
        dists (sorted (sfor [m names] (.items _distributions) :if (in m modules) n names n)))
  (when dists
    (setv more {})
    (for [d dists] (_add-distribution more d))
    (.append layers (Layer more)))
  (when libraries
    (setv more {})
    (for [m libraries] (_add-module more m))
    (.append layers (Layer more)))
  (setv site {})
  (for [m (site-modules propspec extra)] (_add-module site m))
  (.append layers (Layer site (lfor l layers l.hash)))
  (Bundle layers))

(defn cache-directory []
  "Where bundles are cached for the user this process runs as: the same
place, found by the same code (`consfig.boot.cache-directory`), as on a
target.  A `ConsfigError` when no cache directory is safe to use."
  (setv uid (os.geteuid)
        #(path why) (_cache-directory os.environ uid (. (pwd.getpwuid uid) pw_dir)))
  (when (is path None)
    (raise (ConsfigError f"no safe cache directory for uid {uid}: {why}")))
  (os.path.join path "bundles"))

;; Compiling hy and consfig takes seconds; a controller whose Python makes
;; the same bytecode as the target's sends each layer compiled, from a
;; cache of its own, so that a target's first deployment is not much slower
;; than the next ones.  The bytecode is hash-checked (`consfig.python_hop.precompile`):
;; valid whatever dates the files get, never trusted for another source.

(defn bytecode-matches? [hello]
  "Whether the target whose HELLO message this is makes the same bytecode as
this Python."
  (and (= (.get hello "tag") sys.implementation.cache-tag)
       (= (.get hello "magic") (.hex importlib.util.MAGIC-NUMBER))))

(defn _module-name [rel]
  (setv n (.replace (get (os.path.splitext rel) 0) "/" "."))
  (if (.endswith n ".__init__") (cut n 0 -9) n))

(defn _intact? [archive]
  ;; gzip's trailer holds the length and a CRC of the whole: a truncated or
  ;; damaged archive fails here, before it is sent.
  (import gzip)  ; start-up: 0.4 ms
  (try (gzip.decompress archive) True
       (except [#(OSError EOFError ValueError)] False)))

(defn _cached-archive [path note]
  (when (os.path.exists path)
    (with [f (open path "rb")] (setv data (.read f)))
    (when (_intact? data)
      (os.utime path)
      (return data))
    (note f"the compiled code {path} was damaged; compiling it again")
    (os.unlink path))
  None)

;; What a target imports besides the modules of the properties it applies
;; (which the controller imported too): they are compiled with them.
(setv _TARGET-MODULES #("consfig.python_hop.target" "consfig.image.build" "consfig.ui.cli"))

(defn _compile [layer path note]
  (import tarfile tempfile)  ; start-up: 2 ms
  (setv scratch (tempfile.mkdtemp :prefix "consfig-compile-")
        tag sys.implementation.cache-tag)
  (try
    (setv root (os.path.join scratch "b"))
    (with [tar (tarfile.open :fileobj (io.BytesIO (.archive layer)))]
      (.extractall tar root))
    ;; Python modules, and the site's, compiled as this process compiled
    ;; them when it loaded the site, cost nothing to compile here.
    (setv left [])
    (for [rel (sorted layer.files)]
      (setv pyc (bytecode-for (get layer.files rel)
                              (with [f (open (get layer.files rel) "rb")] (.read f))
                              rel))
      (if pyc
          (do (setv out (importlib.util.cache-from-source (os.path.join root rel)))
              (os.makedirs (os.path.dirname out) :exist-ok True)
              (with [f (open out "wb")] (.write f pyc)))
          (.append left (_module-name rel))))
    ;; Hy modules, in a Python of their own (compiling one runs those it
    ;; requires, which must be these): only those this controller imported,
    ;; and those every target does.  The rest of the library is compiled by
    ;; a target that uses it, when it does.
    (when (in "hy/__init__.py" layer.files)
      (for [m _TARGET-MODULES] (importlib.import-module m))
      (setv wanted (lfor n left :if (in n sys.modules) n))
      (when wanted
        (note (+ f"compiling consfig's code for {tag} ({(len wanted)} modules); once for "
                 "each version of consfig"))
        (setv r (subprocess.run [sys.executable "-E" "-S" consfig.python_hop.precompile.__file__ root
                                 #* (gfor n wanted x ["--only" n] x)]
                                :capture-output True :timeout 600))
        (when (!= r.returncode 0) (return None))))
    (setv data (_tar (_tree-files root)))
    (write-atomically path data :mode 0o600)
    data
    (except [e [OSError subprocess.SubprocessError tarfile.TarError]]
      None)
    (finally (shutil.rmtree scratch True))))

;; Hosts deployed side by side need the same layer at the same moment: one
;; of them compiles it, the others wait for it rather than compile it too
;; (and race on one temporary file, named by this process's pid).
(setv _compiling (threading.Lock))

(defn compiled-archive [layer [note (fn [text] None)]]
  "LAYER as a gzipped tar with this Python's bytecode beside the sources,
from the controller's cache, made there the first time (or again, saying so
to NOTE, when the cached one is damaged); None if compiling failed (the
target then compiles for itself)."
  (with [_compiling]
    (_compiled-archive layer note)))

(defn _compiled-archive [layer note]
  (setv tag sys.implementation.cache-tag)
  (when _running-from
    ;; A target passing its layers on to a further Python (a hop after
    ;; :python) has their bytecode already, made by this very interpreter.
    (for [d _running-from]
      (when (= (os.path.basename d) layer.hash)
        (return (_tar (_tree-files d (fn [n] (or (_source? n) (.endswith n f".{tag}.pyc"))))))))
    (return None))
  (try (setv directory (os.path.join (os.path.dirname (cache-directory)) "compiled"))
       (except [ConsfigError] (return None)))
  (setv path (os.path.join directory f"{layer.hash}-{tag}.tar.gz"))
  (os.makedirs directory 0o700 :exist-ok True)
  (or (_cached-archive path note)
      (do (setv data (_compile layer path note))
          (when data (prune-bundles directory path :keep-newest 12 :min-age 0))
          data)))

(defn prune-bundles [directory keep * [keep-newest 3] [min-age 86400]]
  "Remove cached layers (or archives) in DIRECTORY other than KEEP (a path,
or several), keeping the KEEP-NEWEST most recently used and any used within
MIN-AGE seconds (another deployment may be running from it)."
  (setv now (time.time)
        keep (if (isinstance keep str) [keep] keep)
        entries [])
  (for [e (os.scandir directory)]
    (when (not-in e.path keep)
      (.append entries #((. (.stat e :follow-symlinks False) st_mtime) e.path))))
  (for [[i [mtime path]] (enumerate (sorted entries :reverse True))]
    (setv tmp? (in ".tmp" (os.path.basename path)))
    (when (and (or tmp? (>= i (- keep-newest 1))) (> (- now mtime) min-age))
      (if (os.path.isdir path)
          (shutil.rmtree path True)
          (try (os.unlink path) (except [OSError] None))))))

(export :objects [Bundle Layer bundle-for site-modules ship-modules ship-distributions-with running-from
                  cache-directory compiled-archive bytecode-matches? prune-bundles])
