"Images: a host's configuration in one file that applies itself.

`(write-image host path)` writes the image of HOST; `python3 IMAGE` then
applies HOST's propspec to the machine it runs on, over a `:local`
connection, with `consfig deploy`'s report, options and exit statuses.
Nothing needs to be installed there but a Python 3.9 or later.

An image is a zip file that Python runs, after a `#!/usr/bin/env python3`
line:

  __main__.py          consfig/ui/image_main.py: unpacks the layers the user's
                       cache lacks, imports them, calls `consfig.ui.image_cli.run-image`
  consfig-image.json   {format hostname layers secrets}
  host.json            the preprocessed host and its prerequisite data, as
                       the `:python` hop sends them, the data's content
                       inside (`consfig.python_hop.payload.host-payload`)
  layers/HASH/…        the bundle's layers (`consfig.python_hop.bundle.bundle-for`: hy
                       and consfig; rich for the report; the site's
                       modules), each with the bytecode of the Python that
                       built the image, used where the host's Python makes
                       the same

The layers are unpacked where a `:python` hop puts them
(`~/.cache/consfig/bundles/HASH`): a host that runs images and is deployed
to over a chain keeps one copy of consfig, compiled once.

Every entry has the same date (1980-01-01), the entries are sorted, and
nothing in them names a time or a path of the machine that built it: the
same site and host give the same bytes, so an image's hash says whether
anything changed.

Each run records its outcome on the machine it ran on (`state-file`);
`host-status` reads that back over the host's chain."

(import contextlib
        io
        json
        os
        socket
        sys
        tarfile
        time
        hy.models [Keyword]
        consfig.python_hop.bundle [bundle-for cache-directory compiled-archive running-from]
        consfig.errors [ConsfigError]
        consfig.util [STATE-DIRECTORY-SCRIPT sha256-hex state-directory write-atomically]
        consfig.python_hop.payload [host-payload host-on-target payload-secrets secret-values]
        consfig.python_hop.target [tidy-cache]
        consfig.transport.chain [parse-chain with-chain]
        consfig.transport.local [LocalConnection]
        consfig.apply.engine [announced-count]
        consfig.deployer.deployment [Prepared prepare-deployment run-prepared]
        consfig.options [ConvergeSettings RunOptions]
        consfig.deployer.fleet [fleet-exit-code]
        consfig.converge.agent [converge-after keeping]
        consfig.model.context [establishing-for]
        consfig.transport.hop [Script]
        consfig.model.host [find-host Host]
        consfig.data.items [FETCHED-DATA local-digest])

