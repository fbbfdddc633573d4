"Filesystems on a live host's block devices: made, labelled, grown.

  (use-props consfig.props [partition filesystem])
  (partition.exists \"/dev/vdb\" 1 :rest :name \"data\")
  (filesystem.exists \"/dev/vdb1\" :ext4 :label \"data\")

A filesystem is made only on a blank device: one where `blkid -p` finds a
filesystem, a partition table or anything else is refused unless :replace
names what may be overwritten — however the property is written, never over
what it does not know it may destroy.  An ext2/3/4 filesystem smaller than
its device (its partition was grown) is grown to fill it with resize2fs,
mounted or not; a label that differs is set (e2label, swaplabel).  Other
types are made and checked, and said to be left as they are where they
would need more (an xfs or btrfs filesystem grows while mounted, with its
own tool)."

(eval-when-compile (require consfig.model.property [defprop]))
(import re
        consfig.apply.actions [NO-CHANGE run run-ok? output]
        consfig.apply.engine [WOULD-CHANGE checking? inform]
        consfig.errors [FailedChange]
        consfig.props.partition [device replaceable]
        consfig.types *)

(setv fs-type (enum "ext4" "ext3" "ext2" "xfs" "btrfs" "vfat" "swap")
      fs-label (matching "fs-label" "a filesystem label (letters, digits, _ . and -, 1 to 16, not starting with - or .)"
                         r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,15}"))

(setv _MKFS {"ext4" ["mkfs.ext4" "-q"] "ext3" ["mkfs.ext3" "-q"] "ext2" ["mkfs.ext2" "-q"]
             "xfs" ["mkfs.xfs" "-q"] "btrfs" ["mkfs.btrfs" "-q"] "vfat" ["mkfs.vfat"]
             "swap" ["mkswap"]}
      _LABEL {"vfat" "-n"}
      _FORCE {"ext4" "-F" "ext3" "-F" "ext2" "-F" "xfs" "-f" "btrfs" "-f"}
      _EXT #{"ext2" "ext3" "ext4"})

(defn probe [dev]
  "What `blkid -p` finds on DEV: a dict of its fields (TYPE, LABEL, PTTYPE,
…), empty for a blank device."
  (when (not (run-ok? "test" "-b" dev :timeout 30))
    (raise (FailedChange f"{dev} is not a block device")))
  (setv r (run "blkid" "-p" "-o" "export" "--" dev :check False :timeout 60))
  (when (= r.exit-code 127)
    (raise (FailedChange "blkid is not there: (apt.installed \"util-linux\") first")))
  (dict (lfor l (.splitlines r.stdout) :if (in "=" l) (.split l "=" 1))))

(defn _mounted [dev]
  (lfor l (.splitlines (output "lsblk" "-nr" "-o" "MOUNTPOINT" "--" dev :timeout 60)) :if (.strip l) l))

(defn ext-slack [dev]
  "How many bytes of DEV its ext2/3/4 filesystem leaves unused."
  (setv head (output "dumpe2fs" "-h" dev :timeout 60)
        count (int (.group (re.search r"^Block count:\s+(\d+)" head re.M) 1))
        block (int (.group (re.search r"^Block size:\s+(\d+)" head re.M) 1))
        size (int (.strip (output "blockdev" "--getsize64" dev :timeout 60))))
  (- size (* count block)))

(defn _make [dev fs label force]
  (setv argv [#* (get _MKFS fs)
              #* (if label [(.get _LABEL fs "-L") label] [])
              #* (if (and force (in fs _FORCE)) [(get _FORCE fs)] [])
              dev]
        r (run #* argv :check False :timeout 3600))
  (when (= r.exit-code 127)
    (raise (FailedChange f"{(get argv 0)} is not there: install the tools for {fs} first")))
  (when (not r.ok?)
    (raise (FailedChange (+ f"{(.join " " argv)} failed:\n" (.strip (+ r.stderr r.stdout)))))))

(defn _exists [dev fs label replace grow]
  (setv found (probe dev)
        have (or (.get found "TYPE") (.get found "PTTYPE")))
  (cond
    (= (.get found "TYPE") fs)
    (do (setv changes [])
        (when (and label (!= (.get found "LABEL") label))
          (.append changes #(f"labelled {label}"
                             (fn [] (cond (in fs _EXT) (run "e2label" dev label :timeout 60)
                                          (= fs "swap") (run "swaplabel" "-L" label dev :timeout 60)
                                          True (raise (FailedChange (+ f"{dev}'s {fs} filesystem is labelled "
                                                                       f"{(.get found "LABEL")}, not {label}; "
                                                                       "consfig relabels ext2/3/4 and swap only"))))))))
        (when (and grow (in fs _EXT) (>= (ext-slack dev) (* 1024 1024)))
          (.append changes #("grown to fill its device"
                             (fn [] (run "resize2fs" dev :timeout 3600)))))
        (when (not changes) (return NO-CHANGE))
        (when (checking?)
          (inform (+ f"{dev}'s {fs} filesystem would be " (.join " and " (gfor [what _] changes what))))
          (return WOULD-CHANGE))
        (for [[_ do-it] changes] (do-it))
        None)
    (and have (is-not replace True) (not-in have (or replace [])))
    (raise (FailedChange (+ f"{dev} holds {have}, which consfig was not told to replace: give "
                            f":replace [\"{have}\"] (or :replace True) if it may be overwritten")))
    True
    (do (setv mounts (_mounted dev))
        (when mounts
          (raise (FailedChange f"{dev} is mounted at {(.join ", " mounts)}: no filesystem is made on it")))
        (when (checking?)
          (inform (+ f"a {fs} filesystem would be made on {dev}" (if have f", replacing its {have}" "")))
          (return WOULD-CHANGE))
        (when (and have (.get found "PTTYPE"))
          ;; mkfs leaves a partition table's signatures where they lie.
          (run "wipefs" "-a" "-q" "--" dev :timeout 120))
        (_make dev fs label (bool have))
        None)))

(defprop exists :posix [#^ device dev #^ fs-type fs * #^ (optional fs-label) [label None]
                        #^ (optional replaceable) [replace None] #^ boolean [grow True]]
  "DEV holds a filesystem of type FS (`:ext4`, `:ext3`, `:ext2`, `:xfs`,
`:btrfs`, `:vfat`, `:swap`), with LABEL when given.  Made when DEV is blank;
a device holding anything else (another filesystem, a partition table) is
refused unless REPLACE names its type (`:replace [\"ext2\"]`) or is True,
and a mounted one always.  An ext2/3/4 filesystem is grown to fill DEV
unless GROW is false; a differing label is set on ext2/3/4 and swap.  It
is not undone: a filesystem is only ever replaced, by saying so."
  (:desc f"{dev} has a{(if (in fs #(:ext4 :ext3 :ext2 :xfs)) "n" "")} {fs.name} filesystem{(if label f" labelled {label}" "")}")
  (:simulates True)
  (:apply (_exists dev fs.name label replace grow)))

(export :objects [exists probe ext-slack fs-type fs-label])
