"Partitions on a live host's block devices, with sfdisk.

  (use-props consfig.props [partition filesystem])
  (partition.has-table \"/dev/vdb\" :gpt)
  (partition.exists \"/dev/vdb\" 1 \"1G\" :name \"backup\")
  (partition.exists \"/dev/vdb\" 2 :rest :name \"data\")
  (filesystem.exists \"/dev/vdb2\" :ext4 :label \"data\")

A partition table is only ever written to a blank device (no table, no
filesystem, as `blkid -p` finds them) unless :replace says which of those
may be overwritten.  A partition is made in the first free space big enough
(`sfdisk -N`), or grown into the free space after it when it is smaller than
its size (`:rest`: all of it); it is never shrunk or moved, and a partition
that cannot grow is a failure, saying why.  Each change is one sfdisk run,
which writes the table in one go: an interrupted run leaves the old table or
the new one.  When the device itself has grown, a GPT's backup header is
moved to its new end first.  Afterwards the kernel is told (`partx`), so the partitions'
device nodes are there for what comes next.  A device in use (mounted, or a
partition of it) is refused.

Sizes are whole mebibytes, as `consfig.props.disk` takes them: 512, \"512M\",
\"4G\"."

(eval-when-compile (require consfig.model.property [defprop]))
(import json
        re
        consfig.apply.actions [NO-CHANGE Script run run-ok? output]
        consfig.apply.engine [WOULD-CHANGE checking? inform]
        consfig.errors [FailedChange]
        consfig.props.disk [mebibytes]
        consfig.types *)

(setv device (matching "device" "a block device under /dev (/dev/vdb, /dev/loop0; letters, digits, / _ . : and -)"
                       r"/dev/[A-Za-z0-9_][A-Za-z0-9_./:-]*")
      table (enum "gpt" "msdos")
      partition-number (named "partition-number" (int-range 1 128) "a partition number (1 to 128)")
      size (one-of (predicate "size" "a size in whole MiB: 512, \"512M\", \"4G\""
                              (fn [v] (is-not (mebibytes v) None)))
                   (enum "rest"))
      partition-name (matching "partition-name" "a GPT partition name (letters, digits, space _ . and -, at most 36)"
                               r"[A-Za-z0-9_.-][A-Za-z0-9 _.-]{0,35}")
      partition-type (enum "linux" "swap" "esp" "lvm" "raid" "bios-boot")
      replaceable (predicate "replaceable" "True, or a list of the types that may be overwritten (\"ext4\", \"gpt\")"
                             (fn [v] (or (is v True)
                                         (and (isinstance v #(list tuple))
                                              (all (gfor x v (and (isinstance x str)
                                                                  (re.fullmatch r"[a-z0-9_]+" x)))))))))

(setv _TYPES {"linux" "linux" "swap" "swap" "esp" "uefi" "lvm" "lvm" "raid" "raid"
              "bios-boot" "21686148-6449-6E6F-744E-656564454649"})

(defn partition-node [dev number]
  "The device node of partition NUMBER of DEV: /dev/vdb1, /dev/loop0p1."
  (+ dev (if (.isdigit (get dev -1)) "p" "") (str number)))

;; $1 the device: its TYPE/PTTYPE as blkid finds them, and MOUNTED=where
;; for each mount of it or of its partitions.
(setv _STATE "
blkid -p -o export -- \"$1\" 2>/dev/null | grep -E '^(TYPE|PTTYPE)=' || true
lsblk -nr -o MOUNTPOINT -- \"$1\" 2>/dev/null | grep . | sed 's/^/MOUNTED=/' || true
")

(defn device-state [dev]
  "What blkid finds on DEV and where it (or a partition of it) is mounted:
`#(types mounts)`."
  (when (not (run-ok? "test" "-b" dev :timeout 30))
    (raise (FailedChange f"{dev} is not a block device")))
  (setv pairs (lfor l (.splitlines (output (Script _STATE dev) :timeout 60)) :if (in "=" l)
                    (.split l "=" 1)))
  #((lfor [k v] pairs :if (in k #("TYPE" "PTTYPE")) v)
    (lfor [k v] pairs :if (= k "MOUNTED") v)))

(defn layout [dev]
  "DEV's partition table as sfdisk reads it (a dict, sizes in sectors), or
None when it has none."
  (setv r (run "sfdisk" "-J" "--" dev :check False :timeout 60))
  (when (= r.exit-code 127)
    (raise (FailedChange "sfdisk is not there: (apt.installed \"fdisk\") first")))
  (when (and r.ok? (.strip r.stdout))
    (get (json.loads r.stdout) "partitiontable")))

(defn _tell-kernel [dev]
  ;; New partitions added, changed ones updated; a device whose partitions
  ;; are in use keeps them until it is free, which partx says.
  (run "partx" "-a" "--" dev :check False :timeout 60)
  (run "partx" "-u" "--" dev :check False :timeout 60))

(defn _sfdisk [dev argv [script ""]]
  ;; One sfdisk run on DEV, which writes the whole table or none of it.
  (setv r (run "sfdisk" "-q" "--no-reread" #* argv :input script :check False :timeout 120))
  (when (not r.ok?)
    (raise (FailedChange (+ f"sfdisk on {dev} failed; the table is as it was:\n"
                            (.strip (+ r.stderr r.stdout))))))
  (_tell-kernel dev))

(defn _has-table [dev label replace]
  (setv #(types mounts) (device-state dev)
        have (layout dev))
  (when (and have (= (get have "label") label) (or (not replace) (= types [(if (= label "msdos") "dos" label)])))
    (return NO-CHANGE))
  (when mounts
    (raise (FailedChange f"{dev} is in use (mounted at {(.join ", " mounts)}): not partitioned")))
  (when (and types (is-not replace True) (not (<= (set types) (set (or replace [])))))
    (raise (FailedChange (+ f"{dev} holds {(.join " and " types)}, which consfig was not told to "
                            f"replace: give :replace [{(.join " " (gfor t types f"\"{t}\""))}] "
                            "(or :replace True) if it may be overwritten"))))
  (when (checking?)
    (inform f"{dev} would get an empty {label} partition table")
    (return WOULD-CHANGE))
  (_sfdisk dev ["--wipe" "always" "--" dev] f"label: {label}\n")
  None)

(defprop has-table :posix [#^ device dev #^ table label * #^ (optional replaceable) [replace None]]
  "DEV has a partition table of type LABEL (`:gpt` or `:msdos`).  An empty
one is written only to a blank device; one holding a filesystem or another
table is refused unless REPLACE names each of their types (`:replace
[\"ext4\"]`) or is True.  A device in use is refused.  It is not undone:
to give a device back, write another table with :replace."
  (:desc f"{dev} has a {label.name} partition table")
  (:simulates True)
  (:apply (_has-table dev label.name replace)))

(defn _partition [have number]
  (next (gfor p (.get have "partitions" [])
              :if (= (get p "node") (partition-node (get have "device") number)) p)
        None))

(defn _sectors [have]
  (// (int (.strip (output "blockdev" "--getsize64" (get have "device") :timeout 60)))
      (.get have "sectorsize" 512)))

(defn _end [have]
  ;; One past the last sector the table may use: a GPT keeps its backup
  ;; header in the last 33 sectors of the device as it is now (grown, maybe).
  (if (= (get have "label") "gpt")
      (- (_sectors have) 33)
      (_sectors have)))

(defn _free-after [have p]
  ;; Sectors free after partition P, up to the next partition or the end.
  (setv end (+ (get p "start") (get p "size"))
        starts (lfor q (get have "partitions") :if (> (get q "start") (get p "start")) (get q "start")))
  (- (if starts (min starts) (_end have)) end))

(defn _moved-header? [have]
  ;; Whether a GPT's backup header is short of the end of its grown device.
  (and (= (get have "label") "gpt") (in "lastlba" have)
       (< (+ (get have "lastlba") 1) (_end have))))

(defn _spec [size name type-name]
  (.join ", " [#* (if (= size "rest") [] [f"size={(mebibytes size)}MiB"])
               #* (if name [f"name=\"{name}\""] [])
               #* (if type-name [f"type={(get _TYPES type-name)}"] [])]))

(defn _exists [dev number size name type-name]
  (setv have (layout dev))
  (when (is have None)
    (raise (FailedChange f"{dev} has no partition table: (partition.has-table \"{dev}\" :gpt) first")))
  (when (and name (!= (get have "label") "gpt"))
    (raise (FailedChange f"{dev} has an {(get have "label")} table, whose partitions have no names")))
  (setv p (_partition have number)
        sector (.get have "sectorsize" 512)
        want (when (!= size "rest") (// (* (mebibytes size) 1048576) sector)))
  (when (is p None)
    (when (checking?)
      (inform f"partition {number} of {dev} would be made")
      (return WOULD-CHANGE))
    (_sfdisk dev ["-N" (str number) "--" dev] (_spec size name type-name))
    (return None))
  (setv free (_free-after have p)
        ;; sfdisk aligns a partition's end to 1 MiB: what is left past it is
        ;; no room to grow into.
        grow (if (is want None)
                 (>= free (// 1048576 sector))
                 (> want (get p "size")))
        renamed (and name (!= (.get p "name") name)))
  (when (and want (> want (+ (get p "size") free)))
    (raise (FailedChange (+ f"partition {number} of {dev} ({(// (* (get p "size") sector) 1048576)} MiB) "
                            f"cannot grow to {(mebibytes size)} MiB: only "
                            f"{(// (* free sector) 1048576)} MiB are free after it"))))
  (when (not (or grow renamed)) (return NO-CHANGE))
  (when (and grow (_moved-header? have) (not (checking?)))
    ;; The device grew: its GPT's backup header goes to its new end first,
    ;; or the partition could not reach it.
    (_sfdisk dev ["--relocate" "gpt-bak-std" "--" dev]))
  (when (checking?)
    (inform (+ f"partition {number} of {dev} would be "
               (.join " and " [#* (if grow ["grown"] []) #* (if renamed [f"named {name}"] [])])))
    (return WOULD-CHANGE))
  (when grow
    (_sfdisk dev ["-N" (str number) "--" dev] (if (is want None) ", +" f", {(mebibytes size)}MiB")))
  (when renamed
    (_sfdisk dev ["--part-label" "--" dev (str number) name]))
  None)

(defn _removed [dev number]
  (setv have (layout dev))
  (when (or (is have None) (is (_partition have number) None)) (return NO-CHANGE))
  (setv #(_ mounts) (device-state (partition-node dev number)))
  (when mounts
    (raise (FailedChange f"partition {number} of {dev} is mounted at {(.join ", " mounts)}: not removed")))
  (when (checking?)
    (inform f"partition {number} of {dev} would be removed")
    (return WOULD-CHANGE))
  (_sfdisk dev ["--delete" "--" dev (str number)])
  None)

(defprop exists :posix [#^ device dev #^ partition-number number #^ size size
                        * #^ (optional partition-name) [name None]
                        #^ (optional partition-type) [type None]]
  "Partition NUMBER of DEV exists, of at least SIZE (`:rest`: up to the next
partition or the end of the device), with the GPT NAME and the TYPE
(`:linux`, `:swap`, `:esp`, `:lvm`, `:raid`, `:bios-boot`) when given.
Made in the first free space when it is not there; grown into the free
space after it when smaller; renamed when its name differs.  Never shrunk,
moved or retyped.  The table must be there (`has-table`).  Unapplying
removes the partition (its data goes with it), refused while it is mounted."
  (:desc f"{dev} has partition {number} ({(if (= size :rest) "the rest" size)}{(if name f", {name}" "")})")
  (:simulates True)
  (:apply (_exists dev number (if (= size :rest) "rest" size) name (when type type.name)))
  (:unapply (_removed dev number)))

(export :objects [has-table exists layout device-state partition-node device size replaceable])
