"LVM: physical volumes and volume groups, with lvm2's own commands.

  (use-props consfig.props [partition lvm])
  (partition.exists \"/dev/vdb\" 1 :rest :type :lvm)
  (lvm.physical-volume \"/dev/vdb1\")
  (lvm.volume-group \"data\" \"/dev/vdb1\")

A physical volume is made only on a blank device (nothing `blkid -p`
finds) unless :replace names what may be overwritten, and is grown to fill
its device when that grew (`pvresize`).  A volume group is made from its
physical volumes, and extended with those it lacks; it never loses one.

Logical volumes are not here yet: making one needs the kernel's
device-mapper, which the machine these properties were tested on lacks, and
consfig ships no property it has not run."

(eval-when-compile (require consfig.model.property [defprop]))
(import consfig.apply.actions [NO-CHANGE run]
        consfig.apply.engine [WOULD-CHANGE checking? inform]
        consfig.errors [FailedChange]
        consfig.props.filesystem [probe]
        consfig.props.partition [device replaceable]
        consfig.types *)

(setv vg-name (matching "vg-name" "a volume group name (letters, digits, _ . + and -, not starting with - or .)"
                        r"[A-Za-z0-9_+][A-Za-z0-9_.+-]{0,126}"))

(defn _lvm [#* argv]
  (setv r (run #* argv :check False :timeout 300))
  (when (= r.exit-code 127)
    (raise (FailedChange f"{(get argv 0)} is not there: (apt.installed \"lvm2\") first")))
  (when (not r.ok?)
    (raise (FailedChange (+ f"{(.join " " argv)} failed:\n" (.strip (+ r.stderr r.stdout))))))
  r.stdout)

(defn _report [command fields #* args]
  ;; Rows of an lvm report command, as lists of FIELDS' values.
  (lfor l (.splitlines (_lvm command "--noheadings" "--nosuffix" "--units" "b" "--separator" "\t"
                             "-o" fields #* args))
        :if (.strip l)
        (lfor f (.split l "\t") (.strip f))))

(defn _pv-slack [dev]
  ;; Bytes of DEV its physical volume leaves out.
  (setv size (get (get (_report "pvs" "pv_size" "--" dev) 0) 0)
        total (int (.strip (. (run "blockdev" "--getsize64" dev :timeout 60) stdout))))
  (- total (int (float size))))

(defn _physical-volume [dev replace]
  (setv found (probe dev)
        have (or (.get found "TYPE") (.get found "PTTYPE")))
  (cond (= have "LVM2_member")
        (if (< (_pv-slack dev) (* 8 1024 1024))
            NO-CHANGE
            (if (checking?)
                (do (inform f"the physical volume {dev} would be grown to fill it") WOULD-CHANGE)
                (do (_lvm "pvresize" "-q" "--" dev) None)))
        (and have (is-not replace True) (not-in have (or replace [])))
        (raise (FailedChange (+ f"{dev} holds {have}, which consfig was not told to replace: give "
                                f":replace [\"{have}\"] (or :replace True) if it may be overwritten")))
        (checking?) (do (inform f"{dev} would become a physical volume") WOULD-CHANGE)
        True (do (_lvm "pvcreate" "-q" #* (if have ["-ff" "-y"] []) "--" dev) None)))

(defprop physical-volume :posix [#^ device dev * #^ (optional replaceable) [replace None]]
  "DEV is an LVM physical volume, grown to fill DEV.  Made only on a blank
device, unless REPLACE names what is there (`:replace [\"ext4\"]`) or is
True.  It is not undone: `volume-group` never gives one up."
  (:desc f"{dev} is an LVM physical volume")
  (:simulates True)
  (:apply (_physical-volume dev replace)))

(defn _volume-group [name pvs]
  (setv rows (_report "pvs" "pv_name,vg_name" "--" #* pvs)
        owner (dfor [pv vg] rows pv vg)
        elsewhere (lfor pv pvs :if (not-in (.get owner pv "") #("" name)) pv)
        exists (bool (_report "vgs" "vg_name" "--select" f"vg_name={name}"))
        missing (lfor pv pvs :if (!= (.get owner pv) name) pv))
  (when elsewhere
    (raise (FailedChange (+ (.join ", " (gfor pv elsewhere f"{pv} is in volume group {(get owner pv)}"))
                            f", not {name}: taken from none"))))
  (cond (not missing) NO-CHANGE
        (checking?) (do (inform (+ f"volume group {name} would be "
                                   (if exists f"extended with {(.join ", " missing)}" "made")))
                        WOULD-CHANGE)
        exists (do (_lvm "vgextend" "-q" "--" name #* missing) None)
        True (do (_lvm "vgcreate" "-q" "--" name #* pvs) None)))

(defprop volume-group :posix [#^ vg-name name #^ device #* pvs]
  "The volume group NAME exists and holds each physical volume of PVS
(made with `physical-volume`): made with them, or extended with those it
lacks.  One that belongs to another group is a failure.  It is not undone."
  (:invariant pvs "needs at least one physical volume")
  (:desc f"LVM volume group {name} on {(.join ", " pvs)}")
  (:simulates True)
  (:apply (_volume-group name pvs)))

(export :objects [physical-volume volume-group vg-name])
