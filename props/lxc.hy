"LXC: system containers made from a host definition, booted with their own
systemd as PID 1, run by LXC's own tools.

  (use-props consfig.props [lxc os apt])
  (lxc.installed)
  (lxc.container-running* \"web1\" {}
    (os.debian-stable \"bookworm\" :amd64)
    (apt.installed \"nginx\"))

The trailing propspec describes another host, the container, as it does for
`container.nspawn-running` (`consfig.props.container`), whose pieces this
module shares: the tree is bootstrapped as a chroot is, from the
container's own OS declaration, with systemd and dbus included (a tree
made some other way that has no systemd gets it installed); the
container's propspec is applied inside the running container, as a
deployment nested in the host's, over a `[:lxc :name NAME]` hop
(`consfig.connections.lxc`), after its hostname is set to its host's.

These are root's privileged containers, in /var/lib/lxc: NAME/config, in
lxc.container.conf(5)'s syntax, written by consfig, and the tree in
NAME/rootfs unless `:root` puts it elsewhere.  `lxc-start` boots it (LXC's
own monitor keeps it, with or without a systemd on the host), `lxc-stop`
powers it off, and Debian's lxc.service starts those with `:autostart` at
boot.  By default it shares the host's network (`lxc.net.0.type = none`,
as the nspawn container shares it); `:config` adds to or overrides the
configuration's keys: `{:config {\"lxc.net.0.type\" \"veth\"
\"lxc.net.0.link\" \"lxcbr0\" \"lxc.net.0.flags\" \"up\"}}`.

Unprivileged containers of a user (Consfigurator's `lxc:user-container`),
with their shifted ids, are not made here."

(eval-when-compile
  (require consfig.model.property [defprop]
           consfig.model.propspec [defproplist]))
(import posixpath
        re
        hy.models [Keyword]
        consfig.apply.actions [NO-CHANGE Script run run-ok? read-remote-file remote-exists?]
        consfig.apply.engine [Drift WOULD-CHANGE checking? inform]
        consfig.connections.lxc [LXC-PATH container-name? lxc-argv attach-argv]
        consfig.errors [FailedChange]
        consfig.model.watchspec [watch-path]
        consfig.nested.deploys [deploy-nested]
        consfig.props.apt :as apt
        consfig.props.chroot [bootstrapped? remove-tree]
        consfig.props.container [BOOT-TIMEOUT STOP-TIMEOUT AWAIT-BOOT container-data container-host-type
                                 container-os bootable-tree bootable? named-after-its-host
                                 write-if-changed]
        consfig.util [keyword-name]
        consfig.types *)

;; The container's init: what bootable-tree installs.  Not /sbin/init,
;; which only systemd-sysv provides.
(setv INIT "/lib/systemd/systemd")

(setv container-name (predicate "lxc-container-name"
                                (+ "an LXC container name (letters, digits, - and _, labels joined "
                                   "by single dots, at most 64 characters, not starting with -)")
                                container-name?))

(defn container-dir [name] (posixpath.join LXC-PATH name))

(defn config-file [name] (posixpath.join LXC-PATH name "config"))

(defn default-root [name] (posixpath.join LXC-PATH name "rootfs"))

;; Options of `container-running`.

(defn _key [k] (if (isinstance k Keyword) (keyword-name k) k))

;; A configuration key as lxc.container.conf(5) spells them.  lxc.rootfs.path
;; is the `:root` option's, and lxc.include could bring in anything.
(setv _CONFIG-KEY (re.compile r"lxc(\.[a-z0-9_]+)+")
      _RESERVED-KEYS #{"lxc.rootfs.path" "lxc.include"})

(defn _config-value? [v]
  (cond (isinstance v bool) True
        (isinstance v int) True
        (isinstance v str) (not (or (in "\n" v) (in "\r" v) (in "\0" v)))
        (isinstance v #(list tuple)) (and v (all (gfor x v (and (not (isinstance x #(list tuple)))
                                                               (_config-value? x)))))
        True False))

