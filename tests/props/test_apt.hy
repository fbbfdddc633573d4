;; apt, in the Debian chroot (packages come from the mirror, or the test
;; cache of .debs).

(require consfig *)
(import pytest
        consfig.props.apt [standard-sources]
        proptest [apply-twice checks-clean deploy-propspec unapply in-chroot this-os])
(use-props consfig.props [apt])

(setv pytestmark pytest.mark.chroot)

(defn installed? [root package]
  (= (. (in-chroot root f"dpkg-query -W -f '${{db:Status-Abbrev}}' {package} 2>/dev/null || true")
        stdout)
     "ii "))

(defn test-installed-removed [debian-chroot chroot-chain]
  (apply-twice chroot-chain [(this-os) (apt.installed "hello")])
  (assert (installed? debian-chroot "hello") "hello installed")
  (assert (= (. (in-chroot debian-chroot "hello") stdout) "Hello, world!\n") "and runs")
  (apply-twice chroot-chain [(this-os) (apt.removed "hello")])
  (assert (not (installed? debian-chroot "hello")) "hello removed")
  (apply-twice chroot-chain [(this-os) (apt.installed-minimally ["hello"])])
  (assert (installed? debian-chroot "hello") "installed minimally")
  (unapply chroot-chain [(this-os) (apt.installed "hello")])
  (assert (not (installed? debian-chroot "hello")) "unapplying installed removes"))

(defn test-one-dpkg-query-for-many-checks [debian-chroot chroot-chain]
  ;; dpkg-query, replaced by a wrapper that counts its calls.
  (in-chroot debian-chroot (+ "mv /usr/bin/dpkg-query /usr/bin/dpkg-query.real && "
                              "printf '#!/bin/sh\\necho x >> /tmp/dpkg-query-calls\\n"
                              "exec /usr/bin/dpkg-query.real \"$@\"\\n' > /usr/bin/dpkg-query && "
                              "chmod 755 /usr/bin/dpkg-query && rm -f /tmp/dpkg-query-calls"))
  (try
    (setv #(o _) (deploy-propspec chroot-chain
                                  [(this-os) #* (gfor p ["apt" "dpkg" "bash" "coreutils" "sed" "grep"]
                                                      (apt.installed p))]))
    (assert (= o.status "no-change") "all there already")
    (assert (= (. (in-chroot debian-chroot "wc -l < /tmp/dpkg-query-calls") stdout) "1\n")
            "one dpkg-query answered six checks")
    (finally
      (in-chroot debian-chroot "mv -f /usr/bin/dpkg-query.real /usr/bin/dpkg-query"))))

(defn test-updated-upgraded-autoremoved-configured [debian-chroot chroot-chain]
  (for [p [(apt.updated) (apt.upgraded) (apt.autoremoved) (apt.all-configured)]]
    ;; The chroot was built up to date: each may or may not find work the
    ;; first time, but never the second.
    (apply-twice chroot-chain [(this-os) p] :changes False))
  (checks-clean chroot-chain [(this-os) (apt.upgraded)])
  None)

(defn test-autoremoved-removes-orphans [debian-chroot chroot-chain]
  (apply-twice chroot-chain [(this-os) (apt.installed "libfribidi0")])
  (in-chroot debian-chroot "apt-mark auto libfribidi0 >/dev/null")
  (apply-twice chroot-chain [(this-os) (apt.autoremoved)])
  (assert (not (installed? debian-chroot "libfribidi0")) "orphan removed"))

(defn test-reconfigured [debian-chroot chroot-chain]
  (setv p (apt.reconfigured "debconf" ["debconf/priority" "select" "critical"]))
  (apply-twice chroot-chain [(this-os) p])
  (assert (in "critical" (. (in-chroot debian-chroot "echo GET debconf/priority | debconf-communicate debconf") stdout))
          "debconf holds the answer"))

(defn test-proxy-and-mirrors [debian-chroot chroot-chain]
  (apply-twice chroot-chain [(this-os) (apt.proxy "http://proxy.invalid:3142")])
  (assert (= (.read-text (/ debian-chroot "etc/apt/apt.conf.d/20proxy"))
             "Acquire::http::Proxy \"http://proxy.invalid:3142\";\n")
          "proxy configured")
  (unapply chroot-chain [(this-os) (apt.proxy "http://proxy.invalid:3142")])
  (assert (not (.exists (/ debian-chroot "etc/apt/apt.conf.d/20proxy"))) "proxy gone"))