(setv FORMAT 2)
;; Besides what a `:python` target imports: the report's library (the
;; target of a hop reports through the controller; an image, itself).
(setv IMAGE-MODULES #("rich" "typing_extensions"))
(setv _DATE #(1980 1 1 0 0 0))
(setv SHEBANG b"#!/usr/bin/env python3\n")

(defclass Image []
  "A built image: its bytes (`data`), the host it applies (`hostname`), the
secret values it holds (`secrets`, descriptions of the properties holding
them) and `sha256`, the hex digest of its bytes."
  (defn __init__ [self data hostname secrets]
    (setv self.data data
          self.hostname hostname
          self.secrets secrets
          self.sha256 (sha256-hex data)))
  (defn __repr__ [self]
    f"<image of {self.hostname}, {(len self.data)} bytes, sha256 {(cut self.sha256 0 12)}>"))

(defn _zip [entries]
  ;; ENTRIES: name -> bytes.  Fixed date, order and attributes: the same
  ;; entries always make the same bytes.
  (setv buf (io.BytesIO))
  (.write buf SHEBANG)
  ;; zipfile (with pathlib) and socket, below, are imported where they are
  ;; used: a site's `(import consfig *)` imports this module on every
  ;; target of a :python hop, which makes no image and runs none.
  (import zipfile)  ; lazy: 5 ms or more, for building an image alone
  (with [z (zipfile.ZipFile buf "w")]
    (for [name (sorted entries)]
      (setv info (zipfile.ZipInfo name :date-time _DATE))
      (setv info.compress-type zipfile.ZIP-DEFLATED
            info.external-attr (<< 0o100644 16)
            info.create-system 3)
      (.writestr z info (get entries name) :compresslevel 9)))
  (.getvalue buf))

(defn _read [path]
  (with [f (open path "rb")] (.read f)))

(defn _hop-modules [host]
  ;; What the host's own :python hop is told to ship besides: the image
  ;; applies the host as that hop would.
  (if host.deploy
      (lfor [name kwargs] (parse-chain host.deploy)
            :if (= name "python")
            m (.get kwargs "modules" [])
            m)
      []))

(defn _check-no-secret-in-code [host bundle]
  ;; A secret written in a site module is in the image with that module,
  ;; whatever --no-secrets leaves out of the host: refuse rather than say
  ;; the image holds none.
  (for [[desc value] (secret-values host.propspec)
        ;; Line by line: in the source, a newline is written `\n`.
        line (.splitlines (if (isinstance value str) (.encode value) value))
        :setv needle (.strip line)
        :if (>= (len needle) 4)
        layer bundle.layers
        path (.values layer.files)
        :if (in needle (_read path))]
    (raise (ConsfigError
             (+ f"{host.hostname}: the secret of \"{desc}\" is written in {path}, which the "
                "image must carry (it defines properties the host uses), so --no-secrets "
                "cannot leave it out; keep secrets out of the site's code (as prerequisite "
                "data)")))))

(defn _layer-entries [layer]
  ;; A layer's files under layers/HASH/, with the bytecode of this Python
  ;; where it can be had (`compiled-archive`).
  (setv prefix f"layers/{layer.hash}/"
        entries (dfor [rel path] (.items layer.files)
                      (+ prefix (.replace rel os.sep "/")) (_read path))
        compiled (compiled-archive layer))
  (when compiled
    (with [tar (tarfile.open :fileobj (io.BytesIO compiled))]
      (for [member (.getmembers tar)]
        (when (and (.isfile member) (.endswith member.name ".pyc"))
          (setv (get entries (+ prefix member.name)) (.read (.extractfile tar member)))))))
  entries)

(defn _fetched-digests [payload digest]
  ;; `file.fetched` compares what it fetches with DEST's digest where the
  ;; deployment runs from, an image's host.  The image holds none (the
  ;; controller's copy of DEST is not the host's, and would change the
  ;; image with each fetch): each run puts DIGEST of DEST, this machine's.
  (for [m (get payload "data") :if (= (get m "iden1") FETCHED-DATA)]
    (setv text (digest (get m "iden2"))
          sha256 (sha256-hex (.encode text)))
    (.pop m "base64" None)
    ;; Its version is its content's digest, as provide-data makes it.
    (.update m {"text" text "version" sha256 "sha256" sha256}))
  payload)

(defn make-image [host * [no-secrets False]]
  "The `Image` of HOST (a Host or a hostname): its hostattrs are computed
here and its prerequisite data resolved, as for a deployment, and the data
goes inside.  With NO-SECRETS, the secret data and the properties with a
secret argument are left out: on the host, a property needing one fails,
saying why."
  (setv prepared (. (prepare-deployment (Keyword "local") host) host)
        payload (_fetched-digests (host-payload prepared :secrets (not no-secrets) :content True)
                                  (fn [dest] ""))
        secrets (if no-secrets [] (payload-secrets prepared))
        bundle (bundle-for prepared.propspec (_hop-modules prepared) :libraries IMAGE-MODULES))
  (when no-secrets
    (_check-no-secret-in-code prepared bundle))
  (setv entries {})
  (for [layer bundle.layers]
    (.update entries (_layer-entries layer)))
  ;; Its source, read and not imported: the image's, not this process's.
  (setv (get entries "__main__.py") (_read (os.path.join (os.path.dirname (os.path.dirname __file__)) "ui" "image_main.py"))
        (get entries "consfig-image.json")
        (.encode (json.dumps {"format" FORMAT "hostname" prepared.hostname
                              "layers" bundle.hashes "secrets" (bool secrets)}
                             :sort-keys True))
        (get entries "host.json") (.encode (json.dumps payload :ensure-ascii False) "utf-8"))
  (Image (_zip entries) prepared.hostname secrets))

(defn build-image [host * [no-secrets False]]
  "The bytes of HOST's image (see `make-image`)."
  (. (make-image host :no-secrets no-secrets) data))

(defn write-image [host path * [no-secrets False]]
  "Write HOST's image to PATH, atomically, and return it (an `Image`).  An
image holding secrets is mode 0600; one without, 0755 (it runs as
`./IMAGE` too)."
  (setv image (make-image host :no-secrets no-secrets)
        path (os.fspath path))
  (try
    (write-atomically path image.data :mode (if image.secrets 0o600 0o755))
    (except [e OSError]
      (raise (ConsfigError f"cannot write the image of {image.hostname} to {path}: {e.strerror}")
             :from e)))
  image)

;; Running an image

(defn _this-host? [hostname]
  ;; Hostnames are compared whole, or by their first label when one of
  ;; them has no other (`athena` is athena.example.com).
  (setv here (socket.gethostname))
  (or (= here hostname)
      (and (or (not-in "." here) (not-in "." hostname))
           (= (get (.split here ".") 0) (get (.split hostname ".") 0)))))

(defclass _Tally []
  ;; Passes events on to SINK, keeping what the state file records.
  (defn __init__ [self sink]
    (setv self.sink sink
          self.counts {}
          self.failed []
          self.summary None))
  (defn __call__ [self event]
    (setv kind (get event "event"))
    (when (= kind "end")
      (setv status (get event "status")
            (get self.counts status) (+ (.get self.counts status 0) 1))
      (when (and (= status "failed") (in "message" event))
        (.append self.failed {"property" (.get event "property" (get event "desc"))
                              "desc" (get event "desc")
                              "message" (get event "message")})))
    (when (and (= kind "summary") (= (.get event "depth" 0) 0))
      (setv self.summary event))
    (self.sink event)))

(defn apply-image [args archive image meta directories new sink]
  "Apply the host of the image ARCHIVE (the open zip IMAGE, its META, its
layers unpacked in DIRECTORIES, NEW those unpacked just now) to this
machine, as ARGS (the image's command line, `consfig.ui.image_cli.run-image`) ask,
its events going to SINK; return the exit status."
  (setv hostname (get meta "hostname"))
  (when (and (not args.as-host) (not (_this-host? hostname)))
    (raise (ConsfigError (+ f"this is the image of {hostname}, and this machine is "
                            f"{(socket.gethostname)}: nothing was applied.  Run it with "
                            "--as-host to apply it here all the same."))))
  ;; A :python hop from here (a chroot, say) ships this very bundle.
  (running-from directories)
  (setv host (host-on-target (_fetched-digests (json.loads (.decode (.read image "host.json") "utf-8"))
                                              local-digest))
        tally (_Tally sink)
        run {"hostname" hostname
             "image" (sha256-hex (_read archive))
             "started" (time.time)
             ;; --noop checks: its record must not read as an application.
             "check" (or args.check args.noop)
             "as-host" args.as-host})
  (when (hasattr sink "expect")
    (.expect sink hostname (announced-count host.propspec)))
  (when args.noop (setv args.check True))
  (setv keeper (if args.converge
                   ;; A second agent for this host is refused before it
                   ;; applies anything (docs/converge.md).
                   (keeping hostname)
                   (contextlib.nullcontext)))
  (.__enter__ keeper)
  (try
    (setv outcome (run-prepared (Prepared host (parse-chain (Keyword "local"))) tally
                                (RunOptions :check args.check :verbosity args.verbose)))
    (setv agent None)
    (when args.converge
      (_record run tally outcome.status None)
      (setv agent (_converge host sink args directories archive)))
    (.finish sink)
    (except [e Exception]
      (_record run tally "error" (str e))
      (raise))
    (finally
      (.__exit__ keeper None None None)
      (.close sink)
      (tidy-cache directories new)))
  (_record run tally outcome.status None)
  (when (and agent agent.replaced)
    ;; A push installed a new image of this host: run it, in this process
    ;; (a service stays the same service).
    (os.execv sys.executable [sys.executable #* sys.argv]))
  (fleet-exit-code [outcome] args.detailed-exitcode))

(defn _converge [host sink args directories archive]
  ;; The agent, here: its lock is the one a deployment over :local takes.
  ;; It watches ARCHIVE, the image, and stops when it is replaced.
  (setv lock-dir (os.path.dirname (cache-directory)))
  (os.makedirs lock-dir 0o700 :exist-ok True)
  (converge-after host (LocalConnection) sink lock-dir
                  (ConvergeSettings :noop args.noop :log args.log-directory
                                    :image (os.path.abspath archive)
                                    :interval (or args.interval None))
                  :layers directories))

;; The state of the runs (in `state-directory`, see consfig.util)

(defn _checked-hostname [hostname]
  (when (or (not hostname) (in "/" hostname) (.startswith hostname ".") (in "\n" hostname))
    (raise (ConsfigError f"{hostname !r} cannot name a state file")))
  hostname)

(defn state-file [hostname]
  "The file in which runs of HOSTNAME's image on this machine record their
outcome (see `state-directory`)."
  (os.path.join (state-directory) "runs" f"{(_checked-hostname hostname)}.json"))

(defn _record [run tally status error]
  ;; The outcome of RUN, replacing the previous one; a machine that cannot
  ;; keep it still applied its configuration, so only say so.
  (setv finished (time.time)
        state {#** run
               "finished" finished
               "seconds" (round (- finished (get run "started")) 3)
               "status" status
               "counts" tally.counts
               "failures" tally.failed})
  (when error (setv (get state "error") error))
  (setv path (state-file (get run "hostname")))
  (try
    (os.makedirs (os.path.dirname path) 0o700 :exist-ok True)
    (write-atomically path (.encode (+ (json.dumps state :indent 1 :sort-keys True) "\n"))
                      :mode 0o600)
    (except [e OSError]
      (print f"consfig: could not record this run in {path}: {e.strerror}" :file sys.stderr))))

;; Reading it back, over the host's chain

;; $1 is the hostname.
(setv _READ-STATE (+ STATE-DIRECTORY-SCRIPT "
f=\"$d/runs/$1.json\"
if [ -f \"$f\" ]; then printf 'state %s\\n' \"$f\"; cat -- \"$f\"
else printf 'none %s\\n' \"$f\"; fi"))

(defn host-status [host * [via None]]
  "What the last run of HOST's image on HOST recorded, read over VIA (a
chain; by default the host's :deploy), its `:python` hops left out: a dict
(see `state-file`) with \"path\" added, or {\"path\" …} alone when the
image never ran there."
  (setv host (find-host host)
        chain (or via host.deploy))
  (when (is chain None)
    (raise (ConsfigError f"host {host.hostname} has no default chain (:deploy in its defhost options); give one with --via")))
  (setv posix (lfor hop (parse-chain chain) :if (!= (get hop 0) "python") hop))
  (with [_ (establishing-for (Host host.hostname None :hostattrs {"hostname" [host.hostname]}))
         conns (with-chain posix)]
    (setv out (. (.run (get conns -1) (Script _READ-STATE (_checked-hostname host.hostname)))
                 stdout)))
  (setv #(head _ body) (.partition out "\n")
        #(kind _ path) (.partition head " "))
  (cond (= kind "none") {"path" path}
        (= kind "state")
        (try {#** (json.loads body) "path" path}
             (except [e ValueError]
               (raise (ConsfigError f"{host.hostname}: {path} is not a state file of consfig's: {e}"))))
        True (raise (ConsfigError f"{host.hostname}: reading the state of its runs gave {out !r}"))))

(setv _STATUS-WORDS {"no-change" "no changes"
                     "changed" "changes made"
                     "failed" "failures"
                     "error" "error"})

(defn _when [seconds]
  (+ (time.strftime "%Y-%m-%d %H:%M:%S UTC" (time.gmtime seconds))
     (let [ago (- (time.time) seconds)]
       (cond (< ago 120) f" ({(int ago)} s ago)"
             (< ago 7200) f" ({(int (/ ago 60))} min ago)"
             (< ago 172800) f" ({(int (/ ago 3600))} h ago)"
             True f" ({(int (/ ago 86400))} days ago)"))))

(defn format-status [hostname state]
  "STATE (from `host-status`) as lines for a person."
  (when (not-in "status" state)
    (return f"{hostname}: its image has never run there (no {(get state "path")})"))
  (setv counts (get state "counts")
        lines [f"{hostname}: last run {(_when (get state "started"))}, {(get state "seconds") :.1f} s"
               (+ f"  status: {(.get _STATUS-WORDS (get state "status") (get state "status"))}"
                  (if (get state "check") " (a check: nothing was changed)" "")
                  (if (get state "as-host") " (run with --as-host)" ""))
               (+ "  properties: "
                  (or (.join ", " (gfor [k v] (sorted (.items counts)) f"{v} {k}")) "none"))
               f"  image: sha256 {(get state "image")}"])
  (when (.get state "error")
    (.append lines f"  error: {(get state "error")}"))
  (for [f (get state "failures")]
    (.append lines f"  failed: {(get f "property")}: {(get (+ (.splitlines (get f "message")) [""]) 0)}"))
  (.join "\n" lines))

(export :objects [Image make-image build-image write-image apply-image state-directory
                  STATE-DIRECTORY-SCRIPT state-file host-status format-status])
