"Bridges and links on the running kernel, with iproute2: for a host that
has neither systemd-networkd nor ifupdown to declare them.

  (use-props consfig.props [bridge nat])
  (bridge.exists \"br0\")
  (bridge.has-port \"br0\" \"veth-guest\")
  (bridge.has-address \"br0\" \"10.0.3.1/24\")
  (nat.masquerades \"10.0.3.0/24\" \"eth0\")

Each property reads the kernel's state (`ip -j`) and changes only what
differs, so it holds until the next boot; where a host keeps no network
configuration of its own, let the converging agent or a boot-time run of
the host's image put it back (they re-check these properties).  Making a
link a bridge's port, or taking an address away, on the interface the
deploying SSH connection comes in by is refused unless :force true: its
traffic would go elsewhere.  In a chroot nothing is done (the kernel is the
machine's the chroot is on), and the property says so."

(eval-when-compile (require consfig.model.property [defprop]))
(import ipaddress
        json
        consfig.apply.actions [NO-CHANGE Script run]
        consfig.apply.engine [WOULD-CHANGE checking? inform]
        consfig.apply.noservices [no-services-reason]
        consfig.errors [FailedChange]
        consfig.model.context [connection]
        consfig.props.nftables [interface-of ssh-connection]
        consfig.props.reboot [CHROOT-TEST]
        consfig.types *)

(setv link-name (matching "link-name" "an interface name (letters, digits, _ . and -, 1 to 15, not starting with - or .)"
                          r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}")
      interface-address (predicate "interface-address" "an address with its prefix, such as 10.0.3.1/24 or fd00::1/64"
                                   (fn [v] (and (isinstance v str) (in "/" v)
                                                (try (ipaddress.ip-interface v) True
                                                     (except [ValueError] False))))))

(defn not-here []
  "Why the running kernel is not this system's to change (\"in a chroot\"), or None."
  (or (no-services-reason (connection))
      (and (. (run (Script CHROOT-TEST) :check False :timeout 30) ok?) "in a chroot")))

(defn _skip? [what]
  (setv why (not-here))
  (when why (inform f"{what}: not done {why}, whose kernel is not this system's"))
  (bool why))

(defn ip-json [#* args]
  "What `ip -j ARGS…` says, as data; None when it fails (no such link)."
  (setv r (run "ip" "-j" #* args :check False :timeout 60))
  (when (= r.exit-code 127)
    (raise (FailedChange "ip is not there: (apt.installed \"iproute2\") first")))
  (when (and r.ok? (.strip r.stdout)) (json.loads r.stdout)))

(defn link [name]
  "The link NAME as `ip -j -d link show` describes it, or None."
  (setv l (ip-json "-d" "link" "show" "dev" name))
  (when l (get l 0)))

(defn _kind [l] (.get (.get l "linkinfo" {}) "info_kind"))

(defn _ip [#* args]
  (run "ip" #* args :timeout 60))

(defn _refuse-ssh-link [name force what]
  ;; WHAT, done to NAME, would take the deploying connection's traffic away.
  (when force (return))
  (setv conn (ssh-connection))
  (when (and conn (= (interface-of (get conn 1)) name))
    (raise (FailedChange (+ f"{what}: {name} is the interface the deploying SSH connection comes "
                            "in by, whose traffic would go elsewhere; give :force true to do it "
                            "all the same")))))

(defn _exists [name stp]
  (when (_skip? f"bridge {name}") (return NO-CHANGE))
  (setv l (link name)
        want-stp (if stp "1" "0"))
  (when (and l (!= (_kind l) "bridge"))
    (raise (FailedChange f"{name} exists and is a {(or (_kind l) "plain")} link, not a bridge")))
  (setv stp-now (when l (str (.get (.get (.get l "linkinfo" {}) "info_data" {}) "stp_state" 0)))
        up (and l (in "UP" (.get l "flags" []))))
  (cond (and l up (= stp-now want-stp)) NO-CHANGE
        (checking?) (do (inform (cond (not l) f"bridge {name} would be made"
                                      (not up) f"bridge {name} would be brought up"
                                      True f"bridge {name}: STP would be turned {(if stp "on" "off")}"))
                        WOULD-CHANGE)
        True (do (when (not l) (_ip "link" "add" "name" name "type" "bridge"))
                 (_ip "link" "set" "dev" name "type" "bridge" "stp_state" want-stp)
                 (_ip "link" "set" "dev" name "up")
                 None)))

(defn _deleted [name]
  (when (_skip? f"bridge {name}") (return NO-CHANGE))
  (setv l (link name))
  (cond (not l) NO-CHANGE
        (!= (_kind l) "bridge") (raise (FailedChange f"{name} is not a bridge: not deleted"))
        (checking?) (do (inform f"bridge {name} would be deleted") WOULD-CHANGE)
        True (do (_ip "link" "del" "dev" name) None)))

(defprop exists :posix [#^ link-name name * #^ boolean [stp False]]
  "The bridge NAME exists and is up, with the spanning tree protocol on
when STP.  A link of that name that is not a bridge is a failure.
Unapplying deletes the bridge (its ports are let go)."
  (:desc f"bridge {name}")
  (:simulates True)
  (:apply (_exists name stp))
  (:unapply (_deleted name)))

(defn _port [bridge port force remove]
  (when (_skip? f"{port} in bridge {bridge}") (return NO-CHANGE))
  (setv l (link port))
  (when (not l)
    (if remove (return NO-CHANGE) (raise (FailedChange f"there is no link {port} to put in {bridge}"))))
  (setv master (.get l "master")
        up (in "UP" (.get l "flags" [])))
  (if remove
      (cond (!= master bridge) NO-CHANGE
            (checking?) (do (inform f"{port} would leave {bridge}") WOULD-CHANGE)
            True (do (_ip "link" "set" "dev" port "nomaster") None))
      (cond (and (= master bridge) up) NO-CHANGE
            True (do (when (!= master bridge) (_refuse-ssh-link port force f"{port} in bridge {bridge}"))
                     (if (checking?)
                         (do (inform f"{port} would be made a port of {bridge}") WOULD-CHANGE)
                         (do (_ip "link" "set" "dev" port "master" bridge)
                             (_ip "link" "set" "dev" port "up")
                             None))))))

(defprop has-port :posix [#^ link-name bridge #^ link-name port * #^ boolean [force False]]
  "The link PORT is a port of BRIDGE, and up.  Refused for the interface
the deploying SSH connection comes in by, unless FORCE.  Unapplying takes
it out of the bridge."
  (:desc f"{port} is a port of bridge {bridge}")
  (:simulates True)
  (:apply (_port bridge port force False))
  (:unapply (_port bridge port force True)))

(defn _addresses [name]
  (setv l (ip-json "addr" "show" "dev" name))
  (when (is l None) (raise (FailedChange f"there is no link {name}")))
  (lfor a (.get (get l 0) "addr_info" [])
        (ipaddress.ip-interface f"{(get a "local")}/{(get a "prefixlen")}")))

(defn _address [name address force remove]
  (when (_skip? f"{address} on {name}") (return NO-CHANGE))
  (setv want (ipaddress.ip-interface address)
        have (in want (_addresses name)))
  (cond (= have (not remove)) NO-CHANGE
        (checking?) (do (inform (+ f"{address} would be " (if remove "taken from " "put on ") name))
                        WOULD-CHANGE)
        remove (do (_refuse-ssh-link name force f"taking {address} from {name}")
                   (_ip "addr" "del" (str want) "dev" name)
                   None)
        True (do (_ip "addr" "add" (str want) "dev" name) None)))

(defprop has-address :posix [#^ link-name name #^ interface-address address * #^ boolean [force False]]
  "The link NAME (a bridge, or any other) holds ADDRESS with its prefix
(`10.0.3.1/24`).  Addresses it holds besides are left.  Unapplying takes
ADDRESS away: refused on the interface the deploying SSH connection comes
in by, unless FORCE."
  (:desc f"{name} has address {address}")
  (:simulates True)
  (:apply (_address name address force False))
  (:unapply (_address name address force True)))

(defn _veth [name peer remove]
  (when (_skip? f"veth pair {name}") (return NO-CHANGE))
  (setv l (link name))
  (when (and l (!= (_kind l) "veth"))
    (raise (FailedChange f"{name} exists and is not a veth link")))
  (cond (= (bool l) (not remove)) NO-CHANGE
        (checking?) (do (inform (+ f"veth pair {name}/{peer} would be " (if remove "deleted" "made")))
                        WOULD-CHANGE)
        remove (do (_ip "link" "del" "dev" name) None)
        True (do (_ip "link" "add" "name" name "type" "veth" "peer" "name" peer)
                 (_ip "link" "set" "dev" name "up")
                 (_ip "link" "set" "dev" peer "up")
                 None)))

(defprop veth-exists :posix [#^ link-name name #^ link-name peer]
  "A veth pair, NAME and PEER, exists, both ends up: a cable, for a
container or a namespace to reach a bridge.  Unapplying deletes it (both
ends go)."
  (:desc f"veth pair {name}/{peer}")
  (:simulates True)
  (:apply (_veth name peer False))
  (:unapply (_veth name peer True)))

(defn _up [name down]
  (when (_skip? f"{name} {(if down "down" "up")}") (return NO-CHANGE))
  (setv l (link name))
  (when (not l) (raise (FailedChange f"there is no link {name}")))
  (setv up (in "UP" (.get l "flags" [])))
  (cond (!= up down) NO-CHANGE
        (checking?) (do (inform f"{name} would be brought {(if down "down" "up")}") WOULD-CHANGE)
        True (do (when down (_refuse-ssh-link name False f"bringing {name} down"))
                 (_ip "link" "set" "dev" name (if down "down" "up"))
                 None)))

(defprop link-up :posix [#^ link-name name]
  "The link NAME (any kind, made by whatever made it) is up.  Unapplying
brings it down: refused for the interface the deploying SSH connection
comes in by."
  (:desc f"{name} is up")
  (:simulates True)
  (:apply (_up name False))
  (:unapply (_up name True)))

(export :objects [exists has-port has-address veth-exists link-up link ip-json not-here link-name
                  interface-address])
