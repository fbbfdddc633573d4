"Images on hosts: applied on a schedule, and pulled from a server.

`pulled-from` makes a host fetch its own signed image from any static file
server (what `consfig publish` writes), check its signature (with
`ssh-keygen -Y verify`) and apply it, on a timer.  `applied-periodically`
makes a host re-apply the image installed at `IMAGE-PATH`.  Both schedule
with a systemd timer where systemd runs and with a cron job where it does
not (`systemd-or-cron`); the host needs nothing but a Python 3.9+ and
flock(1), and for pulling, ssh-keygen."

(eval-when-compile
  (require consfig.model.property [defprop]
           consfig.model.propspec [defpropspec]))
(import consfig.model.watchspec [watch-path watch-dpkg])
(import contextvars
        json
        os
        re
        shlex
        hy.models [Keyword]
        consfig.apply.actions [NO-CHANGE run run-ok? remote-exists? write-remote-file]
        consfig.apply.combinators [eseqprops on-change with-unapply unapplied]
        consfig.model.context [current-host]
        consfig.data.items [get-data provide-data secret?]
        consfig.apply.engine [Drift WOULD-CHANGE apply-sequence checking? inform]
        consfig.errors [ConsfigError FailedChange]
        consfig.model.host [Host find-host get-hostattrs get-hostname]
        consfig.props [cron file systemd]
        consfig.props.service [no-services?]
        consfig.image.puller
        consfig.image.puller [IDENTITY allowed-signers check-identity]
        consfig.types *
        consfig.util [keyword-name])

(setv STATE-DIR "/var/lib/consfig"
      IMAGE-PATH "/var/lib/consfig/image.pyz"
      APPLY-LOCK "/var/lib/consfig/apply.lock"
      PULL-DIR "/var/lib/consfig/pull"
      LIB-DIR "/usr/local/lib/consfig"
      PULL-CONFIG "/etc/consfig/pull.json"
      ALLOWED-SIGNERS "/etc/consfig/allowed_signers"
      UNIT-DIR "/etc/systemd/system"
      ;; The puller's and the image's status when another application held
      ;; the lock: nothing was done, and that is no failure.
      EX-BUSY 75
      ;; with-unapply's marker, as a value: in a call, `:unapply` would take
      ;; only the one argument after it.
      _UNAPPLY (Keyword "unapply"))

(setv _UNITS {"s" 1 "min" 60 "h" 3600 "d" 86400}
      _NAMED {"hourly" 3600 "daily" 86400 "weekly" (* 7 86400)})

(defn interval-seconds [every]
  "EVERY (`:hourly`, `:daily`, `:weekly`, a duration such as \"15min\",
\"2h\", \"1d\" or \"90s\", or a number of seconds) in seconds; None when it
is none of those, or less than a minute."
  (setv n (cond (isinstance every Keyword) (.get _NAMED every.name)
                (in every _NAMED) (get _NAMED every)
                (and (isinstance every int) (not (isinstance every bool))) every
                (isinstance every str)
                (let [m (re.fullmatch r"([1-9][0-9]*)(s|min|h|d)" every)]
                  (when m (* (int (.group m 1)) (get _UNITS (.group m 2)))))))
  (when (and n (>= n 60)) n))

(setv interval (predicate "interval"
                          "an interval of at least a minute: :hourly, :daily, :weekly, \"15min\", \"2h\", \"1d\" or a number of seconds"
                          (fn [v] (is-not (interval-seconds v) None)))
      scheduler (enum "auto" "systemd" "cron")
      public-key (predicate "public-key"
                            "an OpenSSH public key line (ssh-ed25519 AAAA… comment), or one of consfig's old consfig-ed25519 lines"
                            consfig.image.puller.public-key)
      signer-identity (predicate "signer-identity"
                                 "a signer's identity: a letter or digit, then letters, digits and ._@+=- (consfig-publisher, fleet@example.org)"
                                 check-identity))

(defn span [seconds]
  "SECONDS as a systemd time span: \"1h\", \"15min\", \"90s\"."
  (for [[unit n] [["d" 86400] ["h" 3600] ["min" 60]]]
    (when (= (% seconds n) 0)
      (return f"{(// seconds n)}{unit}")))
  f"{seconds}s")

