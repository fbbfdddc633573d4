"Prerequisite data: versioned content a host needs, named by two identifiers.

A property declares in its `:hostattrs` the items it needs —
`(require-data \"_web\" \"nginx.conf\")` — or computes one on the controller
and provides it — `(provide-data \"--template\" path rendered)`.  While the
deployment is prepared, before anything connects, every declared item is
resolved against the data sources the consfig registered:

  (try-register-data-source :files-tree :location \"data\")

and a missing item is one `MissingData` error naming it, the host, the
property that needs it and the sources asked.  While the host is applied,
`get-data`, `get-data-bytes`, `get-data-string` and `data-version` give the
item's content and version: on the controller over a POSIX chain, from what
travelled with the host after a `:python` hop.

A secret is a `Secret`: whatever prints it shows `«secret»`, `json` refuses
it, and only `(.reveal s)` gives its value.  docs/data.md tells the whole
story: identifiers, sources, the caches on both sides, how secrets travel."

(import importlib
        os
        sys
        hy.models [Keyword]
        consfig.model.context [current-host]
        consfig.errors [ConsfigError site-file?]
        consfig.util [keyword-name sha256-hex text->bytes]
        consfig.model.property [default-desc find-property hostattrs-of site-where]
        consfig.model.host [push-hostattr]
        inspect
        consfig.data.store [controller-cache])

(defclass Secret []
  "A secret value (str or bytes) that does not print: `repr`, `str`,
`hy.repr`, f-strings and `format` give `«secret»`, `json.dumps` refuses it.
`(.reveal s)` gives the value; two secrets are equal when their values are."
  (setv __slots__ #("_value"))
  (defn __init__ [self value]
    (when (isinstance value Secret)
      (setv value (.reveal value)))
    (when (not (isinstance value #(str bytes)))
      (raise (TypeError f"a Secret wraps a str or bytes, not {(. (type value) __name__)}")))
    (object.__setattr__ self "_value" value))
  (defn reveal [self]
    "The secret value itself."
    (object.__getattribute__ self "_value"))
  (defn __repr__ [self] "«secret»")
  (defn __str__ [self] "«secret»")
  (defn __format__ [self spec] (format "«secret»" spec))
  (defn __eq__ [self other]
    (and (isinstance other Secret) (= (.reveal self) (.reveal other))))
  (defn __hash__ [self] (hash #("consfig-secret" (.reveal self))))
  (defn __setattr__ [self name value]
    (raise (AttributeError "a Secret cannot be changed")))
  (defn __reduce__ [self]
    ;; Pickling would write the value wherever the pickle goes.
    (raise (TypeError "a Secret cannot be pickled"))))

(defn secret? [x]
  "True when X is a `Secret`."
  (isinstance x Secret))

(defclass MissingData [ConsfigError]
  "A declared item that no data source has, found while the deployment is
prepared, before anything connects.")

(defclass DataSourceUnusable [ConsfigError]
  "A data source cannot be used here: its program is not installed, its
directory does not exist.  `try-register-data-source` skips such a source
with a warning.")

(defclass DataSourceFailed [ConsfigError]
  "A data source could not say which version of an item it has, or could
not give its content (`pass` could not decrypt it, git failed), found while
the deployment is prepared, before anything connects.")

(defclass UndeclaredData [ConsfigError]
  "A property asked for an item its host did not declare in `:hostattrs`.")

(defclass DataItem []
  "A resolved item: `.iden1 .iden2 .version .secret`, `.sha256` (the hex
digest of its content) and `(.content item)`: bytes, or a `Secret` of
bytes when the item is secret.  The content is fetched when first asked
for; while the deployment is prepared unless the source is one (the
prompt) that should ask only when it is used."
  (defn __init__ [self iden1 iden2 version * [secret False] [fetch None] [content None]
                  [source None] [prefetch True]]
    (setv self.iden1 iden1
          self.iden2 iden2
          self.version (str version)
          self.secret (bool secret)
          self.source source
          self.prefetch prefetch
          self._fetch fetch
          self._content (when (is-not content None) (_unwrap content))
          self._sha256 None))

  (defn _bytes [self]
    (when (is self._content None)
      (setv self._content (_unwrap (self._fetch))))
    self._content)

  (defn content [self]
    "The content: bytes, or a `Secret` of bytes when the item is secret."
    (setv b (._bytes self))
    (if self.secret (Secret b) b))

  (defn [property] sha256 [self]
    "The hex SHA-256 digest of the content."
    (when (is self._sha256 None)
      (setv self._sha256 (sha256-hex (._bytes self))))
    self._sha256)

  (defn __repr__ [self]
    (+ f"<data {self.iden1} {self.iden2} version {self.version}"
       (if self.secret " (secret)>" ">"))))

(defn _unwrap [content]
  (text->bytes (if (isinstance content Secret) (.reveal content) content)))

;; Declaring and providing, in :hostattrs

(defn _check-iden [name value]
  (when (or (not (isinstance value str)) (not value) (in "\0" value))
    (raise (ConsfigError f"a data identifier ({name}) is a non-empty string, not {(hy.repr value)}")))
  value)

(defn _declarer []
  ;; What a MissingData names: the property (with its arguments) and where
  ;; it is, preferring the line of site code that made the declaration.
  (setv propapp (.get hostattrs-of)
        by (if propapp (default-desc propapp) "(no property)")
        where (or (_site-frame)
                  (when propapp
                    (or (site-where propapp) (. (find-property propapp.name) where)))))
  #(by where))

(defn _site-frames []
  ;; The frames of the callers that are site code, innermost first.
  (setv frame (sys._getframe 1))
  (while frame
    (when (site-file? frame.f-code.co-filename)
      (yield frame))
    (setv frame frame.f-back)))

(defn _site-frame []
  (for [frame (_site-frames)]
    (return f"{(os.path.basename frame.f-code.co-filename)}:{frame.f-lineno}"))
  None)

(defn _current-host []
  (try (.get current-host)
       (except [LookupError]
         (raise (ConsfigError "prerequisite data is declared in a property's :hostattrs, while a host is preprocessed")))))

(defn _declare [iden1 iden2 secret]
  (setv #(by where) (_declarer))
  (push-hostattr "data" {"iden1" iden1 "iden2" iden2 "secret" (bool secret)
                         "by" by "where" where}))

(defn require-data [iden1 iden2 * [secret False]]
  "Declare, in a property's `:hostattrs`, that the host needs the item
(IDEN1, IDEN2); SECRET makes it a secret whatever source holds it.  It is
resolved before anything connects, and read while applying with `get-data`."
  (_check-iden "iden1" iden1)
  (_check-iden "iden2" iden2)
  (_declare iden1 iden2 secret))

(defn provide-data [iden1 iden2 content * [version None] [secret False]]
  "Provide, in a property's `:hostattrs`, the item (IDEN1, IDEN2) with
CONTENT (bytes, str or a `Secret`) computed on the controller for this host
(a rendered template, a file of the site).  VERSION defaults to a digest of
the content (of a secret's, to \"provided\").  The item is declared too."
  (_check-iden "iden1" iden1)
  (_check-iden "iden2" iden2)
  (when (not (isinstance content #(bytes str Secret)))
    (raise (ConsfigError f"provide-data {iden1} {iden2}: the content is bytes, a string or a Secret, not {(. (type content) __name__)}")))
  (setv secret (or secret (secret? content))
        raw (_unwrap content)
        host (_current-host))
  ;; A secret's digest would let whoever sees the version guess a short
  ;; secret; a secret is sent each time anyway, so its version says little.
  (when (is version None)
    (setv version (if secret "provided" (sha256-hex raw))))
  (setv (get host.provided #(iden1 iden2))
        (DataItem iden1 iden2 version
                  :secret secret :content raw :source "provided by the consfig"))
  (_declare iden1 iden2 secret))

;; Sources

(defclass DataSource []
  "A place data comes from.  `version` gives its version of an item (a
string) or None when it has none; `fetch` its content (bytes, or a Secret).
A SECRET-ONLY source makes every item it holds a secret.  A CACHED one is
slow to make an item (a git snapshot): the controller keeps each non-secret
version it fetched (consfig.data.store).  Items are fetched while the
deployment is prepared, so that a failure is found before anything
connects, unless the source says not to PREFETCH (it asks the user)."
  (setv secret-only False
        cached False
        prefetch True)
  (defn version [self iden1 iden2] None)
  (defn secret? [self iden1 iden2]
    "Whether this source's (IDEN1, IDEN2) is a secret."
    self.secret-only)
  (defn fetch [self iden1 iden2]
    (raise (NotImplementedError)))
  (defn describe [self] (. (type self) __name__)))

(defn mtime-version [path]
  "The version of the file at PATH, for a data source that versions items
by their files: its modification time in nanoseconds, as text."
  (str (. (os.stat path) st-mtime-ns)))

(defn _read-bytes [path]
  (with [f (open path "rb")] (.read f)))

(defclass LocalFileSource [DataSource]
  "`:local-file`: one file, the item (IDEN1, IDEN2), versioned by VERSION or
else by the file's modification time."
  (defn __init__ [self * location iden1 iden2 [version None] [relative-to None]]
    (setv self.location (absolute-location location relative-to)
          self.iden1 (_check-iden "iden1" iden1)
          self.iden2 (_check-iden "iden2" iden2)
          self.fixed-version (when (is-not version None) (str version)))
    (when (not (os.path.isfile self.location))
      (raise (DataSourceUnusable f":local-file: no such file {self.location}"))))
  (defn version [self iden1 iden2]
    (when (and (= iden1 self.iden1) (= iden2 self.iden2) (os.path.isfile self.location))
      (or self.fixed-version (mtime-version self.location))))
  (defn fetch [self iden1 iden2] (_read-bytes self.location))
  (defn describe [self] f":local-file {self.location}"))

(defn tree-path [root iden1 iden2]
  "The file of the item (IDEN1, IDEN2) in a tree of files at ROOT, or None
when it would climb out of ROOT.  Slashes in an identifier are path
separators and an absolute IDEN2 is taken as relative, so (\"web\",
\"/etc/nginx/x.conf\") is ROOT/web/etc/nginx/x.conf."
  (setv parts (+ (.split iden1 "/") (.split (.lstrip iden2 "/") "/"))
        parts (lfor p parts :if (and p (!= p ".")) p))
  (when (in ".." parts) (return None))
  (os.path.join root #* parts))

(defclass FilesTreeSource [DataSource]
  "`:files-tree`: a directory where the item (IDEN1, IDEN2) is the file
LOCATION/IDEN1/IDEN2, versioned by its modification time."
  (defn __init__ [self * location [relative-to None]]
    (setv self.location (absolute-location location relative-to))
    (when (not (os.path.isdir self.location))
      (raise (DataSourceUnusable f":files-tree: no such directory {self.location}"))))
  (defn version [self iden1 iden2]
    (setv path (tree-path self.location iden1 iden2))
    (when (and path (os.path.isfile path))
      (mtime-version path)))
  (defn fetch [self iden1 iden2]
    (_read-bytes (tree-path self.location iden1 iden2)))
  (defn describe [self] f":files-tree {self.location}"))

(defn absolute-location [location relative-to]
  "A data source's LOCATION (a path, `~` expanded) made absolute: relative
to RELATIVE-TO, else to the directory of the consfig file that registers
the source.  A `ConsfigError` when LOCATION is not a path."
  (when (not (isinstance location #(str os.PathLike)))
    (raise (ConsfigError f"a data source's :location is a path, not {(hy.repr location)}")))
  (setv location (os.path.expanduser (os.fspath location)))
  (os.path.abspath (if (os.path.isabs location)
                       location
                       (os.path.join (or relative-to (_caller-dir)) location))))

(defn _caller-dir []
  ;; A relative :location is relative to the consfig file registering the
  ;; source; failing that (a REPL), to the working directory.
  (for [frame (_site-frames)]
    (return (os.path.dirname (os.path.abspath frame.f-code.co-filename))))
  (os.getcwd))

;; The kinds a consfig may register: name -> class.
(setv data-source-kinds {"local-file" LocalFileSource
                         "files-tree" FilesTreeSource})

;; The registered sources, asked in the order they were registered.
(setv _sources [])

;; On a target, the data that came with the host is the only source, and the
;; site's own registrations (its modules are imported there) do nothing.
(setv _on-target False)

(defn use-only-source [source]
  "Make SOURCE the only data source from now on, whatever registers others:
what a target does with the data sent with its host."
  (global _on-target)
  (setv _on-target True
        (cut _sources) [source]))

(defn register-data-source [kind #** options]
  "Register a data source of KIND (\"files-tree\", \"local-file\",
\"pass\", \"pgp\", \"git-snapshot\", \"prompt\", or a keyword) with OPTIONS,
and return it; or, KIND being a `DataSource` (a site's own), that one.  A source that cannot be used here
raises `DataSourceUnusable`; see `try-register-data-source`."
  (when _on-target (return None))
  (when (isinstance kind DataSource)
    (.append _sources kind)
    (return kind))
  ;; The kinds that call other programs register themselves there.
  (importlib.import-module "consfig.data.sources")
  (setv name (keyword-name kind)
        cls (.get data-source-kinds name))
  (when (is cls None)
    (raise (ConsfigError (+ f"unknown data source kind {(hy.repr kind)}; known kinds: "
                            (.join ", " (gfor k (sorted data-source-kinds) f":{k}"))))))
  (setv options (dfor [k v] (.items options) (hy.mangle (.replace k "_" "-")) v))
  ;; The macro gives every kind the consfig file's directory; a kind that
  ;; reads no path (:prompt, a site's own) takes no :relative-to.
  (when (and (in "relative_to" options) (not (_takes? cls "relative_to")))
    (del (get options "relative_to")))
  (try
    (setv source (cls #** options))
    (except [e TypeError]
      (raise (ConsfigError f"data source :{name}: {e}"))))
  (.append _sources source)
  source)

(defn _takes? [cls name]
  (setv params (. (inspect.signature cls) parameters))
  (or (in name params)
      (any (gfor p (.values params) (= p.kind inspect.Parameter.VAR-KEYWORD)))))

(defn try-register-data-source* [kind #** options]
  "Like `register-data-source`, but a source that cannot be used here is
skipped with a warning on standard error, and None returned."
  (try
    (register-data-source kind #** options)
    (except [e DataSourceUnusable]
      (print f"consfig: warning: data source skipped: {e}" :file sys.stderr :flush True)
      None)))

(defmacro try-register-data-source [_hy_compiler kind #* options]
  "Register a data source as a consfig writes it, skipping with a warning a
source that cannot be used here:

  (try-register-data-source :files-tree :location \"data\")
  (try-register-data-source :local-file :location \"motd\" :iden1 \"_all\" :iden2 \"motd\")

A relative :location is relative to the directory of the file this form is in."
  (setv filename (or _hy_compiler.filename ""))
  `(hy.I.consfig/data/items.try-register-data-source*
     ~(if (isinstance kind Keyword) kind.name kind)
     ~@options
     ~@(if (os.path.isabs filename)
           [(Keyword "relative_to") (os.path.dirname filename)]
           [])))

(defn forget-data-source [source]
  "Unregister SOURCE (what `register-data-source` returned)."
  (when (in source _sources)
    (.remove _sources source)))

(defn on-target? []
  "Whether this Python is a target's, applying a host sent by a controller
(the data it reads came with the host)."
  _on-target)

(defn reset-data-sources []
  "Forget every registered data source."
  (global _on-target)
  (setv _on-target False)
  (.clear _sources))

(defn data-sources []
  "The registered data sources, in the order they are asked."
  (list _sources))

;; Resolving, before connecting

(defn _declarations [host]
  ;; The newest declaration of each item wins; one secret declaration makes
  ;; it a secret.
  (setv out {})
  (for [d (reversed (.get host.hostattrs "data" []))]
    (setv key #((get d "iden1") (get d "iden2"))
          old (.get out key))
    (setv (get out key) (if old (dict d :secret (or (get d "secret") (get old "secret"))) d)))
  out)

(defn _from-sources [iden1 iden2 secret]
  (for [source _sources]
    (try
      (setv version (.version source iden1 iden2))
      (except [e Exception]
        (raise (DataSourceFailed (_failure iden1 iden2 (.describe source) e)))))
    (when (is-not version None)
      (setv secret (or secret (.secret? source iden1 iden2)))
      (return (DataItem iden1 iden2 version
                        :secret secret
                        :fetch (_fetcher source iden1 iden2 (str version) secret)
                        :source (.describe source)
                        :prefetch source.prefetch))))
  None)

(defn _failure [iden1 iden2 source e]
  (setv why (if (isinstance e ConsfigError) (str e) f"{(. (type e) __name__)}: {e}"))
  f"  ({(hy.repr iden1)} {(hy.repr iden2)}) from {source}: {why}")

(defn _fetcher [source iden1 iden2 version secret]
  (if (and source.cached (not secret))
      (fn [] (_cached-fetch source iden1 iden2 version))
      (fn [] (.fetch source iden1 iden2))))

(defn _cached-fetch [source iden1 iden2 version]
  (setv cache (controller-cache)
        content (when cache (.load cache iden1 iden2 version)))
  (when (is content None)
    (setv content (_unwrap (.fetch source iden1 iden2)))
    (when cache (.store cache iden1 iden2 version content)))
  content)

(defn lookup-data [iden1 iden2 * [secret False]]
  "The item (IDEN1, IDEN2) from the first source that has it, or None: for
data no property declares, such as a hop's password."
  (_from-sources iden1 iden2 secret))

(defn resolve-data [host]
  "Resolve every item HOST (preprocessed) declared: what it provided
itself, else the first registered source that has it.  Sets `host.data`;
raises one `MissingData` naming every item no source has, or one
`DataSourceFailed` naming every item a source failed to give."
  (setv found {} missing [] failed [])
  (for [[key d] (.items (_declarations host))]
    (try
      (setv item (or (.get host.provided key)
                     (_from-sources #* key (get d "secret"))))
      (except [e DataSourceFailed]
        (.append failed (str e))
        (continue)))
    (if item
        (do (when (and (get d "secret") (not item.secret))
              (setv item.secret True))
            (setv (get found key) item))
        (.append missing d)))
  (for [item (.values found)]
    (when item.prefetch
      (try (._bytes item)
           (except [e Exception]
             (.append failed (_failure item.iden1 item.iden2 item.source e))))))
  (when missing
    (raise (MissingData (+ (_missing-message host.hostname missing)
                           (if failed (+ "\nand data sources failed:\n" (.join "\n" failed)) "")))))
  (when failed
    (raise (DataSourceFailed (+ f"{host.hostname}: data sources failed, before connecting:\n"
                                (.join "\n" failed)))))
  (setv host.data found)
  found)

(defn fetch-deferred [items]
  "Fetch now the content of each of ITEMS (`DataItem`s) that its source
left to be fetched when used: a `:prompt` item, asked for on the terminal.
Several hosts deployed at once do this before they start (`consfig.deployer.fleet`)."
  (for [item items]
    (when (not item.prefetch)
      (._bytes item))))

(defn _missing-line [d]
  (setv iden1 (hy.repr (get d "iden1"))
        iden2 (hy.repr (get d "iden2"))
        by (get d "by")
        where (get d "where"))
  (+ f"  ({iden1} {iden2}), needed by {by}" (if where f" at {where}" "")))

(defn _missing-message [hostname missing]
  (setv asked (if _sources
                  (+ "sources asked: " (.join "; " (gfor s _sources (.describe s))))
                  (+ "no data source is registered: register one in the consfig, e.g. "
                     "(try-register-data-source :files-tree :location \"data\")")))
  (+ f"{hostname}: missing prerequisite data:\n"
     (.join "\n" (map _missing-line missing))
     "\n" asked))

;; Reading, while applying

(defn get-data [iden1 iden2]
  "The `DataItem` (IDEN1, IDEN2) of the host being applied.  It must have
been declared in a `:hostattrs` (`require-data`, `provide-data`)."
  (setv host (_current-host)
        item (.get (or (getattr host "data" None) {}) #(iden1 iden2)))
  (when (is item None)
    (raise (UndeclaredData
             (+ f"{host.hostname}: prerequisite data ({(hy.repr iden1)} {(hy.repr iden2)}) was not declared; "
                "declare it with require-data in the property's :hostattrs"))))
  item)

(defn get-data-bytes [iden1 iden2]
  "The content of (IDEN1, IDEN2) as bytes, or a `Secret` of bytes."
  (.content (get-data iden1 iden2)))

(defn get-data-string [iden1 iden2]
  "The content of (IDEN1, IDEN2) as a string (UTF-8), or a `Secret` of one."
  (setv c (get-data-bytes iden1 iden2))
  (if (secret? c)
      (Secret (.decode (.reveal c) "utf-8"))
      (.decode c "utf-8")))

(defn data-version [iden1 iden2]
  "The version of (IDEN1, IDEN2) this deployment uses."
  (. (get-data iden1 iden2) version))

;; Events

(defn data-sent-event [item [to None]]
  "The output event (stream \"data\", shown at -v) that says ITEM's content
was sent to the target (written to the file TO, or into its cache): its
identifiers and version, never its content."
  (setv kind (if item.secret "secret" "data")
        text (+ f"sent {kind} ({item.iden1} {item.iden2}) version {item.version}"
                (if to f" to {to}" "")))
  {"event" "output" "stream" "data" "text" text
   "iden1" item.iden1 "iden2" item.iden2 "version" item.version "secret" item.secret})

(setv FETCHED-DATA "--fetched")

(defn local-digest [path]
  "The hex SHA-256 digest of the file PATH of this machine, \"\" when there is
nothing there or it cannot be read.  `file.fetched` provides it, as item
(`FETCHED-DATA` DEST), for DEST where the deployment runs from."
  (try (with [f (open path "rb")] (sha256-hex (.read f)))
       (except [OSError] "")))

(export :objects [Secret secret? MissingData DataSourceUnusable DataSourceFailed UndeclaredData DataItem
                  DataSource LocalFileSource FilesTreeSource data-source-kinds
                  require-data provide-data register-data-source try-register-data-source*
                  reset-data-sources forget-data-source data-sources lookup-data resolve-data fetch-deferred
                  use-only-source on-target?
                  get-data get-data-bytes get-data-string data-version data-sent-event
                  FETCHED-DATA local-digest]
        :macros [try-register-data-source])
