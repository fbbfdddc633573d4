"Podman: images, and containers kept running by systemd.

  (use-props consfig.props [podman])
  (podman.image-present \"docker.io/library/debian:bookworm\")
  (podman.container-running \"web\" \"docker.io/library/nginx:stable\"
                            :publish [\"8080:80\"] :volumes [\"/srv/www:/usr/share/nginx/html:ro\"])

Where there is no registry to pull from, an image comes from a root file
system tarball on the target:

  (podman.image-present \"localhost/bookworm:1\" :archive \"/srv/images/bookworm.tar.zst\")
  (podman.container-running \"box\" \"localhost/bookworm:1\" :command [\"sleep\" \"infinity\"])

These are root's (the system's) images and containers.  A container is
described by a systemd unit, /etc/systemd/system/podman-NAME.service, in
the shape `podman generate systemd --new` gives: `podman run --replace` in
ExecStart, the container removed when the unit stops.  Where systemd runs,
the unit is enabled and started (restarted when its text changed); where
no systemd runs (a container, a CI runner), consfig runs the same `podman
run` itself, detached, so the container runs now and the unit is ready for
a machine that boots with systemd.  A chroot (services not started) gets
the unit only.

With `:user`, images and containers are that user's own, rootless ones
(podman run as the user, through runuser(1)), the unit is the user's
(~/.config/systemd/user/podman-NAME.service) for the user's own service
manager, which runs while the user is logged in or lingers
(`systemd.lingering-enabled`); the user needs subordinate ids in
/etc/subuid and /etc/subgid (useradd gives them) and Debian's `uidmap`.

  (podman.container-running \"app\" \"docker.io/library/redis:7\" :user \"alice\")

Why a unit of our own and not Quadlet (a .container file that systemd's
generator turns into a unit): Quadlet came with Podman 4.4, and Debian
bookworm has 4.3.  A unit consfig writes works with both.

Every container consfig runs carries the label consfig.spec, a digest of
what it was asked for (image, command, ports, volumes, environment): one
running with another digest, or not running, drifts.  An image updated in
its registry under the same name does not: pull it anew, then restart.

Images and containers live in Podman's storage, not in files consfig can
watch: the converging agent polls them.

To configure a container from the inside, deploy to it through the
`:podman` hop (`consfig.connections.podman`), with `:python` after it where
the image has Python."

(eval-when-compile (require consfig.model.property [defprop]))
(import difflib
        hashlib
        json
        consfig.apply.actions [NO-CHANGE run run-ok? remote-exists?]
        consfig.apply.engine [Drift WOULD-CHANGE checking? inform]
        consfig.connections.podman [as-podman-user container-name?]
        consfig.errors [FailedChange]
        consfig.model.watchspec [watch-path watch-poll]
        consfig.props.file [read-text update-file]
        consfig.props.service [no-services? skip-for-no-services]
        consfig.props.systemd [exec-line manager-running? systemctl unit-path]
        consfig.props.user [home-directory]
        consfig.types *)

(setv container-name (predicate "container-name"
                                "a container name (letters, digits, _ . and -, not starting with _ . or -; at most 128)"
                                container-name?)
      ;; REGISTRY/PATH:TAG@DIGEST, as podman parses it: lower-case path
      ;; components, no whitespace, no leading dash.
      image-reference (matching "image-reference"
                                "an image reference such as docker.io/library/debian:bookworm (no whitespace, not starting with -)"
                                (+ r"[a-z0-9][a-z0-9._-]*(:[0-9]+)?(/[a-z0-9][a-z0-9._-]*)*"
                                   r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[0-9a-f]{64})?"))
      port-mapping (matching "port-mapping"
                             "a port mapping: [ADDRESS:]HOST-PORT:CONTAINER-PORT[/tcp|udp]"
                             r"(\d{1,3}(\.\d{1,3}){3}:)?\d{1,5}:\d{1,5}(/(tcp|udp))?")
      volume (matching "volume"
                       "a volume: /HOST/PATH:/CONTAINER/PATH[:OPTIONS] or NAME:/CONTAINER/PATH[:OPTIONS] (no whitespace, comma-separated options)"
                       r"(/[^\s:,\x00]*|[A-Za-z0-9][A-Za-z0-9_.-]*):/[^\s:,\x00]*(:[a-zA-Z,]+)?")
      env-name (matching "env-name" "an environment variable name (letters, digits and _)"
                         r"[A-Za-z_][A-Za-z0-9_]*"))

(setv SPEC-LABEL "consfig.spec")

(defn _podman [#* args [check True] [timeout 300] [user None]]
  ;; podman ARGS, as USER (rootless) when given.
  (setv r (run (as-podman-user user ["podman" #* args]) :check False :timeout timeout))
  ;; Unchecked, a podman that is not there has no images nor containers:
  ;; check mode says what would be made, after the apt.installed before it.
  (when (and check (= r.exit-code 127))
    (raise (FailedChange "podman is not installed here (apt.installed \"podman\")")))
  (when (and check (not r.ok?))
    (raise (FailedChange (+ f"podman {(get args 0)} failed: " (.strip (+ r.stderr r.stdout))))))
  r)

;; Images

(defn image-exists? [reference [user None]]
  "Whether Podman's storage (USER's, when given) holds the image REFERENCE."
  (. (_podman "image" "exists" "--" reference :check False :timeout 60 :user user) ok?))

(defn _for [user] (if user f" of {user}" ""))

(defprop image-present :posix [#^ image-reference reference * #^ (optional abs-path) [archive None]
                               #^ (optional user-name) [user None]]
  "Podman's storage holds the image REFERENCE: pulled from its registry,
or, with ARCHIVE, imported from that root file system tarball on the
target (`podman import`; .tar, .tar.gz, .tar.zst…), for a host that has no
registry to pull from.  With USER, it is in USER's own (rootless) storage,
and ARCHIVE must be readable by USER.  An image that is there is not pulled
again.  Unapplying removes the image (which fails while a container uses it)."
  (:watch [(watch-poll 300)])
  (:desc f"podman image {reference} present{(_for user)}")
  (:check (or (image-exists? reference user) (Drift f"image {reference}{(_for user)}: absent → present")))
  (:apply (if archive
              (do (when (not (remote-exists? archive))
                    (raise (FailedChange f"cannot import {reference}: there is no {archive}")))
                  (_podman "import" "--" archive reference :timeout 900 :user user))
              (_podman "pull" "--quiet" "--" reference :timeout 1800 :user user))
          None)
  (:unapply (if (image-exists? reference user)
                (do (_podman "rmi" "--" reference :user user) None)
                NO-CHANGE)))

;; Containers

(defn unit-name [name] f"podman-{name}.service")

(defn spec-digest [image command publish volumes env]
  "The digest of what a container is asked to be, its consfig.spec label."
  (cut (.hexdigest (hashlib.sha256 (.encode (json.dumps [image command publish volumes env]
                                                        :sort-keys True)
                                            "utf-8")))
       0 16))

(defn run-arguments [name image command publish volumes env]
  "The arguments of `podman run` (after the word `run`) for the container,
but for what only systemd adds."
  [#* (gfor p publish x ["--publish" p] x)
   #* (gfor v volumes x ["--volume" v] x)
   #* (gfor [k v] (sorted (.items env)) x ["--env" f"{k}={v}"] x)
   "--label" f"{SPEC-LABEL}={(spec-digest image command publish volumes env)}"
   "--name" name "--replace" "--" image #* command])

(defn unit-text [name image command publish volumes env]
  "The systemd unit that runs the container NAME, as `podman generate
systemd --new` would write it."
  (+ f"[Unit]\nDescription=Podman container {name} (consfig)\n"
     "Wants=network-online.target\nAfter=network-online.target\nRequiresMountsFor=%t/containers\n\n"
     "[Service]\nEnvironment=PODMAN_SYSTEMD_UNIT=%n\nRestart=on-failure\nTimeoutStopSec=70\n"
     "ExecStart=/usr/bin/podman run --cidfile=%t/%n.ctr-id --cgroups=no-conmon --rm"
     " --sdnotify=conmon -d "
     (exec-line (run-arguments name image command publish volumes env)) "\n"
     "ExecStop=/usr/bin/podman stop --ignore -t 10 --cidfile=%t/%n.ctr-id\n"
     "ExecStopPost=/usr/bin/podman rm -f --ignore -t 10 --cidfile=%t/%n.ctr-id\n"
     "Type=notify\nNotifyAccess=all\n\n[Install]\nWantedBy=default.target\n"))

(defn container-state [name [user None]]
  "#(STATUS DIGEST) of the container NAME (USER's, when given: its state,
\"running\", \"exited\"…, and its consfig.spec label), or None when there is
no such container."
  (setv r (_podman "container" "inspect" "--format"
                   (+ "{{.State.Status}} {{index .Config.Labels \"" SPEC-LABEL "\"}}")
                   "--" name :check False :timeout 60 :user user))
  (when r.ok?
    (setv words (.split r.stdout))
    #((get words 0) (if (> (len words) 1) (get words 1) ""))))

(defn _container-drift [name digest user]
  ;; None when the container NAME runs as DIGEST asks; else what is wrong.
  (setv state (container-state name user)
        it f"container {name}{(_for user)}")
  (cond (is state None) f"{it}: absent → running"
        (!= (get state 1) digest) f"{it}: runs another specification → {digest}"
        (!= (get state 0) "running") f"{it}: {(get state 0)} → running"
        True None))

;; Where a container's unit is, and what reads, writes and starts it: the
;; system's manager's, or USER's own (in ~/.config/systemd/user, written as
;; USER, the manager reached as USER).

(defn container-unit-path [name [user None]]
  "Where the unit of the container NAME (USER's, when given) is written."
  (if user
      (+ (.rstrip (home-directory user) "/") "/.config/systemd/user/" (unit-name name))
      (unit-path (unit-name name))))

(defn _read-unit [path user]
  (if user
      (let [r (run (as-podman-user user ["cat" "--" path]) :check False :timeout 60)]
        (when r.ok? r.stdout))
      (read-text path)))

(setv _WRITE-AS-USER "d=${1%/*}; mkdir -p -- \"$d\" && t=$(mktemp \"$d/.consfig-unit.XXXXXXXX\") &&
{ cat > \"$t\" && chmod 644 \"$t\" && mv -f -- \"$t\" \"$1\"; } || { rm -f -- \"$t\"; exit 1; }")

(defn _write-unit [path text user]
  ;; NO-CHANGE, or None once PATH holds TEXT.
  (cond (= (_read-unit path user) text) NO-CHANGE
        user (do (run (as-podman-user user ["/bin/sh" "-c" _WRITE-AS-USER "sh" path])
                      :input text :timeout 60)
                 None)
        True (update-file path text :mode 0o644 :owner "root" :group "root")))

(defn _manager-running? [user]
  (if user
      (run-ok? (as-podman-user user ["/bin/sh" "-c" "test -S \"$XDG_RUNTIME_DIR/systemd/private\""]))
      (manager-running?)))

(defn _systemctl [user #* args]
  (if user
      (run (as-podman-user user ["systemctl" "--user" #* args]) :timeout 300)
      (systemctl False #* args)))

(defn _enabled? [user unit]
  (run-ok? (as-podman-user user ["systemctl" #* (if user ["--user"] []) "is-enabled" "--quiet"
                                 "--" unit])))

(defn _running-by [user]
  ;; What starts the container: :systemd, :none (services not started
  ;; here) or :podman (consfig itself, where no systemd runs for it).
  (cond (no-services?) :none
        (_manager-running? user) :systemd
        True :podman))

(defn _unit-drift [path text user]
  (setv have (_read-unit path user))
  (when (!= have text)
    (Drift (if (is have None) f"{path}: absent → written" f"{path}: differs → rewritten")
           :path path
           :diff (.join "" (difflib.unified-diff (.splitlines (or have "") True)
                                                 (.splitlines text True)
                                                 (+ "a" path) (+ "b" path))))))

(defn _check-running [name image command publish volumes env user]
  (setv path (container-unit-path name user)
        drift (_unit-drift path (unit-text name image command publish volumes env) user))
  (setv by (_running-by user))
  (cond (is-not drift None) drift
        (= by :none) True
        (and (= by :systemd) (not (_enabled? user (unit-name name))))
        (Drift f"{(unit-name name)}{(_for user)}: not enabled → enabled")
        True (let [d (_container-drift name (spec-digest image command publish volumes env) user)]
               (if d (Drift d) True))))

(defn _apply-running [name image command publish volumes env user]
  (setv unit (unit-name name)
        digest (spec-digest image command publish volumes env)
        written (_write-unit (container-unit-path name user)
                             (unit-text name image command publish volumes env) user)
        by (_running-by user)
        drift (when (!= by :none) (_container-drift name digest user)))
  (cond (= by :none)
        (do (skip-for-no-services f"starting the container {name}") written)
        (= by :systemd)
        (do (when (!= written NO-CHANGE) (_systemctl user "daemon-reload"))
            (when (not (_enabled? user unit))
              (_systemctl user "enable" "--" unit))
            (if (or drift (!= written NO-CHANGE))
                (do (_systemctl user "restart" "--" unit) None)
                written))
        drift
        (do (_podman "run" "--detach" #* (run-arguments name image command publish volumes env)
                     :timeout 600 :user user)
            None)
        True written))

(defn _remove-container [name user]
  (setv unit (unit-name name)
        path (container-unit-path name user)
        has-unit (is-not (_read-unit path user) None)
        has-container (is-not (container-state name user) None))
  (cond (not (or has-unit has-container)) NO-CHANGE
        (checking?) (do (inform (+ f"the container {name}{(_for user)}"
                                   (if has-unit f" and {path}" "") " would be removed"))
                        WOULD-CHANGE)
        True
        (do (setv managed (and (not (no-services?)) (_manager-running? user)))
            (when (and has-unit managed)
              (_systemctl user "disable" "--now" "--" unit))
            (when has-container
              (_podman "rm" "--force" "--ignore" "--time" "10" "--" name :timeout 120 :user user))
            (when has-unit
              (run (as-podman-user user ["rm" "-f" "--" path]) :timeout 60)
              (when managed (_systemctl user "daemon-reload")))
            None)))

(defprop container-running :posix [#^ container-name name #^ image-reference image
                                   * #^ (list-of line) [command []]
                                   #^ (list-of port-mapping) [publish []]
                                   #^ (list-of volume) [volumes []]
                                   #^ (dict-of env-name line) [env {}]
                                   #^ (optional user-name) [user None]]
  "The container NAME runs the image IMAGE (COMMAND, or the image's own),
with the ports PUBLISH (\"8080:80\"), the VOLUMES (\"/srv/data:/data:ro\") and
the environment ENV, from the systemd unit podman-NAME.service, which this
writes and enables; where no systemd runs, consfig starts the same `podman
run` itself (see `consfig.props.podman`).  With USER, the container is
USER's, rootless: the unit is USER's (~/.config/systemd/user), for USER's
own manager, which runs while USER is logged in or lingers
(`systemd.lingering-enabled`), and USER needs subordinate ids (/etc/subuid,
and Debian's uidmap).  A container of another specification is replaced.
The image must be there, or be pullable: `podman.image-present` first.
Check mode shows the unit's diff.  Unapplying stops and removes the
container and the unit."
  (:watch [(watch-poll 60) #* (if user [] [(watch-path (container-unit-path name))])])
  (:desc f"podman container {name}{(_for user)} running {image}")
  (:check (_check-running name image command publish volumes env user))
  (:apply (_apply-running name image command publish volumes env user))
  (:unapply (_remove-container name user)))

(defprop container-removed :posix [#^ container-name name * #^ (optional user-name) [user None]]
  "There is no container NAME (USER's, when given), and no unit
podman-NAME.service for it: a running one is stopped (its unit disabled)
and removed.  Nothing to unapply: a container is made by
`container-running`."
  (:watch [(watch-poll 60) #* (if user [] [(watch-path (container-unit-path name))])])
  (:desc f"podman container {name}{(_for user)} removed")
  (:check (setv path (container-unit-path name user))
          (cond (is-not (_read-unit path user) None) (Drift f"{path}: present → absent")
                (is-not (container-state name user) None)
                (Drift f"container {name}{(_for user)}: present → absent")
                True True))
  (:apply (_remove-container name user)))

(export :objects [image-present container-running container-removed image-exists? container-state
                  unit-name container-unit-path unit-text run-arguments spec-digest SPEC-LABEL])