(defn _bootstrap-value? [v]
  (or (isinstance v #(str bool int))
      (and (isinstance v #(list tuple)) (all (gfor x v (isinstance x str))))))

(defn _config? [v]
  (and (isinstance v dict)
       (all (gfor [k x] (.items v)
                  (and (isinstance k str) (re.fullmatch _CONFIG-KEY k) (not-in k _RESERVED-KEYS)
                       (_config-value? x))))))

(setv _OPTION-CHECKS
      {"root" (fn [v] (and (.accepts abs-path v) (!= (posixpath.normpath v) "/")))
       "bootstrap" (fn [v] (and (isinstance v dict)
                                (all (gfor [k x] (.items v)
                                           (and (isinstance (_key k) str) (_bootstrap-value? x))))))
       "config" _config?
       "autostart" (fn [v] (isinstance v bool))
       "python" (fn [v] (isinstance v bool))})

(defn _options? [v]
  (and (isinstance v dict)
       (all (gfor [k x] (.items v)
                  (and (in (_key k) _OPTION-CHECKS) ((get _OPTION-CHECKS (_key k)) x))))))

(setv lxc-options
      (predicate "lxc-options"
                 (+ "a dict of container options: :root (an absolute path other than /), "
                    ":bootstrap (debootstrap's options), :config ({\"lxc.KEY\" value}, no newlines, "
                    "not lxc.rootfs.path or lxc.include), :autostart and :python (true or false)")
                 _options?))

(defn _options [options]
  (dfor [k v] (.items (or options {})) (_key k) v))

(defn _root [name options]
  (posixpath.normpath (.get options "root" (default-root name))))

(defn _render-value [v]
  (cond (is v True) "1"
        (is v False) "0"
        True (str v)))

(defn config-text [name root [config None] [autostart False]]
  "The configuration file of the container NAME whose tree is ROOT: LXC's
common settings, booted by systemd, sharing the host's network, started at
boot when AUTOSTART; CONFIG (key → value; a list gives the key once per
item) adds keys or overrides these."
  (setv merged {"lxc.rootfs.path" f"dir:{root}"
                "lxc.uts.name" name
                "lxc.init.cmd" INIT
                "lxc.net.0.type" "none"
                "lxc.start.auto" autostart})
  (for [[k v] (.items (or config {}))]
    (setv (get merged k) v))
  (setv lines [f"# The LXC container {name}, written by consfig (lxc.container-running)."
               "lxc.include = /usr/share/lxc/config/common.conf"])
  (for [[k v] (.items merged)]
    (for [item (if (isinstance v #(list tuple)) v [v])]
      (.append lines f"{k} = {(_render-value item)}")))
  (+ (.join "\n" lines) "\n"))

(defn _configured-root [name]
  ;; The tree the configuration consfig wrote names, or None.
  (for [line (.splitlines (read-remote-file (config-file name) ""))]
    (setv m (re.fullmatch r"lxc\.rootfs\.path\s*=\s*(?:dir:)?(/.*)" line))
    (when m (return (posixpath.normpath (.group m 1))))))

(defn running? [name]
  "Whether the LXC container NAME is running on the target."
  (= (. (run (lxc-argv "lxc-info" name "-s" "-H") :check False :timeout 60) stdout) "RUNNING\n"))

(defn _await-boot [name]
  (setv r (run (attach-argv name ["/bin/sh" "-c" AWAIT-BOOT "sh" (str BOOT-TIMEOUT)])
               :check False :timeout (+ BOOT-TIMEOUT 30))
        state (.strip r.stdout))
  (cond (= state "running") None
        (= state "degraded")
        (inform (+ f"the LXC container {name} booted degraded: "
                   (.strip (. (run (attach-argv name ["systemctl" "--failed" "--plain" "--no-legend"])
                                   :check False :timeout 60)
                              stdout))))
        True (raise (FailedChange (+ f"the LXC container {name} did not finish booting within "
                                     f"{BOOT-TIMEOUT} s (systemd says {(or state "nothing")}"
                                     f"{(if r.stderr (+ ": " (.strip r.stderr)) "")})")))))

(defn start [name]
  "Boot the LXC container NAME and wait until its systemd has finished
booting."
  ;; The container must not carry the deployment's token:
  ;; consfig.apply.lock ends what does when the deployment ends.
  (setv r (run ["env" "-u" "CONSFIG_DEPLOYMENT" #* (lxc-argv "lxc-start" name)]
               :check False :timeout 120))
  (when (not r.ok?)
    (raise (FailedChange (+ f"the LXC container {name} did not start (exit code {r.exit-code}):\n"
                            (.join "\n" (cut (.splitlines (+ r.stderr r.stdout)) -15 None))
                            (+ f"\n(`lxc-start -P {LXC-PATH} -n {name} -F -l DEBUG -o /dev/stderr` "
                               "says more)")))))
  (run (lxc-argv "lxc-wait" name "-s" "RUNNING" "-t" "60") :timeout 90)
  (_await-boot name))

(defn stop [name]
  "Power the LXC container NAME off, waiting for it; LXC kills it when it
takes longer than `STOP-TIMEOUT`."
  (when (running? name)
    (run (lxc-argv "lxc-stop" name "-t" (str STOP-TIMEOUT)) :timeout (+ STOP-TIMEOUT 30))
    :changed))

(defn apply-inside [name data * [python False] [unapply False]]
  "Apply the propspec of DATA (`container-data`) inside the running LXC
container NAME, as a deployment nested in the current one; applying, the
container is named after its host first."
  (deploy-nested [[(Keyword "lxc") (Keyword "name") name] #* (if python [(Keyword "python")] [])]
                 (if unapply data (named-after-its-host data)) None unapply))

(defn _would-run [name root options host]
  ;; Check mode: say what `container-running` would do, doing none of it.
  ;; A running container has HOST's propspec checked inside it.
  (setv text (config-text name root (.get options "config") (.get options "autostart" False))
        would (lfor [c what]
                    [[(not (bootstrapped? root)) f"bootstrap {root}"]
                     [(and (bootstrapped? root) (not (bootable? root))) "install systemd and dbus in it"]
                     [(!= (read-remote-file (config-file name)) text) f"write {(config-file name)}"]
                     [(not (running? name)) "boot it and apply its propspec inside"]]
                    :if c what))
  (when would
    (inform f"the LXC container {name} would be made to run: {(.join "; " would)}")
    (return WOULD-CHANGE))
  (apply-inside name host :python (.get options "python" False)))

(defproplist installed :posix []
  "LXC's tools are installed."
  (:desc "LXC installed")
  (apt.installed "lxc"))

(defprop container-running :posix [#^ container-name name #^ (optional lxc-options) options
                                   #^ container-host-type host]
  "The privileged LXC container NAME exists, is booted with its own
systemd as PID 1, and is configured by HOST: a propspec (the dotted form
`lxc.container-running*` takes it as its trailing forms), or a host
defined with defhost, which can then also be deployed on its own over
`[… [:lxc :name NAME] …]`.

Its tree is at OPTIONS' `:root`, else /var/lib/lxc/NAME/rootfs; it is
bootstrapped as `chroot.os-bootstrapped` does, from HOST's own OS
declaration, with `:bootstrap`'s options for debootstrap, and with systemd
and dbus included.  Its configuration, /var/lib/lxc/NAME/config, includes
LXC's common settings and shares the host's network; `:config` adds keys
or overrides them, `:autostart` has Debian's lxc.service start it at
boot.  A configuration that changes while it runs takes effect at its next
start.  HOST's propspec is applied inside the running container every
time, over `[:lxc :name NAME]`, followed by `:python` when `:python` is
true, after the container's hostname is set to HOST's.

Unapplying removes the container (`container-removed`)."
  (:desc f"LXC container {name} running")
  (:opaque-type True)
  (:simulates True)
  (:preprocess [name (_options options) (container-data name host)])
  (:hostattrs (container-os name host))
  (:apply
    (setv root (_root name options)
          changes [])
    (when (checking?)
      (return (_would-run name root options host)))
    (run "mkdir" "-p" "-m" "0700" "--" (container-dir name) :timeout 60)
    (.extend changes (bootable-tree root host (.get options "bootstrap" {})))
    (.append changes (write-if-changed (config-file name)
                                       (config-text name root (.get options "config")
                                                    (.get options "autostart" False))))
    (when (not (running? name))
      (start name)
      (.append changes "booted"))
    (.append changes (apply-inside name host :python (.get options "python" False)))
    (if (any (gfor c changes (!= c NO-CHANGE))) :changed NO-CHANGE))
  (:unapply (remove name)))

(defprop container-stopped :posix [#^ container-name name]
  "The LXC container NAME is not running: its systemd was asked to power
off (`lxc-stop`), and it was killed if it took longer than a minute."
  (:unwatched "LXC's state is its monitor's, not a file to watch: re-checked at the host's interval")
  (:desc f"LXC container {name} stopped")
  (:check (not (running? name)))
  (:apply (stop name) :changed))

(defn _present? [name]
  (or (remote-exists? (container-dir name)) None))

(defn remove [name]
  "Stop the LXC container NAME and remove it: its configuration directory
and the tree its configuration names, when that looks like a system's
(an etc and a usr in it)."
  (when (not (_present? name)) (return NO-CHANGE))
  (setv root (_configured-root name)
        inside (posixpath.join (container-dir name) ""))
  (when (and root (not (.startswith root inside)))
    (when (or (= root "/")
              (and (remote-exists? root)
                   (not (run-ok? (Script "test -d \"$1/etc\" && test -d \"$1/usr\"" root)))))
      (raise (FailedChange (+ f"{(config-file name)} names the tree {root}, which does not look "
                              "like a container's (no etc and usr in it): not removing it")))))
  (stop name)
  (when (and root (not (.startswith root inside)) (remote-exists? root))
    (remove-tree root))
  (remove-tree (container-dir name))
  :changed)

(defprop container-removed :posix [#^ container-name name]
  "The LXC container NAME does not exist: stopped, then its configuration
directory (/var/lib/lxc/NAME) and its tree, wherever `:root` put it, are
removed."
  (:watch [(watch-path (container-dir name))])
  (:desc f"LXC container {name} removed")
  (:check (or (not (_present? name)) (Drift f"LXC container {name} would be removed")))
  (:apply (remove name)))

(export :objects [LXC-PATH INIT container-name lxc-options container-dir config-file default-root
                  config-text running? start stop remove apply-inside
                  installed container-running container-stopped container-removed])
