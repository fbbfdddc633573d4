"Chroots: a Debian system bootstrapped into a directory of the host, then
configured by a propspec of its own.

  (chroot.os-bootstrapped* {:variant \"minbase\"} \"/srv/chroot/sid\"
    (os.debian-unstable :amd64)
    (apt.installed \"build-essential\"))

The trailing propspec describes another host — the chroot — so none of its
hostattrs become the enclosing host's; the chroot's OS declaration says what
to bootstrap.  It is applied through a `[:chroot :into ROOT]` hop on top of
the connection the enclosing host is applied through, as part of the same
deployment: its properties are reported under the `os-bootstrapped` line."

(eval-when-compile (require consfig.model.property [defprop]))
(import posixpath
        hy.models [Keyword]
        consfig.apply.actions [NO-CHANGE Script run run-ok? remote-exists? remove-remote]
        consfig.nested.deploys [deploy-nested]
        consfig.apply.engine [WOULD-CHANGE checking? inform]
        consfig.errors [AbortedChange FailedChange InapplicableProperty]
        consfig.model.host [Host get-hostattr get-hostname
                            preprocess-host inapplicable]
        consfig.props.mount [unmount-below]
        consfig.props.os [isa?]
        consfig.props.service [without-starting-services]
        consfig.util [keyword-name]
        consfig.types *)

(setv DEFAULT-MIRROR "http://deb.debian.org/debian")
(setv BOOTSTRAP-TIMEOUT 3600)

(defn chroot-host [propspec]
  "The host that PROPSPEC, the propspec of a chroot, describes: preprocessed,
with its own hostattrs, and the current host as its parent."
  (preprocess-host (Host (get-hostname) propspec)))

(defn bootstrappable-os [host]
  "HOST's OS declaration, when it is one debootstrap can make; else the
property is inapplicable, saying why."
  (setv os-value (get-hostattr "os" host))
  (cond (not os-value)
        (inapplicable "the chroot's propspec declares no OS; begin it with one, e.g. (os.debian-unstable :amd64)")
        (not (isa? os-value "debian"))
        (inapplicable f"chroot.os-bootstrapped can bootstrap Debian only, not {(get os-value "type")}")
        (not (.get os-value "suite"))
        (inapplicable "the chroot's OS declaration names no suite"))
  os-value)

(defn _option-name [k]
  (.lstrip (or (keyword-name k) (str k)) "-"))

(defn bootstrap-options [options]
  "OPTIONS, a dict of the bootstrapping tool's long options, with plain string keys."
  (dfor [k v] (.items (or options {})) (_option-name k) v))

(defn bootstrap-argv [tool os-value root mirror options]
  "The command line that bootstraps OS-VALUE into ROOT from MIRROR with TOOL
(debootstrap or mmdebstrap).  OPTIONS are more of the tool's long options:
`{:variant \"minbase\" :include [\"less\" \"vim\"]}` gives `--variant=minbase
--include=less,vim`; True gives a bare `--option`."
  (setv argv [tool])
  (for [[k v] (.items options)]
    (cond (= k "mirror") None
          (is v True) (.append argv f"--{k}")
          (or (is v False) (is v None)) None
          (isinstance v #(list tuple)) (.append argv f"--{k}={(.join "," (map str v))}")
          True (.append argv f"--{k}={v}")))
  (when (.get os-value "arch")
    (.append argv f"--arch={(get os-value "arch")}"))
  [#* argv (get os-value "suite") root mirror])

(defn _first-mirror [mirrors]
  ;; `apt.mirrors` values are lists of URIs, best first.
  (when mirrors
    (if (isinstance mirrors #(list tuple)) (get mirrors 0) mirrors)))

(defn _mirror-and-proxy [host options]
  ;; The chroot's own apt settings first, then those of the host building it.
  #((or (.get options "mirror")
        (_first-mirror (get-hostattr "apt.mirrors" host))
        (_first-mirror (get-hostattr "apt.mirrors"))
        DEFAULT-MIRROR)
    (or (get-hostattr "apt.proxy" host) (get-hostattr "apt.proxy"))))

(defn _sh? [script #* args]
  ;; SCRIPT with ARGS as its $1…, so that nothing is interpolated.
  (run-ok? (Script script #* args)))

(defn bootstrapped? [root]
  "Whether ROOT holds a completely bootstrapped system.  debootstrap
removes ROOT/debootstrap only once it has succeeded."
  (_sh? "test -e \"$1/var/lib/dpkg/status\" && ! test -e \"$1/debootstrap\"" root))

(defn remove-tree [root]
  "Unmount whatever is mounted at or below ROOT, then delete it, never
crossing into another filesystem, by the safe walk (docs/security.md): a
symlink at ROOT, or planted anywhere in the tree, is removed itself, never
what it leads to; over a chain with no Python, a ROOT under a directory
another user may change is refused."
  (unmount-below root)
  (remove-remote [root] :recursive True :timeout 1800))

(defn _tail [text [n 25]]
  (.join "\n" (cut (.splitlines text) (- n) None)))

(defn bootstrap-into [root host options]
  "Bootstrap the OS HOST declares into ROOT with OPTIONS (`bootstrap-options`),
removing what an unfinished bootstrap left there first; a failure removes ROOT."
  (when (not (_sh? "command -v debootstrap >/dev/null || command -v mmdebstrap >/dev/null"))
    (raise (AbortedChange "neither debootstrap nor mmdebstrap is installed on the host (apt-get install debootstrap)")))
  ;; debootstrap where it is installed: OPTIONS are its options (a site
  ;; writes them for the tool it documents), and its marker file is what
  ;; tells an unfinished bootstrap (`bootstrapped?`).  Installing mmdebstrap
  ;; beside it (lxc-templates recommends it) once made a site's :cache-dir
  ;; an mmdebstrap usage error.
  (setv os-value (bootstrappable-os host)
        tool (if (run-ok? "command" "-v" "debootstrap") "debootstrap" "mmdebstrap")
        #(mirror proxy) (_mirror-and-proxy host options))
  (cond (_sh? "test -e \"$1/debootstrap\"" root)
        (do (inform f"removing the remains of an unfinished bootstrap of {root}")
            (remove-tree root))
        (_sh? "test -n \"$(ls -A -- \"$1\" 2>/dev/null | grep -vx lost+found)\"" root)
        (raise (AbortedChange f"{root} exists and holds no bootstrapped system; remove it, or choose another directory")))
  (inform f"{tool} {(get os-value "suite")} from {mirror}")
  (setv r (run (bootstrap-argv tool os-value root mirror options)
               :env (if proxy {"http_proxy" proxy "https_proxy" proxy} None)
               :check False :timeout BOOTSTRAP-TIMEOUT))
  (when (not r.ok?)
    ;; Leave nothing half-made behind: a later run starts afresh.
    (remove-tree root)
    (raise (FailedChange (+ f"{tool} of {(get os-value "suite")} into {root} failed "
                            f"(exit code {r.exit-code}):\n"
                            (_tail (+ r.stdout r.stderr)))))))

(defn apply-inside [root propspec * [unapply False]]
  "Apply (or unapply) PROPSPEC, a chroot's, inside the chroot ROOT: a
deployment nested in the current one, through a `:chroot` hop on top of the
current connection.  No service starts meanwhile."
  (deploy-nested [[(Keyword "chroot") (Keyword "into") root]]
                 {"hostname" (get-hostname)
                  "deploy" None
                  "propspec" (without-starting-services propspec)
                  "these" None}
                 None
                 unapply))

;; The root of a chroot is deleted when the property is unapplied: never /.
(setv chroot-root (predicate "chroot-root" "an absolute path other than /"
                             (fn [v] (and (.accepts abs-path v) (!= (posixpath.normpath v) "/")))))

(defprop os-bootstrapped :posix [#^ (optional (dict-of keyword (one-of string boolean integer))) options
                                 #^ chroot-root root #^ propspec propspec]
  "ROOT holds a Debian system, bootstrapped with debootstrap (mmdebstrap
where only it is installed) and configured by PROPSPEC, the propspec of the chroot
as a host of its own.  The suite and architecture come from PROPSPEC's own OS
declaration; the mirror and proxy from its `apt.mirrors` and `apt.proxy`
hostattrs, else from those of the host building it, else deb.debian.org.
OPTIONS are more options of the bootstrapping tool, such as `{:variant
\"minbase\"}`; `:mirror` names the mirror outright.

PROPSPEC is applied inside the chroot every time, with starting services
prevented.  Unapplying unmounts whatever is mounted below ROOT and deletes
it.  The dotted form `chroot.os-bootstrapped*` takes PROPSPEC as its trailing
forms."
  (:desc f"Chroot {root} bootstrapped")
  (:opaque-type True)
  (:preprocess [options (posixpath.normpath root) propspec])
  ;; The chroot is another host: its hostattrs are its own.  Computing them
  ;; here checks, before anything connects, that it declares a Debian OS.
  (:hostattrs
    (try
      (bootstrappable-os (chroot-host propspec))
      (except [e InapplicableProperty]
        ;; Say that it is the chroot's propspec that does not fit.
        (setv prefix f"{(get-hostname)}: ")
        (raise (InapplicableProperty
                 (+ prefix f"in the chroot {root}: "
                    (if (.startswith e.message prefix) (cut e.message (len prefix) None) e.message)))
               :from e))))
  (:simulates True)
  (:apply
    (setv host (chroot-host propspec)
          made (not (bootstrapped? root)))
    (when (and made (checking?))
      (inform f"{root} would be bootstrapped")
      (return WOULD-CHANGE))
    (when made
      (bootstrap-into root host (bootstrap-options options)))
    (if (or (!= (apply-inside root propspec) NO-CHANGE) made)
        :changed
        NO-CHANGE))
  (:unapply
    (cond (not (remote-exists? root)) NO-CHANGE
          (checking?) (do (inform f"{root} would be removed") WOULD-CHANGE)
          True (do (remove-tree root) :changed))))

(export :objects [DEFAULT-MIRROR chroot-host bootstrap-argv bootstrapped? bootstrappable-os
                  bootstrap-options bootstrap-into
                  remove-tree apply-inside os-bootstrapped])
