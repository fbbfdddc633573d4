"libvirt: QEMU domains defined, started and stopped through libvirtd.

  (use-props consfig.props [libvirt])
  (libvirt.installed)
  (libvirt.daemon-running)
  (libvirt.defined \"web1\" {:disk \"/srv/images/web1.img\" :memory 1024})
  (libvirt.started \"web1\")

For sites that run libvirt: the domain is root's (`qemu:///system`), so
`virsh`, virt-manager and libvirt's own autostart see it.  `vm.running`
(`consfig.props.vm`) runs QEMU itself, with no daemon, and builds the disk
from the VM's host; here, build the image with `disk.raw-image-built-for`
and point `:disk` at it.

consfig writes the domain's XML from a few options (a virtio disk, QEMU's
user-mode network, the first serial port written to a file, no display),
and keeps a digest of them in the domain's metadata (namespace
`urn:consfig:libvirt`): a domain whose digest differs, or that is missing,
drifts and is defined again, keeping its UUID.  A domain defined anew while
it runs takes its new definition at its next start, as libvirt does.

Where the host's PID 1 is systemd, `daemon-running` starts libvirtd.service;
elsewhere (a container, a CI runner) consfig starts `virtlogd -d` and
`libvirtd -d` itself, as it runs its own nspawn containers and VMs there."

(eval-when-compile
  (require consfig.model.property [defprop]
           consfig.model.propspec [defproplist]))
(import hashlib
        json
        posixpath
        re
        xml.sax.saxutils [escape quoteattr]
        consfig.apply.actions [NO-CHANGE Script run run-ok?]
        consfig.apply.engine [Drift]
        consfig.connections.nspawn [machine-name?]
        consfig.errors [FailedChange]
        consfig.model.watchspec [watch-poll]
        consfig.props.apt :as apt
        consfig.props.vm [kvm-usable?]
        consfig.util [keyword-name]
        consfig.types *)

(setv URI "qemu:///system"
      METADATA-NS "urn:consfig:libvirt"
      ;; Where libvirt keeps its QEMU domains' logs; the console goes there too.
      LOG-DIR "/var/log/libvirt/qemu"
      ;; How long libvirtd may take to answer after it is started.
      DAEMON-TIMEOUT 30
      POLL-SECONDS 60)

(setv domain-name (predicate "domain-name"
                             (+ "a domain name (letters, digits, - and _, labels joined by single "
                                "dots, at most 64 characters, not starting with -)")
                             machine-name?))

(defn _key [k] (if (isinstance k hy.models.Keyword) (keyword-name k) k))

(defn _count? [v low high]
  (and (isinstance v int) (not (isinstance v bool)) (<= low v high)))