(defn test-standard-sources-text []
  (setv text (standard-sources {"type" "debian-stable" "suite" "bookworm" "arch" "amd64"}
                               ["http://m1/debian" "http://m2/debian"] ["main" "contrib"] False))
  (assert (in "URIs: http://m1/debian http://m2/debian\nSuites: bookworm bookworm-updates\n" text) text)
  (assert (in "Suites: bookworm-security\n" text) text)
  (setv text (standard-sources {"type" "debian-unstable" "suite" "unstable" "arch" "amd64"}
                               ["http://m/debian"] ["main"] True))
  (assert (and (in "Types: deb deb-src\n" text) (not-in "security" text)) text))

(defn test-standard-sources-list-and-additional [debian-chroot chroot-chain]
  (import proptest [host-mirror host-suite])
  (setv mirror (host-mirror (host-suite)))
  (apply-twice chroot-chain [(this-os) (apt.mirrors mirror) (apt.standard-sources-list)])
  (setv text (.read-text (/ debian-chroot "etc/apt/sources.list.d/debian.sources")))
  (assert (in f"URIs: {mirror}\n" text) text)
  (assert (.startswith (.read-text (/ debian-chroot "etc/apt/sources.list")) "#") "old list emptied")
  (apply-twice chroot-chain [(this-os) (apt.updated)] :changes True)
  (setv extra (apt.additional-sources "extra" [f"deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] {mirror} {(host-suite)} contrib"]))
  (apply-twice chroot-chain [(this-os) extra])
  (checks-clean chroot-chain [(this-os) extra])
  (assert (.exists (/ debian-chroot "etc/apt/sources.list.d/extra.list")) "one-line source")
  (unapply chroot-chain [(this-os) extra])
  (assert (not (.exists (/ debian-chroot "etc/apt/sources.list.d/extra.list"))) "removed"))

(defn test-cache-cleaned [debian-chroot chroot-chain]
  (in-chroot debian-chroot "apt-get -q -y --download-only install --reinstall hello >/dev/null")
  (apply-twice chroot-chain [(this-os) (apt.cache-cleaned)])
  (assert (= (. (in-chroot debian-chroot "ls /var/cache/apt/archives/*.deb 2>/dev/null | wc -l") stdout) "0\n")
          "no .deb left"))

(defn test-cache-cleaned-holds-after-apt-remakes-its-package-cache [debian-chroot chroot-chain]
  ;; Any apt command makes /var/cache/apt/*.bin again; that is no download
  ;; to clean, and a cleaned host must check clean (issue 31).
  (deploy-propspec chroot-chain [(this-os) (apt.cache-cleaned)])
  (in-chroot debian-chroot "apt-cache policy >/dev/null")
  (setv #(o _) (deploy-propspec chroot-chain [(this-os) (apt.cache-cleaned)] :check-mode True))
  (assert (= o.status "no-change") o.status))

(defn test-service-installed-running-without-starting [debian-chroot chroot-chain]
  (use-props consfig.props [service])
  (apply-twice chroot-chain [(this-os)
                             (service.without-starting-services
                               (apt.service-installed-running "cron"))])
  (assert (installed? debian-chroot "cron") "cron installed"))

(defn render [chain propspec #** options]
  "Deploy PROPSPEC over CHAIN into a Reporter writing to a string."
  (import io consfig.deployer.report [Reporter] rich.console [Console])
  (setv out (io.StringIO)
        reporter (Reporter :console (Console :file out :width 300) #** options))
  (deploy-propspec chain propspec :sink reporter :check-mode (.get options "check" False))
  (.finish reporter)
  (.getvalue out))

(defn test-installing-says-one-line-and-apts-output-only-at-v [debian-chroot chroot-chain]
  (deploy-propspec chroot-chain [(this-os) (apt.removed "hello")])
  (setv quiet (render chroot-chain [(this-os) (apt.installed "hello")]))
  (assert (in "apt installed hello ... done" quiet) quiet)
  (assert (not-in "Unpacking" quiet) "apt's own output is not shown by default")
  (deploy-propspec chroot-chain [(this-os) (apt.removed "hello")])
  (setv verbose (render chroot-chain [(this-os) (apt.installed "hello")] :verbosity 1))
  (assert (in "Unpacking hello" verbose) verbose))

(defn test-check-mode-names-the-packages-and-installs-nothing [debian-chroot chroot-chain]
  (deploy-propspec chroot-chain [(this-os) (apt.removed "hello")])
  (setv text (render chroot-chain [(this-os) (apt.installed "hello")] :check True))
  (assert (in "would install: hello" text) text)
  (assert (in "apt installed hello ... would change" text) text)
  (assert (not (installed? debian-chroot "hello")) "nothing installed"))
