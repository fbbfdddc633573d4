"LUKS: block devices encrypted with cryptsetup, the key from the site's data.

  (use-props consfig.props [luks crypttab])
  (luks.formatted \"/dev/vdb2\")                      ; key: data (--luks-key--HOSTNAME /dev/vdb2)
  (crypttab.has-entry \"secure\" \"/dev/vdb2\" \"/etc/keys/secure.key\" \"luks\")

The key is a prerequisite data item, a secret, used as a key file: its
bytes exactly (a trailing newline is part of it).  It goes to cryptsetup on
standard input (`--key-file=-`), never on a command line, in a log or in
the output.  A device is formatted only when blank (nothing `blkid -p`
finds) unless :replace names what may be overwritten; a LUKS device that
the key does not open is a failure, never reformatted.  It holds when the
device is LUKS and the key opens it (`cryptsetup open --test-passphrase`,
which needs no device-mapper).

Opening devices (`cryptsetup open`, and at boot through crypttab) needs the
kernel's device-mapper, which the machine these properties were tested on
lacks: write the crypttab line with `crypttab.has-entry`, and the key file
it names with `file.secret-uploaded`."

(eval-when-compile (require consfig.model.property [defprop]))
(import consfig.apply.actions [NO-CHANGE run]
        consfig.apply.engine [WOULD-CHANGE checking? inform]
        consfig.data.items [get-data-bytes require-data]
        consfig.errors [FailedChange]
        consfig.model.host [get-hostname]
        consfig.props.filesystem [probe]
        consfig.props.partition [device replaceable]
        consfig.types *)

(defn key-iden1 []
  "The first identifier of the current host's LUKS keys:
`--luks-key--HOSTNAME` (the second is the device)."
  (+ "--luks-key--" (get-hostname)))

(defn _item [dev iden1 iden2]
  #((or iden1 (key-iden1)) (or iden2 dev)))

(defn _key [dev iden1 iden2]
  (setv key (.reveal (get-data-bytes #* (_item dev iden1 iden2))))
  (when (not key)
    (raise (FailedChange f"the key of {dev} is empty (its content is not shown)")))
  key)

(defn _opens? [dev key]
  (setv r (run "cryptsetup" "open" "--test-passphrase" "--key-file=-" "--" dev
               :input key :check False :timeout 300))
  (when (= r.exit-code 127)
    (raise (FailedChange "cryptsetup is not there: (apt.installed \"cryptsetup-bin\") first")))
  r.ok?)

(defn _formatted [dev iden1 iden2 replace iter-time]
  (setv key (_key dev iden1 iden2)
        found (probe dev)
        have (or (.get found "TYPE") (.get found "PTTYPE")))
  (cond (= have "crypto_LUKS")
        (if (_opens? dev key)
            NO-CHANGE
            (raise (FailedChange (+ f"{dev} is LUKS, and its key from data does not open it: "
                                    "not reformatted (its data would be lost); add the key to it, "
                                    "or wipe it and give :replace [\"crypto_LUKS\"]"))))
        (and have (is-not replace True) (not-in have (or replace [])))
        (raise (FailedChange (+ f"{dev} holds {have}, which consfig was not told to replace: give "
                                f":replace [\"{have}\"] (or :replace True) if it may be overwritten")))
        (checking?) (do (inform f"{dev} would be formatted as LUKS2 with its key from data")
                        WOULD-CHANGE)
        True (let [r (run "cryptsetup" "luksFormat" "--batch-mode" "--type" "luks2"
                          "--iter-time" (str iter-time) "--key-file=-" "--" dev
                          :input key :check False :timeout 600)]
               (when (not r.ok?)
                 (raise (FailedChange (+ f"cryptsetup luksFormat {dev} failed:\n"
                                         (.strip (+ r.stderr r.stdout))))))
               None)))

(defprop formatted :posix [#^ device dev * #^ (optional non-empty-line) [iden1 None]
                           #^ (optional non-empty-line) [iden2 None]
                           #^ (optional replaceable) [replace None]
                           #^ (int-range 10 60000) [iter-time 2000]]
  "DEV is a LUKS2 device that the key held as prerequisite data opens: the
item (`--luks-key--HOSTNAME` DEV), or (IDEN1 IDEN2).  Formatted (the key
deriving for ITER-TIME ms) only when blank, or what is there is named by
REPLACE; see `consfig.props.luks`.  It is not undone."
  (:desc f"{dev} is LUKS, its key from data")
  (:hostattrs (require-data #* (_item dev iden1 iden2) :secret True))
  (:simulates True)
  (:apply (_formatted dev iden1 iden2 replace iter-time)))

(export :objects [formatted key-iden1])
