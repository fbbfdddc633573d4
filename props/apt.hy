"Debian packages, through apt and dpkg.

Everything runs non-interactively (DEBIAN_FRONTEND=noninteractive, existing
configuration files kept, dpkg's lock waited for with a timeout).  Whether
packages are installed is asked of dpkg once per connection and remembered
(in the connection's attributes) until an apt or dpkg command run here
changes it, so that a host with a hundred `apt.installed` properties runs
`dpkg-query` once, not a hundred times."

(eval-when-compile
  (require consfig.property [defprop]
           consfig.propspec [defproplist]))
(import re
        consfig.actions [NO-CHANGE change-if-changes-file remote-exists? run run-script]
        consfig.context [forget-connattr get-connattr set-connattr]
        consfig.engine [Drift inform report-output]
        consfig.errors [CommandFailed]
        consfig.host [push-hostattr get-hostattr]
        consfig.props.file [update-file]
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

(setv ENV {"DEBIAN_FRONTEND" "noninteractive"
           "APT_LISTCHANGES_FRONTEND" "none"
           "NEEDRESTART_MODE" "l"})

(setv APT-OPTIONS ["-y" "-q"
                   "-o" "Dpkg::Options::=--force-confdef"
                   "-o" "Dpkg::Options::=--force-confold"
                   "-o" "DPkg::Lock::Timeout=300"])

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
  (setv r (run "apt-get" "-s" #* APT-OPTIONS #* args "--" #* packages
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
      (fn [] (report-output (. (run "apt-get" #* APT-OPTIONS #* args :env ENV
                                    :timeout APT-TIMEOUT)
                               stdout))))
    (finally (forget-installed-packages))))

(defn install-packages [args packages]
  "apt-get install PACKAGES with ARGS; on failure, update the indexes and
try once more."
  ;; Indexes that are missing or stale (a package 404s after a point release)
  ;; are the usual reason an install fails: update them and try once more.
  (try
    (apt-get "install" #* args "--" #* packages)
    (except [e CommandFailed]
      (inform f"apt-get install failed; updating the package indexes and trying again")
      (run "apt-get" "-q" "update" :env ENV :timeout APT-TIMEOUT)
      (apt-get "install" #* args "--" #* packages))))

(defprop installed :posix [#^ packages #* packages]
  "Each of PACKAGES (names, or lists of names) is installed, with its
recommends."
  (:desc f"apt installed {(.join " " (_flatten packages))}")
  (:preprocess (_flatten packages))
  (:hostattrs (required "debian"))
  (:check (_installed-or-drift [] packages))
  (:apply (install-packages [] packages))
  (:unapply (apt-get "remove" "--" #* packages)))

(defprop installed-minimally :posix [#^ packages #* packages]
  "Each of PACKAGES is installed, without its recommends."
  (:desc f"apt installed minimally {(.join " " (_flatten packages))}")
  (:preprocess (_flatten packages))
  (:hostattrs (required "debian"))
  (:check (_installed-or-drift ["--no-install-recommends"] packages))
  (:apply (install-packages ["--no-install-recommends"] packages))
  (:unapply (apt-get "remove" "--" #* packages)))

(defprop removed :posix [#^ packages #* packages]
  "None of PACKAGES is installed (their configuration files may remain)."
  (:desc f"apt removed {(.join " " (_flatten packages))}")
  (:preprocess (_flatten packages))
  (:hostattrs (required "debian"))
  (:check (or (none-installed? #* packages) (_would "remove" [] packages)))
  (:apply (apt-get "remove" "--" #* packages)))

(defprop all-configured :posix []
  "No package's installation is left unfinished (`dpkg --configure --pending`)."
  (:desc "dpkg --configure --pending")
  (:hostattrs (required "debian"))
  (:check (= "" (.strip (. (run "dpkg" "--audit" :check False :timeout 300) stdout))))
  (:apply
    (try
      (change-if-changes-file DPKG-STATUS
        (fn [] (run "dpkg" "--configure" "--pending" :env ENV :timeout APT-TIMEOUT)))
      (finally (forget-installed-packages)))))

(defn _lists-state []
  (. (run-script "cd /var/lib/apt/lists 2>/dev/null && md5sum -- *Release 2>/dev/null; true"
                 :timeout 60)
     stdout))

(defn _update []
  ;; apt-get fetches InRelease anew ("Get:") even when it has not changed,
  ;; so a change is judged by the content of the Release files instead.
  (setv before (_lists-state))
  (report-output (. (run "apt-get" "-q" "update"
                         #* (if (isa? (get-hostattr "os") "debian-stable")
                                [] ["--allow-releaseinfo-change"])
                         :env ENV :timeout APT-TIMEOUT)
                    stdout))
  (if (= before (_lists-state)) NO-CHANGE None))

(defprop updated :posix []
  "The package indexes are up to date with the archive (`apt-get update`).
It counts as a change only when the archive's indexes have changed."
  (:desc "apt-get update")
  (:hostattrs (required "debian"))
  (:apply
    ;; An unfinished installation would make apt-get refuse to do anything.
    (when (.strip (. (run "dpkg" "--audit" :check False :timeout 300) stdout))
      (run "dpkg" "--configure" "--pending" :env ENV :timeout APT-TIMEOUT)
      (forget-installed-packages))
    (_update)))

(defprop upgraded :posix []
  "Every package is at the newest version the indexes offer
(`apt-get dist-upgrade`)."
  (:desc "apt upgraded")
  (:hostattrs (required "debian"))
  (:apply (apt-get "dist-upgrade")))

(defprop autoremoved :posix []
  "No package remains that was installed automatically and is no longer
needed (`apt-get autoremove`)."
  (:desc "apt removed automatically installed packages")
  (:hostattrs (required "debian"))
  (:apply (apt-get "autoremove")))

(defn _debconf-value [package question]
  (setv r (run "debconf-communicate" package :input f"GET {question}\n"
               :check False :timeout 60)
        #(code _ value) (.partition (.strip r.stdout) " "))
  (when (= code "0") value))

(defn _triples [triples]
  (lfor t triples (lfor x t (str x))))

(defprop reconfigured :posix [#^ package-name package #^ debconf-triple #* triples]
  "PACKAGE's debconf answers are each `[question type value]` of TRIPLES,
and PACKAGE has been reconfigured with them (`dpkg-reconfigure`).  Nothing to
do when debconf already holds those answers."
  (:desc f"{package} reconfigured")
  (:hostattrs (required "debian"))
  (:check (all (gfor [q _ v] (_triples triples) (= (_debconf-value package q) v))))
  (:apply
    (run "debconf-set-selections"
         :input (.join "" (gfor [q t v] (_triples triples) f"{package} {q} {t} {v}\n"))
         :timeout 60)
    (run "dpkg-reconfigure" "-fnoninteractive" package :env ENV :timeout APT-TIMEOUT)))

(defproplist service-installed-running :posix [#^ package-name package]
  "PACKAGE, which provides a service of the same name, is installed and the
service is running (where services are started at all: see
`service.without-starting-services`)."
  (:desc f"{package} installed and running")
  (installed package)
  (service.running package))

(defprop mirrors :posix [#^ url #* uris]
  "The host's Debian mirrors are URIS, best first (the hostattr
`apt.mirrors`, used by `standard-sources-list` and by chroots this host
bootstraps)."
  (:desc f"apt mirrors {(.join ", " uris)}")
  (:hostattrs (push-hostattr "apt.mirrors" (list uris)))
  (:unapply NO-CHANGE))

(defn get-mirrors []
  "The host's Debian mirrors: the newest `apt.mirrors`, or deb.debian.org."
  (or (get-hostattr "apt.mirrors") [DEFAULT-MIRROR]))

(setv PROXY-FILE "/etc/apt/apt.conf.d/20proxy")

(defprop proxy :posix [#^ url uri]
  "apt fetches through the HTTP proxy URI (a hostattr `apt.proxy` too, for
chroots this host bootstraps).  Unapplying removes the proxy setting."
  (:desc f"apt proxy {uri}")
  (:hostattrs (push-hostattr "apt.proxy" uri))
  (:apply (update-file PROXY-FILE f"Acquire::http::Proxy \"{uri}\";\n"))
  (:unapply (if (remote-exists? PROXY-FILE) (run "rm" "-f" "--" PROXY-FILE) NO-CHANGE)))

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
there, so that no source is listed twice.  Update the indexes afterwards
(`(on-change (apt.standard-sources-list) (apt.updated))`)."
  (:desc "apt standard sources")
  (:hostattrs
    (required "debian")
    (when (not (.get (get-hostattr "os") "suite"))
      (import consfig.host [inapplicable])
      (inapplicable "apt.standard-sources-list needs the host's Debian suite")))
  (:apply
    (setv results [(update-file SOURCES-FILE
                                (standard-sources (get-hostattr "os") (get-mirrors)
                                                  (list components) deb-src))
                   (if (remote-exists? SOURCES-LIST)
                       (update-file SOURCES-LIST SOURCES-LIST-POINTER)
                       NO-CHANGE)])
    (if (all (gfor r results (= r NO-CHANGE))) NO-CHANGE None)))

(defn _additional-path [basename content]
  (setv text (if (isinstance content #(list tuple)) (.join "\n" (_flatten content)) content))
  (+ "/etc/apt/sources.list.d/" basename
     (if (re.search r"^Types:" text re.M) ".sources" ".list")))

(defprop additional-sources :posix [#^ sources-basename basename
                                    #^ (one-of string (list-of line)) content]
  "/etc/apt/sources.list.d/BASENAME holds CONTENT (a string or list of
lines): `.sources` when it is deb822, `.list` otherwise.  The package indexes
are updated when it changes.  Unapplying removes the file (and updates)."
  (:desc f"apt sources {basename}")
  (:hostattrs (required "debian"))
  (:apply
    (import consfig.props.file [_text])
    (if (= (update-file (_additional-path basename content) (_text content)) NO-CHANGE)
        NO-CHANGE
        (do (_update) None)))
  (:unapply
    (setv path (_additional-path basename content))
    (if (remote-exists? path)
        (do (run "rm" "-f" "--" path) (_update) None)
        NO-CHANGE)))

(defprop cache-cleaned :posix []
  "apt's cache of downloaded packages is empty (`apt-get clean`)."
  (:desc "apt cache cleaned")
  (:hostattrs (required "debian"))
  (:check (not (. (run-script (+ "for f in /var/cache/apt/archives/*.deb "
                                 "/var/cache/apt/archives/partial/* /var/cache/apt/*.bin; "
                                 "do [ -e \"$f\" ] && exit 0; done; exit 1")
                              :check False :timeout 60)
                  ok?)))
  (:apply (run "apt-get" "clean" :env ENV :timeout 300)))

(export :objects [installed installed-minimally removed updated upgraded
                  autoremoved reconfigured service-installed-running mirrors
                  proxy standard-sources-list additional-sources cache-cleaned
                  all-configured installed-packages forget-installed-packages
                  installed? install-packages apt-get get-mirrors standard-sources ENV])