(setv _OPTION-CHECKS
      {"disk" (fn [v] (and (.accepts abs-path v) (not (re.search r"[\x00-\x1f]" v))))
       "format" (fn [v] (in (_key v) #{"raw" "qcow2"}))
       "memory" (fn [v] (_count? v 16 1048576))
       "cpus" (fn [v] (_count? v 1 256))
       "accel" (fn [v] (in (_key v) #{"auto" "kvm" "tcg"}))
       "network" (fn [v] (isinstance v bool))})

(setv domain-options
      (predicate "domain-options"
                 (+ "a dict of :disk (an absolute path, no control characters), :format (:raw "
                    "or :qcow2), :memory (MiB, from 16), :cpus (1 to 256), :accel (:auto, :kvm "
                    "or :tcg) and :network (true or false)")
                 (fn [v] (and (isinstance v dict)
                              (all (gfor [k x] (.items v)
                                         (and (in (_key k) _OPTION-CHECKS)
                                              ((get _OPTION-CHECKS (_key k)) x))))))))

(defn _options [options]
  (dfor [k v] (.items (or options {})) (_key k) (if (isinstance v hy.models.Keyword) (_key v) v)))

(defn virsh [#* args]
  "virsh's argv for ARGS, on root's libvirtd."
  ["virsh" "-c" URI "-q" #* args])

(defn console-log [name]
  "The file the domain NAME's first serial port is written to."
  (posixpath.join LOG-DIR f"{name}-console.log"))

(defn spec-digest [name options]
  "The digest of what the domain NAME is asked to be, kept in its metadata."
  (. (hashlib.sha256 (.encode (json.dumps [name (_options options)] :sort-keys True))) (hexdigest)))

(defn domain-xml [name options * [kvm False] [uuid None]]
  "The XML definition of the domain NAME with OPTIONS: under KVM when KVM is
true and `:accel` is :auto (else as it says), with UUID when one is given
(a domain defined again keeps its own)."
  (setv o (_options options)
        accel (.get o "accel" "auto")
        dtype (if (= accel "auto") (if kvm "kvm" "qemu") (if (= accel "kvm") "kvm" "qemu"))
        disk (.get o "disk")
        lines [f"<domain type='{dtype}'>"
               f"  <name>{(escape name)}</name>"
               #* (if uuid [f"  <uuid>{(escape uuid)}</uuid>"] [])
               (+ "  <metadata><consfig:spec xmlns:consfig=" (quoteattr METADATA-NS) ">"
                  (spec-digest name options) "</consfig:spec></metadata>")
               f"  <memory unit='MiB'>{(.get o "memory" 512)}</memory>"
               f"  <vcpu>{(.get o "cpus" 1)}</vcpu>"
               "  <os><type arch='x86_64' machine='pc'>hvm</type><boot dev='hd'/></os>"
               "  <features><acpi/></features>"
               "  <on_poweroff>destroy</on_poweroff>"
               "  <devices>"])
  (when disk
    (setv fmt (.get o "format" (if (.endswith disk ".qcow2") "qcow2" "raw")))
    (.extend lines [f"    <disk type='file' device='disk'><driver name='qemu' type='{fmt}'/>"
                    f"<source file={(quoteattr disk)}/><target dev='vda' bus='virtio'/></disk>"]))
  (when (.get o "network" True)
    (.append lines "    <interface type='user'><model type='virtio'/></interface>"))
  (.extend lines [(+ "    <serial type='file'><source path=" (quoteattr (console-log name))
                     "/><target port='0'/></serial>")
                  "  </devices>"
                  "</domain>"])
  (+ (.join "\n" lines) "\n"))

(defn daemon-answers? []
  "Whether root's libvirtd answers."
  (run-ok? #* (virsh "uri") :timeout 60))

(defn _systemd-host? [] (run-ok? "test" "-d" "/run/systemd/system"))

;; $1 seconds: wait until libvirtd answers.
(setv _AWAIT-DAEMON (+ "i=0\n"
                       "until virsh -c " URI " -q uri >/dev/null 2>&1; do\n"
                       "  [ $i -lt $(($1 * 5)) ] || exit 1; sleep 0.2; i=$((i + 1))\n"
                       "done"))

;; Start virtlogd and libvirtd where their pid files name no live process
;; (a zombie left by an earlier one, reaped by nobody in a container, is not
;; one).  Each daemonises itself.
(setv _START-DAEMONS "
alive() {
  p=$(cat \"/run/$1.pid\" 2>/dev/null) && [ -d \"/proc/$p\" ] &&
    [ \"$(sed -n 's/^State:[[:space:]]*\\([A-Z]\\).*/\\1/p' \"/proc/$p/status\")\" != Z ]
}
for d in virtlogd libvirtd; do
  alive \"$d\" || env -u CONSFIG_DEPLOYMENT \"$d\" -d || exit 1
done")

(defn start-daemon []
  "Start root's libvirtd (and virtlogd, which it writes logs through) and
wait until it answers."
  (if (_systemd-host?)
      (run "systemctl" "start" "libvirtd.service" :timeout 120)
      ;; libvirtd -d daemonises itself; it must not carry the deployment's
      ;; token, which consfig.apply.lock ends with the deployment.
      (run (Script _START-DAEMONS) :timeout 60))
  (when (not (run-ok? (Script _AWAIT-DAEMON (str DAEMON-TIMEOUT)) :timeout (+ DAEMON-TIMEOUT 30)))
    (raise (FailedChange (+ f"libvirtd did not answer within {DAEMON-TIMEOUT} s of being started "
                            "(`virsh -c qemu:///system uri` says why)")))))

(defn domain-state [name]
  "The state of the domain NAME as virsh says it (running, shut off,
paused, …), or None when there is no such domain."
  (setv r (run #* (virsh "domstate" "--" name) :check False :timeout 60))
  (when r.ok? (.strip r.stdout)))

(defn _defined-digest [name]
  (setv r (run #* (virsh "metadata" "--config" "--uri" METADATA-NS "--" name) :check False :timeout 60)
        m (re.search r">([0-9a-f]{64})<" r.stdout))
  (when m (.group m 1)))

(defn define [name options]
  "Define the domain NAME with OPTIONS, keeping its UUID if it exists."
  (setv r (run #* (virsh "domuuid" "--" name) :check False :timeout 60)
        uuid (when r.ok? (.strip r.stdout))
        xml (domain-xml name options :kvm (kvm-usable?) :uuid uuid)
        d (run #* (virsh "define" "/dev/stdin") :input xml :check False :timeout 120))
  (when (not d.ok?)
    (raise (FailedChange (+ f"libvirt refused the domain {name}: " (.strip (+ d.stderr d.stdout))))))
  :changed)

(defproplist installed :posix []
  "libvirt's daemon and virsh are installed."
  (:desc "libvirt installed")
  (apt.installed "libvirt-daemon-system" "libvirt-clients"))

(defprop daemon-running :posix []
  "Root's libvirtd runs and answers: started by systemd where it is PID 1,
else by consfig (`virtlogd -d`, `libvirtd -d`)."
  (:desc "libvirtd running")
  (:watch [(watch-poll POLL-SECONDS)])
  (:check (daemon-answers?))
  (:apply (start-daemon) :changed))

(defprop defined :posix [#^ domain-name name #^ (optional domain-options) options]
  "The libvirt domain NAME is defined (persistent, on `qemu:///system`)
with OPTIONS: `:disk` (an image, raw or by its extension or `:format`
qcow2; none by default), `:memory` MiB (512), `:cpus` (1), `:accel`
(:auto — KVM where it is usable, as `vm.running` decides, else TCG —,
:kvm or :tcg) and `:network` (QEMU's user-mode network, true by default).
A domain defined otherwise is defined again, keeping its UUID.

Unapplying undefines it (`undefined`)."
  (:desc f"libvirt domain {name} defined")
  (:watch [(watch-poll POLL-SECONDS)])
  (:check (setv digest (_defined-digest name))
          (cond (= digest (spec-digest name options)) True
                (is digest None) (if (domain-state name)
                                     (Drift f"libvirt domain {name} was not defined by consfig: would define it again")
                                     (Drift f"libvirt domain {name} would be defined"))
                True (Drift f"libvirt domain {name} is defined otherwise: would define it again")))
  (:apply (define name options))
  (:unapply (undefine name)))

(defn undefine [name]
  (if (domain-state name)
      (do (run #* (virsh "undefine" "--" name) :timeout 120) :changed)
      NO-CHANGE))

(defprop undefined :posix [#^ domain-name name]
  "No libvirt domain NAME is defined.  One that runs goes on running, as a
transient domain, until it stops (stop it first with `destroyed`)."
  (:desc f"libvirt domain {name} undefined")
  (:watch [(watch-poll POLL-SECONDS)])
  (:check (setv r (run #* (virsh "dominfo" "--" name) :check False :timeout 60))
          (or (not r.ok?) (in "Persistent:     no" r.stdout)))
  (:apply (undefine name)))

(defprop started :posix [#^ domain-name name]
  "The libvirt domain NAME is running (`virsh start`).  It must be defined."
  (:desc f"libvirt domain {name} started")
  (:watch [(watch-poll POLL-SECONDS)])
  (:check (= (domain-state name) "running"))
  (:apply
    (setv r (run #* (virsh "start" "--" name) :check False :timeout 300))
    (when (not r.ok?)
      (raise (FailedChange (+ f"libvirt could not start the domain {name}: "
                              (.strip (+ r.stderr r.stdout))
                              (if (domain-state name) "" " (define it with libvirt.defined)")))))
    :changed))

(defprop destroyed :posix [#^ domain-name name]
  "The libvirt domain NAME is not running: stopped at once (`virsh
destroy`, which pulls the plug; the guest is not asked)."
  (:desc f"libvirt domain {name} destroyed")
  (:watch [(watch-poll POLL-SECONDS)])
  (:check (not-in (domain-state name) #{"running" "paused" "in shutdown" "idle"}))
  (:apply (run #* (virsh "destroy" "--" name) :timeout 120) :changed))

(export :objects [URI METADATA-NS LOG-DIR domain-name domain-options virsh console-log
                  spec-digest domain-xml daemon-answers? start-daemon domain-state define undefine
                  installed daemon-running defined undefined started destroyed])
