"Disks and disk images: a host's volumes, declared as data and made real in
a raw image file with loop devices, sfdisk and mkfs.

  (disk.has-volumes {:table :gpt
                     :size \"4G\"
                     :partitions [{:size \"1M\" :type :bios-boot}
                                  {:size \"256M\" :fs :vfat :mount \"/boot/efi\" :type :esp}
                                  {:size \"512M\" :fs :swap}
                                  {:size :rest :fs :ext4 :mount \"/\" :label \"root\"}]})

An EFI system partition (`:type :esp`) is made and filled without being
mounted (mtools): a disk with one boots by UEFI (`:grub-efi`, see
`raw-image-built-for`), and with a BIOS boot partition too by either
firmware (`:grub-hybrid`), as Debian's cloud images do.  A root filesystem
with `:luks NAME` is encrypted (LUKS2) once it is built, and unlocked at
boot as /dev/mapper/NAME.

Sizes are whole mebibytes: a number, or text with a unit (\"512M\", \"4G\");
`:rest` (last partition only) takes what is left of the table's `:size`,
which it then needs.  The volumes are checked when the consfig is loaded: one
root filesystem, no mount point twice, known filesystem and partition
types, labels that fit their filesystem, sizes that fit the disk.

Partitions are reached through loop devices attached by offset and size, one
per partition, so that an image can be built where nothing makes partition
device nodes (a container, a host without udev); everything attached and
mounted is released however the build ends."

(eval-when-compile (require consfig.model.property [defprop]))
(import consfig.model.watchspec [watch-dpkg])
(import posixpath
        re
        uuid
        hy.models [Keyword]
        consfig.apply.actions [NO-CHANGE Script run run-ok? output read-remote-file write-remote-file
                               remote-exists?]
        consfig.nested.deploys [deploy-nested]
        consfig.apply.engine [CANNOT-CHECK WOULD-CHANGE checking? inform]
        consfig.data.items [get-data-bytes require-data]
        consfig.errors [FailedChange]
        consfig.model.host [Host find-host get-hostattr inapplicable preprocess-host push-hostattr]
        consfig.props [apt]
        consfig.props.chroot [bootstrappable-os bootstrap-into bootstrap-options]
        consfig.props.crypttab [crypt-name]
        consfig.props.mount [unmount-below]
        consfig.props.service [without-starting-services]
        consfig.util [keyword-name sha256-hex]
        consfig.apply.combinators [eseqprops]
        consfig.types *)

(setv TABLES #{"gpt" "msdos"}
      FILESYSTEMS #{"ext4" "btrfs" "vfat" "swap" "none"}
      PARTITION-TYPES #{"linux" "esp" "bios-boot" "swap"}
      ;; sfdisk's type for each partition type, per table (no BIOS boot
      ;; partition on an MBR disk: GRUB uses the gap before the first one).
      _SFDISK-TYPES {"gpt" {"linux" "L" "esp" "U" "swap" "S"
                            "bios-boot" "21686148-6449-6E6F-744E-656564454649"}
                     "msdos" {"linux" "83" "esp" "ef" "swap" "82"}}
      ;; The longest label each filesystem takes.
      _LABEL-MAX {"ext4" 16 "btrfs" 255 "vfat" 11 "swap" 16}
      ;; Room for the partition table before the first partition (aligned
      ;; to 1 MiB) and, for GPT, its backup at the end.
      _HEAD-MIB 1
      _TAIL-MIB {"gpt" 1 "msdos" 0}
      ;; What encrypting a built filesystem in place takes from the end of
      ;; its partition: twice the LUKS2 header (16 MiB), as cryptsetup(8)
      ;; advises for `reencrypt --encrypt --reduce-device-size`.
      LUKS-RESERVE-MIB 32)

(defn _name [v]
  (cond (isinstance v Keyword) (keyword-name v)
        (isinstance v str) v
        True None))

(defn mebibytes [size]
  "SIZE in whole MiB: a positive integer, or text such as \"512M\", \"4G\",
\"1T\"; None for anything else (`:rest` included)."
  (cond (isinstance size bool) None
        (isinstance size int) (when (> size 0) size)
        (isinstance size str)
        (do (setv m (re.fullmatch r"([1-9][0-9]*)\s*([MGT]?)(?:i?B)?" size))
            (when m
              (* (int (.group m 1)) (get {"" 1 "M" 1 "G" 1024 "T" 1048576} (.group m 2)))))
        True None))

(defn _rest? [size] (= (_name size) "rest"))

(defn _field [part k [default None]]
  (setv v (.get part k (.get part (Keyword k) default)))
  v)

(defn normalise-volumes [volumes]
  "VOLUMES as plain data: string keys and values, sizes in MiB (\"rest\" for
the rest).  Assumes `volumes-problem` found none."
  (setv table (_name (_field volumes "table"))
        size (_field volumes "size"))
  {"table" table
   "size" (when (is-not size None) (mebibytes size))
   "partitions"
   (lfor p (_field volumes "partitions")
         (do (setv fs (or (_name (_field p "fs")) "none")
                   type (or (_name (_field p "type")) (if (= fs "swap") "swap" "linux")))
             {"size" (if (_rest? (_field p "size")) "rest" (mebibytes (_field p "size")))
              "fs" fs
              "type" type
              "mount" (_field p "mount")
              "label" (_field p "label")
              "options" (or (_field p "options") "defaults")
              "luks" (_luks-of (_field p "luks"))}))})

(defn _luks-of [v]
  ;; `:luks NAME` or `:luks {:name NAME :iter-time MS}` or `{:name NAME
  ;; :iterations N}`, as plain data.
  (cond (is v None) None
        (isinstance v str) {"name" v "iter-time" 2000 "iterations" None}
        True {"name" (_field v "name")
              "iter-time" (if (_field v "iterations") None (or (_field v "iter-time") 2000))
              "iterations" (_field v "iterations")}))

(defn _int-in? [v lo hi]
  (and (isinstance v int) (not (isinstance v bool)) (<= lo v hi)))

(defn _luks-problem [v]
  (setv what "is NAME (a mapped device name), {:name NAME :iter-time MS} or {:name NAME :iterations N}")
  (cond (is v None) None
        (isinstance v str) (when (not (.accepts crypt-name v)) f":luks {(hy.repr v)} {what}")
        (not (isinstance v dict)) f":luks {(hy.repr v)} {what}"
        (- (set (gfor k v (_name k))) #{"name" "iter-time" "iterations"}) f":luks {(hy.repr v)} {what}"
        (not (.accepts crypt-name (_field v "name"))) f":luks {(hy.repr v)} {what}"
        (and (is-not (_field v "iter-time") None) (is-not (_field v "iterations") None))
        f":luks {(hy.repr v)}: :iter-time or :iterations, not both"
        (not (or (is (_field v "iter-time") None) (_int-in? (_field v "iter-time") 10 60000)))
        f":luks {(hy.repr v)}: :iter-time is a number of milliseconds from 10 to 60000"
        (not (or (is (_field v "iterations") None) (_int-in? (_field v "iterations") 1000 1000000000)))
        f":luks {(hy.repr v)}: :iterations is a number of PBKDF2 iterations from 1000"))

(defn _partition-problem [i p table]
  (setv where f"partition {(+ i 1)}")
  (when (not (isinstance p dict))
    (return f"{where} is not a dict of :size, :fs, :type, :mount, :label, :options and :luks"))
  (setv unknown (- (set (gfor k p (_name k))) #{"size" "fs" "type" "mount" "label" "options" "luks"}))
  (when unknown
    (return f"{where} has unknown key(s) {(.join " " (gfor u (sorted (gfor u unknown (str u))) f":{u}"))}"))
  (setv size (_field p "size")
        fs (or (_name (_field p "fs")) "none")
        type (or (_name (_field p "type")) (if (= fs "swap") "swap" "linux"))
        mount (_field p "mount")
        label (_field p "label")
        options (_field p "options")
        luks (_field p "luks"))
  (cond (not (or (mebibytes size) (_rest? size)))
        f"{where}: size {(hy.repr size)} is not a number of MiB, text such as \"512M\" or \"4G\", or :rest"
        (not-in fs FILESYSTEMS)
        f"{where}: unknown filesystem {(hy.repr (_field p "fs"))} (consfig knows {(.join " " (gfor f (sorted FILESYSTEMS) f":{f}"))})"
        (not-in type (get _SFDISK-TYPES table))
        f"{where}: a {table} table has no partition type {(hy.repr (_field p "type"))} (it takes {(.join " " (gfor t (sorted (get _SFDISK-TYPES table)) f":{t}"))})"
        (and (= type "esp") (!= fs "vfat"))
        f"{where}: an EFI system partition holds a :vfat filesystem"
        (and (= type "bios-boot") (!= fs "none"))
        f"{where}: a BIOS boot partition holds no filesystem"
        (and (is-not mount None)
             (not (and (isinstance mount str) (posixpath.isabs mount)
                       (= (posixpath.normpath mount) mount)
                       (not (re.search r"[\s\\]" mount)))))
        f"{where}: mount point {(hy.repr mount)} is not a normalised absolute path without spaces"
        (and mount (in fs #{"swap" "none"}))
        f"{where}: a {fs} partition cannot be mounted at {mount}"
        (and (is-not label None)
             (or (not (isinstance label str)) (not label) (in fs #{"none"})
                 (> (len (.encode label)) (.get _LABEL-MAX fs 0))
                 (not (re.fullmatch r"[A-Za-z0-9._-]+" label))))
        f"{where}: label {(hy.repr label)} does not fit a {fs} filesystem (letters, digits, . _ -; at most {(.get _LABEL-MAX fs 0)} bytes)"
        (and (is-not options None)
             (not (and (isinstance options str) (re.fullmatch r"[A-Za-z0-9_=,.:/-]+" options))))
        f"{where}: mount options {(hy.repr options)} are not comma-separated words"
        (_luks-problem luks) f"{where}: {(_luks-problem luks)}"
        (and (is-not luks None) (or (!= mount "/") (!= fs "ext4")))
        f"{where}: only the root filesystem, of :ext4, can be :luks"
        (and (is-not luks None) (mebibytes size) (<= (mebibytes size) (* 2 LUKS-RESERVE-MIB)))
        f"{where}: a :luks partition needs more than {(* 2 LUKS-RESERVE-MIB)} MiB"))

(defn volumes-problem [volumes]
  "What is wrong with VOLUMES, as a sentence; None when nothing is."
  (when (not (isinstance volumes dict))
    (return "volumes are a dict of :table, :size and :partitions"))
  (setv unknown (- (set (gfor k volumes (_name k))) #{"table" "size" "partitions"})
        table (_name (_field volumes "table"))
        size (_field volumes "size")
        parts (_field volumes "partitions"))
  (when unknown
    (return f"unknown key(s) {(.join " " (gfor u (sorted (gfor u unknown (str u))) f":{u}"))}; volumes take :table :size :partitions"))
  (when (not-in table TABLES)
    (return f"unknown partition table {(hy.repr (_field volumes "table"))} (:gpt or :msdos)"))
  (when (and (is-not size None) (not (mebibytes size)))
    (return f"disk size {(hy.repr size)} is not a number of MiB or text such as \"4G\""))
  (when (not (and (isinstance parts #(list tuple)) parts))
    (return "no :partitions (a non-empty list)"))
  (when (and (= table "msdos") (> (len parts) 4))
    (return f"an msdos table holds at most 4 partitions, not {(len parts)}"))
  (for [[i p] (enumerate parts)]
    (setv problem (_partition-problem i p table))
    (when problem (return problem)))
  (setv norm (normalise-volumes volumes)
        ps (get norm "partitions")
        mounts (lfor p ps :if (get p "mount") (get p "mount"))
        rests (lfor [i p] (enumerate ps) :if (= (get p "size") "rest") i))
  (when (!= (.count mounts "/") 1)
    (return (if (in "/" mounts)
                f"{(.count mounts "/")} root filesystems (mounted at /); a host has one"
                "no root filesystem (a partition mounted at /)")))
  (for [m (set mounts)]
    (when (> (.count mounts m) 1)
      (return f"two partitions are mounted at {m}")))
  (when (or (> (len rests) 1) (and rests (!= (get rests 0) (- (len ps) 1))))
    (return "only the last partition may take the :rest of the disk"))
  (when (and (any (gfor p ps (get p "luks"))) (not-in "/boot" mounts))
    (return "a :luks root needs a /boot partition of its own: GRUB reads the kernel from it unencrypted"))
  (when (and rests (is (get norm "size") None))
    (return "a partition takes the :rest of the disk, so the volumes need a :size"))
  (setv fixed (sum (gfor p ps :if (!= (get p "size") "rest") (get p "size")))
        needed (+ _HEAD-MIB fixed (get _TAIL-MIB table) (if rests 1 0)))
  (when (and (get norm "size") (> needed (get norm "size")))
    (return f"the partitions need {needed} MiB with the table, more than the disk's {(get norm "size")} MiB"))
  None)

(defn disk-mebibytes [norm]
  "The size in MiB of a disk holding the normalised volumes NORM."
  (or (get norm "size")
      (+ _HEAD-MIB (sum (gfor p (get norm "partitions") (get p "size")))
         (get _TAIL-MIB (get norm "table")))))

(defn sfdisk-script [norm]
  "The sfdisk(8) script that writes NORM's partition table."
  (setv types (get _SFDISK-TYPES (get norm "table"))
        lines [f"label: {(if (= (get norm "table") "gpt") "gpt" "dos")}" ""])
  (for [p (get norm "partitions")]
    (.append lines (+ (if (= (get p "size") "rest") "" f"size={(get p "size")}MiB, ")
                      f"type={(get types (get p "type"))}")))
  (+ (.join "\n" lines) "\n"))

(defn fstab-lines [norm uuids]
  "/etc/fstab lines for NORM's mounted filesystems and swap, each by the
UUID in UUIDS (partition index → UUID), root first; a `:luks` one by its
/dev/mapper name."
  (setv lines [])
  (for [[i p] (enumerate (get norm "partitions"))]
    (setv fs (get p "fs")
          uuid (.get uuids i)
          source (if (get p "luks") f"/dev/mapper/{(get p "luks" "name")}" f"UUID={uuid}"))
    (cond (= fs "swap")
          (.append lines f"UUID={uuid} none swap sw 0 0")
          (get p "mount")
          (.append lines (.join " " [source (get p "mount") fs (get p "options") "0"
                                     (cond (= (get p "mount") "/") "1"
                                           (= fs "vfat") "2"
                                           (= fs "btrfs") "0"
                                           True "2")]))))
  (sorted lines :key (fn [l] (len (get (.split l) 1)))))

(setv volumes-type (predicate "volumes" "a dict of :table, :size and :partitions"
                              (fn [v] (isinstance v dict))))

(defprop has-volumes :posix [#^ volumes-type volumes]
  "The host's disk holds VOLUMES: a partition table (`:table`, :gpt or
:msdos), an optional disk `:size`, and `:partitions`, each with a `:size`,
an `:fs` (:ext4 :btrfs :vfat :swap or :none), a partition `:type` (:linux,
:esp, :bios-boot on GPT, :swap), and optionally a `:mount` point, a `:label`
and mount `:options`; the root (ext4, with a /boot of its own) may have
`:luks NAME`, `:luks {:name NAME :iter-time MS}` (2000 by default) or `:luks
{:name NAME :iterations N}` (PBKDF2's) to be encrypted (see
`raw-image-built-for`).  It changes nothing on the host itself: it records,
for the properties that build the host's disk (`raw-image-built-for`), what
to build; they also write the host's /etc/fstab from it."
  (:unwatched "volumes are made once, on a disk being built: a change to them is a rebuild, not a repair")
  (:invariant (not (volumes-problem volumes)) (volumes-problem volumes))
  (:desc "has volumes")
  (:hostattrs (push-hostattr "volumes" (normalise-volumes volumes)))
  ;; Nothing to change, so nothing to check either (check mode says so).
  (:check True)
  (:apply NO-CHANGE))

;; Opening an image: loop devices by offset and size, and mounts.  $1 is the
;; image; prints `START SIZE` in bytes for each partition, in order.
(setv _PARTITION-EXTENTS "
sfdisk --json -- \"$1\" | tr -d ' \\n' | grep -o '\"start\":[0-9]*,\"size\":[0-9]*' |
  sed 's/\"start\":\\([0-9]*\\),\"size\":\\([0-9]*\\)/\\1 \\2/' |
  while read -r s n; do echo $((s * 512)) $((n * 512)); done
")

;; How long a filesystem of an image may stay in use (a process of the
;; deployment inside it still ending) before it is unmounted lazily and the
;; image fails.  Unmounted lazily, ext4 writes its superblock when its last
;; user goes, whenever that is: after a LUKS root was encrypted where it
;; lies, over the LUKS header.
(setv UNMOUNT-PATIENCE 30)

;; $1 the mount point, $2 seconds.  Exit 3: still in use, unmounted lazily.
(setv _UNMOUNT "
end=$(( $(date +%s) + $2 ))
while ! umount -- \"$1\" 2>/dev/null; do
  mountpoint -q -- \"$1\" || exit 0
  if [ \"$(date +%s)\" -ge \"$end\" ]; then umount -l -- \"$1\"; exit 3; fi
  sleep 0.2
done
")

(defn _settled-copy [image]
  ;; Where `settled` copies IMAGE: a build killed meanwhile leaves it, and
  ;; the next build of the image removes it (`build-image`).
  (+ image ".consfig-settled"))

(defn settled [image]
  "Make IMAGE, whose filesystems were just unmounted, one that only this
build writes from now on.  A process that made a mount namespace while they
were mounted (a service with PrivateTmp, `ip netns exec`, `unshare -m`) has
a copy of those mounts: unmounted here, a filesystem lives on there and
writes to IMAGE when that process ends (ext4, its superblock: over a LUKS
header written meanwhile, or into a VM's running disk).  Such a filesystem
keeps its loop device attached: then its data is synced and IMAGE replaced
by a copy of itself, a new file, which those loop devices do not write to."
  (when (.strip (output (Script _ATTACHED image) :timeout 60))
    (run "sync" :timeout 600)
    (setv fresh (_settled-copy image))
    (inform (+ f"{image}'s filesystems are still mounted in another mount namespace (a process "
               "started during the build took a copy of its mounts): the build goes on with a "
               "copy of the image, which only it writes"))
    (try
      (run "cp" "--sparse=always" "--preserve=mode" "--" image fresh :timeout 3600)
      (run "mv" "-f" "-T" "--" fresh image :timeout 60)
      (except [BaseException]
        (run "rm" "-f" "--" fresh :check False :timeout 60)
        (raise)))))

(defclass OpenedImage []
  "An image whose partitions are attached to loop devices (`devices`, one per
partition, in order) and whose filesystems may be mounted below a
directory; `close` releases all of it, mounts first."
  (defn __init__ [self image]
    (setv self.image image
          self.devices []
          self.mounted []))

  (defn attach [self]
    (for [line (.splitlines (output (Script _PARTITION-EXTENTS self.image) :timeout 60))]
      (setv #(start size) (.split line))
      (.append self.devices
               (.strip (output "losetup" "--show" "--find" "--offset" start "--sizelimit" size
                               "--" self.image :timeout 60))))
    self)

  (defn attach-whole [self]
    "Attach the whole image to one more loop device (released with the
others) and return its name: what a bootloader is written to."
    (setv device (.strip (output "losetup" "--show" "--find" "--" self.image :timeout 60)))
    (.append self.devices device)
    device)

  (defn mount [self device point [fs None] [bind False]]
    (run "mkdir" "-p" "--" point :timeout 60)
    (run "mount" #* (cond bind ["--bind"] fs ["-t" fs] True []) "--" device point :timeout 120)
    (.append self.mounted point))

  (defn close [self]
    (setv problems [])
    (while self.mounted
      (setv point (.pop self.mounted)
            r (run (Script _UNMOUNT point (str UNMOUNT-PATIENCE)) :check False
                   :timeout (+ UNMOUNT-PATIENCE 60)))
      (cond (= r.exit-code 3)
            (.append problems (+ f"{point} was still in use after {UNMOUNT-PATIENCE} s (a process "
                                 "left inside the image?): unmounted lazily, so the image may "
                                 "still be written to; build it again"))
            (not r.ok?)
            (.append problems f"could not unmount {point}: {(.strip r.stderr)}")))
    (while self.devices
      (setv device (.pop self.devices)
            r (run "losetup" "--detach" device :check False :timeout 60))
      (when (not r.ok?) (.append problems f"could not detach {device}: {(.strip r.stderr)}")))
    problems)

  (defn __enter__ [self] (.attach self))
  (defn __exit__ [self kind #* _]
    (setv problems (.close self))
    ;; A failure to release is the news, unless something failed already.
    (when (and problems (is kind None))
      (raise (FailedChange (.join "; " problems))))
    None))

;; $1 an image: the loop devices attached to it, one a line.
(setv _ATTACHED "losetup --noheadings --output NAME --associated \"$1\" 2>/dev/null || true")

(defn release-image [image]
  "Detach every loop device backed by IMAGE (one left by a build that was
killed), unmounting what is mounted from it first."
  (for [device (.split (output (Script _ATTACHED image) :timeout 60))]
    (run (Script "findmnt -rn -o TARGET --source \"$1\" | sort -r | while read -r m; do umount -l -- \"$m\"; done"
                 device)
         :check False :timeout 120)
    (run "losetup" "--detach" device :check False :timeout 60)))

(defn _mkfs-argv [p device [kib None]]
  ;; KIB: the filesystem's size, when it is not the whole partition.
  (setv label (get p "label")
        fs (get p "fs"))
  (cond (= fs "ext4") ["mkfs.ext4" "-q" "-F" #* (if label ["-L" label] []) "--" device
                       #* (if kib [f"{kib}k"] [])]
        (= fs "btrfs") ["mkfs.btrfs" "-q" "-f" #* (if label ["-L" label] []) "--" device]
        (= fs "vfat") ["mkfs.vfat" #* (if label ["-n" label] []) "--" device]
        (= fs "swap") ["mkswap" #* (if label ["-L" label] []) "--" device]))

(defn partitioned-image [norm image]
  "Write, at IMAGE (a new file), a sparse disk image holding NORM's
partition table and empty filesystems; return the UUIDs of the filesystems
(partition index → UUID).  A failure removes IMAGE and releases everything."
  (try
    (run "truncate" "-s" f"{(disk-mebibytes norm)}M" "--" image :timeout 60)
    (run "sfdisk" "--quiet" "--" image :input (sfdisk-script norm) :timeout 120)
    (with [opened (OpenedImage image)]
      (setv uuids {})
      (for [[i p] (enumerate (get norm "partitions"))]
        ;; A :luks filesystem leaves room at the end for the LUKS header
        ;; that `encrypt-in-place` moves it along for.
        (setv argv (_mkfs-argv p (get opened.devices i)
                               (when (get p "luks")
                                 (- (// (int (output "blockdev" "--getsize64" (get opened.devices i)
                                                     :timeout 60))
                                        1024)
                                    (* LUKS-RESERVE-MIB 1024)))))
        (when argv
          (run #* argv :timeout 600)
          (setv (get uuids i)
                (.strip (output "blkid" "-o" "value" "-s" "UUID" "--" (get opened.devices i)
                                :timeout 60))))))
    uuids
    (except [BaseException]
      (release-image image)
      (run "rm" "-f" "--" image :check False :timeout 60)
      (raise))))

(defn _image-host [host]
  (preprocess-host (Host (get host "hostname") (get host "propspec"))))

(defn _volumes-of [prepared]
  (setv v (get-hostattr "volumes" prepared))
  (when (not v)
    (inapplicable (+ f"{prepared.hostname} declares no volumes; give it "
                     "(disk.has-volumes {:table :gpt :partitions […]})")))
  v)

(defn _mount-order [norm]
  ;; Root first, then each mount point after the one it is below.
  (sorted (lfor [i p] (enumerate (get norm "partitions")) :if (get p "mount") #(i (get p "mount")))
          :key (fn [x] #((.count (.rstrip (get x 1) "/") "/") (get x 1)))))

(defn _uuids [opened norm]
  (dfor [i p] (enumerate (get norm "partitions"))
        :if (!= (get p "fs") "none")
        i (.strip (output "blkid" "-o" "value" "-s" "UUID" "--" (get opened.devices i) :timeout 60))))

(defn _fill [root host prepared options]
  ;; A tarball of a bootstrapped tree stands in for debootstrap (a cached
  ;; base, as the tests use); else the OS the host declares is bootstrapped.
  (if (.get options "tarball")
      (run "tar" "-C" root "--numeric-owner" "--xattrs" "-xpf" (get options "tarball") :timeout 1800)
      (bootstrap-into root prepared (bootstrap-options (.get options "bootstrap" {})))))

(setv BOOT-KERNEL "linux-image-amd64"
      BOOT-PACKAGES
      ;; What a BIOS boot with GRUB needs inside the image: a kernel and its
      ;; initramfs (zstd is what initramfs-tools compresses with, a
      ;; recommendation: without it, gzip, slower), GRUB's i386-pc images and
      ;; tools (not grub-pc, whose maintainer scripts want to install to a
      ;; disk they ask about), and systemd as PID 1 (a minbase tree has no
      ;; init).
      [BOOT-KERNEL "initramfs-tools" "zstd" "grub-pc-bin" "grub2-common" "systemd-sysv"])

(defn boot-packages [bootloader luks]
  "What an image needs inside to boot with BOOTLOADER (\"grub-bios\",
\"grub-efi\" or \"grub-hybrid\"), and with LUKS (true) its root encrypted:
`BOOT-PACKAGES`, GRUB's EFI images in place of its BIOS ones for :grub-efi
and beside them for :grub-hybrid, and for a LUKS root cryptsetup-initramfs
(which puts cryptsetup, the crypttab entries marked `initramfs` and their
key files in the initramfs)."
  (+ (lfor p BOOT-PACKAGES
           :if (not (and (= p "grub-pc-bin") (= bootloader "grub-efi")))
           p)
     (if (in bootloader #{"grub-efi" "grub-hybrid"}) ["grub-efi-amd64-bin"] [])
     (if luks ["cryptsetup-initramfs"] [])))

(setv deb-package (matching "deb-package" "a Debian package name" r"[a-z0-9][a-z0-9+.-]+"))

(defprop boot-packages-installed :posix [* #^ (list-of deb-package) [packages BOOT-PACKAGES]]
  "PACKAGES (`BOOT-PACKAGES` unless given: see `boot-packages`) are
installed, without recommends: what an image built to boot needs inside.
It declares nothing about the host, so that it can come before the host's
own propspec (which may need systemctl)."
  (:watch [(watch-dpkg)])
  (:desc "kernel, GRUB and systemd installed to boot")
  (:check (apt.installed? #* packages))
  ;; The kernel last, alone.  initramfs-tools makes the whole initramfs
  ;; again whenever a package with hooks for it is configured (itself, udev,
  ;; kmod, dmsetup, …): installed with the kernel, they made it a second
  ;; time, after the kernel's own (twice the time).  Installed first, with no
  ;; kernel yet, they have nothing to make.
  (:apply (apt.install-packages ["--no-install-recommends"]
                                (lfor p packages :if (!= p BOOT-KERNEL) p))
          (when (in BOOT-KERNEL packages)
            (apt.install-packages ["--no-install-recommends"] [BOOT-KERNEL]))))

(defn _inside [root host bootloader norm]
  (setv propspec (get host "propspec"))
  (when (in bootloader GRUB-BOOTLOADERS)
    (setv propspec (eseqprops (boot-packages-installed
                                :packages (boot-packages bootloader (_luks-partition norm)))
                              propspec)))
  (deploy-nested [[(Keyword "chroot") (Keyword "into") root]]
                 {"hostname" (get host "hostname")
                  "deploy" None
                  ;; Check mode starts nothing and must not write policy-rc.d.
                  "propspec" (if (checking?) propspec (without-starting-services propspec))
                  ;; The image the machine applies once booted starts them.
                  "own-propspec" (get host "propspec")
                  "these" None}
                 None))

(defn _boot-partition [norm]
  "The index of the partition holding /boot, and where /boot is in its
filesystem (\"\" when it is a filesystem of its own, else \"/boot\")."
  (setv by-mount (dfor [i p] (enumerate (get norm "partitions")) :if (get p "mount") (get p "mount") i))
  (if (in "/boot" by-mount)
      #((get by-mount "/boot") "")
      #((get by-mount "/") "/boot")))

(defn grub-cfg [kernel initrd boot-uuid root-uuid * [root-device None]]
  "GRUB's configuration booting KERNEL and INITRD (paths in the filesystem
of UUID BOOT-UUID) with the root filesystem of UUID ROOT-UUID (or at
ROOT-DEVICE, a /dev/mapper name the initramfs makes), its console on the
first serial port as well as the screen."
  (.join "\n" ["# Written by consfig (disk.raw-image-built-for)."
                "serial --unit=0 --speed=115200"
                "terminal_input serial console"
                "terminal_output serial console"
                "set timeout=1"
                "menuentry 'Debian GNU/Linux' {"
                "  insmod part_gpt"
                "  insmod part_msdos"
                "  insmod ext2"
                "  insmod btrfs"
                f"  search --no-floppy --fs-uuid --set=root {boot-uuid}"
                f"  linux {kernel} root={(or root-device f"UUID={root-uuid}")} ro console=tty0 console=ttyS0,115200"
                f"  initrd {initrd}"
                "}"
                ""]))

(defn _grub-plan [root norm uuids]
  ;; What both GRUBs boot: the index of the partition holding /boot, where
  ;; /boot is in it, the newest kernel's version, and grub.cfg's text.
  (setv #(boot-index under) (_boot-partition norm)
        root-index (next (gfor [i p] (enumerate (get norm "partitions")) :if (= (get p "mount") "/") i))
        luks (get norm "partitions" root-index "luks")
        kernels (.split (output (Script "cd \"$1\"/boot && ls -1v vmlinuz-* 2>/dev/null | tail -n 1" root)
                                :timeout 60)))
  (when (not kernels)
    (raise (FailedChange f"no kernel in the image's /boot (is {BOOT-KERNEL} installed?)")))
  (setv version (cut (get kernels 0) (len "vmlinuz-") None))
  #(boot-index under version
    (grub-cfg f"{under}/vmlinuz-{version}" f"{under}/initrd.img-{version}"
              (get uuids boot-index) (.get uuids root-index)
              :root-device (when luks f"/dev/mapper/{(get luks "name")}"))))

(defn _grub-modules [root platform]
  ;; GRUB's modules for PLATFORM, where the core image's prefix finds them.
  (run "mkdir" "-p" "--" (posixpath.join root "boot/grub" platform) :timeout 60)
  (run (Script "cp -- \"$1\"/usr/lib/grub/\"$2\"/*.mod \"$1\"/usr/lib/grub/\"$2\"/*.lst \"$1\"/boot/grub/\"$2\"/"
               root platform)
       :timeout 120))

(defn install-grub-bios [opened root norm uuids * [check False]]
  "Make the image OPENED (mounted at ROOT) boot on a PC BIOS: GRUB's core
image made with the image's own grub-mkimage and written to its first
track (or BIOS boot partition) with grub-bios-setup, onto a loop device of
the whole image, named in a device.map so that GRUB need not find
partition devices (there may be none); grub.cfg boots the newest kernel.
Return `:changed`, or `:no-change` when all of it was there already."
  (setv types (lfor p (get norm "partitions") (get p "type")))
  (when (and (= (get norm "table") "gpt") (not-in "bios-boot" types))
    (raise (FailedChange (+ "a GPT disk booted by GRUB on a BIOS needs a BIOS boot partition: "
                            "add {:size \"1M\" :type :bios-boot} to its volumes"))))
  (setv #(boot-index under version cfg) (_grub-plan root norm uuids)
        grub-dir (posixpath.join root "boot/grub")
        cfg-path (posixpath.join grub-dir "grub.cfg"))
  (when (and (= (read-remote-file cfg-path) cfg)
             (remote-exists? (posixpath.join grub-dir "i386-pc/core.img")))
    (return NO-CHANGE))
  (when check
    (inform f"GRUB (BIOS) would be installed to {opened.image}, booting Linux {version}")
    (return WOULD-CHANGE))
  (inform f"installing GRUB (BIOS) to {opened.image}, booting Linux {version}")
  (_grub-modules root "i386-pc")
  (write-remote-file (posixpath.join grub-dir "i386-pc/load.cfg")
                     (+ f"search.fs_uuid {(get uuids boot-index)} root\n"
                        f"set prefix=($root){under}/grub\n")
                     :mode 0o644)
  (run "chroot" root "grub-mkimage" "-O" "i386-pc" "-d" "/usr/lib/grub/i386-pc"
       "-c" "/boot/grub/i386-pc/load.cfg" "-p" f"{under}/grub" "-o" "/boot/grub/i386-pc/core.img"
       "biosdisk" "part_gpt" "part_msdos" "ext2" "btrfs" "search_fs_uuid" :timeout 300)
  (run "cp" "--" (posixpath.join root "usr/lib/grub/i386-pc/boot.img")
       (posixpath.join grub-dir "i386-pc/boot.img") :timeout 60)
  (setv whole (.attach-whole opened))
  (.mount opened "/dev" (posixpath.join root "dev") :bind True)
  (write-remote-file (posixpath.join grub-dir "device.map") f"(hd0) {whole}\n" :mode 0o644)
  (try
    (run "chroot" root "/usr/lib/grub/i386-pc/grub-bios-setup" "--skip-fs-probe" "-m" "/boot/grub/device.map"
         "-d" "/boot/grub/i386-pc" whole :timeout 300)
    (finally (run "rm" "-f" "--" (posixpath.join grub-dir "device.map") :timeout 60)))
  (write-remote-file cfg-path cfg :mode 0o644)
  :changed)

;; The ESP is never mounted (vfat may not be mountable where the image is
;; built): mtools reads and writes it on its loop device.  $1 the device,
;; $2 the file: exit 0 when the ESP's loader is that file.
(setv _ESP-HOLDS "
export MTOOLS_SKIP_CHECK=1
mcopy -n -i \"$1\" ::EFI/BOOT/BOOTX64.EFI - 2>/dev/null | cmp -s - \"$2\"
")
;; $1 the device, $2 the file: the ESP's loader becomes that file.
(setv _ESP-WRITE "
export MTOOLS_SKIP_CHECK=1
mmd -D s -i \"$1\" ::EFI ::EFI/BOOT 2>/dev/null || mdir -i \"$1\" ::EFI/BOOT >/dev/null
mcopy -o -i \"$1\" -- \"$2\" ::EFI/BOOT/BOOTX64.EFI
")

(defn install-grub-efi [opened root norm uuids * [check False]]
  "Make the image OPENED (mounted at ROOT) boot by UEFI: GRUB's EFI image
made with the image's own grub-mkimage (from grub-efi-amd64-bin), with an
early configuration that finds /boot by its UUID, written to the EFI system
partition as the removable-media loader EFI/BOOT/BOOTX64.EFI (which
firmware boots with no boot entry in its NVRAM) with mtools, the ESP never
mounted; GRUB's modules and grub.cfg on /boot, as for `install-grub-bios`.
Return `:changed`, or `:no-change` when all of it was there already."
  (setv esps (lfor [i p] (enumerate (get norm "partitions")) :if (= (get p "type") "esp") i))
  (when (not esps)
    (raise (FailedChange (+ "a disk booted by GRUB on UEFI needs an EFI system partition: add "
                            "{:size \"32M\" :type :esp :fs :vfat :mount \"/boot/efi\"} to its volumes"))))
  (setv #(boot-index under version cfg) (_grub-plan root norm uuids)
        esp (get opened.devices (get esps 0))
        grub-dir (posixpath.join root "boot/grub")
        core (posixpath.join grub-dir "x86_64-efi/core.efi")
        cfg-path (posixpath.join grub-dir "grub.cfg"))
  (when (not (run-ok? "sh" "-c" "command -v mcopy"))
    (raise (FailedChange "mcopy is not installed here, where the image is built: (apt.installed \"mtools\")")))
  (when (and (= (read-remote-file cfg-path) cfg) (remote-exists? core)
             (run-ok? (Script _ESP-HOLDS esp core)))
    (return NO-CHANGE))
  (when check
    (inform f"GRUB (UEFI) would be installed to {opened.image}, booting Linux {version}")
    (return WOULD-CHANGE))
  (inform f"installing GRUB (UEFI) to {opened.image}'s EFI system partition, booting Linux {version}")
  (_grub-modules root "x86_64-efi")
  (write-remote-file (posixpath.join grub-dir "x86_64-efi/load.cfg")
                     (+ f"search.fs_uuid {(get uuids boot-index)} root\n"
                        f"set prefix=($root){under}/grub\n")
                     :mode 0o644)
  (run "chroot" root "grub-mkimage" "-O" "x86_64-efi" "-d" "/usr/lib/grub/x86_64-efi"
       "-c" "/boot/grub/x86_64-efi/load.cfg" "-p" f"{under}/grub" "-o" "/boot/grub/x86_64-efi/core.efi"
       "part_gpt" "part_msdos" "ext2" "btrfs" "search_fs_uuid" :timeout 300)
  (run (Script _ESP-WRITE esp core) :timeout 120)
  (write-remote-file cfg-path cfg :mode 0o644)
  :changed)

(defn _fstab [root norm uuids * [check False]]
  (setv path (posixpath.join root "etc/fstab")
        text (+ "# Written by consfig from the host's volumes (disk.has-volumes).\n"
                (.join "\n" (fstab-lines norm uuids)) "\n"))
  (cond (= (read-remote-file path) text) NO-CHANGE
        check (do (inform "/etc/fstab would be written from the volumes") WOULD-CHANGE)
        True (do (write-remote-file path text :mode 0o644) :changed)))

(defn _partial [image] (+ image ".consfig-partial"))

(defn _work-prefix [image]
  ;; A build mounts IMAGE on a new directory named for it, so that the next
  ;; build of IMAGE knows a directory a killed one left (`_remove-stale-work`)
  ;; from one another build, of another image, is using.
  f"consfig-image-{(cut (sha256-hex (.encode image)) 0 12)}-")

(defn _work-directory [image]
  (.strip (output "mktemp" "-d" f"/tmp/{(_work-prefix image)}XXXXXXXX" :timeout 60)))

(defn _remove-stale-work [image]
  ;; A build killed with KILL cannot remove its mount point: the next build
  ;; of the same image unmounts what is still mounted there and removes it.
  ;; (The deployment lock keeps two builds on one target from overlapping.)
  (for [d (.split (output (Script "find /tmp -maxdepth 1 -type d -name \"$1\" -user \"$(id -u)\""
                                 (+ (_work-prefix image) "????????"))
                         :timeout 60))]
    (unmount-below d)
    (run "rmdir" "--" d :check False :timeout 60)))

(setv GRUB-BOOTLOADERS #{"grub-bios" "grub-efi" "grub-hybrid"})

(defn image-bootloader [norm options]
  "The bootloader an image of the volumes NORM gets with OPTIONS (plain
data): their `:bootloader`, else \"grub-hybrid\" when the volumes hold both
an EFI system partition and a BIOS boot partition, \"grub-efi\" when they
hold an EFI system partition alone, else \"grub-bios\"."
  (setv types (lfor p (get norm "partitions") (get p "type")))
  (or (_name (.get options "bootloader"))
      (cond (not-in "esp" types) "grub-bios"
            (in "bios-boot" types) "grub-hybrid"
            True "grub-efi")))

(defn _luks-partition [norm]
  ;; The index of the :luks partition (the root), or None.
  (next (gfor [i p] (enumerate (get norm "partitions")) :if (get p "luks") i) None))

(defn luks-key-item [hostname name]
  "The prerequisite data item holding the key of the LUKS root NAME of an
image of HOSTNAME: (`--luks-key--HOSTNAME` NAME), as `luks.formatted`
names its keys."
  #(f"--luks-key--{hostname}" name))

(setv KEY-DIR "/etc/cryptsetup-keys.d")

(defn _luks-files [root host norm luks-uuid]
  ;; What unlocks the LUKS root at boot, written before the kernel's
  ;; initramfs is made: its crypttab line, marked `initramfs` (the root
  ;; device cannot be found from inside a chroot), the key file, which
  ;; cryptsetup-initramfs copies in when it matches KEYFILE_PATTERN, and a
  ;; umask that keeps the initramfs holding it private.
  (setv luks (get norm "partitions" (_luks-partition norm) "luks")
        name (get luks "name")
        key (.reveal (get-data-bytes #* (luks-key-item (get host "hostname") name))))
  (when (not key)
    (raise (FailedChange f"the LUKS key of {name} is empty (its content is not shown)")))
  (run "mkdir" "-p" "-m" "0700" "--" (posixpath.join root (cut KEY-DIR 1 None))
       (posixpath.join root "etc/cryptsetup-initramfs") (posixpath.join root "etc/initramfs-tools/conf.d")
       :timeout 60)
  (write-remote-file (posixpath.join root (cut KEY-DIR 1 None) f"{name}.key") key :mode 0o400)
  (write-remote-file (posixpath.join root "etc/crypttab")
                     (+ "# Written by consfig from the host's volumes (disk.has-volumes).\n"
                        f"{name} UUID={luks-uuid} {KEY-DIR}/{name}.key luks,initramfs\n")
                     :mode 0o644)
  (write-remote-file (posixpath.join root "etc/cryptsetup-initramfs/conf-hook")
                     f"# Written by consfig: the LUKS root's key file goes in the initramfs.\nKEYFILE_PATTERN=\"{KEY-DIR}/*.key\"\n"
                     :mode 0o644)
  (write-remote-file (posixpath.join root "etc/initramfs-tools/conf.d/consfig-umask")
                     "# Written by consfig: the initramfs holds a LUKS key.\nUMASK=0077\n" :mode 0o644)
  key)

;; $1 a device holding ext4: the filesystem's size in bytes.
(setv _EXT4-BYTES "
dumpe2fs -h -- \"$1\" 2>/dev/null | awk -F: '
  /^Block count:/ { n = $2 } /^Block size:/ { b = $2 }
  END { if (n && b) printf \"%.0f\\n\", n * b; else exit 1 }'
")

(defn encrypt-in-place [device key luks-uuid iter-time * [iterations None]]
  "Encrypt the filesystem on DEVICE (which ends `LUKS-RESERVE-MIB` before
the device does) in place as LUKS2 with the UUID LUKS-UUID, KEY (bytes) in
its first key slot, derived with PBKDF2 for ITER-TIME ms (measured first,
which takes seconds) or, given ITERATIONS, that many times: `cryptsetup
reencrypt --encrypt --reduce-device-size`, offline, which needs no
device-mapper.  The key goes on standard input, never on a command line.
PBKDF2 rather than argon2: a key file is random already, and argon2's
memory cost, measured here, could exceed a small VM's memory at boot."
;; cryptsetup moves the data along without looking at it: a filesystem
  ;; reaching into the last LUKS-RESERVE-MIB would lose its end.
  (setv fs-bytes (int (output (Script _EXT4-BYTES device) :timeout 60))
        room (- (int (output "blockdev" "--getsize64" device :timeout 60)) (* LUKS-RESERVE-MIB 1048576)))
  (when (> fs-bytes room)
    (raise (FailedChange (+ f"the filesystem on {device} ({fs-bytes} bytes) leaves no room for the "
                            f"LUKS header: it must end {LUKS-RESERVE-MIB} MiB before the device, "
                            f"at {room} bytes; not encrypted"))))
  (setv r (run "cryptsetup" "reencrypt" "--encrypt" "--batch-mode" "--type" "luks2"
               "--reduce-device-size" f"{LUKS-RESERVE-MIB}M" "--uuid" luks-uuid
               "--pbkdf" "pbkdf2"
               #* (if iterations ["--pbkdf-force-iterations" (str iterations)] ["--iter-time" (str iter-time)])
               "--key-file=-" "--" device
               :input key :check False :timeout 3600))
  (when (= r.exit-code 127)
    (raise (FailedChange "cryptsetup is not installed here, where the image is built: (apt.installed \"cryptsetup-bin\")")))
  (when (not r.ok?)
    (raise (FailedChange (+ f"encrypting {device} in place (cryptsetup reencrypt --encrypt) failed:\n"
                            (.strip (+ r.stderr r.stdout))))))
  :changed)

(defn _mount-below-root [opened work norm order * [check False]]
  ;; Every filesystem but the root (mounted already), in ORDER; a vfat one
  ;; (the ESP) is filled with mtools, never mounted: its mount point is
  ;; only made.
  (for [[i point] (cut order 1 None)]
    (if (= (get norm "partitions" i "fs") "vfat")
        (when (not check) (run "mkdir" "-p" "--" (+ work point) :timeout 60))
        (.mount opened (get opened.devices i) (+ work point)))))

(defn _install-bootloader [bootloader opened work norm uuids * [check False]]
  ;; Both for a hybrid: each finds its own part in place, and they write the
  ;; same grub.cfg.
  (setv changes (lfor [name install] [["grub-bios" install-grub-bios] ["grub-efi" install-grub-efi]]
                      :if (in bootloader #{name "grub-hybrid"})
                      (install opened work norm uuids :check check)))
  (cond (all (gfor c changes (= c NO-CHANGE))) NO-CHANGE
        (in WOULD-CHANGE changes) WOULD-CHANGE
        True :changed))

(defn _encrypted-left-alone [image host]
  (inform (+ f"{image}'s root is encrypted (LUKS), which consfig opens only while it builds the "
             f"image: {(get host "hostname")}'s propspec is not applied inside it again (the machine "
             "applies its own consfig image when it runs; remove the image to build it anew)"))
  NO-CHANGE)

(defn _check-image [host image options norm made]
  ;; Check mode: what a build would do.  A new image is described; an
  ;; existing one is opened (its filesystems mounted, as a build does) and
  ;; the host's propspec checked inside, fstab and GRUB compared, changing
  ;; no file in it.
  (setv bootloader (image-bootloader norm options)
        luks-index (_luks-partition norm))
  (when made
    (inform (+ f"{image} would be built: a {(disk-mebibytes norm)} MiB {(get norm "table")} disk "
               f"of {(len (get norm "partitions"))} partitions, "
               (if (.get options "tarball") f"{(get options "tarball")} unpacked" "the OS bootstrapped")
               f", {(get host "hostname")}'s propspec applied inside, /etc/fstab written"
               (cond (= bootloader "grub-bios") ", GRUB installed for BIOS"
                     (= bootloader "grub-efi") ", GRUB installed for UEFI on the EFI system partition"
                     (= bootloader "grub-hybrid")
                       ", GRUB installed for BIOS, and for UEFI on the EFI system partition"
                     True "")
               (if (is-not luks-index None) ", the root encrypted with LUKS" "")))
    (return WOULD-CHANGE))
  (when (is-not luks-index None)
    (return (_encrypted-left-alone image host)))
  (setv work (_work-directory image))
  (try
    (with [opened (OpenedImage image)]
      (setv order (_mount-order norm))
      (.mount opened (get opened.devices (get order 0 0)) work)
      (_mount-below-root opened work norm order :check True)
      (setv uuids (_uuids opened norm)
            changes [(_inside work host bootloader norm) (_fstab work norm uuids :check True)
                     (_install-bootloader bootloader opened work norm uuids :check True)]))
    (finally
      (run "rmdir" "--" work :check False :timeout 60)))
  (cond (all (gfor c changes (= c NO-CHANGE))) NO-CHANGE
        (all (gfor c changes (in c #{NO-CHANGE CANNOT-CHECK}))) CANNOT-CHECK
        True WOULD-CHANGE))

(defn build-image [host image options]
  "Build (or bring up to date) the raw disk IMAGE of HOST (host data): see
`raw-image-built-for`.  Return `:changed` or `:no-change`."
  (setv prepared (_image-host host)
        norm (_volumes-of prepared)
        made (not (remote-exists? image))
        luks-index (_luks-partition norm))
  (when (checking?)
    (return (_check-image host image options norm made)))
  (setv target (if made (_partial image) image))
  ;; What a killed build left: its loops, mounts and half-made image, and
  ;; its mount point.
  (when made
    (release-image target))
  (_remove-stale-work image)
  ;; And the copy of the image `settled` was making, whichever it was of.
  (run "rm" "-f" "--" (_settled-copy image) (_settled-copy (_partial image)) :timeout 60)
  (setv work (_work-directory image))
  (try
    (when made
      (run "rm" "-f" "--" target :timeout 60)
      (inform f"partitioning {image} ({(disk-mebibytes norm)} MiB)")
      (partitioned-image norm target))
    (if (and (is-not luks-index None) (not made))
        (setv changes [(_encrypted-left-alone image host)])
        (with [opened (OpenedImage target)]
          ;; The root alone while bootstrapping: debootstrap wants it empty.
          (setv order (_mount-order norm)
                [root-index _] (get order 0))
          (.mount opened (get opened.devices root-index) work)
          (when made
            (inform f"bootstrapping {(get host "hostname")} into {image}")
            (_fill work host prepared options)
            ;; The machine is the host: its image (`image.installed`) applies
            ;; only where the hostname says so.  Written once, before the
            ;; propspec, which may set it otherwise.
            (write-remote-file (posixpath.join work "etc/hostname")
                               (+ (get (.split (get host "hostname") ".") 0) "\n") :mode 0o644))
          (_mount-below-root opened work norm order)
          (setv uuids (_uuids opened norm)
                bootloader (image-bootloader norm options)
                luks-uuid (str (uuid.uuid4))
                key (when (is-not luks-index None) (_luks-files work host norm luks-uuid))
                changes [(_inside work host bootloader norm) (_fstab work norm uuids)
                         (_install-bootloader bootloader opened work norm uuids)])))
    (settled target)
    (when (and made (is-not luks-index None))
      ;; Last, with nothing mounted: the filesystem is encrypted where it is.
      (inform f"encrypting {image}'s root filesystem (LUKS2, its key from data)")
      (with [opened (OpenedImage target)]
        (setv luks (get norm "partitions" luks-index "luks"))
        (encrypt-in-place (get opened.devices luks-index) key luks-uuid (get luks "iter-time")
                          :iterations (get luks "iterations"))))
    (when made
      (run "mv" "-f" "-T" "--" target image :timeout 60))
    (setv changed (or made (any (gfor c changes (!= c NO-CHANGE))))
          qcow2 (.get options "qcow2"))
    ;; Not by comparing the disks: opening an image (an unchanged rebuild)
    ;; moves its filesystems' mount times on.
    (when (and qcow2 (or changed (not (remote-exists? qcow2))))
      (convert-to-qcow2 image qcow2)
      (setv changed True))
    (if changed :changed NO-CHANGE)
    (except [BaseException]
      (when made
        (release-image target)
        (run "rm" "-f" "--" target :check False :timeout 60))
      (raise))
    (finally
      (run "rmdir" "--" work :check False :timeout 60))))

(setv image-options
      (predicate "image-options" "a dict of :tarball (an absolute path), :bootstrap (debootstrap's options), :bootloader (:grub-bios, :grub-efi, :grub-hybrid or :none) and :qcow2 (an absolute path)"
                 (fn [v] (and (isinstance v dict)
                              (all (gfor [k x] (.items v)
                                         (cond (= (_name k) "tarball") (.accepts abs-path x)
                                               (= (_name k) "qcow2") (.accepts abs-path x)
                                               (= (_name k) "bootstrap") (isinstance x dict)
                                               (= (_name k) "bootloader") (in (_name x) (| GRUB-BOOTLOADERS #{"none"}))
                                               True False)))))))

(defprop raw-image-built-for :posix [#^ (optional image-options) options #^ anything host
                                     #^ abs-path image]
  "IMAGE is a raw disk image of HOST (a defined host, or its name): its
volumes (`has-volumes`) partitioned and made, its OS bootstrapped into them
(or OPTIONS' `:tarball` of a bootstrapped tree unpacked there), its own
propspec applied inside through a chroot with no service started, and its
/etc/fstab written from the volumes.  A new image's /etc/hostname is the
first label of HOST's name (before its propspec applies).  The image is built under
IMAGE.consfig-partial and renamed when complete; a build that was killed
is cleaned up (its loop devices, mounts, mount point and file) by the next
build of IMAGE.  An image
that exists already has HOST's propspec re-applied inside it: unchanged, it
changes nothing.

With OPTIONS' `:bootloader` `:grub-bios` (the default, but for the cases
below) the image boots on a PC BIOS (or QEMU, see
`consfig.props.vm`): a kernel, initramfs-tools, GRUB's BIOS images and
systemd-sysv are installed inside, and GRUB is written to the disk
(`install-grub-bios`), booting with root=UUID=… and its console on the
first serial port too.  `:grub-efi` (the default for volumes with an EFI
system partition and no BIOS boot partition) boots by UEFI instead: GRUB's EFI images inside, and GRUB
written to the ESP as EFI/BOOT/BOOTX64.EFI with mtools, the ESP never
mounted (`install-grub-efi`).  `:grub-hybrid` (the default for volumes with
both) does both, so that the disk boots under either firmware, as Debian's
cloud images do.  `:none` leaves the image without a bootloader
(a tree to copy, or one to boot as a container).

A root with `:luks NAME` in the volumes is built as a plain ext4 that ends
`LUKS-RESERVE-MIB` early, filled, then encrypted in place as LUKS2
(`encrypt-in-place`) with the key held as the prerequisite data item
(`--luks-key--HOSTNAME` NAME), HOSTNAME being HOST's: the key also goes,
mode 0400, to /etc/cryptsetup-keys.d/NAME.key in the image, which
cryptsetup-initramfs copies into the initramfs (mode 0600 by its umask), and
crypttab's NAME line, marked `initramfs`, unlocks the root at boot as
/dev/mapper/NAME with it.  So whoever reads the image's /boot has the key:
it suits tests and machines whose disk is not what is protected.  Such a
root needs a /boot of its own (GRUB reads it unencrypted).  An existing
image with a LUKS root is left as it is: consfig opens it only while
building it.  OPTIONS' `:qcow2` PATH
also writes the image in qcow2 format there (`qemu-img convert`) when the
build changed it or PATH is missing."
  (:desc f"Disk image {image} built")
  (:opaque-type True)
  (:simulates True)
  (:preprocess [(dfor [k v] (.items (or options {})) (_name k) v) (_host-data host) image])
  (:hostattrs (image-host-checked host))
  (:apply (build-image host image options)))

(defn image-host-checked [host]
  "Refuse, as a property's hostattrs do, HOST (host data) where an image of
it cannot be built: no volumes declared, or an OS that cannot be
bootstrapped; and declare the key of a LUKS root as prerequisite data."
  (setv prepared (_image-host host)
        norm (_volumes-of prepared)
        luks-index (_luks-partition norm))
  (when (is-not luks-index None)
    (require-data #* (luks-key-item (get host "hostname")
                                    (get norm "partitions" luks-index "luks" "name"))
                  :secret True))
  (bootstrappable-os prepared))

(defn _host-data [host]
  (if (isinstance host dict)
      host
      (do (setv h (find-host host))
          {"hostname" h.hostname "propspec" h.propspec})))

;; Writing an image to a disk.  $1 device, $2 image.  Exit 0 when the device
;; already begins with the image, 1 when not.
(setv _HOLDS-IMAGE "
n=$(stat -c %s -- \"$2\") && cmp -s -n \"$n\" -- \"$2\" \"$1\"
")

;; $1 device: what is on it, one `KEY=value` a line (blkid's TYPE and
;; PTTYPE), and MOUNTED=where for each mount of it or of its partitions.
(setv _DEVICE-STATE "
blkid -p -o export -- \"$1\" 2>/dev/null | grep -E '^(TYPE|PTTYPE)=' || true
findmnt -rn -o TARGET --source \"$1\" 2>/dev/null | sed 's/^/MOUNTED=/'
lsblk -nr -o MOUNTPOINT -- \"$1\" 2>/dev/null | grep . | sed 's/^/MOUNTED=/' || true
")

(defn _device-refusal [device image replace]
  "Why IMAGE must not be written to DEVICE, as a sentence; None when it may."
  (when (not (run-ok? "test" "-b" device))
    (return f"{device} is not a block device"))
  (setv state (lfor l (.splitlines (output (Script _DEVICE-STATE device) :timeout 60))
                    :if (in "=" l) (.split l "=" 1))
        mounts (sorted (sfor [k v] state :if (= k "MOUNTED") v))
        held (lfor [k v] state :if (in k #{"TYPE" "PTTYPE"}) v)
        size (int (.strip (output "blockdev" "--getsize64" device :timeout 60)))
        need (int (.strip (output "stat" "-c" "%s" "--" image :timeout 60))))
  (cond mounts f"{device} is mounted (at {(.join ", " mounts)}): unmount it first"
        (> need size) f"{image} ({need} bytes) does not fit on {device} ({size} bytes)"
        (and held (is-not replace True) (not (<= (set held) (set (or replace [])))))
        (+ f"{device} holds {(.join " and " held)}, which consfig was not told to replace: "
           f"give :replace [{(.join " " (gfor h held f"\"{h}\""))}] (or :replace True) "
           "if it may be overwritten")))

(defn write-image [device image replace]
  "Write IMAGE to the block DEVICE (see `image-written-to`)."
  (when (not (remote-exists? image))
    (raise (FailedChange f"the image {image} does not exist: build it first (raw-image-built-for)")))
  (when (run-ok? (Script _HOLDS-IMAGE device image))
    (return NO-CHANGE))
  (setv refusal (_device-refusal device image replace))
  (when refusal (raise (FailedChange refusal)))
  (when (checking?)
    (inform f"{image} would be written to {device}")
    (return WOULD-CHANGE))
  (inform f"writing {image} to {device}")
  (run "dd" f"if={image}" f"of={device}" "bs=4M" "conv=fsync" "status=none" :timeout 7200)
  (run "blockdev" "--rereadpt" device :check False :timeout 60)
  :changed)

(setv replaceable
      (predicate "replaceable" "True, or a list of filesystem and partition table types (\"ext4\", \"gpt\")"
                 (fn [v] (or (is v True)
                             (and (isinstance v #(list tuple))
                                  (all (gfor x v (and (isinstance x str) (re.fullmatch r"[a-z0-9_]+" x)))))))))

(defprop image-written-to :posix [#^ abs-path device #^ abs-path image
                                  * #^ (optional replaceable) [replace None]]
  "The block DEVICE begins with the disk IMAGE (one `raw-image-built-for`
built): it is written there with dd when it does not.  It refuses a device
that is mounted (or any partition of it is), one smaller than the image, and
one holding a filesystem or partition table (as `blkid -p` finds them)
unless REPLACE names each of their types (`:replace [\"gpt\"]`) or is
True.  A device that holds the image already is left alone."
  (:unwatched "a disk written from an image once: a change to it is a rebuild, not a repair")
  (:desc f"{image} written to {device}")
  (:simulates True)
  (:apply (write-image device image replace)))

(defn convert-to-qcow2 [image qcow2]
  "Write QCOW2, the raw disk IMAGE in QEMU's qcow2 format (`qemu-img
convert`, written aside and renamed)."
  (inform f"converting {image} to qcow2 at {qcow2}")
  (setv aside (+ qcow2 ".consfig-partial"))
  (try
    (run "qemu-img" "convert" "-f" "raw" "-O" "qcow2" "--" image aside :timeout 3600)
    (run "mv" "-f" "-T" "--" aside qcow2 :timeout 60)
    (except [BaseException]
      (run "rm" "-f" "--" aside :check False :timeout 60)
      (raise))))

(export :objects [TABLES FILESYSTEMS PARTITION-TYPES mebibytes normalise-volumes volumes-problem
                  disk-mebibytes sfdisk-script fstab-lines OpenedImage release-image settled
                  partitioned-image build-image image-host-checked image-options has-volumes
                  raw-image-built-for BOOT-KERNEL BOOT-PACKAGES grub-cfg install-grub-bios write-image image-written-to
                  boot-packages-installed convert-to-qcow2 LUKS-RESERVE-MIB boot-packages image-bootloader
                  luks-key-item encrypt-in-place install-grub-efi])
