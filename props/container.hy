"Containers: systemd-nspawn machines made from a host definition, booted
with their own systemd as PID 1.

  (container.nspawn-running* \"web1\" {}
    (os.debian-stable \"bookworm\" :amd64)
    (apt.installed \"nginx\"))

The trailing propspec describes another host — the container, named after
the machine unless a defined host is given instead — so none of its
hostattrs become the enclosing host's.  The tree is bootstrapped as a chroot
is (`consfig.props.chroot`, with systemd and dbus included), registered as a
machine (in /var/lib/machines, or linked there from the `:root` given) with
its settings in /etc/systemd/nspawn/NAME.nspawn, booted, and the propspec is
applied inside the running container through a `[:nspawn :machine NAME]`
hop (`consfig.connections.nspawn`): services start there as on any host.

How a container is booted depends on the host.  Where its PID 1 is systemd,
through systemd-nspawn@NAME.service (`machinectl start`), which the
`nspawn-enabled` property also enables at boot.  Where it is not (a
container, a CI runner, a VM with another init), consfig runs
`systemd-nspawn --boot` itself, detached in a session of its own, keeping
its PID in /run/consfig/nspawn/NAME.pid and the container's console in
NAME.log there; every deployment checks it, and one that finds it gone
boots it again."

(eval-when-compile (require consfig.model.property [defprop]))
(import consfig.model.watchspec [watch-path])
(import posixpath
        hy.models [Keyword]
        consfig.apply.combinators [eseqprops]
        consfig.props.hostname :as props-hostname
        consfig.props.swap [fstab-escaped]
        consfig.apply.actions [NO-CHANGE Script run run-ok? read-remote-file write-remote-file
                               remote-exists? remove-remote]
        consfig.model.context [connection]
        consfig.transport.hop [SAFE-WALK walk-refusal]
        consfig.connections.nspawn [RUN-DIR LEADER machine-name? enter-argv]
        consfig.nested.deploys [deploy-nested]
        consfig.apply.engine [Drift WOULD-CHANGE checking? inform]
        consfig.errors [FailedChange InapplicableProperty]
        consfig.model.host [Host find-host get-hostname preprocess-host]
        consfig.model.property [Propapp]
        consfig.props.chroot [bootstrapped? bootstrappable-os bootstrap-options bootstrap-into
                              remove-tree]
        consfig.util [keyword-name]
        consfig.types
        *)

(setv MACHINES-DIR "/var/lib/machines"
      SETTINGS-DIR "/etc/systemd/nspawn"
      ;; How long a container may take to boot (to `systemctl
      ;; is-system-running` saying running or degraded), and to power off.
      BOOT-TIMEOUT 180
      STOP-TIMEOUT 60
      ;; What a bootstrapped tree needs to boot, and for `machinectl login`.
      BOOT-PACKAGES ["systemd" "dbus"])

(setv machine-name (predicate "machine-name"
                              (+ "a machine name (letters, digits, - and _, labels joined by "
                                 "single dots, at most 64 characters, not starting with -)")
                              machine-name?))

;; Options of `nspawn-running`.

(setv _SECTIONS #{"Exec" "Files" "Network"})

(defn _key [k] (if (isinstance k Keyword) (keyword-name k) k))

(defn _setting-value? [v]
  (cond (isinstance v bool) True
        (isinstance v int) True
        (isinstance v str) (not (or (in "\n" v) (in "\r" v) (in "\0" v)))
        (isinstance v #(list tuple)) (all (gfor x v (and (not (isinstance x #(list tuple)))
                                                       (_setting-value? x))))
        True False))

(defn _settings? [v]
  (and (isinstance v dict)
       (all (gfor [section entries] (.items v)
                  (and (in (_key section) _SECTIONS)
                       (isinstance entries dict)
                       (all (gfor [k x] (.items entries)
                                  (and (isinstance (_key k) str) (.isalnum (_key k))
                                       (_setting-value? x)))))))))

(defn _bootstrap-value? [v]
  (or (isinstance v #(str bool int))
      (and (isinstance v #(list tuple)) (all (gfor x v (isinstance x str))))))

(setv _OPTION-CHECKS
      {"root" (fn [v] (and (.accepts abs-path v) (!= (posixpath.normpath v) "/")))
       "bootstrap" (fn [v] (and (isinstance v dict)
                                (all (gfor [k x] (.items v)
                                           (and (isinstance (_key k) str) (_bootstrap-value? x))))))
       "settings" _settings?
       "python" (fn [v] (isinstance v bool))})

(defn _options? [v]
  (and (isinstance v dict)
       (all (gfor [k x] (.items v)
                  (and (in (_key k) _OPTION-CHECKS) ((get _OPTION-CHECKS (_key k)) x))))))

(setv nspawn-options
      (predicate "nspawn-options"
                 (+ "a dict of container options: :root (an absolute path other than /), "
                    ":bootstrap (debootstrap's options), :settings ({\"Exec\"|\"Files\"|\"Network\" "
                    "{\"Key\" value}}, no newlines) and :python (true or false)")
                 _options?))

(defn _options [options]
  (dfor [k v] (.items (or options {})) (_key k) v))

;; The container as a host.

(setv container-host-type
      (predicate "container-host" "a propspec, or a host defined with defhost (or its name)"
                 (fn [v] (or (isinstance v #(Propapp Host str))
                             (and (isinstance v dict) (in "propspec" v))))))

(defn container-data [name host]
  "The nested host HOST describes, as data a deployment carries: a propspec
makes a host named NAME; a defined host (or its name) is itself."
  (cond (isinstance host dict) host
        (isinstance host Propapp) {"hostname" name "deploy" None "propspec" host "these" None}
        True (do (setv h (find-host host))
                 {"hostname" h.hostname "deploy" h.deploy "propspec" h.propspec "these" None})))

(defn host-of [data]
  (preprocess-host (Host (get data "hostname") (get data "propspec"))))

;; Where it lives.

(defn default-root [name] (posixpath.join MACHINES-DIR name))

(defn settings-file [name] (posixpath.join SETTINGS-DIR f"{name}.nspawn"))

(defn _pid-file [name] (posixpath.join RUN-DIR f"{name}.pid"))

(defn _log-file [name] (posixpath.join RUN-DIR f"{name}.log"))

(defn container-os [name host]
  "The OS the container NAME's host data HOST declares, for its tree to be
bootstrapped from; else the property is inapplicable, saying so of the
container NAME."
  (try
    (bootstrappable-os (host-of host))
    (except [e InapplicableProperty]
      (setv prefix f"{(get-hostname)}: ")
      (setv said (if (.startswith e.message prefix) (cut e.message (len prefix) None) e.message))
      (raise (InapplicableProperty
               (+ prefix f"in the container {name}: " (.replace said "the chroot's" "its")))
             :from e))))

(defn bootable-tree [root host bootstrap]
  "Make ROOT a tree a container can boot: bootstrapped from the OS of HOST
(`container-data`) with debootstrap's options BOOTSTRAP, systemd and dbus
included, when it holds no system; given them, when it holds one without.
Returns what it did, as a list of words."
  (setv changes [])
  (when (not (bootstrapped? root))
    (setv bopts (bootstrap-options bootstrap))
    (setv (get bopts "include")
          (list (dict.fromkeys [#* BOOT-PACKAGES
                                #* (let [i (.get bopts "include" [])]
                                     (if (isinstance i str) (.split i ",") i))])))
    (run "mkdir" "-p" "--" root :timeout 60)
    (bootstrap-into root (host-of host) bopts)
    (.append changes "bootstrapped"))
  (when (not (bootable? root))
    (install-boot-packages root)
    (.append changes "systemd installed"))
  changes)

(defn _systemd-host? []
  ;; sd_booted(3)'s own test.
  (run-ok? "test" "-d" "/run/systemd/system"))

(defn running? [name]
  "Whether the container NAME is running (booted, or booting) on the target."
  (run-ok? (Script (+ LEADER "cf_leader \"$1\" >/dev/null") name)))

(defn _render-value [v]
  (cond (is v True) "yes"
        (is v False) "no"
        True (str v)))

(defn settings-text [name settings]
  "The .nspawn file of the container NAME: booted, sharing the host's users
and network unless SETTINGS (section → key → value; a list value gives the
key once per item) say otherwise."
  (setv merged {"Exec" {"Boot" True "PrivateUsers" False}
                "Files" {}
                "Network" {"VirtualEthernet" False}})
  (for [[section entries] (.items (or settings {}))]
    (for [[k v] (.items entries)]
      (setv (get merged (_key section) (_key k)) v)))
  (setv lines [f"# The container {name}, written by consfig (container.nspawn-running)."])
  (for [section ["Exec" "Files" "Network"]]
    (when (get merged section)
      (.extend lines ["" f"[{section}]"])
      (for [[k v] (.items (get merged section))]
        (for [item (if (isinstance v #(list tuple)) v [v])]
          (.append lines f"{k}={(_render-value item)}")))))
  (+ (.join "\n" lines) "\n"))

(defn write-if-changed [path text]
  (if (= (read-remote-file path) text)
      NO-CHANGE
      (do (run "mkdir" "-p" "--" (posixpath.dirname path) :timeout 60)
          (write-remote-file path text :mode 0o644)
          :changed)))

(defn _registered [name root]
  ;; machinectl and systemd-nspawn@.service find machines by name in
  ;; /var/lib/machines: a root elsewhere is linked there.
  (setv link (default-root name))
  (when (= root link) (return NO-CHANGE))
  (when (= (. (run "readlink" "--" link :check False :timeout 60) stdout) (+ root "\n"))
    (return NO-CHANGE))
  (when (run-ok? "test" "-e" link)
    (when (not (run-ok? "test" "-L" link))
      (raise (FailedChange (+ f"{link} exists and is not a link to {root}; remove it, or give the "
                              "container its default root")))))
  (run "mkdir" "-p" "--" MACHINES-DIR :timeout 60)
  (run "ln" "-sfn" "--" root link :timeout 60)
  :changed)

(defn install-boot-packages [root]
  ;; A tree bootstrapped elsewhere (a tarball, a chroot) may have no init.
  ;; systemd-nspawn without --boot runs apt-get inside with /proc, /dev and
  ;; the rest set up and torn down for it; no service starts, as no init runs.
  (inform f"installing {(.join " " BOOT-PACKAGES)} in {root}, which has no systemd to boot")
  (setv r (run (Script (+ "n() { r=$1; shift; env -u CONSFIG_DEPLOYMENT systemd-nspawn --quiet --register=no "
                          "--keep-unit -D \"$r\" -E DEBIAN_FRONTEND=noninteractive \"$@\"; }\n"
                          "root=$1; shift\n"
                          "n \"$root\" apt-get -o DPkg::Lock::Timeout=300 install -y -q "
                          "--no-install-recommends \"$@\" || { n \"$root\" apt-get update -q && "
                          "n \"$root\" apt-get install -y -q --no-install-recommends \"$@\"; }")
                       root #* BOOT-PACKAGES)
               :check False :timeout 1800))
  (when (not r.ok?)
    (raise (FailedChange (+ f"could not install {(.join " " BOOT-PACKAGES)} in {root} "
                            f"(exit code {r.exit-code}):\n"
                            (.join "\n" (cut (.splitlines (+ r.stdout r.stderr)) -20 None)))))))

(defn bootable? [root]
  (run-ok? (Script "test -x \"$1/usr/lib/systemd/systemd\" || test -x \"$1/lib/systemd/systemd\""
                   root)))

;; consfig's runner, for a host whose PID 1 is not systemd.  $1 name, $2
;; root, $3 run directory.  The container must not carry the deployment's
;; token (consfig.apply.lock ends what does when the deployment ends), and gets a
;; session of its own, so that nothing that ends the deployment's process
;; group ends it.
(setv _START-DIRECT "
mkdir -p -m 0700 \"$3\"
env -u CONSFIG_DEPLOYMENT setsid systemd-nspawn --quiet --boot --register=no --keep-unit \\
  --machine=\"$1\" --directory=\"$2\" </dev/null >\"$3/$1.log\" 2>&1 &
echo $! >\"$3/.$1.pid\" && mv -f \"$3/.$1.pid\" \"$3/$1.pid\"
")

;; $1 name, $2 seconds: wait for the leader; 3 when systemd-nspawn ended.
(setv _AWAIT-LEADER (+ LEADER "
i=0
while [ $i -lt $(($2 * 5)) ]; do
  cf_leader \"$1\" >/dev/null && exit 0
  if [ -d /run/systemd/system ]; then :
  else
    p=$(cat \"" RUN-DIR "/$1.pid\" 2>/dev/null) && [ -d \"/proc/$p\" ] &&
      [ \"$(sed -n 's/^State:[[:space:]]*\\([A-Z]\\).*/\\1/p' \"/proc/$p/status\")\" != Z ] || exit 3
  fi
  sleep 0.2; i=$((i + 1))
done
exit 4"))

(defn _console-tail [name]
  (setv log (read-remote-file (_log-file name) ""))
  (.join "\n" (cut (.splitlines log) -15 None)))

(defn start [name root]
  "Boot the container NAME (whose tree is ROOT) and wait until its systemd
has finished booting."
  (if (_systemd-host?)
      (run "machinectl" "start" "--" name :timeout 120)
      (run (Script _START-DIRECT name root RUN-DIR) :timeout 60))
  (setv r (run (Script _AWAIT-LEADER name (str BOOT-TIMEOUT)) :check False
               :timeout (+ BOOT-TIMEOUT 30)))
  (when (not r.ok?)
    (raise (FailedChange (+ f"the container {name} did not start"
                            (if (_systemd-host?)
                                f" (journalctl -u systemd-nspawn@{name}.service says why)"
                                f"; its console ({(_log-file name)}) ends:\n{(_console-tail name)}")))))
  (_await-boot name))

(defn _await-boot [name]
  ;; systemctl can only wait for the boot once systemd listens on its
  ;; private socket, which it makes a moment after it starts.
  (setv r (run (enter-argv name ["/bin/sh" "-c" AWAIT-BOOT "sh" (str BOOT-TIMEOUT)])
               :check False :timeout (+ BOOT-TIMEOUT 30))
        state (.strip r.stdout))
  (cond (= state "running") None
        (= state "degraded")
        (inform (+ f"the container {name} booted degraded: "
                   (.strip (. (run (enter-argv name ["systemctl" "--failed" "--plain" "--no-legend"])
                                   :check False :timeout 60)
                              stdout))))
        True (raise (FailedChange (+ f"the container {name} did not finish booting within "
                                     f"{BOOT-TIMEOUT} s (systemd says {(or state "nothing")}"
                                     f"{(if r.stderr (+ ": " (.strip r.stderr)) "")})")))))

;; Inside the container, $1 seconds: say the state its systemd ends booting in.
(setv AWAIT-BOOT "
i=0
until [ -S /run/systemd/private ]; do
  [ $i -lt $(($1 * 5)) ] || { echo 'systemd made no /run/systemd/private' >&2; exit 1; }
  sleep 0.2; i=$((i + 1))
done
exec timeout \"$1\" systemctl is-system-running --wait")

;; $1 name, $2 seconds, $3 run directory: stop what consfig's runner
;; started.  TERM makes systemd-nspawn ask the container's systemd to power
;; off; what is still there at the end is killed.
(setv _STOP-DIRECT (+ LEADER "
pid=$(cat \"$3/$1.pid\" 2>/dev/null) || exit 0
alive() {
  [ -d \"/proc/$1\" ] && [ \"$(cat \"/proc/$1/comm\" 2>/dev/null)\" = systemd-nspawn ] &&
    [ \"$(sed -n 's/^State:[[:space:]]*\\([A-Z]\\).*/\\1/p' \"/proc/$1/status\")\" != Z ]
}
if alive \"$pid\"; then
  leader=$(cf_leader \"$1\")
  kill -TERM \"$pid\"
  i=0
  while alive \"$pid\" && [ $i -lt $(($2 * 5)) ]; do sleep 0.2; i=$((i + 1)); done
  if alive \"$pid\"; then
    echo \"the container $1 did not power off within $2 s: killed\" >&2
    [ -n \"$leader\" ] && kill -KILL \"$leader\" 2>/dev/null
    kill -KILL \"$pid\" 2>/dev/null
  fi
fi
rm -f \"$3/$1.pid\"
"))

(defn stop [name]
  "Power the container NAME off, waiting for it; kill it when it takes
longer than `STOP-TIMEOUT`."
  (run (Script _STOP-DIRECT name (str STOP-TIMEOUT) RUN-DIR) :timeout (+ STOP-TIMEOUT 30))
  (when (and (_systemd-host?) (running? name))
    (run "machinectl" "poweroff" "--" name :check False :timeout 60)
    (setv r (run (Script (+ "i=0; while machinectl show -- \"$1\" >/dev/null 2>&1; do "
                            "[ $i -lt $(($2 * 5)) ] || exit 1; sleep 0.2; i=$((i + 1)); done")
                         name (str STOP-TIMEOUT))
                 :check False :timeout (+ STOP-TIMEOUT 30)))
    (when (not r.ok?)
      (run "machinectl" "terminate" "--" name :check False :timeout 60))))

(defn named-after-its-host [data]
  "DATA (`container-data`) whose propspec first gives the container the
hostname of its host definition (`hostname.configured`): the tree was made
from, or copied out of, a system of another name."
  {#** data "propspec" (eseqprops (props-hostname.configured) (get data "propspec"))})

(defn apply-inside [name data * [python False] [unapply False]]
  "Apply the propspec of DATA (`container-data`) inside the running
container NAME, as a deployment nested in the current one; applying, the
container is named after its host first (`named-after-its-host`)."
  (deploy-nested [[(Keyword "nspawn") (Keyword "machine") name] #* (if python [(Keyword "python")] [])]
                 (if unapply data (named-after-its-host data)) None unapply))

(defn _would-run [name root options host]
  ;; Check mode: say what `nspawn-running` would do, doing none of it.  A
  ;; running container has HOST's propspec checked inside it.
  (setv link (default-root name)
        would (lfor [c what]
                    [[(not (bootstrapped? root)) f"bootstrap {root}"]
                     [(and (bootstrapped? root) (not (bootable? root))) "install systemd and dbus in it"]
                     [(and (!= root link)
                           (!= (. (run "readlink" "--" link :check False :timeout 60) stdout) (+ root "\n")))
                      f"link {link} to it"]
                     [(!= (read-remote-file (settings-file name)) (settings-text name (.get options "settings")))
                      f"write {(settings-file name)}"]
                     [(not (running? name)) "boot it and apply its propspec inside"]]
                    :if c what))
  (when would
    (inform f"the container {name} would be made to run: {(.join "; " would)}")
    (return WOULD-CHANGE))
  (apply-inside name host :python (.get options "python" False)))

(defprop nspawn-running :posix [#^ machine-name name #^ (optional nspawn-options) options
                                #^ container-host-type host]
  "The systemd-nspawn container NAME exists, is booted with its own systemd
as PID 1, and is configured by HOST: a propspec (the dotted form
`container.nspawn-running*` takes it as its trailing forms), or a host
defined with defhost, which can then also be deployed on its own over
`[… [:nspawn :machine NAME] …]`.

Its tree is at OPTIONS' `:root`, else /var/lib/machines/NAME; it is
bootstrapped as `chroot.os-bootstrapped` does, from HOST's own OS
declaration, with `:bootstrap`'s options for debootstrap, and with systemd
and dbus included.  `:settings` adds to or overrides its .nspawn file (by
default it shares the host's network and users: `{\"Network\"
{\"VirtualEthernet\" True}}` gives it a veth link of its own).  HOST's
propspec is applied inside the running container every time, over
`[:nspawn :machine NAME]`, followed by `:python` when `:python` is true,
after the container's hostname is set to HOST's (`hostname.configured`).

Unapplying removes the container (`nspawn-removed`)."
  (:desc f"Container {name} running")
  (:opaque-type True)
  (:simulates True)
  (:preprocess [name (_options options) (container-data name host)])
  (:hostattrs (container-os name host))
  (:apply
    (setv root (posixpath.normpath (.get options "root" (default-root name)))
          changes [])
    (when (checking?)
      (return (_would-run name root options host)))
    (.extend changes (bootable-tree root host (.get options "bootstrap" {})))
    (.append changes (_registered name root))
    (.append changes (write-if-changed (settings-file name)
                                        (settings-text name (.get options "settings"))))
    (when (not (running? name))
      (start name root)
      (.append changes "booted"))
    (.append changes (apply-inside name host :python (.get options "python" False)))
    (if (any (gfor c changes (!= c NO-CHANGE))) :changed NO-CHANGE))
  (:unapply (remove name)))

(defn _enable-links [name]
  ;; What `machinectl enable` makes: the machine's instance of
  ;; systemd-nspawn@.service wanted by machines.target, which
  ;; multi-user.target wants.
  [f"/etc/systemd/system/machines.target.wants/systemd-nspawn@{name}.service"
   "/etc/systemd/system/multi-user.target.wants/machines.target"])

(defprop nspawn-enabled :posix [#^ machine-name name]
  "The container NAME boots when the host does: systemd-nspawn@NAME.service
is enabled, as `machinectl enable` does.  systemctl writes the links even
where no systemd runs; only a host that boots systemd acts on them."
  (:watch [(watch-path "/etc/systemd/system/machines.target.wants") (watch-path "/etc/systemd/system/multi-user.target.wants")])
  (:desc f"Container {name} enabled at boot")
  (:check (all (gfor l (_enable-links name) (remote-exists? l))))
  (:apply
    (run "systemctl" "enable" "--" "machines.target" f"systemd-nspawn@{name}.service" :timeout 120)
    (when (not (_systemd-host?))
      (inform "systemd is not PID 1 here: the links take effect only where the host boots systemd"))
    :changed)
  (:unapply
    (if (remote-exists? (get (_enable-links name) 0))
        (do (run "systemctl" "disable" "--" f"systemd-nspawn@{name}.service" :timeout 120)
            :changed)
        NO-CHANGE)))

(defprop nspawn-stopped :posix [#^ machine-name name]
  "The container NAME is not running: its systemd was asked to power off
(and it was killed if it took longer than a minute)."
  (:unwatched "a container consfig booted itself has no unit to watch: re-checked at the host's interval")
  (:desc f"Container {name} stopped")
  (:check (not (running? name)))
  (:apply (stop name) :changed))

;; $1 a tree, as /proc/swaps writes it: swap off each file below it; the
;; one that cannot be, on stderr.
(setv _SWAPOFF-BELOW "
R=\"$1/\" awk 'NR > 1 && index($1, ENVIRON[\"R\"]) == 1 { print $1 }' /proc/swaps |
while IFS= read -r f; do
  f=$(printf '%b' \"$f\")
  swapoff -- \"$f\" || { printf '%s\\n' \"$f\" >&2; exit 1; }
  echo \"$f\"
done")

(defn _swapped-off-below [root]
  ;; A file the machine's kernel swaps on cannot be removed: a container
  ;; whose own kernel it was taken for (an older consfig's swap.file-exists)
  ;; left it there.  It is swapped off, or the removal refused.
  (setv r (run (Script _SWAPOFF-BELOW (fstab-escaped root)) :check False :timeout 3600))
  (for [f (.splitlines r.stdout)]
    (inform f"{f} was swapped on by the machine's kernel: swapped off"))
  (when (not r.ok?)
    (raise (FailedChange (+ f"{(.strip r.stderr)} is swapped on by the machine's kernel and "
                            "swapoff failed: not removing the container; swap it off "
                            "(swapoff) and remove it again")))))
(defn _link-target [link]
  ;; The absolute, normalised path the symlink LINK names, or None.
  (setv r (run "readlink" "-n" "--" link :check False :timeout 60))
  (when (and r.ok? r.stdout)
    (posixpath.normpath (posixpath.join (posixpath.dirname link) r.stdout))))

(defn _check-walk [path]
  ;; Refuse PATH, as a file operation on it would, if the safe walk does.
  (setv r (run (Script (+ SAFE-WALK "cf_walk \"$1\" 0") path) :check False :timeout 60)
        refusal (walk-refusal r.exit-code r.stderr path (. (connection) where)))
  (when refusal (raise refusal)))

(defn _present? [name]
  ;; Anything of the container NAME left: the tree its link names (read one
  ;; step, never followed further), its settings, its pid file.  Returns
  ;; that tree, or True, or None.
  (setv link (default-root name))
  (or (_link-target link) (remote-exists? link) (remote-exists? (settings-file name))
      (remote-exists? (_pid-file name)) None))

(defn remove [name]
  "Stop the container NAME and remove it: its tree, its registration, its
settings and its enabling at boot.  A root linked from /var/lib/machines
is removed too.  A file in the tree that the machine's kernel swaps on is
swapped off first; when it cannot be, nothing is removed."
  ;; The link root made when it registered the machine, read one step and
  ;; never followed further: whatever is at its end is removed as a name,
  ;; by the safe walk, so that a link a user put there (her tree replaced by
  ;; a link to a root directory) goes, and not what it leads to.
  (setv link (default-root name)
        target (_link-target link)
        present (_present? name))
  (when (not present) (return NO-CHANGE))
  (when (and target (not (. (connection) python?)))
    ;; Refused here, before the container is stopped, where a shell could
    ;; not remove it safely.
    (_check-walk target))
  (stop name)
  (when (remote-exists? (get (_enable-links name) 0))
    (run "systemctl" "disable" "--" f"systemd-nspawn@{name}.service" :check False :timeout 120))
  (when (and target (!= target link))
    ;; Only a system's tree: never / or whatever else a link might lead to.
    (when (or (= target "/")
              (not (run-ok? (Script "test -d \"$1/etc\" && test -d \"$1/usr\"" target))))
      (raise (FailedChange (+ f"{link} leads to {target}, which does not look like a "
                              "container's tree (no etc and usr in it): not removing it"))))
    (_swapped-off-below target)
    (remove-tree target))
  (when (run-ok? "test" "-e" link "-o" "-L" link)
    (when (not target) (_swapped-off-below link))
    (if target
        (remove-remote [link] :timeout 60)
        (remove-tree link)))
  (run "rm" "-f" "--" (settings-file name) (_log-file name) :timeout 60)
  :changed)

(defprop nspawn-removed :posix [#^ machine-name name]
  "The container NAME does not exist: stopped, then its tree (at
/var/lib/machines/NAME, or where the link there leads), its .nspawn file and
its enabling at boot are removed."
  (:watch [(watch-path (default-root name)) (watch-path (settings-file name))])
  (:desc f"Container {name} removed")
  (:check (or (not (_present? name)) (Drift f"container {name} would be removed")))
  (:apply (remove name)))

(export :objects [MACHINES-DIR SETTINGS-DIR BOOT-TIMEOUT STOP-TIMEOUT BOOT-PACKAGES
                  machine-name nspawn-options container-data default-root settings-file
                  settings-text running? start stop remove apply-inside named-after-its-host
                  container-host-type host-of container-os bootable-tree bootable? write-if-changed
                  AWAIT-BOOT
                  nspawn-running nspawn-enabled nspawn-stopped nspawn-removed])
