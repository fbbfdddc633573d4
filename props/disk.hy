"Disks and disk images: a host's volumes, declared as data and made real in
a raw image file with loop devices, sfdisk and mkfs.

  (disk.has-volumes {:table :gpt
                     :size \"4G\"
                     :partitions [{:size \"1M\" :type :bios-boot}
                                  {:size \"256M\" :fs :vfat :mount \"/boot/efi\" :type :esp}
                                  {:size \"512M\" :fs :swap}
                                  {:size :rest :fs :ext4 :mount \"/\" :label \"root\"}]})

Sizes are whole mebibytes: a number, or text with a unit (\"512M\", \"4G\");
`:rest` (last partition only) takes what is left of the table's `:size`,
which it then needs.  The volumes are checked when the consfig is loaded: one
root filesystem, no mount point twice, known filesystem and partition
types, labels that fit their filesystem, sizes that fit the disk.

Partitions are reached through loop devices attached by offset and size, one
per partition, so that an image can be built where nothing makes partition
device nodes (a container, a host without udev); everything attached and
mounted is released however the build ends."

(eval-when-compile (require consfig.property [defprop]))
(import posixpath
        re
        hy.models [Keyword]
        consfig.actions [NO-CHANGE Script run output read-remote-file write-remote-file
                         remote-exists?]
        consfig.deployment [deploy-nested]
        consfig.engine [inform]
        consfig.errors [FailedChange]
        consfig.host [Host find-host get-hostattr inapplicable preprocess-host push-hostattr]
        consfig.props.chroot [bootstrappable-os bootstrap-into bootstrap-options]
        consfig.props.service [without-starting-services]
        consfig.util [keyword-name]
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
      _TAIL-MIB {"gpt" 1 "msdos" 0})

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
              "options" (or (_field p "options") "defaults")}))})

(defn _partition-problem [i p table]
  (setv where f"partition {(+ i 1)}")
  (when (not (isinstance p dict))
    (return f"{where} is not a dict of :size, :fs, :type, :mount, :label and :options"))
  (setv unknown (- (set (gfor k p (_name k))) #{"size" "fs" "type" "mount" "label" "options"}))
  (when unknown
    (return f"{where} has unknown key(s) {(.join " " (gfor u (sorted (gfor u unknown (str u))) f":{u}"))}"))
  (setv size (_field p "size")
        fs (or (_name (_field p "fs")) "none")
        type (or (_name (_field p "type")) (if (= fs "swap") "swap" "linux"))
        mount (_field p "mount")
        label (_field p "label")
        options (_field p "options"))
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
        f"{where}: mount options {(hy.repr options)} are not comma-separated words"))

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
UUID in UUIDS (partition index → UUID), root first."
  (setv lines [])
  (for [[i p] (enumerate (get norm "partitions"))]
    (setv fs (get p "fs")
          uuid (.get uuids i))
    (cond (= fs "swap")
          (.append lines f"UUID={uuid} none swap sw 0 0")
          (get p "mount")
          (.append lines (.join " " [f"UUID={uuid}" (get p "mount") fs (get p "options") "0"
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
and mount `:options`.  It changes nothing on the host itself: it records,
for the properties that build the host's disk (`raw-image-built-for`), what
to build; they also write the host's /etc/fstab from it."
  (:invariant (not (volumes-problem volumes)) (volumes-problem volumes))
  (:desc "has volumes")
  (:hostattrs (push-hostattr "volumes" (normalise-volumes volumes)))
  (:apply NO-CHANGE))

;; Opening an image: loop devices by offset and size, and mounts.  $1 is the
;; image; prints `START SIZE` in bytes for each partition, in order.
(setv _PARTITION-EXTENTS "
sfdisk --json -- \"$1\" | tr -d ' \\n' | grep -o '\"start\":[0-9]*,\"size\":[0-9]*' |
  sed 's/\"start\":\\([0-9]*\\),\"size\":\\([0-9]*\\)/\\1 \\2/' |
  while read -r s n; do echo $((s * 512)) $((n * 512)); done
")

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

  (defn mount [self device point [fs None]]
    (run "mkdir" "-p" "--" point :timeout 60)
    (run "mount" #* (if fs ["-t" fs] []) "--" device point :timeout 120)
    (.append self.mounted point))

  (defn close [self]
    (setv problems [])
    (while self.mounted
      (setv point (.pop self.mounted)
            r (run (Script "umount -- \"$1\" || umount -l -- \"$1\"" point) :check False :timeout 120))
      (when (not r.ok?) (.append problems f"could not unmount {point}: {(.strip r.stderr)}")))
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

(defn release-image [image]
  "Detach every loop device backed by IMAGE (one left by a build that was
killed), unmounting what is mounted from it first."
  (for [device (.split (output (Script "losetup --noheadings --output NAME --associated \"$1\" 2>/dev/null || true"
                                       image)
                               :timeout 60))]
    (run (Script "findmnt -rn -o TARGET --source \"$1\" | sort -r | while read -r m; do umount -l -- \"$m\"; done"
                 device)
         :check False :timeout 120)
    (run "losetup" "--detach" device :check False :timeout 60)))

(defn _mkfs-argv [p device]
  (setv label (get p "label")
        fs (get p "fs"))
  (cond (= fs "ext4") ["mkfs.ext4" "-q" "-F" #* (if label ["-L" label] []) "--" device]
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
        (setv argv (_mkfs-argv p (get opened.devices i)))
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

(defn _inside [root host]
  (deploy-nested [[(Keyword "chroot") (Keyword "into") root]]
                 {"hostname" (get host "hostname")
                  "deploy" None
                  "propspec" (without-starting-services (get host "propspec"))
                  "these" None}
                 None))

(defn _fstab [root norm uuids]
  (setv path (posixpath.join root "etc/fstab")
        text (+ "# Written by consfig from the host's volumes (disk.has-volumes).\n"
                (.join "\n" (fstab-lines norm uuids)) "\n"))
  (if (= (read-remote-file path) text)
      NO-CHANGE
      (do (write-remote-file path text :mode 0o644) :changed)))

(defn _partial [image] (+ image ".consfig-partial"))

(defn build-image [host image options]
  "Build (or bring up to date) the raw disk IMAGE of HOST (host data): see
`raw-image-built-for`.  Return `:changed` or `:no-change`."
  (setv prepared (_image-host host)
        norm (_volumes-of prepared)
        made (not (remote-exists? image))
        target (if made (_partial image) image)
        work (.strip (output "mktemp" "-d" "/tmp/consfig-image-XXXXXXXX" :timeout 60)))
  (try
    (when made
      ;; What a killed build left: its loops, mounts and half-made image.
      (release-image target)
      (run "rm" "-f" "--" target :timeout 60)
      (inform f"partitioning {image} ({(disk-mebibytes norm)} MiB)")
      (partitioned-image norm target))
    (with [opened (OpenedImage target)]
      ;; The root alone while bootstrapping: debootstrap wants it empty.
      (setv order (_mount-order norm)
            [root-index _] (get order 0))
      (.mount opened (get opened.devices root-index) work)
      (when made
        (inform f"bootstrapping {(get host "hostname")} into {image}")
        (_fill work host prepared options))
      (for [[i point] (cut order 1 None)]
        (.mount opened (get opened.devices i) (+ work point)))
      (setv changes [(_inside work host) (_fstab work norm (_uuids opened norm))]))
    (when made
      (run "mv" "-f" "-T" "--" target image :timeout 60))
    (if (or made (any (gfor c changes (!= c NO-CHANGE)))) :changed NO-CHANGE)
    (except [BaseException]
      (when made
        (release-image target)
        (run "rm" "-f" "--" target :check False :timeout 60))
      (raise))
    (finally
      (run "rmdir" "--" work :check False :timeout 60))))

(setv image-options
      (predicate "image-options" "a dict of :tarball (an absolute path) and :bootstrap (debootstrap's options)"
                 (fn [v] (and (isinstance v dict)
                              (all (gfor [k x] (.items v)
                                         (cond (= (_name k) "tarball") (.accepts abs-path x)
                                               (= (_name k) "bootstrap") (isinstance x dict)
                                               True False)))))))

(defprop raw-image-built-for :posix [#^ (optional image-options) options #^ anything host
                                     #^ abs-path image]
  "IMAGE is a raw disk image of HOST (a defined host, or its name): its
volumes (`has-volumes`) partitioned and made, its OS bootstrapped into them
(or OPTIONS' `:tarball` of a bootstrapped tree unpacked there), its own
propspec applied inside through a chroot with no service started, and its
/etc/fstab written from the volumes.  The image is built under
IMAGE.consfig-partial and renamed when complete; a build that was killed
is cleaned up (its loop devices, mounts and file) by the next.  An image
that exists already has HOST's propspec re-applied inside it: unchanged, it
changes nothing.  No bootloader is installed yet."
  (:desc f"Disk image {image} built")
  (:opaque-type True)
  (:preprocess [(dfor [k v] (.items (or options {})) (_name k) v) (_host-data host) image])
  (:hostattrs
    (setv prepared (_image-host host))
    (_volumes-of prepared)
    (bootstrappable-os prepared))
  (:apply (build-image host image options)))

(defn _host-data [host]
  (if (isinstance host dict)
      host
      (do (setv h (find-host host))
          {"hostname" h.hostname "propspec" h.propspec})))

(export :objects [TABLES FILESYSTEMS PARTITION-TYPES mebibytes normalise-volumes volumes-problem
                  disk-mebibytes sfdisk-script fstab-lines OpenedImage release-image
                  partitioned-image build-image has-volumes raw-image-built-for])