(defn _random-delay [seconds given]
  ;; Hosts of a fleet started together spread over a quarter of the
  ;; interval, at most an hour, unless told.
  (if (is given None) (min 3600 (// seconds 4)) (int given)))

(defn systemd-quote [arg]
  "ARG as one word of a systemd ExecStart= line: specifiers and variables
escaped, quoted when it is not a plain word."
  (setv escaped (.replace (.replace arg "%" "%%") "$" "$$"))
  (if (re.fullmatch r"[A-Za-z0-9/._:=+@,-]+" escaped)
      escaped
      (+ "\"" (.replace (.replace escaped "\\" "\\\\") "\"" "\\\"") "\"")))

(defn _unit-desc [desc]
  ;; Description= expands specifiers: a URL's %20 would not survive.
  (.replace desc "%" "%%"))

(defn service-text [desc argv [network False] [timeout 7200]]
  "The unit file of a oneshot service running ARGV, whose output goes to
the journal; exit status 75 (another application was running) counts as
success."
  (.join "\n" ["[Unit]"
               f"Description={(_unit-desc desc)}"
               #* (if network ["Wants=network-online.target" "After=network-online.target"] [])
               ""
               "[Service]"
               "Type=oneshot"
               f"ExecStart={(.join " " (map systemd-quote argv))}"
               f"SuccessExitStatus={EX-BUSY}"
               f"TimeoutStartSec={timeout}"
               ""]))

(defn timer-text [desc seconds random-delay [first-after None]]
  "The unit file of a timer that starts its service every SECONDS: FIRST-AFTER
seconds after boot (by default SECONDS, at most five minutes), then SECONDS
after each start, each time after a random delay of up to RANDOM-DELAY
seconds."
  (.join "\n" ["[Unit]"
               f"Description={(_unit-desc desc)}"
               ""
               "[Timer]"
               f"OnBootSec={(span (or first-after (min 300 seconds)))}"
               f"OnUnitActiveSec={(span seconds)}"
               f"RandomizedDelaySec={random-delay}"
               ""
               "[Install]"
               "WantedBy=timers.target"
               ""]))

(defn crontab-time [seconds]
  "The crontab(5) time nearest to every SECONDS that cron can say."
  (setv minutes (max 1 (// seconds 60)))
  (defn step [n divisors] (max (gfor d divisors :if (<= d n) d)))
  (cond (< minutes 60) (let [m (step minutes [1 2 3 4 5 6 10 12 15 20 30])]
                         (if (= m 1) "* * * * *" f"*/{m} * * * *"))
        (< minutes 1440) (let [h (step (// minutes 60) [1 2 3 4 6 8 12])]
                           (if (= h 1) "0 * * * *" f"0 */{h} * * *"))
        (< minutes 10080) "0 0 * * *"
        True "0 0 * * 0"))

(defn cron-command [argv random-delay [timeout 7200]]
  "The shell command of the cron job running ARGV, after a random delay of
up to RANDOM-DELAY seconds when one is given, for at most TIMEOUT seconds
(then it is terminated, and killed 30 s later if it has not ended); exit
status 75 (another application was running) counts as success, so that cron
mails nothing.  The job's script keeps two runs from overlapping."
  (+ (if random-delay f"sleep $(shuf -i 0-{random-delay} -n 1); " "")
     f"timeout -k 30 {(int timeout)} " (shlex.join argv) f" || test $? -eq {EX-BUSY}"))

(defprop systemd-or-cron :posix [#^ scheduler via #^ propspec with-systemd #^ propspec with-cron]
  "Apply WITH-SYSTEMD where a systemd service manager runs (or VIA is
`:systemd`), else WITH-CRON (or where VIA is `:cron`), and unapply the other
one, so that a host has exactly one of them.  Unapplying unapplies both."
  (:unwatched "it chooses a propspec by the host's init; the chosen properties are watched")
  (:simulates True)
  (:announce False)
  (:apply
    (setv via (or (keyword-name via) via)
          systemd? (if (= via "auto") (systemd.manager-running?) (= via "systemd"))
          #(wanted other) (if systemd? #(with-systemd with-cron) #(with-cron with-systemd)))
    (if (= (apply-sequence [wanted (unapplied other)]) NO-CHANGE) NO-CHANGE :changed))
  (:unapply (apply-sequence [with-systemd with-cron] :unapply True)))

(defn _unit-paths [name]
  [(os.path.join UNIT-DIR f"{name}.service") (os.path.join UNIT-DIR f"{name}.timer")])

(defprop timer-absent :posix [#^ systemd.unit-name name]
  "Neither NAME.timer nor NAME.service is installed in /etc/systemd/system:
the timer is stopped and disabled first, where systemd allows."
  (:watch [(watch-path UNIT-DIR)])
  (:desc f"systemd timer {name} removed")
  (:check (setv there (lfor p (_unit-paths name) :if (remote-exists? p) p))
          (or (not there) (Drift f"{(.join ", " there)} would be removed")))
  (:apply
    (setv timer f"{name}.timer")
    (when (and (not (no-services?)) (systemd.manager-running?))
      (systemd.systemctl False "stop" "--" timer))
    (when (run-ok? "sh" "-c" "command -v systemctl >/dev/null")
      (systemd.systemctl False "disable" "--" timer))
    (run "rm" "-f" "--" #* (_unit-paths name))
    (when (and (not (no-services?)) (systemd.manager-running?))
      (systemd.systemctl False "daemon-reload"))))

(defpropspec scheduled :posix [#^ systemd.unit-name name #^ non-empty-line desc
                               #^ (non-empty-list-of line) argv #^ interval every
                               * #^ scheduler [via :auto] #^ (optional (int-range 0 86400)) [random-delay None]
                               #^ boolean [network False] #^ (int-range 1 604800) [timeout 7200]
                               #^ (optional (int-range 1 86400)) [first-after None]]
  "ARGV runs as root every EVERY (see `interval-seconds`), one run at a
time, each for at most TIMEOUT seconds: from the systemd timer NAME.timer
and the oneshot service NAME.service (output in the journal; NETWORK: after
the network is up) where systemd runs, else from the cron job NAME (at the
nearest time cron can say; output mailed when it fails).  The timer starts
each run after a random delay of up to RANDOM-DELAY seconds (by default a
quarter of EVERY, at most an hour), so that a fleet does not run all at
once; the cron job sleeps first only when RANDOM-DELAY is given, since its
script is also what an admin runs by hand.  VIA `:systemd` or `:cron`
chooses instead of looking (`:systemd` in an image built to boot later).
The timer's first run is FIRST-AFTER seconds after boot (by default EVERY,
at most five minutes): an image that should apply as the machine comes up
says `:first-after 5`; cron knows no such time, and its job keeps to its
own.  Unapplying removes both."
  (:desc f"{desc}, every {(span (interval-seconds every))}")
  (setv seconds (interval-seconds every)
        delay (_random-delay seconds random-delay)
        #(service timer) (_unit-paths name))
  (systemd-or-cron
    via
    (with-unapply
      (on-change (eseqprops (file.exists-with-content service (service-text desc argv network timeout)
                                                      :mode 0o644)
                            (file.exists-with-content timer (timer-text desc seconds delay first-after)
                                                      :mode 0o644))
                 (systemd.daemon-reloaded))
      (systemd.enabled f"{name}.timer")
      (systemd.started f"{name}.timer")
      :unapply
      (timer-absent name))
    (cron.system-job name (crontab-time seconds) "root"
                     (cron-command argv random-delay timeout))))

(defn _image-arguments [noop arguments]
  ;; `--noop` first: ARGUMENTS may end in words that are not options.
  (if noop ["--noop" #* arguments] (list arguments)))

(defn _noop-desc [noop]
  (if noop ", reporting drift without repairing it" ""))

(defn _source [module-file]
  ;; The puller goes to hosts as the very file consfig runs.
  (with [f (open (os.path.join (os.path.dirname consfig.image.puller.__file__) module-file)
                 :encoding "utf-8")]
    (.read f)))

(defn pull-config [url hostname identity python arguments]
  "The puller's configuration file (JSON) on the host."
  (+ (json.dumps {"url" url
                  "host" hostname
                  "allowed-signers" ALLOWED-SIGNERS
                  "identity" identity
                  "state-directory" PULL-DIR
                  "python" python
                  "arguments" arguments
                  "lock" APPLY-LOCK}
                 :indent 1 :sort-keys True)
     "\n"))

(defprop ssh-keygen-present :posix []
  "ssh-keygen (openssh-client, OpenSSH 8.2 or later) is installed: the
puller checks images' signatures with it.  It is not installed for you (its
package has another name on each system): where it is missing, this fails,
saying what to add."
  (:watch [(watch-dpkg)])
  (:desc "ssh-keygen is installed, to check images' signatures")
  (:check (or (run-ok? "command" "-v" "ssh-keygen")
              (Drift "ssh-keygen is missing: the puller could not check a signature")))
  (:apply
    (raise (FailedChange (+ "ssh-keygen is not installed, and the puller checks images' signatures "
                            "with it: add (apt.installed \"openssh-client\") (or your system's "
                            "OpenSSH client package) before image.pulled-from")))))

(defpropspec pulled-from :posix [#^ url url
                                 * #^ (one-of public-key (non-empty-list-of public-key)) public-key
                                 #^ signer-identity [identity IDENTITY]
                                 #^ interval [every "1h"] #^ scheduler [via :auto]
                                 #^ (optional (int-range 0 86400)) [random-delay None]
                                 #^ (optional (int-range 1 86400)) [first-after None]
                                 #^ abs-path [python "/usr/bin/python3"]
                                 #^ (list-of non-empty-line) [arguments []]
                                 #^ boolean [noop False]]
  "Every EVERY, the host fetches its image URL/HOSTNAME and the signature
URL/HOSTNAME.sshsig (as `consfig publish` writes them), downloading only
what changed (a conditional GET), checks that the signature is by
PUBLIC-KEY (an OpenSSH public key line, as in a KEY.pub, or a list of them:
any one is trusted, for key rotation), names this host, vouches for these
bytes, has not expired and is no older than the image applied last, keeps
the image as the last good one and applies it with PYTHON (and ARGUMENTS,
the image's options: `[\"-v\"]`, `[\"--as-host\"]`; NOOP: with `--noop`,
so that each run reports drift and repairs nothing).  An unsigned,
altered, stale or wrongly signed image is refused and reported (the run
fails, in the journal or cron's mail) and nothing is applied.  The puller
(`/usr/local/lib/consfig/puller.py`) needs nothing but Python 3.9+ and
ssh-keygen: `ssh-keygen -Y verify -n consfig-image -I IDENTITY` checks each
signature against `/etc/consfig/allowed_signers`, which lists the keys for
IDENTITY in the consfig-image namespace.  Scheduling is `scheduled`'s (VIA,
RANDOM-DELAY, FIRST-AFTER).  Unapplying removes the puller, its allowed signers, its
schedule and its state (the last good image)."
  (:desc f"pulls its image from {url} every {(span (interval-seconds every))}{(_noop-desc noop)}")
  (setv keys (if (isinstance public-key str) [public-key] public-key)
        puller (os.path.join LIB-DIR "puller.py")
        ;; What a consfig before OpenSSH signatures installed beside it.
        old-verifier (os.path.join LIB-DIR "ed25519.py")
        schedule (scheduled "consfig-pull" f"consfig: pull and apply this host's image from {url}"
                            [python puller PULL-CONFIG] every
                            :via via :random-delay random-delay :network True
                            :first-after first-after))
  ;; The puller before its configuration: a new puller reads an older
  ;; configuration, should this stop in between.
  (with-unapply
    (ssh-keygen-present)
    (file.directory-exists LIB-DIR)
    (file.exists-with-content puller (_source "puller.py") :mode 0o644)
    (file.does-not-exist old-verifier)
    (file.directory-exists (os.path.dirname PULL-CONFIG))
    (file.exists-with-content ALLOWED-SIGNERS (allowed-signers keys identity) :mode 0o644)
    (file.exists-with-content PULL-CONFIG (pull-config url (get-hostname) identity python
                                                       (_image-arguments noop arguments))
                              :mode 0o644)
    (file.directory-exists STATE-DIR)
    (file.has-mode STATE-DIR 0o700)
    schedule
    _UNAPPLY
    (unapplied schedule)
    (file.does-not-exist puller old-verifier ALLOWED-SIGNERS PULL-CONFIG)
    (file.directory-does-not-exist PULL-DIR)))

;; The hosts whose image is being built.  Building an image computes the
;; host's hostattrs, which runs `installed`'s :hostattrs again: there it
;; provides nothing, so that the image does not have to contain itself.
(setv _imaging (contextvars.ContextVar "consfig-imaging" :default (frozenset)))

(defn _unprepared [hostname]
  ;; The host as its consfig defines it; a host that is not registered (one
  ;; made for `deploy-these`, or a machine's given as its propspec) with its
  ;; own propspec, not the one its deployment wraps it in.
  (try (find-host hostname)
       (except [ConsfigError]
         (setv current (.get current-host))
         (Host hostname (or current.own-propspec current.propspec)))))

(defn own-image [hostname * [no-secrets False]]
  "The `consfig.image.build.Image` of HOSTNAME as `installed` puts it on the host:
built while the host is preprocessed, and without the image itself."
  (import consfig.image.build [make-image])  ; lazy: the deployer's, for building an image alone
  (setv token (.set _imaging (| (.get _imaging) #{hostname})))
  (try (make-image (_unprepared hostname) :no-secrets no-secrets)
       (finally (.reset _imaging token))))

(defn _image-declared? [hostname]
  (any (gfor d (get-hostattrs "data")
             (and (= (get d "iden1") "--image") (= (get d "iden2") hostname)))))

(defn _installed-sha256 []
  (setv r (run "sha256sum" "--" IMAGE-PATH :check False))
  (when r.ok? (get (.split r.stdout) 0)))

(defprop installed :posix [* #^ boolean [no-secrets False]]
  "The host's own image (see docs/images.md) is installed at `IMAGE-PATH`,
mode 0600 when it holds secrets (0755 otherwise), in a directory only root
reads: what `applied-periodically` applies.  The image is built on the
controller when the host is preprocessed and travels as prerequisite data
(`--image` HOSTNAME), so it is written only when its SHA-256 differs from
the installed one's.  NO-SECRETS installs one built with `--no-secrets`.

An image cannot contain itself: inside the image, this property has nothing
to install and leaves the installed image as it is (so a host applying its
image from a timer keeps it; a new one comes with the next deployment from
the controller).  Unapplying removes the image."
  (:watch [(watch-path IMAGE-PATH)])
  (:desc f"its own image installed at {IMAGE-PATH}")
  (:hostattrs
    (setv hostname (get-hostname))
    (when (not-in hostname (.get _imaging))
      (setv image (own-image hostname :no-secrets no-secrets))
      ;; A secret's version is left to the data layer, which does not make
      ;; it a digest of the content.
      (provide-data "--image" hostname image.data
                    :version (when (not image.secrets) image.sha256)
                    :secret (bool image.secrets))))
  ;; No :check: whether the image is installed cannot decide whether to
  ;; remove it, so :apply compares, and simulates in check mode.
  (:simulates True)
  (:apply
    (setv hostname (get-hostname))
    (when (not (_image-declared? hostname))
      (inform f"applied from its own image: {IMAGE-PATH} is left as it is")
      (return NO-CHANGE))
    (setv item (get-data "--image" hostname)
          have (_installed-sha256))
    (when (= have item.sha256)
      (return NO-CHANGE))
    (when (checking?)
      (inform (if have
                  f"{IMAGE-PATH}: sha256 {(cut have 0 12)} → {(cut item.sha256 0 12)}"
                  f"{IMAGE-PATH} would be installed"))
      (return WOULD-CHANGE))
    (setv content (.content item))
    (run "mkdir" "-p" "-m" "700" "--" STATE-DIR)
    (write-remote-file IMAGE-PATH (if (secret? content) (.reveal content) content)
                       :mode (if (secret? content) 0o600 0o755)))
  (:unapply
    (cond (not (remote-exists? IMAGE-PATH)) NO-CHANGE
          (checking?) (do (inform f"{IMAGE-PATH} would be removed") WOULD-CHANGE)
          True (run "rm" "-f" "--" IMAGE-PATH))))

(defpropspec applied-periodically :posix [* #^ interval [every "1h"] #^ scheduler [via :auto]
                                          #^ (optional (int-range 0 86400)) [random-delay None]
                                          #^ (optional (int-range 1 86400)) [first-after None]
                                          #^ abs-path [python "/usr/bin/python3"]
                                          #^ (list-of non-empty-line) [arguments []]
                                          #^ boolean [noop False]]
  "The host re-applies its installed image (`IMAGE-PATH`, see `installed`)
every EVERY, as Consfigurator's `cron:runs-consfigurator` does: one
application at a time (under flock(1) on `APPLY-LOCK`, the lock the puller
takes too), from the systemd timer consfig-apply.timer (output in the
journal) or, where systemd does not run, a cron job.  Scheduling is
`scheduled`'s (VIA, RANDOM-DELAY, FIRST-AFTER); ARGUMENTS are the image's options
(`[\"-v\"]`, `[\"--as-host\"]`).  NOOP runs the image with `--noop`: each
run reports drift (in the journal, and in the run's state file) and repairs
nothing.  Unapplying removes both."
  (:desc f"applies its image every {(span (interval-seconds every))}{(_noop-desc noop)}")
  (setv schedule (scheduled "consfig-apply" "consfig: apply this host's image"
                            ["/usr/bin/flock" "-n" "-E" (str EX-BUSY) APPLY-LOCK python IMAGE-PATH
                             #* (_image-arguments noop arguments)]
                            every :via via :random-delay random-delay
                            :first-after first-after))
  (with-unapply
    (file.directory-exists STATE-DIR)
    (file.has-mode STATE-DIR 0o700)
    schedule
    :unapply
    (unapplied schedule)))

(export :objects [STATE-DIR IMAGE-PATH APPLY-LOCK PULL-DIR LIB-DIR PULL-CONFIG ALLOWED-SIGNERS UNIT-DIR
                  interval-seconds span systemd-quote service-text timer-text crontab-time
                  cron-command systemd-or-cron timer-absent scheduled pull-config
                  ssh-keygen-present pulled-from own-image installed applied-periodically])
