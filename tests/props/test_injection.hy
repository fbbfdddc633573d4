;; Values that land in a line-oriented file or name a thing on a command
;; line are refused when the consfig is loaded: one line naming the file and
;; line, the property, the parameter, the type wanted and the value given.

(import consfig.errors [ConsfigError]
        consfig.site.load [load-consfig])

(defn load-error [tmp-path form]
  "The error loading a consfig whose host has the property FORM."
  (setv f (/ tmp-path "site.hy"))
  (.write-text f (+ "(require consfig *)\n(import consfig *)\n"
                    "(use-props consfig.props [apt cron etc-default file git nftables sshd user])\n"
                    "(defhost inj.example {}\n"
                    "  " form ")\n"))
  (try (load-consfig (str f))
       (except [e ConsfigError] (return (str e))))
  (assert False f"the consfig with {form} loaded without error"))

(defn refused [tmp-path form #* expected]
  (setv msg (load-error tmp-path form))
  (assert (in "site.hy:5: " msg) msg)
  (for [e expected] (assert (in e msg) msg))
  (assert (not-in "\n" msg) f"one line: {msg}"))

(defn test-cron-description-with-a-newline-is-refused [tmp-path]
  (refused tmp-path "(cron.system-job \"backup\\nrm -rf /\" :daily \"root\" \"true\")"
           "cron.system-job: desc must be a non-empty line of text" "\"backup\\nrm -rf /\""))

(defn test-cron-schedule-with-a-newline-is-refused [tmp-path]
  (refused tmp-path "(cron.system-job \"b\" \"0 3 * * *\\n* * * * * root evil\" \"root\" \"true\")"
           "cron.system-job: schedule must be one of :hourly" "a crontab time"))

(defn test-cron-user-with-a-newline-is-refused [tmp-path]
  (refused tmp-path "(cron.system-job \"b\" \"0 3 * * *\" \"root\\n* * * * * root evil\" \"true\")"
           "cron.system-job: user must be a user name"))

(defn test-initial-password-with-a-newline-is-refused-without-showing-it [tmp-path]
  (setv msg (load-error tmp-path "(user.has-enabled-password \"alice\" :initial-password \"temp123\\nother:hash\")"))
  (assert (in "user.has-enabled-password: :initial-password must be a non-empty line" msg) msg)
  (assert (not-in "temp123" msg) f"the secret is not shown: {msg}"))

(defn test-etc-default-key-must-be-a-shell-identifier [tmp-path]
  (refused tmp-path "(etc-default.contains \"rsync\" \"X=1;touch /tmp/p;Y\" \"1\")"
           "etc-default.contains: each key must be a shell variable name" "\"X=1;touch /tmp/p;Y\""))

(defn test-etc-default-value-with-a-newline-is-refused [tmp-path]
  (refused tmp-path "(etc-default.contains \"rsync\" \"RSYNC_ENABLE\" \"true\\nevil=1\")"
           "etc-default.contains: each of pairs must be"))

(defn test-ini-value-with-a-newline-is-refused [tmp-path]
  (refused tmp-path "(file.contains-ini-settings \"/etc/x.ini\" [\"s\" \"k\" \"v\\n[evil]\"])"
           "file.contains-ini-settings: each of triples must be a [section key value] triple"))

(defn test-conf-space-key-with-a-newline-is-refused [tmp-path]
  (refused tmp-path "(file.contains-conf-space \"/etc/x.conf\" \"Port\\nPermitRootLogin\" \"yes\")"
           "file.contains-conf-space: each of pairs must be a key or a value (one line each"))

(defn test-sshd-value-with-a-newline-is-refused [tmp-path]
  (refused tmp-path "(sshd.configured \"Port\" \"22\\nPermitRootLogin yes\")"
           "sshd.configured: each of pairs must be"))

(defn test-package-starting-with-a-dash-is-refused [tmp-path]
  (refused tmp-path "(apt.installed \"--version\")"
           "apt.installed: each of packages must be" "a package name" "\"--version\""))

(defn test-git-commit-starting-with-a-dash-is-refused [tmp-path]
  (refused tmp-path "(git.clone-exists \"https://example.org/r.git\" \"/srv/r\" :commit \"--orphan=x\")"
           "git.clone-exists: :commit must be" "\"--orphan=x\""))

;; Values a program would take as something else: each is checked, at load,
;; against what the program it reaches accepts.

(defn test-an-apt-mirror-that-is-no-http-url-is-refused [tmp-path]
  (refused tmp-path "(apt.mirrors \"javascript:alert(1)\")" "apt.mirrors:" "http:// or https://")
  (refused tmp-path "(apt.mirrors \"file:///etc/shadow\")" "apt.mirrors:" "http:// or https://"))

(defn test-an-apt-proxy-that-is-no-http-url-is-refused [tmp-path]
  (refused tmp-path "(apt.proxy \"file:///etc/shadow\")" "apt.proxy: uri must be")
  (refused tmp-path "(apt.proxy \"http://p:3142\\\";Dir \\\"/tmp\")" "apt.proxy: uri must be"))

(defn test-an-apt-source-uri-apt-has-no-method-for-is-refused [tmp-path]
  (refused tmp-path "(apt.source \"t\" :uris [\"javascript:alert(1)\"] :suites [\"./\"])"
           "apt.source: :uris (element 0) must be")
  (refused tmp-path "(apt.source \"t\" :uris [\"file:///srv/../etc\"] :suites [\"./\"])"
           "apt.source: :uris (element 0) must be"))

(defn test-an-apt-suite-that-climbs-out-of-the-archive-is-refused [tmp-path]
  (refused tmp-path "(apt.source \"t\" :uris [\"http://x\"] :suites [\"../../..\"] :components [\"main\"])"
           "apt.source: :suites (element 0) must be a suite"))

(defn test-a-path-with-a-dot-dot-segment-or-a-newline-is-refused [tmp-path]
  (refused tmp-path "(file.has-content \"/home/u/../../etc/shadow\" \"x\\n\")"
           "file.has-content: path must be an absolute path")
  (refused tmp-path "(file.directory-exists \"/srv/a\\nb\")"
           "file.directory-exists: directory must be an absolute path"))

(defn test-an-nftables-conf-that-is-no-nftables-file-is-refused [tmp-path]
  (refused tmp-path "(nftables.has-ruleset \"table inet f {}\" :conf \"/etc/shadow\")"
           "nftables.has-ruleset: :conf must be"))
