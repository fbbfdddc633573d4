"Debian packages, through apt and dpkg.

Everything runs non-interactively (DEBIAN_FRONTEND=noninteractive, existing
configuration files kept), and every apt, dpkg and debconf command waits for
the package system's locks — held by unattended-upgrades, a boot-time
apt-daily, an operator's apt — for up to the host's `apt.lock-timeout` (300
seconds unless it says otherwise) rather than failing at once.  Whether
packages are installed is asked of dpkg once per connection and remembered
(in the connection's attributes) until an apt or dpkg command run here
changes it, so that a host with a hundred `apt.installed` properties runs
`dpkg-query` once, not a hundred times.

Third-party repositories: `trusts-key` installs a repository's signing key in
/etc/apt/keyrings, `source` writes a deb822 .sources file whose `Signed-By`
names that key (and only that key), `pinned` sets a preference.  A change to
apt's sources or keys marks the package indexes stale, on the target
(/var/lib/consfig/apt-update-needed): the next apt property that installs or
upgrades runs `apt-get update` first, in this deployment or a later one."

(eval-when-compile
  (require consfig.model.property [defprop]
           consfig.model.propspec [defproplist]))
(import consfig.model.watchspec [watch-path watch-dpkg]
        consfig.model.host [inapplicable]
        consfig.props.file [content-text])
(import base64
        re
        urllib.parse
        time
        consfig.apply.actions [NO-CHANGE change-if-changes-file remote-exists? run run-script
                               write-remote-file]
        consfig.model.context [connection forget-connattr get-connattr set-connattr]
        consfig.data.items [get-data-bytes require-data secret?]
        consfig.apply.engine [Drift WOULD-CHANGE checking? inform report-output]
        consfig.errors [CommandFailed FailedChange]
        consfig.model.host [push-hostattr get-hostattr get-hostattrs]
        consfig.props.file [combined-results conf-pairs pairs-problem remove-files update-file]
        consfig.props.os [required isa?]
        consfig.props.service :as service
        consfig.types *)

;; Names go to apt-get and dpkg as arguments: one starting with `-` would be
;; taken for an option (`(apt.installed "--version")` ran `apt-get --version`).
(setv packages (one-of package-name (list-of package-name))
      debconf-triple (predicate "debconf-triple"
                                "a [question type value] triple of lines (question and type without spaces)"
                                (fn [t] (and (isinstance t #(list tuple)) (= (len t) 3)
                                             (.accepts name (get t 0)) (.accepts name (get t 1))
                                             (.accepts (one-of line integer boolean) (get t 2)))))
      sources-basename (matching "sources-basename"
                                 "a file name (letters, digits, _ . and -, not starting with . or -)"
                                 r"[A-Za-z0-9_][A-Za-z0-9_.-]*"))

;; URIs as apt takes them: by a scheme it has a method for (apt-transport-*,
;; /usr/lib/apt/methods), the network ones with a host, the local ones with an
;; absolute path that does not climb (`..`); never a character that would end
;; the line or the quoted string they are written in.
(setv _NETWORK-METHODS #{"http" "https" "mirror+http" "mirror+https" "tor+http" "tor+https"}
      _LOCAL-METHODS #{"file" "copy" "mirror+file"})

(defn _apt-uri? [v methods]
  (when (or (not (isinstance v str)) (re.search r"[\s\"\\\x00-\x1f\x7f]" v))
    (return False))
  (setv m (re.fullmatch r"([a-z][a-z0-9+]*):(.+)" v))
  (when (or (not m) (not-in (.group m 1) methods))
    (return False))
  (setv parts (urllib.parse.urlsplit v))
  (if (in (.group m 1) _NETWORK-METHODS)
      (and (.startswith (.group m 2) "//") (bool parts.hostname))
      (and (not parts.netloc) (.startswith parts.path "/")
           (not-in ".." (.split parts.path "/")))))

(setv apt-uri (predicate "apt-uri"
                         (+ "a URI apt has a method for: http://HOST/…, https://HOST/… (or with "
                            "mirror+ or tor+), or file:/PATH, copy:/PATH with no .. in PATH")
                         (fn [v] (_apt-uri? v (| _NETWORK-METHODS _LOCAL-METHODS))))
      mirror-uri (predicate "mirror-uri"
                            "a Debian mirror: http:// or https:// and its host (http://deb.debian.org/debian)"
                            (fn [v] (_apt-uri? v #{"http" "https"})))
      proxy-uri (predicate "proxy-uri"
                           "an HTTP proxy apt can use: http:// or https:// and its host (http://proxy:3142)"
                           (fn [v] (_apt-uri? v #{"http" "https"}))))

(setv ENV {"DEBIAN_FRONTEND" "noninteractive"
           "APT_LISTCHANGES_FRONTEND" "none"
           "NEEDRESTART_MODE" "l"})

(setv LOCK-TIMEOUT 300)

(defn _lock-timeout []
  (setv t (get-hostattr "apt.lock-timeout"))
  (if (is t None) LOCK-TIMEOUT t))

(defn apt-options []
  "The options every apt-get consfig runs is given: answer yes, keep
changed configuration files, wait for dpkg's lock up to the lock timeout."
  ["-y" "-q"
   "-o" "Dpkg::Options::=--force-confdef"
   "-o" "Dpkg::Options::=--force-confold"
   "-o" f"DPkg::Lock::Timeout={(_lock-timeout)}"])

;; What apt, dpkg and debconf say when another process holds a lock they
;; need.  DPkg::Lock::Timeout makes apt-get wait for dpkg's lock only; the
;; package lists' lock (apt-get update), the archives' (apt-get clean) and
;; dpkg's and debconf's own are waited for here.
(setv _LOCKED (re.compile (+ r"Could not get lock|Unable to lock|Unable to acquire the dpkg"
                             r"|is locked by another process|lock was locked by another process")))

(defn run-waiting-for-locks [#* cmd [check True] #** kw]
  "Run CMD (an apt, dpkg or debconf command) as `run` does, and while it
fails because another process holds one of the package system's locks, try
it again, for up to the host's lock timeout (`apt.lock-timeout`)."
  (setv deadline (+ (time.monotonic) (_lock-timeout))
        waited False)
  (while True
    (setv r (run #* cmd #** kw :check False))
    (when (or r.ok? (not (.search _LOCKED (+ r.stdout r.stderr))))
      (break))
    (when (>= (time.monotonic) deadline)
      (raise (CommandFailed r.command r.exit-code r.stdout
                            (+ r.stderr f"\n(waited {(_lock-timeout)} s for the lock: see apt.lock-timeout)")
                            (. (connection) where))))
    (when (not waited)
      (inform "another process holds the package system's lock: waiting for it")
      (setv waited True))
    (time.sleep 1))
  (when (and check (not r.ok?))
    (raise (CommandFailed r.command r.exit-code r.stdout r.stderr (. (connection) where))))
  r)

(defprop lock-timeout :posix [#^ (int-range 0 86400) seconds]
  "Every apt, dpkg and debconf command consfig runs on the host waits up to
SECONDS for a lock another process holds (unattended-upgrades, apt-daily, an
operator's apt) before it fails (the hostattr `apt.lock-timeout`; 300
without this property).  apt-get is given `-o DPkg::Lock::Timeout=SECONDS`
for dpkg's lock; the other locks are tried again each second."
  (:unwatched "a setting of the commands consfig runs (a hostattr), not a state of the host")
  (:desc f"apt waits up to {seconds} s for its locks")
  (:hostattrs (push-hostattr "apt.lock-timeout" seconds))
  (:unapply NO-CHANGE))

;; Long enough for a dist-upgrade over a slow mirror; short of forever.
(setv APT-TIMEOUT 3600)

(setv DPKG-STATUS "/var/lib/dpkg/status"
      DEFAULT-MIRROR "http://deb.debian.org/debian"
      SECURITY-MIRROR "http://deb.debian.org/debian-security"
      KEYRING "/usr/share/keyrings/debian-archive-keyring.gpg")

(defn _flatten [xs]
  (setv out [])
  (for [x xs]
    (if (isinstance x #(list tuple)) (.extend out (_flatten x)) (.append out (str x))))
  out)

(defn installed-packages []
  "The names of the packages installed on the target (with and without
`:arch`), asked of dpkg once per connection."
  (when (is (get-connattr "apt-installed") None)
    (setv out (. (run "dpkg-query" "-W" "-f" "${Package} ${binary:Package} ${db:Status-Abbrev}\\n"
                      :timeout 300)
                 stdout)
          names (set))
    (for [line (.splitlines out)]
      (setv fields (.split line))
      ;; Status-Abbrev: wanted, then state ("i" installed), then error flag.
      (when (and (= (len fields) 3) (= (cut (get fields 2) 1 2) "i"))
        (.update names (cut fields 0 2))))
    (set-connattr "apt-installed" names))
  (get-connattr "apt-installed"))

(defn forget-installed-packages []
  "Forget what dpkg said was installed: call this after installing or
removing packages other than through these properties."
  (forget-connattr "apt-installed"))

(defn _name [package]
  ;; "foo=1.2", "foo/bookworm-backports" and "foo:i386" install a "foo".
  (get (re.split r"[=/]" package) 0))

(defn installed? [#* packages]
  (setv have (installed-packages))
  (all (gfor p packages (in (_name p) have))))

(defn none-installed? [#* packages]
  (setv have (installed-packages))
  (not (any (gfor p packages (in (_name p) have)))))

(defn _simulated [args packages]
  ;; What apt-get would install or remove besides, from its simulation
  ;; (`apt-get -s`), which needs no lock and changes nothing; nothing when it
  ;; cannot tell (no package lists yet).
  (setv r (run "apt-get" "-s" #* (apt-options) #* args "--" #* packages
               :env ENV :timeout 120 :check False))
  (lfor line (.splitlines r.stdout)
        :if (.startswith line #("Inst " "Remv "))
        (get (.split line) 1)))

(defn _would [verb args packages]
  ;; A Drift for check mode: the packages VERB would act on, and what
  ;; apt-get's simulation says comes with them.
  (setv have (installed-packages)
        named (lfor p packages :if (= (in (_name p) have) (= verb "remove")) p)
        more (lfor p (_simulated [verb #* args] named) :if (not-in p named) p))
  (Drift (+ f"would {verb}: {(.join " " named)}"
            (if more f" (and with them: {(.join " " more)})" ""))))

(defn _installed-or-drift [args packages]
  (or (installed? #* packages) (_would "install" args packages)))

(defn apt-get [#* args]
  "Run apt-get non-interactively with ARGS; `:no-change` unless it changed
what dpkg has installed.  Output goes to the deployment's output."
  (try
    (change-if-changes-file DPKG-STATUS
      (fn [] (report-output (. (run-waiting-for-locks "apt-get" #* (apt-options) #* args :env ENV
                                                      :timeout APT-TIMEOUT)
                               stdout))))
    (finally (forget-installed-packages))))

(defn install-packages [args packages]
  "apt-get install PACKAGES with ARGS; on failure, update the indexes and
try once more."
  ;; Indexes that are missing or stale (a package 404s after a point release)
  ;; are the usual reason an install fails: update them and try once more.
  (_update-if-sources-changed)
  (try
    (apt-get "install" #* args "--" #* packages)
    (except [e CommandFailed]
      (inform f"apt-get install failed; updating the package indexes and trying again")
      (_update)
      (apt-get "install" #* args "--" #* packages))))

(defprop installed :posix [#^ packages #* packages]
  "Each of PACKAGES (names, or lists of names) is installed, with its
recommends."
  (:watch [(watch-dpkg)])
  (:desc f"apt installed {(.join " " (_flatten packages))}")
  (:preprocess (_flatten packages))
  (:hostattrs (required "debian"))
  (:check (_installed-or-drift [] packages))
  (:apply (install-packages [] packages))
  (:unapply (apt-get "remove" "--" #* packages)))

(defprop installed-minimally :posix [#^ packages #* packages]
  "Each of PACKAGES is installed, without its recommends."
  (:watch [(watch-dpkg)])
  (:desc f"apt installed minimally {(.join " " (_flatten packages))}")
  (:preprocess (_flatten packages))
  (:hostattrs (required "debian"))
  (:check (_installed-or-drift ["--no-install-recommends"] packages))
  (:apply (install-packages ["--no-install-recommends"] packages))
  (:unapply (apt-get "remove" "--" #* packages)))

(defprop removed :posix [#^ packages #* packages]
  "None of PACKAGES is installed (their configuration files may remain)."
  (:watch [(watch-dpkg)])
  (:desc f"apt removed {(.join " " (_flatten packages))}")
  (:preprocess (_flatten packages))
  (:hostattrs (required "debian"))
  (:check (or (none-installed? #* packages) (_would "remove" [] packages)))
  (:apply (apt-get "remove" "--" #* packages)))

(defprop all-configured :posix []
  "No package's installation is left unfinished (`dpkg --configure --pending`)."
  (:watch [(watch-dpkg)])
  (:desc "dpkg --configure --pending")
  (:hostattrs (required "debian"))
  (:check (= "" (.strip (. (run "dpkg" "--audit" :check False :timeout 300) stdout))))
  (:apply
    (try
      (change-if-changes-file DPKG-STATUS
        (fn [] (run-waiting-for-locks "dpkg" "--configure" "--pending" :env ENV :timeout APT-TIMEOUT)))
      (finally (forget-installed-packages)))))

(defn _lists-state []
  (. (run-script "cd /var/lib/apt/lists 2>/dev/null && md5sum -- *Release 2>/dev/null; true"
                 :timeout 60)
     stdout))

(setv UPDATE-NEEDED "/var/lib/consfig/apt-update-needed")

(defn _update []
  ;; apt-get fetches InRelease anew ("Get:") even when it has not changed,
  ;; so a change is judged by the content of the Release files instead.
  (setv before (_lists-state))
  (report-output (. (run-waiting-for-locks
                      "apt-get" "-q" "-o" f"DPkg::Lock::Timeout={(_lock-timeout)}" "update"
                      #* (if (isa? (get-hostattr "os") "debian-stable")
                             [] ["--allow-releaseinfo-change"])
                      :env ENV :timeout APT-TIMEOUT)
                    stdout))
  (run "rm" "-f" "--" UPDATE-NEEDED)
  (set-connattr "apt-update-needed" False)
  (if (= before (_lists-state)) NO-CHANGE None))

(defn sources-changed []
  "Record, on the target, that apt's sources or keys changed: the next apt
property that installs or upgrades updates the package indexes first, in
this deployment or, should it fail before then, in a later one.  Nothing is
recorded in check mode."
  (when (not (checking?))
    ;; consfig's state directory, private as image.installed makes it.
    (run "mkdir" "-p" "-m" "700" "--" "/var/lib/consfig")
    (write-remote-file UPDATE-NEEDED "apt's sources changed since the last apt-get update\n")
    (set-connattr "apt-update-needed" True)))

(defn _update-if-sources-changed []
  ;; Asked of the target once per connection, then remembered.
  (when (is (get-connattr "apt-update-needed") None)
    (set-connattr "apt-update-needed" (remote-exists? UPDATE-NEEDED)))
  (when (get-connattr "apt-update-needed")
    (inform "apt's sources changed: updating the package indexes first")
    (_update)))

(defprop updated :posix []
  "The package indexes are up to date with the archive (`apt-get update`).
It counts as a change only when the archive's indexes have changed."
  (:action "only the archive knows whether the indexes are current: asking it is fetching them")
  (:desc "apt-get update")
  (:hostattrs (required "debian"))
  (:apply
    ;; An unfinished installation would make apt-get refuse to do anything.
    (when (.strip (. (run "dpkg" "--audit" :check False :timeout 300) stdout))
      (run-waiting-for-locks "dpkg" "--configure" "--pending" :env ENV :timeout APT-TIMEOUT)
      (forget-installed-packages))
    (_update)))

(defprop upgraded :posix []
  "Every package is at the newest version the indexes offer
(`apt-get dist-upgrade`), the indexes updated first if apt's sources
changed since they last were."
  (:unwatched "an action: new versions appear upstream, which nothing on the host can watch")
  (:desc "apt upgraded")
  (:hostattrs (required "debian"))
  (:check (cond (remote-exists? UPDATE-NEEDED) (Drift "apt's sources changed: the indexes would be updated first")
                (_simulated ["dist-upgrade"] []) (Drift "packages would be upgraded")
                True True))
  (:apply (_update-if-sources-changed)
          (apt-get "dist-upgrade")))

(defprop autoremoved :posix []
  "No package remains that was installed automatically and is no longer
needed (`apt-get autoremove`)."
  (:unwatched "an action: it acts each time it is applied, and leaves no state to watch")
  (:desc "apt removed automatically installed packages")
  (:hostattrs (required "debian"))
  (:check (or (not (_simulated ["autoremove"] [])) (Drift "packages would be autoremoved")))
  (:apply (apt-get "autoremove")))

(defn _debconf-value [package question]
  (setv r (run-waiting-for-locks "debconf-communicate" package :input f"GET {question}\n"
                                 :check False :timeout 60)
        #(code _ value) (.partition (.strip r.stdout) " "))
  (when (= code "0") value))

(defn _triples [triples]
  (lfor t triples (lfor x t (str x))))

(defprop reconfigured :posix [#^ package-name package #^ debconf-triple #* triples]
  "PACKAGE's debconf answers are each `[question type value]` of TRIPLES,
and PACKAGE has been reconfigured with them (`dpkg-reconfigure`).  Nothing to
do when debconf already holds those answers."
  (:watch [(watch-path "/var/cache/debconf/config.dat")])
  (:desc f"{package} reconfigured")
  (:hostattrs (required "debian"))
  (:check (all (gfor [q _ v] (_triples triples) (= (_debconf-value package q) v))))
  (:apply
    (run-waiting-for-locks "debconf-set-selections"
                           :input (.join "" (gfor [q t v] (_triples triples) f"{package} {q} {t} {v}\n"))
                           :timeout 60)
    (run-waiting-for-locks "dpkg-reconfigure" "-fnoninteractive" package :env ENV :timeout APT-TIMEOUT)))

(defproplist service-installed-running :posix [#^ package-name package]
  "PACKAGE, which provides a service of the same name, is installed and the
service is running (where services are started at all: see
`service.without-starting-services`)."
  (:desc f"{package} installed and running")
  (installed package)
  (service.running package))

(defprop mirrors :posix [#^ mirror-uri #* uris]
  "The host's Debian mirrors are URIS, best first (the hostattr
`apt.mirrors`, used by `standard-sources-list` and by chroots this host
bootstraps)."
  (:unwatched "a declaration for the controller (a hostattr): nothing on the target to keep")
  (:desc f"apt mirrors {(.join ", " uris)}")
  (:hostattrs (push-hostattr "apt.mirrors" (list uris)))
  (:unapply NO-CHANGE))

(defn get-mirrors []
  "The host's Debian mirrors: the newest `apt.mirrors`, or deb.debian.org."
  (or (get-hostattr "apt.mirrors") [DEFAULT-MIRROR]))

(setv PROXY-FILE "/etc/apt/apt.conf.d/20proxy")

(defprop proxy :posix [#^ proxy-uri uri]
  "apt fetches through the HTTP proxy URI (a hostattr `apt.proxy` too, for
chroots this host bootstraps).  Unapplying removes the proxy setting."
  (:watch [(watch-path PROXY-FILE)])
  (:desc f"apt proxy {uri}")
  (:hostattrs (push-hostattr "apt.proxy" uri))
  (:simulates True)
  (:apply (update-file PROXY-FILE f"Acquire::http::Proxy \"{uri}\";\n"))
  (:unapply (remove-files PROXY-FILE)))

(defn standard-sources [os-value mirrors components deb-src]
  "The deb822 text of the standard Debian sources for OS-VALUE."
  (setv suite (.get os-value "suite")
        stable (isa? os-value "debian-stable")
        suites [suite #* (if stable [f"{suite}-updates"] [])]
        security (and (or stable (isa? os-value "debian-testing"))
                      f"{suite}-security")
        types (if deb-src "deb deb-src" "deb"))
  (defn stanza [uris suites]
    (.join "\n" [f"Types: {types}"
                 f"URIs: {(.join " " uris)}"
                 f"Suites: {(.join " " suites)}"
                 f"Components: {(.join " " components)}"
                 f"Signed-By: {KEYRING}"
                 ""]))
  (.join "\n" [(stanza mirrors suites)
               #* (if security [(stanza [SECURITY-MIRROR] [security])] [])]))

(setv SOURCES-FILE "/etc/apt/sources.list.d/debian.sources"
      SOURCES-LIST "/etc/apt/sources.list"
      SOURCES-LIST-POINTER "# Debian's sources are in /etc/apt/sources.list.d/debian.sources\n")

(defprop standard-sources-list :posix [* #^ (non-empty-list-of name) [components ["main"]]
                                       #^ boolean [deb-src False]]
  "apt's sources are Debian's standard ones for the host's OS — its suite,
with -updates and -security for stable (-security for testing) — in deb822
form in /etc/apt/sources.list.d/debian.sources, from the host's mirrors
(`apt.mirrors`), with COMPONENTS, and source packages too with DEB-SRC.
/etc/apt/sources.list, if there is one, is left with just a comment pointing
there, so that no source is listed twice.  A change marks the package
indexes stale (see the module's documentation)."
  (:watch [(watch-path SOURCES-FILE) (watch-path SOURCES-LIST)])
  (:desc "apt standard sources")
  (:hostattrs
    (required "debian")
    (when (not (.get (get-hostattr "os") "suite"))
      (inapplicable "apt.standard-sources-list needs the host's Debian suite")))
  (:simulates True)
  (:apply
    (combined-results [(_write-sources SOURCES-FILE
                                (standard-sources (get-hostattr "os") (get-mirrors)
                                                  (list components) deb-src))
                (if (remote-exists? SOURCES-LIST)
                    (_write-sources SOURCES-LIST SOURCES-LIST-POINTER)
                    NO-CHANGE)])))

(defn _write-sources [path text]
  ;; A file of apt's sources or keys, world-readable as apt wants it; a
  ;; change makes the indexes stale.
  (setv r (update-file path text :mode 0o644))
  (when (is r None) (sources-changed))
  r)

(defn _remove-sources [#* paths]
  (setv r (remove-files #* paths))
  (when (is r None) (sources-changed))
  r)

;; Third-party repositories.  A key and a source are each a file of their
;; own, named by the user (sources-name): apt reads only names of letters,
;; digits, _ . and - in sources.list.d and preferences.d.

(setv sources-name (matching "sources-name"
                             "a name (letters, digits, _ and -, not starting with -)"
                             r"[A-Za-z0-9_][A-Za-z0-9_-]*")
      KEYRINGS "/etc/apt/keyrings")

(setv _ARMOR-BEGIN "-----BEGIN PGP PUBLIC KEY BLOCK-----"
      _ARMOR-END "-----END PGP PUBLIC KEY BLOCK-----"
      _ARMOR (re.compile (+ r"\s*" _ARMOR-BEGIN r"\r?\n"
                            r"(?:[A-Za-z][A-Za-z0-9-]*: [^\n\x00]*\r?\n)*"   ; armor headers
                            r"\r?\n"
                            r"((?:[A-Za-z0-9+/][A-Za-z0-9+/=]*\r?\n)+)"        ; base64
                            r"(?:=([A-Za-z0-9+/]{4})\r?\n)?"                 ; CRC-24
                            _ARMOR-END r"\s*")))

(defn _binary-public-key? [b]
  ;; The first packet is a public key (tag 6), in the old format (0x98-0x9b)
  ;; or the new (0xc6): a secret key (tag 5) is not, nor anything else.
  (and (isinstance b bytes) (> (len b) 2)
       (or (<= 0x98 (get b 0) 0x9b) (= (get b 0) 0xc6))))

(defn _crc24 [data]
  ;; RFC 4880 §6.1.
  (setv crc 0xB704CE)
  (for [byte data]
    (^= crc (<< byte 16))
    (for [_ (range 8)]
      (<<= crc 1)
      (when (& crc 0x1000000) (^= crc 0x1864CFB))))
  (& crc 0xFFFFFF))

(defn dearmor [text]
  "The binary form of TEXT, an ASCII-armored OpenPGP public key (RFC 4880
§6.2), as `gpg --dearmor` gives it; None when TEXT is not one, or its
checksum does not match."
  (setv m (.fullmatch _ARMOR text))
  (when (not m) (return None))
  (try (setv data (base64.b64decode (.join "" (.split (.group m 1))) :validate True))
       (except [ValueError] (return None)))
  (when (and (.group m 2)
             (!= (.to-bytes (_crc24 data) 3 "big") (base64.b64decode (.group m 2))))
    (return None))
  (when (_binary-public-key? data) data))

(setv openpgp-public-key
      (predicate "openpgp-public-key"
                 (+ "an OpenPGP public key: ASCII-armored text (-----BEGIN PGP PUBLIC KEY BLOCK-----…), "
                    "or the bytes of its binary form")
                 (fn [k] (if (isinstance k str) (dearmor k) (_binary-public-key? k)))))

(defn _explain-key [k]
  ;; A secret key is refused without being shown: the refusal is printed.
  (cond (or (is k None) (.accepts openpgp-public-key k)) None
        (or (and (isinstance k str) (re.search r"PRIVATE KEY|SECRET KEY" k))
            (and (isinstance k bytes) (or (re.search rb"PRIVATE KEY|SECRET KEY" k)
                                          (and k (in (get k 0) #(0x94 0x95 0x96 0x97 0xc5))))))
        "must be a public key: this is a private key (not shown), which never belongs in a consfig"
        True (+ f"must be {openpgp-public-key.phrase}, not "
                (show (if (and (isinstance k #(str bytes)) (> (len k) 80))
                          (+ (cut k 0 80) (if (isinstance k str) "…" b"..."))
                          k)))))

;; The key parameter: a public key, or None for one from data.  Its own
;; type rather than `(optional …)`, whose refusal would show the value.
(setv key-or-none (Type "key-or-none" openpgp-public-key.phrase
                        (fn [k] (is (_explain-key k) None)) openpgp-public-key.render))
(setv key-or-none.explain _explain-key)

(defn keyring-path [name key]
  "Where `trusts-key` installs the key NAME, KEY being what it was given
(None for a key from data): /etc/apt/keyrings/NAME.asc for armored text,
NAME.gpg for the binary form, which a key from data is turned into."
  (+ KEYRINGS "/" name (if (isinstance key str) ".asc" ".gpg")))

(defn _key-from-data [iden1 iden2]
  (setv content (get-data-bytes iden1 iden2))
  (when (secret? content) (setv content (.reveal content)))
  (setv binary (if (_binary-public-key? content)
                   content
                   (dearmor (.decode content "utf-8" "replace"))))
  (when (is binary None)
    (raise (FailedChange (+ f"the data item ({iden1} {iden2}) is not an OpenPGP public key "
                            "(armored or binary); a secret key never belongs in apt's keyrings"))))
  binary)

(setv data-iden (predicate "data-iden" "a [iden1 iden2] pair of non-empty lines"
                           (fn [v] (and (isinstance v #(list tuple)) (= (len v) 2)
                                        (all (gfor x v (.accepts non-empty-line x)))))))

(defprop trusts-key :posix [#^ sources-name name #^ key-or-none [key None]
                            * #^ (optional data-iden) [data None]]
  "apt trusts the OpenPGP public key KEY, under the name NAME, for the
sources that name it (`source`'s :signed-by, NAME by default): KEY is
written to /etc/apt/keyrings/NAME.asc when it is ASCII-armored text,
NAME.gpg when it is bytes (the binary form).  Or, with DATA `[IDEN1 IDEN2]`
instead of KEY, the key is the prerequisite data item (IDEN1, IDEN2), armored
or binary, written to NAME.gpg in binary form.  The key is trusted only for
the sources whose `Signed-By` names its file, never for the whole archive.
Unapplying removes it.

  (apt.trusts-key \"docker\" :data [\"_apt\" \"docker.asc\"])   ; a file data/_apt/docker.asc"
  (:watch [(watch-path KEYRINGS)])
  (:desc f"apt trusts key {name}")
  (:invariant (!= (is key None) (is data None)) "give either the key or :data [IDEN1 IDEN2]")
  (:hostattrs
    (required "debian")
    (when data (require-data #* data))
    (push-hostattr "apt.keyring" {"name" name "path" (keyring-path name key)}))
  (:simulates True)
  (:apply
    (when (not (checking?)) (run "mkdir" "-p" "-m" "755" "--" KEYRINGS))
    (combined-results [(_write-sources (keyring-path name key)
                                (if data (_key-from-data #* data) key))
                ;; A key that was given in the other form before.
                (_remove-sources (keyring-path name (if (isinstance key str) b"" "")))]))
  (:unapply (_remove-sources (keyring-path name "") (keyring-path name b""))))

(defn key-path [name]
  "The keyring of the key NAME a `trusts-key` of the host installs; a
failure naming what to do when none does."
  (for [k (get-hostattrs "apt.keyring")]
    (when (= (get k "name") name) (return (get k "path"))))
  (raise (FailedChange (+ f"no apt.trusts-key for {(hy.repr name)} on this host: add "
                          f"(apt.trusts-key {(hy.repr name)} KEY), or give :signed-by the path "
                          "of a keyring"))))

(setv suite (predicate "suite"
                       "a suite or codename (bookworm, stable-backports), or a path in the archive ending in / (./), with no .. in it"
                       (fn [v] (and (re.fullmatch r"[A-Za-z0-9._][A-Za-z0-9_.+~/-]*" v)
                                    (not-in ".." (.split v "/")))))
      component (matching "component" "a component (main, contrib, stable…)"
                          r"[A-Za-z0-9][A-Za-z0-9_.+/-]*")
      architecture (matching "architecture" "a Debian architecture (amd64, arm64, i386…)"
                             r"[a-z0-9][a-z0-9-]*")
      source-type (matching "source-type" "deb or deb-src" r"deb|deb-src")
      signed-by (named "signed-by" (one-of sources-name abs-path)
                       "the name of a key (see apt.trusts-key) or the absolute path of a keyring"))

(defn sources-text [* types uris suites components architectures signed-by]
  "One deb822 stanza of apt's sources (sources.list(5)), from its fields."
  (.join "" (gfor [field values] [["Types" types] ["URIs" uris] ["Suites" suites]
                                  ["Components" components] ["Architectures" architectures]
                                  ["Signed-By" [signed-by]]]
                  :if values
                  f"{field}: {(.join " " values)}\n")))

(defn _signed-by [name signed-by]
  (setv s (or signed-by name))
  (if (.startswith s "/") s (key-path s)))

(defprop source :posix [#^ sources-name name
                        * #^ (non-empty-list-of apt-uri) uris #^ (non-empty-list-of suite) suites
                        #^ (list-of component) [components []]
                        #^ (list-of architecture) [architectures []]
                        #^ (non-empty-list-of source-type) [types ["deb"]]
                        #^ (optional signed-by) [signed-by None]]
  "/etc/apt/sources.list.d/NAME.sources is the deb822 source of URIS,
SUITES, COMPONENTS (none when the suite is a path ending in /), for
ARCHITECTURES (all the host's, by default) and TYPES (deb, deb-src),
trusting only the key SIGNED-BY: the name of an `apt.trusts-key` of the
host (by default NAME itself), or the path of a keyring.  A one-line
NAME.list beside it — the old form a vendor's instructions make — is removed,
since apt refuses one source with two Signed-By.  A change marks the package
indexes stale (see the module's documentation).  Unapplying removes the file.

  (apt.trusts-key \"docker\" docker-key)
  (apt.source \"docker\" :uris [\"https://download.docker.com/linux/debian\"]
              :suites [\"bookworm\"] :components [\"stable\"])"
  (:watch [(watch-path "/etc/apt/sources.list.d")])
  (:desc f"apt source {name}")
  (:invariant (not (and components (any (gfor s suites (.endswith s "/")))))
              "a suite that is a path (ending in /) takes no components")
  (:invariant (or components (all (gfor s suites (.endswith s "/"))))
              "give :components, unless each suite is a path ending in /")
  (:hostattrs (required "debian"))
  (:simulates True)
  (:apply
    (combined-results [(_write-sources (+ "/etc/apt/sources.list.d/" name ".sources")
                                (sources-text :types types :uris uris :suites suites
                                              :components components
                                              :architectures architectures
                                              :signed-by (_signed-by name signed-by)))
                (_remove-sources (+ "/etc/apt/sources.list.d/" name ".list"))]))
  (:unapply (_remove-sources (+ "/etc/apt/sources.list.d/" name ".sources"))))

(setv pin-package (matching "pin-package"
                            "a package name, a glob (nginx*) or a /regex/, with no whitespace"
                            r"[^\s\x00-][^\s\x00]*")
      pin-value (matching "pin-value" "what a Pin line matches (a=bookworm-backports), on one line"
                          r"[^\s\x00][^\n\r\x00]*"))

(defprop pinned :posix [#^ sources-name name #^ (one-of pin-package (non-empty-list-of pin-package)) packages
                        #^ (int-range -32768 32767) priority
                        * #^ (optional pin-value) [release None] #^ (optional pin-value) [origin None]
                        #^ (optional pin-value) [version None]]
  "/etc/apt/preferences.d/NAME.pref gives PACKAGES (names, globs, /regexes/,
or \"*\") the pin PRIORITY (apt_preferences(5)) in the release matching
RELEASE (`n=bookworm-backports`, `o=Docker`…), from the ORIGIN host, or at
the VERSION (`1.24.*`): exactly one of these.  Unapplying removes the file.

  (apt.pinned \"nginx-backports\" [\"nginx\" \"nginx-*\"] 900 :release \"n=bookworm-backports\")"
  (:watch [(watch-path "/etc/apt/preferences.d")])
  (:desc f"apt pins {(if (isinstance packages str) packages (.join " " packages))} at {priority}")
  (:invariant (= 1 (sum (gfor x [release origin version] (is-not x None))))
              "give exactly one of :release, :origin and :version")
  (:hostattrs (required "debian"))
  (:simulates True)
  (:apply
    (setv pin (next (gfor [k v] [["release" release] ["origin" origin] ["version" version]]
                          :if (is-not v None) f"{k} {v}")))
    (update-file (+ "/etc/apt/preferences.d/" name ".pref")
                 (+ f"Package: {(if (isinstance packages str) packages (.join " " packages))}\n"
                    f"Pin: {pin}\n"
                    f"Pin-Priority: {priority}\n")
                 :mode 0o644))
  (:unapply (remove-files (+ "/etc/apt/preferences.d/" name ".pref"))))

(setv BACKPORTS-FILE "/etc/apt/sources.list.d/debian-backports.sources")

(defprop backports-enabled :posix [* #^ (non-empty-list-of component) [components ["main"]]]
  "apt's sources include Debian's backports of the host's stable suite
(SUITE-backports, from the host's mirrors, `apt.mirrors`, with COMPONENTS),
in /etc/apt/sources.list.d/debian-backports.sources.  The archive marks
backports NotAutomatic: nothing comes from them but what is asked for
(`(apt.installed \"nginx/bookworm-backports\")`) or pinned
(`apt.pinned`).  A change marks the package indexes stale.  Unapplying
removes the file."
  (:watch [(watch-path BACKPORTS-FILE)])
  (:desc "apt backports enabled")
  (:hostattrs
    (required "debian-stable")
    (when (not (.get (get-hostattr "os") "suite"))
      (inapplicable "apt.backports-enabled needs the host's Debian suite: (os.debian-stable \"bookworm\" :amd64)")))
  (:simulates True)
  (:apply
    (_write-sources BACKPORTS-FILE
                    (sources-text :types ["deb"] :uris (get-mirrors)
                                  :suites [f"{(get (get-hostattr "os") "suite")}-backports"]
                                  :components components :architectures []
                                  :signed-by KEYRING)))
  (:unapply (_remove-sources BACKPORTS-FILE)))

(setv AUTO-UPGRADES "/etc/apt/apt.conf.d/20auto-upgrades"
      UNATTENDED-CONF "/etc/apt/apt.conf.d/52consfig-unattended-upgrades"
      mail-address (matching "mail-address" "a mail address (user@host, no spaces, quotes or ;)"
                             r"[^\s\"\\;@{}]+@[^\s\"\\;@{}]+")
      time-of-day (matching "time-of-day" "a time of day, HH:MM" r"([01][0-9]|2[0-3]):[0-5][0-9]"))

(defn _apt-conf [settings]
  (.join "" (gfor [k v] settings f"{k} \"{v}\";\n")))

(defn _ensure-installed [packages]
  (cond (installed? #* packages) NO-CHANGE
        (checking?) (do (inform f"would install: {(.join " " packages)}") WOULD-CHANGE)
        True (install-packages [] packages)))

(defprop unattended-upgrades-enabled :posix [* #^ (optional mail-address) [mail None]
                                             #^ boolean [automatic-reboot False]
                                             #^ (optional time-of-day) [reboot-time None]]
  "unattended-upgrades is installed and runs every day (apt's periodic
update of the package lists, then the upgrade), installing what Debian's
security archive and point releases bring (its default origins).  With MAIL,
it mails a report there; with AUTOMATIC-REBOOT, it reboots when an upgrade
needs it, at REBOOT-TIME (HH:MM) if given, else at once.  Unapplying turns
the daily runs off and leaves the package."
  (:watch [(watch-path AUTO-UPGRADES) (watch-path UNATTENDED-CONF) (watch-dpkg)])
  (:desc "unattended-upgrades enabled")
  (:invariant (or automatic-reboot (is reboot-time None)) ":reboot-time needs :automatic-reboot True")
  (:hostattrs (required "debian"))
  (:simulates True)
  (:apply
    (setv extra (+ (if mail [["Unattended-Upgrade::Mail" mail]] [])
                   (if automatic-reboot [["Unattended-Upgrade::Automatic-Reboot" "true"]] [])
                   (if reboot-time [["Unattended-Upgrade::Automatic-Reboot-Time" reboot-time]] [])))
    (combined-results [(_ensure-installed ["unattended-upgrades"])
                (update-file AUTO-UPGRADES (_apt-conf [["APT::Periodic::Update-Package-Lists" "1"]
                                                       ["APT::Periodic::Unattended-Upgrade" "1"]])
                             :mode 0o644)
                (if extra
                    (update-file UNATTENDED-CONF (_apt-conf extra) :mode 0o644)
                    (_remove-sources UNATTENDED-CONF))]))
  (:unapply
    (update-file AUTO-UPGRADES (_apt-conf [["APT::Periodic::Update-Package-Lists" "0"]
                                           ["APT::Periodic::Unattended-Upgrade" "0"]])
                 :mode 0o644)))

(defn _additional-path [basename content]
  (setv text (if (isinstance content #(list tuple)) (.join "\n" (_flatten content)) content))
  (+ "/etc/apt/sources.list.d/" basename
     (if (re.search r"^Types:" text re.M) ".sources" ".list")))

(defprop additional-sources :posix [#^ sources-basename basename
                                    #^ (one-of string (list-of line)) content]
  "/etc/apt/sources.list.d/BASENAME holds CONTENT (a string or list of
lines): `.sources` when it is deb822, `.list` otherwise.  A change marks the
package indexes stale (see the module's documentation).  Unapplying removes
the file.  `source` writes a deb822 file from typed fields instead."
  (:watch [(watch-path "/etc/apt/sources.list.d")])
  (:desc f"apt sources {basename}")
  (:hostattrs (required "debian"))
  (:simulates True)
  (:apply
    (_write-sources (_additional-path basename content) (content-text content)))
  (:unapply (_remove-sources (_additional-path basename content))))

(defprop cache-cleaned :posix []
  "apt's cache of downloaded packages is empty (`apt-get clean`)."
  (:unwatched "apt fills its cache at every install: it is emptied again at the host's interval, not at each download")
  (:desc "apt cache cleaned")
  (:hostattrs (required "debian"))
  ;; Not /var/cache/apt/*.bin: any apt command makes those again (a check
  ;; that simulates an install too), so a host would never check clean.
  (:check (not (. (run-script (+ "for f in /var/cache/apt/archives/*.deb "
                                 "/var/cache/apt/archives/partial/*; "
                                 "do [ -e \"$f\" ] && exit 0; done; exit 1")
                              :check False :timeout 60)
                  ok?)))
  (:apply (run-waiting-for-locks "apt-get" "-o" f"DPkg::Lock::Timeout={(_lock-timeout)}" "clean"
                                 :env ENV :timeout 300)))

(defn _known-states [packages]
  ;; `{name: Status-Abbrev}` of those of PACKAGES dpkg knows of.
  (setv r (run "dpkg-query" "-W" "-f" "${Package} ${db:Status-Abbrev}\\n" "--" #* packages
               :check False :timeout 300))
  (dfor l (.splitlines r.stdout) :if (= (len (.split l)) 2) (get (.split l) 0) (get (.split l) 1)))

(defn _left-behind [packages]
  ;; Those of PACKAGES of which dpkg keeps anything: the package, or its
  ;; configuration files ("rc").
  (setv states (_known-states (lfor p packages (_name p))))
  (lfor p packages :if (not-in (cut (.get states (_name p) "un") 1 2) #("n" "")) p))

(defprop purged :posix [#^ packages #* packages]
  "None of PACKAGES is installed, and none has configuration files left
behind (`apt-get purge`): a package removed earlier is purged too."
  (:watch [(watch-dpkg)])
  (:desc f"apt purged {(.join " " (_flatten packages))}")
  (:preprocess (_flatten packages))
  (:hostattrs (required "debian"))
  (:check (setv left (_left-behind packages))
          (or (not left) (Drift f"would purge: {(.join " " left)}")))
  (:apply (apt-get "purge" "--" #* (_left-behind packages))))

(defn _held []
  (set (.split (. (run "apt-mark" "showhold" :timeout 120) stdout))))

(defprop held :posix [#^ packages #* packages]
  "Each of PACKAGES is held (`apt-mark hold`): apt leaves it at the version
it has, neither upgrading nor removing it.  Unapplying releases the hold."
  (:watch [(watch-dpkg)])
  (:desc f"apt holds {(.join " " (_flatten packages))}")
  (:preprocess (_flatten packages))
  (:hostattrs (required "debian"))
  (:check (setv missing (lfor p packages :if (not-in p (_held)) p))
          (or (not missing) (Drift f"would hold: {(.join " " missing)}")))
  (:apply (run-waiting-for-locks "apt-mark" "hold" "--" #* packages :timeout 300))
  (:unapply (setv have (_held))
            (if (any (gfor p packages (in p have)))
                (run-waiting-for-locks "apt-mark" "unhold" "--" #* packages :timeout 300)
                NO-CHANGE)))

(setv NO-RECOMMENDS "/etc/apt/apt.conf.d/50consfig-no-recommends")

(defprop recommends-not-installed :posix []
  "apt installs no recommended or suggested package unless told to, as a
minimal server wants (`APT::Install-Recommends \"false\"`, in
/etc/apt/apt.conf.d).  Unapplying removes the setting."
  (:watch [(watch-path "/etc/apt/apt.conf.d")])
  (:simulates True)
  (:desc "apt installs no recommends")
  (:hostattrs (required "debian"))
  (:apply (update-file NO-RECOMMENDS (+ "// Written by consfig.\n"
                                        "APT::Install-Recommends \"false\";\n"
                                        "APT::Install-Suggests \"false\";\n")
                       :mode 0o644))
  (:unapply (remove-files NO-RECOMMENDS)))

(setv apt-conf-name (matching "apt-conf-name"
                             "a file name apt reads in apt.conf.d (letters, digits, _ . and -, not starting with . or -)"
                             r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")
      apt-conf-key (matching "apt-conf-key"
                            "an apt configuration option such as Acquire::Retries (letters, digits, : _ . + and -)"
                            r"[A-Za-z0-9][A-Za-z0-9:_.+-]*")
      ;; apt.conf quotes a value in double quotes and has no escape for one.
      apt-conf-setting (predicate "apt-conf-setting"
                                  "an option or its value (one line with no double quote, or an integer), or a dict of them"
                                  (fn [v] (or (and (isinstance v int) (not (isinstance v bool)))
                                              (and (isinstance v str) (not (re.search "[\"\n\r\x00]" v)))
                                              (and (isinstance v dict)
                                                   (all (gfor [k x] (.items v)
                                                              (and (isinstance k str) (.accepts apt-conf-key k)
                                                                   (or (isinstance x int)
                                                                       (and (isinstance x str)
                                                                            (not (re.search "[\"\n\r\x00]" x))))))))))))

(defn _apt-conf-problem [pairs]
  (if pairs
      (pairs-problem pairs apt-conf-key)
      "needs options: alternating names and values, or one dict"))

(defn apt-conf-path [name] (+ "/etc/apt/apt.conf.d/" name))

(defprop configured :posix [#^ apt-conf-name name #^ apt-conf-setting #* pairs]
  "apt's options PAIRS (alternating names and values, or one dict) are set
in /etc/apt/apt.conf.d/NAME, which holds nothing else, one `Name \"value\";`
a line, for every apt and apt-get run after it.  A value is one line
without a double quote (apt.conf has no escape for one); lists of values
(`DPkg::Pre-Invoke`) are not written here.  Check mode shows the diff.
Unapplying removes the file.

  (apt.configured \"80retries\" \"Acquire::Retries\" 3 \"Acquire::http::Timeout\" 30)"
  (:watch [(watch-path (apt-conf-path name))])
  (:simulates True)
  (:invariant (not (_apt-conf-problem pairs)) (_apt-conf-problem pairs))
  (:desc (+ "apt has " (.join ", " (gfor [[_ k] v] (.items (conf-pairs pairs)) f"{k}={v}"))))
  (:hostattrs (required "debian"))
  (:apply (update-file (apt-conf-path name)
                       (+ "// Written by consfig.\n"
                          (.join "" (gfor [[_ k] v] (.items (conf-pairs pairs)) f"{k} \"{v}\";\n")))
                       :mode 0o644))
  (:unapply (remove-files (apt-conf-path name))))

(defn _marks [which]
  (set (.split (. (run "apt-mark" (+ "show" which) :timeout 120) stdout))))

(defn _mark-drift [packages which]
  (setv wrong (lfor p packages :if (not-in p (_marks which)) p))
  (or (not wrong) (Drift f"would mark {which}: {(.join " " wrong)}")))

(defprop marked-manual :posix [#^ packages #* packages]
  "Each of PACKAGES, installed, is marked as installed by hand (`apt-mark
manual`): `apt-get autoremove` keeps it when nothing depends on it any
more.  Unapplying marks them automatically installed."
  (:watch [(watch-path "/var/lib/apt/extended_states")])
  (:desc f"apt marks {(.join " " (_flatten packages))} manual")
  (:preprocess (_flatten packages))
  (:hostattrs (required "debian"))
  (:check (_mark-drift packages "manual"))
  (:apply (run-waiting-for-locks "apt-mark" "manual" "--" #* packages :timeout 300))
  (:unapply (run-waiting-for-locks "apt-mark" "auto" "--" #* packages :timeout 300)))

(defprop marked-auto :posix [#^ packages #* packages]
  "Each of PACKAGES, installed, is marked as automatically installed
(`apt-mark auto`): `apt-get autoremove` removes it once nothing depends on
it.  Unapplying marks them installed by hand."
  (:watch [(watch-path "/var/lib/apt/extended_states")])
  (:desc f"apt marks {(.join " " (_flatten packages))} auto")
  (:preprocess (_flatten packages))
  (:hostattrs (required "debian"))
  (:check (_mark-drift packages "auto"))
  (:apply (run-waiting-for-locks "apt-mark" "auto" "--" #* packages :timeout 300))
  (:unapply (run-waiting-for-locks "apt-mark" "manual" "--" #* packages :timeout 300)))

(export :objects [configured apt-conf-path installed installed-minimally removed updated upgraded
                  autoremoved reconfigured service-installed-running mirrors
                  proxy standard-sources-list additional-sources cache-cleaned
                  all-configured installed-packages forget-installed-packages
                  installed? install-packages apt-get get-mirrors standard-sources ENV
                  lock-timeout apt-options run-waiting-for-locks sources-changed
                  trusts-key source pinned backports-enabled unattended-upgrades-enabled
                  keyring-path key-path dearmor sources-text openpgp-public-key
                  UPDATE-NEEDED purged held recommends-not-installed NO-RECOMMENDS
                  marked-manual marked-auto])
