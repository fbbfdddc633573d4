"Virtual machines: a disk image booted under QEMU, supervised by consfig.

  (disk.raw-image-built-for \"web1.example.org\" \"/srv/images/web1.img\")
  (vm.running \"web1\" {:disk \"/srv/images/web1.img\" :memory 512})

or, the image built from the VM's own propspec when it is started:

  (vm.running* \"web1\" {:disk \"/srv/images/web1.img\"}
    (os.debian-stable \"bookworm\" :amd64)
    (disk.has-volumes {:table :gpt
                       :partitions [{:size \"1M\" :type :bios-boot}
                                    {:size :rest :fs :ext4 :mount \"/\"}]})
    (apt.installed \"nginx\"))

A raw GPT disk with an EFI system partition and no BIOS boot partition (an
image `disk.raw-image-built-for` gave GRUB for UEFI) boots under OVMF, the
UEFI firmware of Debian's ovmf; any other by QEMU's own BIOS; `:firmware`
chooses instead.

QEMU runs with KVM where /dev/kvm is there for root and the CPU has hardware
virtualisation (vmx or svm in /proc/cpuinfo), and with plain emulation (TCG)
otherwise; `:accel` chooses instead.  Not QEMU's own fallback
(`-accel kvm -accel tcg`): a /dev/kvm can open without running a normal
guest (a kernel whose KVM is PVM, as on the test machines, where such a
guest hangs before its BIOS prints anything).  consfig starts
QEMU itself, detached (`-daemonize`), with no display: its PID is kept in
/run/consfig/vm/NAME.pid and the guest's first serial port (its console,
as `disk.raw-image-built-for` sets it up) is written to NAME.log there.
Every deployment checks the PID, and one that finds QEMU gone boots the
machine again.

Not libvirt: it wants a daemon and an XML domain definition for what is
here one command line, and its supervision would replace this one rather
than add to it.  Sites that run libvirt have `consfig.props.libvirt`."

(eval-when-compile (require consfig.model.property [defprop]))
(import json
        posixpath
        consfig.apply.actions [Script run run-ok? remote-exists?]
        consfig.connections.nspawn [machine-name?]
        consfig.apply.engine [Drift inform]
        consfig.errors [FailedChange]
        consfig.props.container [container-data container-host-type]
        consfig.props.disk [build-image image-host-checked image-options]
        consfig.util [keyword-name]
        consfig.types *)

(setv RUN-DIR "/run/consfig/vm"
      ;; UEFI firmware for QEMU, from Debian's ovmf: code and variables in
      ;; one image, its variables not kept (an image built by consfig boots
      ;; its removable-media loader, with no boot entry to remember).
      OVMF "/usr/share/ovmf/OVMF.fd"
      ;; How long an orderly stop may take before QEMU is killed.
      STOP-TIMEOUT 60)

(setv machine-name (predicate "machine-name"
                              (+ "a machine name (letters, digits, - and _, labels joined by "
                                 "single dots, at most 64 characters, not starting with -)")
                              machine-name?))

(defn _key [k] (if (isinstance k hy.models.Keyword) (keyword-name k) k))

(defn _options-problem [options]
  (for [[k v] (.items options)]
    (setv k (_key k))
    (setv problem
          (cond (= k "disk") (when (not (.accepts abs-path v)) f":disk {(hy.repr v)} is not an absolute path")
                (= k "memory") (when (not (and (isinstance v int) (not (isinstance v bool)) (<= 64 v 1048576)))
                                 f":memory {(hy.repr v)} is not a number of MiB from 64")
                (= k "cpus") (when (not (and (isinstance v int) (not (isinstance v bool)) (<= 1 v 256)))
                               f":cpus {(hy.repr v)} is not a number of CPUs from 1 to 256")
                (= k "format") (when (not-in (_key v) #{"raw" "qcow2"})
                                 f":format {(hy.repr v)} is not :raw or :qcow2")
                (= k "accel") (when (not-in (_key v) #{"auto" "kvm" "tcg"})
                                f":accel {(hy.repr v)} is not :auto, :kvm or :tcg")
                (= k "firmware") (when (not-in (_key v) #{"bios" "uefi"})
                                   f":firmware {(hy.repr v)} is not :bios or :uefi")
                (= k "image") (when (not (.accepts image-options v))
                                f":image {(hy.repr v)} is not {image-options.phrase}")
                True f"unknown option :{k} (a VM takes :disk :memory :cpus :format :accel :firmware :image)"))
    (when problem (return problem)))
  (when (not-in "disk" (lfor k options (_key k)))
    (return "no :disk (the image to boot)"))
  None)

(setv vm-options (predicate "vm-options" "a dict of :disk, :memory, :cpus, :format, :accel, :firmware and :image"
                            (fn [v] (isinstance v dict))))

(defn pid-file [name] (posixpath.join RUN-DIR f"{name}.pid"))
(defn console-log [name]
  "The file the guest NAME's serial console is written to."
  (posixpath.join RUN-DIR f"{name}.log"))

(defn kvm-usable? []
  "Whether KVM can run a guest here: /dev/kvm is read- and writable and the
CPU has hardware virtualisation."
  (run-ok? (Script "[ -r /dev/kvm ] && [ -w /dev/kvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo")))

(defn qemu-argv [name options [kvm False]]
  "QEMU's command line for the machine NAME with OPTIONS (normalised), under
KVM when KVM is true and OPTIONS' `:accel` is :auto (else as it says), and
with `OVMF` for firmware when `:firmware` is :uefi."
  (setv disk (get options "disk")
        fmt (_key (.get options "format" (if (.endswith disk ".qcow2") "qcow2" "raw")))
        accel (_key (.get options "accel" "auto")))
  ["qemu-system-x86_64" "-name" name
   "-accel" (if (= accel "auto") (if kvm "kvm" "tcg") accel)
   "-m" (str (.get options "memory" 512)) "-smp" (str (.get options "cpus" 1))
   #* (if (= (_key (.get options "firmware" "bios")) "uefi") ["-bios" OVMF] [])
   "-drive" f"file={(.replace disk "," ",,")},format={fmt},if=virtio"
   "-nic" "user,model=virtio-net-pci"
   "-display" "none" "-monitor" "none"
   "-serial" f"file:{(console-log name)}"
   "-daemonize" "-pidfile" (pid-file name)])

;; $1 name, $2 run directory: is the QEMU of the PID file running?
(setv _ALIVE "
p=$(cat \"$2/$1.pid\" 2>/dev/null) && [ -d \"/proc/$p\" ] &&
  case $(cat \"/proc/$p/comm\" 2>/dev/null) in qemu-system*) true ;; *) false ;; esac &&
  [ \"$(sed -n 's/^State:[[:space:]]*\\([A-Z]\\).*/\\1/p' \"/proc/$p/status\")\" != Z ]
")

(defn running? [name]
  "Whether consfig's QEMU for the machine NAME is running."
  (run-ok? (Script _ALIVE name RUN-DIR)))

(defn start [name options]
  "Boot the machine NAME under QEMU, its console written afresh (the last
one kept as NAME.log.old)."
  (when (not (remote-exists? (get options "disk")))
    (raise (FailedChange (+ f"the disk image {(get options "disk")} of the VM {name} does not "
                            "exist: build it first (disk.raw-image-built-for)"))))
  (setv options (| options {"firmware" (firmware-of options)}))
  (when (and (= (get options "firmware") "uefi") (not (remote-exists? OVMF)))
    (raise (FailedChange (+ f"the VM {name} boots by UEFI, and there is no {OVMF}: "
                            "(apt.installed \"ovmf\") first"))))
  (run "mkdir" "-p" "-m" "0700" "--" RUN-DIR :timeout 60)
  (run (Script "[ ! -e \"$1\" ] || mv -f -- \"$1\" \"$1.old\"" (console-log name)) :timeout 60)
  (inform f"booting the VM {name} from {(get options "disk")}")
  (run "env" "-u" "CONSFIG_DEPLOYMENT" #* (qemu-argv name options (kvm-usable?)) :timeout 120))

;; $1 name, $2 seconds, $3 run directory.  QEMU powers the guest off at
;; once on TERM (as a power cut would); what is still there is killed.
(setv _STOP (+ "alive() {" _ALIVE "}
p=$(cat \"$3/$1.pid\" 2>/dev/null) || exit 0
if alive \"$1\" \"$3\"; then
  kill -TERM \"$p\"
  i=0
  while alive \"$1\" \"$3\" && [ $i -lt $(($2 * 5)) ]; do sleep 0.2; i=$((i + 1)); done
  if alive \"$1\" \"$3\"; then echo \"the VM $1 did not stop within $2 s: killed\" >&2; kill -KILL \"$p\"; fi
fi
rm -f \"$3/$1.pid\"
"))

(defn stop [name]
  "Stop the machine NAME's QEMU, waiting for it."
  (run (Script _STOP name (str STOP-TIMEOUT) RUN-DIR) :timeout (+ STOP-TIMEOUT 30)))

(defn _image-problem [options host]
  ;; What keeps OPTIONS from building the image of HOST, or None.
  (when (is host None)
    (return (when (in "image" options) ":image is for building the disk from the VM's host: give one")))
  (when (or (= (_key (.get options "format" "raw")) "qcow2")
            (and (not-in "format" options) (.endswith (str (.get options "disk" "")) ".qcow2")))
    ":disk must be a raw image to be built from the VM's host (the image's own :qcow2 writes a copy)"))

(defn _preprocessed [options]
  (dfor [k v] (.items options)
        (_key k) (cond (isinstance v hy.models.Keyword) (_key v)
                       (= (_key k) "image") (dfor [ik iv] (.items v) (_key ik) iv)
                       True v)))

(setv _ESP-GUID "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"
      _BIOS-BOOT-GUID "21686148-6449-6E6F-744E-656564454649")

(defn firmware-of [options]
  "The firmware the VM of OPTIONS (normalised) boots with: its `:firmware`,
else \"uefi\" when its disk is raw and partitioned GPT with an EFI system
partition and no BIOS boot partition (as `disk.raw-image-built-for` makes
a disk that boots by GRUB for UEFI), else \"bios\"."
  (setv given (.get options "firmware")
        disk (get options "disk"))
  (when given (return (_key given)))
  (when (or (= (_key (.get options "format" "raw")) "qcow2")
            (and (not-in "format" options) (.endswith disk ".qcow2")))
    (return "bios"))
  (setv r (run "sfdisk" "--json" "--" disk :check False :timeout 60))
  (when (not r.ok?) (return "bios"))
  (setv table (.get (json.loads r.stdout) "partitiontable" {})
        types (sfor p (.get table "partitions" []) (.upper (.get p "type" ""))))
  (if (and (= (.get table "label") "gpt") (in _ESP-GUID types) (not-in _BIOS-BOOT-GUID types))
      "uefi"
      "bios"))

(defprop running :posix [#^ machine-name name #^ vm-options options
                         #^ (optional container-host-type) [host None]]
  "The virtual machine NAME runs under QEMU from OPTIONS' `:disk` (a raw
image, or qcow2 by its extension or `:format`), with `:memory` MiB (512)
and `:cpus` (1), under KVM or emulation as `:accel` says (:auto, :kvm,
:tcg; :auto by default: see the module's documentation), user-mode networking and no display; its serial console
goes to /run/consfig/vm/NAME.log.  A QEMU that is gone is started again.
`:firmware` :bios boots it with SeaBIOS, :uefi with OVMF (Debian's ovmf,
`OVMF`); unless given, it is :uefi when the disk is a raw GPT disk with an
EFI system partition and no BIOS boot partition (as an image built from
volumes with an ESP boots by GRUB for UEFI), else :bios.

Without HOST the image is not built here: `disk.raw-image-built-for` does
that, before.  With HOST (a propspec, which the dotted form `vm.running*`
takes as its trailing forms, or a host defined with defhost, or its name),
every start of the VM first builds its raw `:disk` as
`disk.raw-image-built-for` does, with `:image`'s options (`:tarball`,
`:bootstrap`, `:bootloader`, `:qcow2`): made when it is missing, HOST's
propspec applied inside it again when it is there.  A running VM's disk is
left alone (it is in use): a running VM keeps itself with its own consfig
image (`image.applied-periodically`), or gets HOST's changes at its next
start by consfig."
  (:unwatched "a VM is a qemu process consfig started, with no unit to watch: re-checked at the host's interval")
  (:desc f"VM {name} running")
  (:invariant (not (_options-problem options)) (_options-problem options))
  (:invariant (not (_image-problem (_preprocessed options) host))
              (_image-problem (_preprocessed options) host))
  (:opaque-type True)
  (:preprocess [name (_preprocessed options) (when (is-not host None) (container-data name host))])
  (:hostattrs (when host (image-host-checked host)))
  (:check (or (running? name)
              (Drift (+ f"the VM {name} would be booted from {(get options "disk")}"
                        (if host ", its image built from its host first" "")))))
  (:apply
    (when host
      (build-image host (get options "disk") (.get options "image" {})))
    (start name options)))

(defprop stopped :posix [#^ machine-name name]
  "The virtual machine NAME is not running (QEMU is ended: TERM, then KILL
after `STOP-TIMEOUT` seconds)."
  (:unwatched "a VM is a qemu process consfig started, with no unit to watch: re-checked at the host's interval")
  (:desc f"VM {name} stopped")
  (:check (or (not (running? name)) (Drift f"the VM {name} would be stopped")))
  (:apply (stop name)))

(defprop removed :posix [#^ machine-name name]
  "The virtual machine NAME is stopped and its PID file and console logs
are gone (its disk image is left: remove it with `file.absent`)."
  (:unwatched "a VM is a qemu process consfig started, with no unit to watch: re-checked at the host's interval")
  (:desc f"VM {name} removed")
  (:check (or (not (or (running? name) (remote-exists? (pid-file name))
                       (remote-exists? (console-log name))))
              (Drift f"the VM {name} would be stopped and its logs removed")))
  (:apply (stop name)
          (run "rm" "-f" "--" (console-log name) (+ (console-log name) ".old") :timeout 60)))

(export :objects [RUN-DIR OVMF firmware-of STOP-TIMEOUT pid-file console-log kvm-usable? qemu-argv running? start stop
                  running stopped removed])
