"Loading a site's consfig file.

A consfig file is loaded as a module with a stable name derived from its file
name (`hosts/web.hy` → `consfig_site_web`), so that the qualified names of the
properties it defines (`consfig_site_web.web-base`) mean the same on the
controller and, once its source is shipped, on a target.

Mistakes in a consfig — a syntax error, an unknown property, wrong arguments,
an exception at top level — become one `ConsfigError` naming the file and
line, not a traceback."

(import hy
        hashlib
        pwd
        consfig.boot [cache-directory]
        importlib.util
        os
        re
        sys
        traceback
        hy.errors [HyLanguageError]
        hy.importer [HyLoader]
        consfig.errors [ConsfigError]
        consfig.python_hop.precompile [remember]
        consfig.model.property [defining]
        importlib._bootstrap_external :as bx
        marshal)

(setv DEFAULT-CONSFIGS ["consfig.hy"])

(defn module-name-for [path]
  "The stable module name of the consfig at PATH."
  (setv stem (get (os.path.splitext (os.path.basename path)) 0))
  (+ "consfig_site_" (re.sub r"[^A-Za-z0-9_]" "_" stem)))

(defn _display [path]
  (setv rel (os.path.relpath path))
  (if (.startswith rel "..") path rel))

(defn _where-in [e path]
  ;; The innermost frame of the traceback that is in the consfig itself.
  (setv line None)
  (for [frame (traceback.extract-tb e.__traceback__)]
    (when (= (os.path.abspath frame.filename) path)
      (setv line frame.lineno)))
  (if line f"{(_display path)}:{line}" (_display path)))

(defn load-consfig [path]
  "Load the consfig file at PATH and return its module."
  (setv path (os.path.abspath path))
  (when (not (os.path.isfile path))
    (raise (ConsfigError f"cannot read consfig {(_display path)}: no such file")))
  (when (not (os.access path os.R_OK))
    (raise (ConsfigError f"cannot read consfig {(_display path)}: permission denied")))
  (setv name (module-name-for path)
        loader (_SiteLoader name path)
        spec (importlib.util.spec-from-file-location name path :loader loader)
        module (importlib.util.module-from-spec spec)
        previous (.get sys.modules name))
  (setv (get sys.modules name) module
        token (.set defining {}))
  (try
    (.exec-module loader module)
    (except [e BaseException]
      (if (is previous None)
          (.pop sys.modules name None)
          (setv (get sys.modules name) previous))
      (raise (_consfig-error e path)))
    (finally (.reset defining token)))
  module)

