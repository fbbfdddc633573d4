"Network interfaces: systemd-networkd `.network` files, and ifupdown's
/etc/network/interfaces.d.

  (network.networkd-configured \"10-uplink\"
    [\"Match\" {\"Name\" \"eth0\"}]
    [\"Network\" {\"Address\" \"192.0.2.5/24\" \"Gateway\" \"192.0.2.1\"
                \"DNS\" [\"192.0.2.53\" \"192.0.2.54\"]}])
  (network.interface-configured \"eth1\" :method :static
    :options {\"address\" \"198.51.100.7/24\"})

A change to the configuration of the interface the deploying SSH connection
comes in by is refused, unless :force true: consfig cannot tell whether the
new configuration keeps that connection, and a mistake there leaves the host
out of reach.  That interface is the one holding the address the target's
SSH_CONNECTION was made to (see `consfig.props.nftables.ssh-connection`); a
`.network` file configures it when its [Match] names it (Name=, globs
included, or MACAddress=) or matches without naming any (no Name= nor
MACAddress=).  The change is applied at once where that is safe: networkd
reloads its files when it runs (`networkctl reload`); ifupdown brings a new
`auto` interface up, and one already up down and up again.  In a chroot,
the files are written and nothing else is done."

(eval-when-compile (require consfig.model.property [defprop]))
(import consfig.model.watchspec [watch-path])
(import fnmatch
        posixpath
        re
        consfig.apply.actions [NO-CHANGE Script run run-ok? remove-remote make-remote-directory]
        consfig.model.context [connection]
        consfig.apply.engine [WOULD-CHANGE checking? inform]
        consfig.errors [FailedChange]
        consfig.apply.noservices [no-services-reason]
        consfig.props.file [add-lines read-text update-file]
        consfig.props.nftables [interface-of ssh-connection]
        consfig.props.reboot [CHROOT-TEST]
        consfig.types *
        consfig.util [keyword-name])

(setv NETWORKD-DIRECTORY "/etc/systemd/network"
      INTERFACES-DIRECTORY "/etc/network/interfaces.d"
      INTERFACES "/etc/network/interfaces")

(setv file-stem (matching "file-stem"
                          "a file name (letters, digits, _ . @ and -, not starting with . or -)"
                          r"[A-Za-z0-9_@][A-Za-z0-9_.@-]{0,200}")
      interface-name (matching "interface-name"
                               "an interface name (letters, digits, _ . : and -, not starting with - or ., at most 15)"
                               r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,14}")
      unit-key (matching "unit-key" "a key of a systemd unit file (letters and digits)"
                         r"[A-Za-z][A-Za-z0-9]*")
      unit-value (named "unit-value" (one-of non-empty-line integer (non-empty-list-of non-empty-line))
                        "a value (one line, or an integer), or a list of them for a key given several times")
      networkd-section (predicate "networkd-section"
                                  "a [SECTION {KEY VALUE …}] pair, SECTION and KEYs letters and digits"
                                  (fn [s] (and (isinstance s #(list tuple)) (= (len s) 2)
                                               (.accepts unit-key (get s 0))
                                               (.accepts (dict-of unit-key unit-value) (get s 1)))))
      ifupdown-key (matching "ifupdown-key"
                             "an ifupdown option (lower-case letters, digits, _ and -)"
                             r"[a-z0-9][a-z0-9_-]*")
      address-family (enum "inet" "inet6")
      ifupdown-method (enum "static" "dhcp" "manual" "auto" "loopback")
      ifupdown-value (named "ifupdown-value" (one-of non-empty-line integer (non-empty-list-of non-empty-line))
                            "a value (one line, or an integer), or a list of them for an option given several times"))

(defn _values [v]
  (lfor x (if (isinstance v #(list tuple)) v [v]) (str x)))

(defn networkd-text [sections]
  "The `.network` file of SECTIONS, `[NAME {KEY VALUE}]` pairs in order: a
list value gives its key once per element."
  (+ "# Written by consfig.\n"
     (.join "\n" (gfor [name keys] sections
                       (+ f"[{name}]\n"
                          (.join "" (gfor [k v] (.items keys) x (_values v) f"{k}={x}\n")))))))

(defn interface-text [name family method options auto]
  "The ifupdown stanza of interface NAME."
  (+ "# Written by consfig.\n"
     (if auto f"auto {name}\n" "")
     f"iface {name} {family} {method}\n"
     (.join "" (gfor [k v] (.items options) x (_values v) f"    {k} {x}\n"))))

(defn _chroot []
  (or (no-services-reason (connection))
      (and (. (run (Script CHROOT-TEST) :check False :timeout 30) ok?) "in a chroot")))

(defn ssh-interface []
  "The interface the deploying SSH connection comes in by, `#(name mac)`,
or None when the target's commands run under no SSH session."
  (setv conn (ssh-connection))
  (when (is conn None) (return None))
  (setv #(client server port) conn
        name (interface-of server)
        link (run "ip" "-o" "link" "show" "dev" name :check False :timeout 30)
        mac (re.search r"link/\S+ ([0-9a-f:]{17})" link.stdout))
  #(name (when mac (.group mac 1))))

(defn _match-section [text]
  ;; The keys of the [Match] sections of a .network file: key → words.
  (setv found {}
        section None)
  (for [line (.splitlines (or text ""))]
    (setv line (.strip line))
    (cond (or (not line) (.startswith line #("#" ";"))) None
          (.startswith line "[") (setv section (.strip line "[] "))
          (and (= section "Match") (in "=" line))
          (let [#(k _ v) (.partition line "=")]
            (.extend (.setdefault found (.strip k) []) (.split v)))))
  found)

(defn networkd-matches? [text interface]
  "Whether the `.network` file TEXT configures INTERFACE, `#(name mac)`:
its [Match] names it (Name=, with globs; MACAddress=), or names no
interface at all (it matches by other keys, or matches every one)."
  (when (is text None) (return False))
  (setv #(name mac) interface
        m (_match-section text)
        names (.get m "Name")
        macs (.get m "MACAddress"))
  (cond (and (not names) (not macs)) True
        (and names (any (gfor g names (fnmatch.fnmatchcase name (.lstrip g "!"))))) True
        (and macs mac (in (.lower mac) (lfor x macs (.lower x)))) True
        True False))

(defn _refuse-cut [what force affects]
  ;; AFFECTS: given the SSH interface, whether the change touches it.
  (when force (return))
  (setv iface (ssh-interface))
  (when (and iface (affects iface))
    (raise (FailedChange (+ f"{what} configures {(get iface 0)}, the interface the deploying SSH "
                            "connection comes in by: changing it could cut that connection, and "
                            "leave the host out of reach.  Give :force true to change it all the same")))))

(defn _file-change [path text force affects]
  ;; Write PATH with TEXT (None: remove it) unless that changes the SSH
  ;; connection's interface; `:no-change`, or what changed.
  (setv old (read-text path))
  (when (= old text) (return NO-CHANGE))
  (_refuse-cut path force (fn [iface] (or (affects old iface) (affects text iface))))
  (cond (is-not text None) (do (when (not (checking?))
                                (make-remote-directory (posixpath.dirname path)))
                              (update-file path text :mode 0o644))
        (checking?) (do (inform f"{path} would be removed") WOULD-CHANGE)
        True (do (remove-remote [path]) None)))

(defn _networkd-reload []
  (setv chroot (_chroot))
  (cond chroot (inform f"networkd not reloaded: this runs {chroot}")
        (not (run-ok? "systemctl" "is-active" "--quiet" "systemd-networkd" :timeout 30))
        (inform "systemd-networkd is not running: the file takes effect when it starts")
        True (run "networkctl" "reload" :timeout 120)))

(defn _networkd [name sections directory force unapply]
  (setv path (posixpath.join directory f"{name}.network")
        result (_file-change path (if unapply None (networkd-text sections)) force networkd-matches?))
  (when (and (!= result NO-CHANGE) (not (checking?)))
    (_networkd-reload))
  result)

(defprop networkd-configured :posix [#^ file-stem name #^ networkd-section #* sections
                                     #^ abs-path [directory NETWORKD-DIRECTORY]
                                     #^ boolean [force False]]
  "DIRECTORY/NAME.network is the systemd-networkd file of SECTIONS, each a
`[SECTION {KEY VALUE …}]` pair, in order (a list value gives its key once
per element), and systemd-networkd has reloaded it if it runs.  A change to
a file that configures the interface the deploying SSH connection comes in
by is refused, unless FORCE.  Unapplying removes the file.  See
`consfig.props.network`."
  (:watch [(watch-path directory)])
  (:desc f"systemd-networkd has {name}.network")
  (:simulates True)
  (:invariant sections "needs its sections, such as [\"Match\" {\"Name\" \"eth0\"}]")
  (:apply (_networkd name sections directory force False))
  (:unapply (_networkd name sections directory force True)))

(defn _ifupdown? []
  (run-ok? (Script "command -v ifup >/dev/null && command -v ifdown >/dev/null") :timeout 30))

(defn _interface-up? [name]
  (run-ok? "ifquery" "--state" "--" name :timeout 30))

(defn _ifupdown-apply [name auto cut]
  ;; Where ifupdown runs it: a new `auto` interface brought up, one up
  ;; brought down and up again.  CUT: it carries the deploying connection
  ;; (and :force said so), so the bounce goes to systemd, to be finished
  ;; after the connection is gone.
  (setv chroot (_chroot))
  (cond chroot (inform f"{name} not brought up: this runs {chroot}")
        (not (_ifupdown?)) (inform f"{name} not brought up: ifupdown is not installed here")
        (_interface-up? name)
        (if (and cut (run-ok? (Script "command -v systemd-run >/dev/null") :timeout 30))
            (run "systemd-run" "--no-block" "--collect" "--quiet" "--" "/bin/sh" "-c"
                 "ifdown --force -- \"$1\"; ifup -- \"$1\"" "sh" name :timeout 60)
            (run (Script "ifdown --force -- \"$1\"; ifup -- \"$1\"" name) :timeout 300))
        auto (run "ifup" "--" name :timeout 300)))

(defn _sources-directory [text directory]
  (any (gfor l (.splitlines (or text ""))
             :setv w (.split l)
             (or (= w ["source" (posixpath.join directory "*")])
                 (= w ["source-directory" directory])))))

(defn _interface [name family method options auto directory force unapply]
  (setv path (posixpath.join directory name)
        affects (fn [text iface] (and (is-not text None)
                                      (in (get iface 0) (.split (.replace text "\n" " ")))))
        change (_file-change path (if unapply None (interface-text name family method options auto))
                             force affects)
        results [change])
  ;; Debian's /etc/network/interfaces reads interfaces.d; one made by hand
  ;; (or none, where ifupdown is not installed yet) may not.
  (when (and (not unapply) (= directory INTERFACES-DIRECTORY)
             (not (_sources-directory (read-text INTERFACES) directory)))
    (.append results (add-lines INTERFACES [(+ "source " (posixpath.join directory "*"))])))
  (when (and (!= change NO-CHANGE) (not (checking?)) (not unapply))
    (setv iface (when force (ssh-interface)))
    (_ifupdown-apply name auto (and iface (= (get iface 0) name))))
  (if (all (gfor r results (= r NO-CHANGE)))
      NO-CHANGE
      (if (checking?) WOULD-CHANGE :changed)))

(defprop interface-configured :posix [#^ interface-name name
                                      * #^ address-family [family :inet]
                                      #^ ifupdown-method [method :static]
                                      #^ (dict-of ifupdown-key ifupdown-value) [options {}]
                                      #^ boolean [auto True]
                                      #^ abs-path [directory INTERFACES-DIRECTORY]
                                      #^ boolean [force False]]
  "ifupdown configures the interface NAME from DIRECTORY/NAME: `iface NAME
FAMILY METHOD` with OPTIONS (`{\"address\" \"192.0.2.5/24\" \"gateway\"
\"192.0.2.1\"}`; a list value gives its option once per element), brought up
at boot when AUTO.  /etc/network/interfaces is made to read
/etc/network/interfaces.d when it does not.  Where ifupdown is installed
and it is not a chroot, a new interface is brought up and one already up
brought down and up again.  A change to the interface the deploying SSH
connection comes in by is refused, unless FORCE.  Unapplying removes the
file (and leaves the interface as it is).  See `consfig.props.network`."
  (:watch [(watch-path directory) (watch-path INTERFACES)])
  (:desc f"Interface {name} configured ({(keyword-name family)} {(keyword-name method)})")
  (:simulates True)
  (:apply (_interface name (keyword-name family) (keyword-name method) options auto directory force False))
  (:unapply (_interface name (keyword-name family) (keyword-name method) options auto directory force True)))

(export :objects [networkd-configured interface-configured networkd-text interface-text
                  networkd-matches? ssh-interface])
