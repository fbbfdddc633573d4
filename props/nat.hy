"NAT for a host that routes: forwarding on, masquerading and port forwards
with nftables, rule by rule.

  (use-props consfig.props [bridge nat])
  (nat.forwarding)
  (nat.masquerades \"10.0.3.0/24\" \"eth0\")
  (nat.port-forwarded 8080 \"10.0.3.10\" :to-port 80 :on \"eth0\")

The rules live in tables of their own, `ip consfig_nat` and `ip6
consfig_nat`, each rule named by a comment that says what it is, so that
each property adds and removes its own rule (in one `nft -f` transaction)
and leaves every other table alone.  `nftables.has-ruleset` flushes the
whole ruleset: on a host whose firewall is a ruleset, put the NAT rules in
it instead.  They hold on the running kernel, as `consfig.props.bridge`
explains; in a chroot nothing is done."

(eval-when-compile
  (require consfig.model.property [defprop]
           consfig.model.propspec [defproplist]))
(import ipaddress
        json
        consfig.apply.actions [NO-CHANGE run]
        consfig.apply.engine [WOULD-CHANGE checking? inform]
        consfig.errors [FailedChange]
        consfig.props.bridge [link-name not-here]
        consfig.props.sysctl :as sysctl
        consfig.types *)

(setv TABLE "consfig_nat"
      network (predicate "network" "a network such as 10.0.3.0/24 (or an address)"
                         (fn [v] (and (isinstance v str)
                                      (try (ipaddress.ip-network v :strict False) True
                                           (except [ValueError] False)))))
      address (predicate "address" "an address such as 10.0.3.10"
                         (fn [v] (and (isinstance v str)
                                      (try (ipaddress.ip-address v) True (except [ValueError] False)))))
      port (named "port" (int-range 1 65535) "a port (1 to 65535)")
      protocol (enum "tcp" "udp"))

(defproplist forwarding :posix [* #^ boolean [ipv6 False]]
  "The kernel forwards packets between interfaces (IPv4, and IPv6 with
IPV6): set at boot and now, as `sysctl.has-value` sets it."
  (:desc (+ "IP forwarding" (if ipv6 " (IPv4 and IPv6)" "")))
  (sysctl.has-values {"net.ipv4.ip_forward" 1
                      #** (if ipv6 {"net.ipv6.conf.all.forwarding" 1} {})}
                     :file "90-consfig-forwarding.conf"))

(defn _family [net] (if (= (. (ipaddress.ip-network net :strict False) version) 6) "ip6" "ip"))

(defn _rules [family]
  ;; The rules of our table of FAMILY: a dict comment → #(chain handle).
  (setv r (run "nft" "-j" "list" "table" family TABLE :check False :timeout 60))
  (when (= r.exit-code 127)
    (raise (FailedChange "nft is not there: (apt.installed \"nftables\") first")))
  (if (not r.ok?)
      {}
      (dfor item (get (json.loads r.stdout) "nftables")
            :if (and (in "rule" item) (in "comment" (get item "rule")))
            :setv rule (get item "rule")
            (get rule "comment") #((get rule "chain") (get rule "handle")))))

(setv _CHAINS {"postrouting" "type nat hook postrouting priority srcnat;"
               "prerouting" "type nat hook prerouting priority dstnat;"})

(defn _ensure-rule [family chain rule comment remove]
  (setv why (not-here))
  (when why
    (inform f"{comment}: not done {why}, whose kernel is not this system's")
    (return NO-CHANGE))
  (setv have (.get (_rules family) comment))
  (cond (= (is-not have None) (not remove)) NO-CHANGE
        (checking?) (do (inform (+ f"nftables {family} {TABLE}: the rule \"{comment}\" would be "
                                   (if remove "deleted" "added")))
                        WOULD-CHANGE)
        remove (do (run "nft" "delete" "rule" family TABLE (get have 0) "handle" (str (get have 1))
                        :timeout 60)
                   None)
        True (let [script (+ f"table {family} {TABLE} {{\n"
                             f"  chain {chain} {{ {(get _CHAINS chain)} }}\n}}\n"
                             f"add rule {family} {TABLE} {chain} {rule} comment \"{comment}\"\n")
                   r (run "nft" "-f" "-" :input script :check False :timeout 60)]
               (when (not r.ok?)
                 (raise (FailedChange (+ "nft refused the rule; nothing changed:\n"
                                         (.strip (+ r.stderr r.stdout))))))
               None)))

(defn _masquerade [source out remove]
  (setv net (str (ipaddress.ip-network source :strict False))
        family (_family net))
  (_ensure-rule family "postrouting"
                (+ f"{family} saddr {net}" (if out f" oifname \"{out}\"" "") " masquerade")
                (+ f"consfig: masquerade {net}" (if out f" out {out}" ""))
                remove))

(defprop masquerades :posix [#^ network source * #^ (optional link-name) [out None]]
  "Connections from SOURCE (a network) leaving by the interface OUT (by any
when None) take the address of the interface they leave by (masquerade):
a rule in the consfig_nat table (see `consfig.props.nat`).  Forwarding must
be on (`forwarding`).  Unapplying deletes the rule."
  (:desc (+ f"NAT: {source} masqueraded" (if out f" out of {out}" "")))
  (:simulates True)
  (:apply (_masquerade source out False))
  (:unapply (_masquerade source out True)))

(defn _forward [port to to-port proto on remove]
  (setv family (if (= (. (ipaddress.ip-address to) version) 6) "ip6" "ip")
        target (if (= family "ip6") f"[{to}]:{(or to-port port)}" f"{to}:{(or to-port port)}"))
  (_ensure-rule family "prerouting"
                (+ (if on f"iifname \"{on}\" " "") f"{proto} dport {port} dnat to {target}")
                (+ f"consfig: {proto} port {port}" (if on f" in {on}" "") f" to {target}")
                remove))

(defprop port-forwarded :posix [#^ port port #^ address to * #^ (optional port) [to-port None]
                                #^ protocol [proto :tcp] #^ (optional link-name) [on None]]
  "Connections to PORT (of PROTO, `:tcp` or `:udp`), coming in by the
interface ON (any when None), go on to TO, port TO-PORT (PORT when None):
a destination NAT rule in the consfig_nat table.  Unapplying deletes it."
  (:desc f"NAT: {proto.name} port {port}{(if on f" in {on}" "")} forwarded to {to}:{(or to-port port)}")
  (:simulates True)
  (:apply (_forward port to to-port proto.name on False))
  (:unapply (_forward port to to-port proto.name on True)))

(defn _snat [source to out remove]
  (setv net (str (ipaddress.ip-network source :strict False))
        family (_family net))
  (when (!= (. (ipaddress.ip-address to) version) (. (ipaddress.ip-network net :strict False) version))
    (raise (FailedChange f"{source} and {to} are of different address families")))
  (_ensure-rule family "postrouting"
                (+ f"{family} saddr {net}" (if out f" oifname \"{out}\"" "") f" snat to {to}")
                (+ f"consfig: snat {net}" (if out f" out {out}" "") f" to {to}")
                remove))

(defprop snat :posix [#^ network source #^ address to * #^ (optional link-name) [out None]]
  "Connections from SOURCE leaving by the interface OUT (any when None)
take the fixed address TO (source NAT, where `masquerades` takes the
interface's address as it is): a rule in the consfig_nat table.
Unapplying deletes it."
  (:desc (+ f"NAT: {source} leaves as {to}" (if out f" out of {out}" "")))
  (:simulates True)
  (:apply (_snat source to out False))
  (:unapply (_snat source to out True)))

(defn _redirect [port to-port proto on remove]
  (_ensure-rule "ip" "prerouting"
                (+ (if on f"iifname \"{on}\" " "") f"{proto} dport {port} redirect to :{to-port}")
                (+ f"consfig: redirect {proto} port {port}" (if on f" in {on}" "") f" to {to-port}")
                remove))

(defprop redirected :posix [#^ port port #^ port to-port * #^ protocol [proto :tcp]
                            #^ (optional link-name) [on None]]
  "Connections to PORT (IPv4, of PROTO) coming in by ON (any when None) go
to this host's own TO-PORT instead (`redirect`: a service on an unprivileged
port answering on 80, say): a rule in the consfig_nat table.  Unapplying
deletes it."
  (:desc f"NAT: {proto.name} port {port}{(if on f" in {on}" "")} redirected to port {to-port}")
  (:simulates True)
  (:apply (_redirect port to-port proto.name on False))
  (:unapply (_redirect port to-port proto.name on True)))

(export :objects [forwarding masquerades port-forwarded snat redirected TABLE])