(defclass _SiteLoader [HyLoader]
  "Hy's loader, but the bytecode it caches for a consfig is checked against
a hash of the source, not its mtime and size: Python trusts a cached compile
whose source has the same mtime in whole seconds and the same size, and a
site edited and redeployed within a second (a script, a generated consfig)
would deploy its old version.  The code is remembered (`remember`), so
that the site's modules travel to a target compiled, at no cost."
  (defn get-code [self fullname]
    (setv path (self.get-filename fullname)
          source (self.get-data path)
          digest (importlib.util.source-hash (+ source (compiler-identity)))
          cached (_cached-code-path path))
    (try
      (with [f (open cached "rb")] (setv data (.read f)))
      ;; Magic, flags (0b11: hash-based, checked), then the source's hash.
      (when (and (= (cut data 0 4) importlib.util.MAGIC-NUMBER)
                 (= (int.from-bytes (cut data 4 8) "little") 0b11)
                 (= (cut data 8 16) digest))
        (setv code (marshal.loads (cut data 16 None)))
        (remember path source code)
        (return code))
      (except [OSError] None))
    (setv code (self.source-to-code source path))
    (remember path source code)
    (when cached
      (try (self._cache-bytecode path cached (bx._code-to-hash-pyc code digest True))
           (except [#(OSError NotImplementedError)] None)))
    code))

(defn _cached-code-path [path]
  ;; Beside the source, as Python caches (or under $PYTHONPYCACHEPREFIX);
  ;; where bytecode writing is off, in consfig's own private cache, as the
  ;; layers it ships are: a site compiled again on every run is most of
  ;; such a run's time, and this bytecode is checked against the source's
  ;; hash and the compiler's identity, never trusted by date.  None when
  ;; there is no safe place.
  (if (not sys.dont-write-bytecode)
      (importlib.util.cache-from-source path)
      (do (setv uid (os.geteuid)
                #(root _) (cache-directory os.environ uid (. (pwd.getpwuid uid) pw-dir)))
          (when root
            (os.path.join root "sites"
                          (+ (cut (.hexdigest (hashlib.sha256 (os.fsencode path))) 0 32)
                             "." sys.implementation.cache-tag ".pyc"))))))

(setv _compiler-identity None)

(defn compiler-identity []
  "Bytes that change when what compiles a consfig does: Hy's version, and
the name, size and mtime of each Hy file of hyrule and of consfig, its
layer packages, its properties and connections included (their macros
expand in the site's code).  A site's cached bytecode is valid only for
the same source compiled by the same consfig."
  (global _compiler-identity)
  (when (is _compiler-identity None)
    (setv h (hashlib.sha256 (.encode f"hy {hy.__version__}\0")))
    ;; hyrule's files, not its version: found without importing it (its
    ;; macros cost a controller 0.6 s) nor importlib.metadata (20 ms).
    ;; Installed, props and connections are inside consfig's directory, so
    ;; a directory walked once is not walked (and hashed) again.
    (setv walked (set))
    (for [package ["hyrule" "consfig" "consfig.props" "consfig.connections"]]
      (setv spec (importlib.util.find-spec package))
      (for [top (or (and spec spec.submodule-search-locations) [])]
        (for [[d dirs files] (os.walk top)]
          (when (in (os.path.realpath d) walked)
            (setv (cut dirs) [])
            (continue))
          (.add walked (os.path.realpath d))
          (setv (cut dirs) (sorted (gfor x dirs :if (!= x "__pycache__") x)))
          (for [name (sorted files)]
            (when (.endswith name ".hy")
              (setv path (os.path.join d name)
                    st (os.stat path)
                    rel (os.path.relpath path top))
              (.update h (.encode f"{package}/{rel} {st.st-size} {st.st-mtime-ns}\0")))))))
    (setv _compiler-identity (.digest h)))
  _compiler-identity)

(defn _unclosed-line [text]
  ;; The reader reports a missing `)` at the end of the file; the line where
  ;; the unclosed form opens is what the user needs.
  (setv depth 0 line 1 opened None in-string False escaped False comment False)
  (for [ch text]
    (cond
      (= ch "\n") (do (+= line 1) (setv comment False))
      comment None
      in-string (cond escaped (setv escaped False)
                      (= ch "\\") (setv escaped True)
                      (= ch "\"") (setv in-string False))
      (= ch ";") (setv comment True)
      (= ch "\"") (setv in-string True)
      (in ch "([{") (do (when (= depth 0) (setv opened line)) (+= depth 1))
      (in ch ")]}") (-= depth 1)))
  (when (> depth 0) opened))

(defn _consfig-error [e path]
  (cond
    ;; A consfig's mistake found while a macro (defhost, deploy) expanded:
    ;; Hy wraps it, traceback text and all; its own message names the line.
    (and (isinstance e HyLanguageError) (isinstance e.__context__ ConsfigError))
    (do (setv inner e.__context__)
        ;; An error that does not say where is where the macro was used.
        (when (and (is inner.where None) e.lineno)
          (setv inner.where f"{(_display (or e.filename path))}:{e.lineno}"))
        (_consfig-error inner path))
    (and (isinstance e HyLanguageError) (.startswith (str e.msg) "Premature end of input"))
    (do (setv opened (with [f (open path :encoding "utf-8" :errors "replace")]
                       (_unclosed-line (.read f))))
        (ConsfigError (if opened
                          "premature end of input: the form opened here is never closed"
                          (str e.msg))
                      f"{(_display path)}:{(or opened e.lineno)}"))
    (isinstance e HyLanguageError)
    (ConsfigError (str (or e.msg e))
                  (if e.lineno f"{(_display (or e.filename path))}:{e.lineno}" (_display path)))
    (isinstance e ConsfigError)
    (do (when (is e.where None) (setv e.where (_where-in e path)))
        e)
    (isinstance e #(KeyboardInterrupt SystemExit)) e
    True
    (ConsfigError f"{(. (type e) __name__)}: {e}" (_where-in e path))))

(defn find-default-consfig []
  "The consfig to use when none is named: $CONSFIG, ./consfig.hy, or the
demo consfig that ships with consfig."
  (setv env (.get os.environ "CONSFIG"))
  (when env (return env))
  (for [candidate DEFAULT-CONSFIGS]
    (when (os.path.isfile candidate) (return candidate)))
  (demo-consfig))

(defn demo-consfig []
  "The path of the demo consfig installed with consfig."
  ;; Found, not imported: the package `consfig.hosts`, once imported, is an
  ;; attribute of consfig, where `(import consfig *)` must find `hosts`, the
  ;; hosts defined so far.
  (os.path.join (get (. (importlib.util.find-spec "consfig.hosts") submodule-search-locations) 0)
                "demo.hy"))

(export :objects [load-consfig module-name-for find-default-consfig demo-consfig])
