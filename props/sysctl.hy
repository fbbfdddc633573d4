"Kernel parameters (sysctl.d(5)): set at boot from a file in /etc/sysctl.d,
and on the running kernel at once.

The running kernel is changed only where it is the system's own: not in a
chroot, and not where services are not started (`service.no-services?`),
since a chroot shares the kernel of the machine it is on.  There the file is
written, the property says that the running kernel was left alone, and the
values take effect when the system boots.  In a container (see
`service.kernel-left-alone-where`) only the parameters of its own network
namespace (net.*) are set, where it may write them; the kernel-wide ones are
the machine's, and left alone with a note."

(eval-when-compile (require consfig.model.property [defprop]))
(import consfig.model.watchspec [watch-path watch-poll])
(import re
        consfig.apply.actions [NO-CHANGE Script output run run-ok?]
        consfig.apply.engine [WOULD-CHANGE checking? inform]
        consfig.errors [FailedChange]
        consfig.props.file [combined-results conf-equals-text conf-pairs describe-pairs map-file-lines
                            pairs-problem read-text update-file]
        consfig.props.service [container-kind no-services-where]
        consfig.types *)

(defn _key-problem [key]
  ;; A key names a file below /proc/sys: dotted (net.ipv4.ip_forward) or
  ;; slashed (net/ipv4/conf/eth0.1/rp_filter, for a component with a dot).
  (when (not (isinstance key str)) (return "not a string"))
  (setv parts (.split key (if (in "/" key) "/" ".")))
  (when (not (all (gfor p parts (and (re.fullmatch r"[A-Za-z0-9_@:+-][A-Za-z0-9_@:.+-]*" p)
                                     (not-in p #("." ".."))))))
    (return "not a key"))
  (when (.startswith key "-") "starts with -"))

(setv sysctl-key (predicate "sysctl-key"
                            (+ "a kernel parameter (net.ipv4.ip_forward, or net/ipv4/conf/eth0.1/rp_filter: "
                               "letters, digits, _ @ : + and -, no empty, . or .. part, not starting with -)")
                            (fn [k] (is (_key-problem k) None)))
      sysctl-value (one-of integer
                           (matching "sysctl-value"
                                     "a value on one line, without leading or trailing whitespace"
                                     r"[^\s\x00](?:[^\n\r\x00]*[^\s\x00])?"))
      sysctl-file (matching "sysctl-file"
                            "a file name in /etc/sysctl.d ending in .conf (letters, digits, _ . and -, not starting with . or -)"
                            r"[A-Za-z0-9_][A-Za-z0-9_.-]*\.conf"))

(setv FILE "90-consfig.conf")

(defn _path [file] (+ "/etc/sysctl.d/" file))

(defn _proc-path [key]
  (+ "/proc/sys/" (if (in "/" key) key (.replace key "." "/"))))

;; How often the agent reads the running values back: /proc/sys tells
;; nobody when one is written.
(setv LIVE-POLL 1)

(defn _watches [keys file]
  ;; The file, and a poll of the running values.
  [(watch-path (_path file)) (watch-poll LIVE-POLL)])

(defn _pairs-problem [pairs]
  (or (pairs-problem pairs sysctl-key)
      (for [[_ v] (.items (conf-pairs pairs))]
        (when (not (.accepts sysctl-value v))
          (return (+ "each value " (.explain sysctl-value v)))))))

(defn _normal [value]
  ;; The kernel shows a vector with tabs (32768\t60999): compare words.
  (.join " " (.split (str value))))

;; One command reads every key: for each, "V" and its value, "M" when the
;; kernel has no such parameter, "U" when it cannot be read (write-only).
(setv _READ-LIVE (.join "\n" ["for p; do"
                              "  if [ ! -e \"$p\" ]; then printf 'M\\0'"
                              "  elif v=$(cat -- \"$p\" 2>/dev/null); then printf 'V%s\\0' \"$v\""
                              "  else printf 'U\\0'; fi"
                              "done"]))

(defn live-values [keys]
  "What the running kernel has for each of KEYS: a dict of key → its value
(words joined by one space), None for a key it has no parameter for, or
False for one that cannot be read."
  (setv fields (cut (.split (output (Script _READ-LIVE #* (map _proc-path keys)) :timeout 60) "\0")
                    0 (len keys)))
  (dfor [k f] (zip keys fields)
        k (cond (.startswith f "V") (_normal (cut f 1 None))
                (= f "M") None
                True False)))

(defn namespaced? [key]
  "Whether KEY is a parameter of the network namespace (net.*), which a
container with a network of its own has for itself, rather than of the
whole kernel."
  (in (get (.split key (if (in "/" key) "/" ".")) 0) #("net")))

;; Each path given that may be written, NUL-terminated; one that is not
;; there too, for `_live-changes` to say the kernel lacks it.
(setv _WRITABLE "for p; do { [ -w \"$p\" ] || [ ! -e \"$p\" ]; } && printf '%s\\0' \"$p\"; done; exit 0")

(defn _in-container [wanted kind]
  ;; What of WANTED a container may set on the running kernel: parameters
  ;; of its own network namespace that it may write; the rest is said.
  (setv wide (lfor k wanted :if (not (namespaced? k)) k)
        net (lfor k wanted :if (namespaced? k) k)
        writable (set (cut (.split (output (Script _WRITABLE #* (map _proc-path net)) :timeout 60)
                                   "\0")
                           0 -1))
        kept (lfor k net :if (not-in (_proc-path k) writable) k))
  (when wide
    (inform (+ f"{(.join ", " wide)}: the running kernel is left alone (in a container ({kind}): "
               "its kernel is the machine's); the values take effect where this system boots")))
  (when kept
    (inform (+ f"{(.join ", " kept)}: the running kernel is left alone (in a container ({kind}) "
               "that may not set them: its network is not its own)")))
  (dfor [k v] (.items wanted) :if (and (namespaced? k) (not-in k kept)) k v))

(defn _live-changes [wanted]
  ;; What of WANTED (key → value) the running kernel lacks, as a dict; None
  ;; where it is not this system's.  A parameter it does not have at all is
  ;; a failure.
  (setv where (no-services-where))
  (when where
    (inform (+ f"the running kernel is left alone ({where}, it is not this system's); "
               "the values take effect at boot"))
    (return None))
  (setv kind (container-kind))
  (when kind
    (setv wanted (_in-container wanted kind))
    (when (not wanted) (return None)))
  (setv have (live-values (list wanted))
        missing (lfor [k v] (.items have) :if (is v None) k))
  (when missing
    (raise (FailedChange (+ f"the running kernel has no parameter {(.join ", " missing)} "
                            f"({(.join ", " (map _proc-path missing))} does not exist); "
                            "is the module that provides it loaded?"))))
  (dfor [k v] (.items wanted) :if (!= (get have k) (_normal v))
        k #((get have k) v)))

(defn _set-live [changes]
  (cond (not changes) NO-CHANGE
        (checking?)
        (do (for [[k [old new]] (.items changes)]
              (inform f"{k}: {(if (is old False) "(unreadable)" old)} → {new} on the running kernel"))
            WOULD-CHANGE)
        (not (run-ok? "sh" "-c" "command -v sysctl" :timeout 60))
        (raise (FailedChange "sysctl is not installed: (apt.installed \"procps\") first"))
        True (do (run "sysctl" "-w" "--" #* (gfor [k [_ new]] (.items changes) f"{k}={new}")
                      :timeout 60)
                 None)))

(defn _has-values [pairs file]
  (setv wanted (conf-pairs pairs)
        path (_path file)
        live (_live-changes (dfor [[_ k] v] (.items wanted) k v)))
  ;; procps makes the directory; a minimal system may lack it.
  (when (not (checking?)) (run "mkdir" "-p" "--" "/etc/sysctl.d"))
  (combined-results [(update-file path (conf-equals-text (or (read-text path) "") wanted) :mode 0o644)
                     (_set-live live)]))

(defn _lacks-keys [keys file]
  (setv path (_path file)
        keys (set keys))
  (defn setting? [line]
    (setv m (re.match r"\s*([^\s=#;]+)\s*=" line))
    (and m (in (.group m 1) keys)))
  (setv r (map-file-lines path (fn [lines] (lfor l lines :if (not (setting? l)) l))))
  (when (and (!= r NO-CHANGE) (not (checking?)) (not (no-services-where)))
    (inform (+ f"{(.join ", " (sorted keys))}: the running kernel keeps its values "
               "until the next boot")))
  r)

(defprop has-values :posix [#^ (one-of sysctl-value (dict-of sysctl-key sysctl-value)) #* pairs
                            #^ sysctl-file [file FILE]]
  "Each kernel parameter of PAIRS (alternating keys and values, or a dict)
has its value: set in /etc/sysctl.d/FILE (90-consfig.conf unless FILE says
otherwise) for every boot, and on the running kernel with `sysctl -w` (see
the module's documentation for where it is left alone).  A parameter the
running kernel lacks is a failure, before anything is written there.
Unapplying removes the parameters' lines from FILE; the running kernel keeps
its values until the next boot."
  (:simulates True)
  (:invariant (not (_pairs-problem pairs)) (_pairs-problem pairs))
  (:desc f"sysctl {(describe-pairs pairs " = ")}")
  (:watch (_watches (gfor [[_ k] _] (.items (conf-pairs pairs)) k) file))
  (:apply (_has-values pairs file))
  (:unapply (_lacks-keys (gfor [[_ k] _] (.items (conf-pairs pairs)) k) file)))

(defprop has-value :posix [#^ sysctl-key key #^ sysctl-value value * #^ sysctl-file [file FILE]]
  "The kernel parameter KEY has VALUE, as `has-values` sets it:
`(sysctl.has-value \"net.ipv4.ip_forward\" 1)`."
  (:simulates True)
  (:desc f"sysctl {key} = {value}")
  (:watch (_watches [key] file))
  (:apply (_has-values [key value] file))
  (:unapply (_lacks-keys [key] file)))

(export :objects [has-value has-values live-values namespaced? sysctl-key sysctl-value FILE])
