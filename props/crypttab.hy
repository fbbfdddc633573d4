"Entries of /etc/crypttab: the encrypted devices set up at boot.

An entry is matched to an existing line by its name, the first field (the
device appears as /dev/mapper/NAME).  A root or resume device is unlocked
by the initramfs, which reads its own copy of crypttab: run
`update-initramfs -u` after changing one."

(eval-when-compile (require consfig.model.property [defprop]))
(import consfig.model.watchspec [watch-path])
(import consfig.props.file [map-file-lines]
        consfig.types *)

(setv crypt-name (matching "crypt-name"
                           "a mapped device name (letters, digits, _ . + and -, not starting with - or .)"
                           r"[A-Za-z0-9_+][A-Za-z0-9_.+-]*")
      crypt-source (matching "crypt-source"
                             "a device: UUID=…, PARTUUID=…, LABEL=… or an absolute path, with no whitespace"
                             r"(?:(?:UUID|PARTUUID|LABEL|PARTLABEL|ID)=|/)[^\s\x00]+")
      crypt-key (matching "crypt-key"
                          "none, - (ask for a passphrase), or the absolute path of a key file, with no whitespace"
                          r"none|-|/[^\s\x00]+")
      crypt-option (matching "crypt-option"
                             "a crypttab option (luks, discard, cipher=aes-xts-plain64…: no whitespace or comma)"
                             r"[A-Za-z0-9_][A-Za-z0-9_=.:/+-]*"))

(setv CRYPTTAB "/etc/crypttab")

(defn _name-of [line]
  (setv fields (.split line))
  (when (and fields (not (.startswith (get fields 0) "#")))
    (get fields 0)))

(defn entry-line [name source key-file options]
  "The crypttab line of NAME."
  (.join " " [name source key-file #* (if options [(.join "," options)] [])]))

(defn merge-entry [lines line]
  "LINES of a crypttab with LINE in place of those for its name (the first
of them; any other dropped), or appended."
  (setv name (_name-of line)
        out []
        placed False)
  (for [l lines]
    (cond (!= (_name-of l) name) (.append out l)
          (not placed) (do (.append out line) (setv placed True))))
  (if placed out (+ out [line])))

(defprop has-entry :posix [#^ crypt-name name #^ crypt-source source
                           * #^ crypt-key [key-file "none"]
                           #^ (list-of crypt-option) [options ["luks"]]]
  "/etc/crypttab sets up NAME (/dev/mapper/NAME) from SOURCE, unlocked with
KEY-FILE (`none` or `-` to ask for a passphrase, or a key file's path), with
OPTIONS (`luks` by default): an existing line for NAME is replaced, or the
line is appended.  Unapplying removes the lines for NAME.

  (crypttab.has-entry \"data\" \"UUID=0b9e…\" :key-file \"/etc/keys/data.key\" :options [\"luks\" \"discard\"])"
  (:watch [(watch-path CRYPTTAB)])
  (:simulates True)
  (:desc f"crypttab entry for {name}")
  (:apply (map-file-lines CRYPTTAB
                          (fn [lines] (merge-entry lines (entry-line name source key-file options)))
                          :create True))
  (:unapply (map-file-lines CRYPTTAB (fn [lines] (lfor l lines :if (!= (_name-of l) name) l)))))

(export :objects [CRYPTTAB has-entry merge-entry entry-line])
