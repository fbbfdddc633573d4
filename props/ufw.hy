"The firewall, for those who use ufw: its rules, its default policies, and
whether it is on.

  (use-props consfig.props [apt ufw])
  (apt.installed \"ufw\")
  (ufw.has-rule :allow :port 22 :proto :tcp)
  (ufw.has-rule :allow :port 443 :proto :tcp :from \"192.0.2.0/24\")
  (ufw.default-policy :incoming :deny)
  (ufw.enabled)

Each property runs `ufw` itself and reads back what ufw keeps: the rules as
the `### tuple ###` lines of /etc/ufw/user.rules and user6.rules, the
policies in /etc/default/ufw, whether it is on from `ufw status`.

As with `nftables`, a change that would cut the deploying SSH connection is
refused, unless :force true: enabling ufw, a default incoming policy of
deny or reject, a deny, reject or limit rule, or an allow rule removed.
Before it is made, the change is played against the rules as ufw would
(the first user rule that matches decides; none: the default incoming
policy; loopback and connections already established are always let in by
ufw's before.rules), for a new TCP connection from the controller's address
to the SSH port, as SSH_CONNECTION gives them (see `consfig.props.nftables`).
A user rule this module cannot read makes the answer unknown, which refuses
too.  In check mode each change is played against the host as it is: a rule
that the same deployment would add first is not there yet.  ufw changes the running kernel's firewall at once, so it is refused in
a chroot (write the rules with `nftables.has-ruleset` there)."

(eval-when-compile (require consfig.model.property [defprop]))
(import ipaddress
        re
        consfig.apply.actions [NO-CHANGE Script run]
        consfig.apply.engine [WOULD-CHANGE checking? inform]
        consfig.apply.noservices [no-services-reason]
        consfig.errors [FailedChange]
        consfig.model.context [connection]
        consfig.model.watchspec [watch-path]
        consfig.props.file [read-text]
        consfig.props.nftables [interface-of ssh-connection]
        consfig.props.reboot [CHROOT-TEST]
        consfig.types *)

(setv RULES ["/etc/ufw/user.rules" "/etc/ufw/user6.rules"]
      DEFAULTS "/etc/default/ufw"
      CONF "/etc/ufw/ufw.conf")

(setv action (enum "allow" "deny" "reject" "limit")
      direction (enum "in" "out")
      protocol (enum "tcp" "udp" "any")
      policy (enum "allow" "deny" "reject")
      chain (enum "incoming" "outgoing" "routed")
      log-level (enum "off" "low" "medium" "high" "full")
      port (named "port" (int-range 1 65535) "a port (1 to 65535)")
      network (predicate "network" "an address or network, such as 192.0.2.0/24 or 2001:db8::/32, or \"any\""
                         (fn [v] (and (isinstance v str)
                                      (or (= v "any")
                                          (try (ipaddress.ip-network v :strict False) True
                                               (except [ValueError] False))))))
      interface (matching "interface" "an interface name (letters, digits, _ . : and -, at most 15, not starting with -)"
                          r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,14}"))

(setv _POLICY-KEYS {"incoming" "DEFAULT_INPUT_POLICY" "outgoing" "DEFAULT_OUTPUT_POLICY"
                    "routed" "DEFAULT_FORWARD_POLICY"}
      _POLICY-WORDS {"ACCEPT" "allow" "DROP" "deny" "REJECT" "reject"})

(defn _family [net]
  (if (= net "any") None (. (ipaddress.ip-network net :strict False) version)))

(defn rule-tuples [action port proto from_ to direction on]
  "The `### tuple ###` lines (their words after the marker, as lists) ufw
keeps for the rule: one for IPv4 and one for IPv6 unless an address says
which."
  (setv families (or (lfor n [from_ to] :if (_family n) (_family n)) [4 6])
        any-net {4 "0.0.0.0/0" 6 "::/0"})
  (lfor f (sorted (set families))
        [action.name proto.name (if port (str port) "any")
         (if (= to "any") (get any-net f) (str (ipaddress.ip-network to :strict False)))
         "any"
         (if (= from_ "any") (get any-net f) (str (ipaddress.ip-network from_ :strict False)))
         (+ direction.name (if on f"_{on}" ""))]))

(defn read-tuples []
  "The user rules ufw keeps, in order, as lists of words (IPv4's, then IPv6's)."
  (setv out [])
  (for [path RULES]
    (for [line (.splitlines (or (read-text path) ""))]
      (when (.startswith line "### tuple ### ")
        (.append out (lfor w (.split (cut line 14 None)) :if (not (.startswith w "comment=")) w)))))
  out)

(defn _ufw [#* args]
  (setv r (run "ufw" #* args :check False :timeout 120))
  (when (= r.exit-code 127)
    (raise (FailedChange "ufw is not installed here: add (apt.installed \"ufw\") before")))
  (when (not r.ok?)
    (raise (FailedChange (+ f"ufw {(.join " " args)} failed: " (.strip (+ r.stderr r.stdout))))))
  r.stdout)

(defn _refuse-in-chroot []
  (setv why (or (no-services-reason (connection))
                (and (. (run (Script CHROOT-TEST) :check False :timeout 30) ok?) "in a chroot")))
  (when why
    (raise (FailedChange (+ f"ufw changes the running firewall, which {why} is the machine's "
                            "this runs on: not done (write a ruleset with nftables.has-ruleset there)")))))

(defn active? []
  "Whether ufw is on (`ufw status`)."
  (.startswith (.strip (_ufw "status")) "Status: active"))

(defn policies []
  "The default policies in /etc/default/ufw: chain name → allow, deny or reject."
  (setv text (or (read-text DEFAULTS) ""))
  (dfor [name key] (.items _POLICY-KEYS)
        :setv m (re.search (+ "^" key r"=\"?(\w+)\"?") text re.M)
        name (.get _POLICY-WORDS (if m (.group m 1) "") "unknown")))

;; Whether a new connection would get through

(defn _net-holds [net address]
  (setv a (ipaddress.ip-address address)
        n (ipaddress.ip-network net :strict False))
  (and (= a.version n.version) (in a n)))

(defn _port-holds [field port]
  (cond (= field "any") True
        (in ":" field) (let [[lo hi] (.split field ":")] (<= (int lo) port (int hi)))
        (.isdigit field) (= (int field) port)
        True (any (gfor p (.split field ",") (_port-holds p port)))))

(defn _matches [t conn iface]
  ;; Whether the rule tuple T matches a new TCP connection CONN (client,
  ;; server, port) coming in by IFACE: True, False, or None (cannot tell).
  (setv #(client server port) conn)
  (try
    (setv #(act proto dport dst sport src dir #* _) t)
    (except [ValueError] (return None)))
  (setv #(d _ on) (.partition dir "_"))
  (try
    (and (= d "in")
         (in proto #("tcp" "any"))
         (_port-holds dport port)
         (_net-holds dst server)
         (_net-holds src client)
         (or (not on) (= on iface))
         ;; Where the client's port is named, this cannot tell.
         (if (= sport "any") True None))
    (except [ValueError] None)))

(defn admits [conn iface tuples default on]
  "Whether a new TCP connection CONN `#(client server port)` coming in by
IFACE gets through ufw with the user rules TUPLES, the default incoming
policy DEFAULT, ufw ON or not: True, False, or None when it cannot be told."
  (setv #(client _ _) conn)
  (when (or (not on) (. (ipaddress.ip-address client) is-loopback)) (return True))
  (for [t tuples]
    (setv m (_matches t conn iface))
    (cond (is m None) (return None)
          m (return (in (get t 0) #("allow" "limit")))))
  (= default "allow"))

(defn with-rules [have tuples]
  "The user rules HAVE once the rules TUPLES are added, as ufw adds them: a
rule that differs from one it has only by its action replaces it where it
stands (`ufw deny 22` after `ufw allow 22` leaves no allow); any other is
appended."
  (setv out (list have))
  (for [t tuples]
    (setv same (next (gfor [i h] (enumerate out) :if (= (cut h 1 None) (cut t 1 None)) i) None))
    (if (is same None) (.append out t) (setv (get out same) t)))
  out)

(defn _check-keeps-connection [tuples default on what]
  ;; Refuse the state TUPLES/DEFAULT/ON that WHAT would bring about, when it
  ;; would shut out a new connection like the deploying one.
  (setv conn (ssh-connection))
  (when (is conn None)
    (inform "no SSH connection to keep (the target's commands run under none)")
    (return))
  (setv #(client server port) conn
        iface (if (. (ipaddress.ip-address client) is-loopback) "lo" (interface-of server))
        verdict (admits conn iface tuples default on))
  (cond (is verdict True)
        (inform f"a new SSH connection from {client} to {server} port {port} still gets through")
        (is verdict False)
        (raise (FailedChange (+ f"{what} would cut the deploying SSH connection: a new connection "
                                f"from {client} to port {port} ({server}) would not get through.  "
                                f"Allow it first (ufw.has-rule :allow :port {port} :proto :tcp), "
                                "or give :force true")))
        True
        (raise (FailedChange (+ f"cannot tell whether {what} keeps the deploying SSH connection "
                                f"({client} to {server} port {port}): a user rule names the client's "
                                "port, or is not one this module reads; give :force true")))))

(defn _state []
  #((read-tuples) (get (policies) "incoming") (active?)))

;; The properties

(defn _has-rule [tuples args force unapply]
  (_refuse-in-chroot)
  (setv have (read-tuples)
        present (all (gfor t tuples (in t have))))
  (when (if unapply (not (any (gfor t tuples (in t have)))) present)
    (return NO-CHANGE))
  (setv #(_ default on) (_state)
        after (if unapply
                  (lfor t have :if (not-in t tuples) t)
                  (with-rules have tuples))
        risky (if unapply
                  (in (get (get tuples 0) 0) #("allow" "limit"))
                  (in (get (get tuples 0) 0) #("deny" "reject" "limit"))))
  (when (and risky (not force))
    (_check-keeps-connection after default on (+ (if unapply "removing the rule " "the rule ")
                                                 (.join " " (get tuples 0)))))
  (when (checking?) (return WOULD-CHANGE))
  (_ufw #* (if unapply ["delete"] []) #* (get args 0))
  None)

(defn _rule-args [act port proto from_ to dir on]
  ;; ufw's full syntax, each value a word of its own.
  [[act.name dir.name #* (if on ["on" on] []) "from" from_ "to" to
    #* (if port ["port" (str port)] [])
    #* (if (= proto :any) [] ["proto" proto.name])]])

(defprop has-rule :posix [#^ action act * #^ (optional port) [port None] #^ protocol [proto :any]
                          #^ network [from_ "any"] #^ network [to "any"] #^ direction [dir :in]
                          #^ (optional interface) [on None] #^ boolean [force False]]
  "ufw has the rule: ACT (`:allow`, `:deny`, `:reject` or `:limit`)
connections of PROTO (`:tcp`, `:udp`, `:any`) from FROM_ (`:from`, an
address or network, or \"any\") to TO, port PORT (all ports when None), in
the direction DIR (`:in` or `:out`), on the interface ON when given.  Added
with `ufw ACT …` at the end of the user rules, so an earlier rule that
matches the same traffic still wins — but one that differs from it by its
action alone is replaced where it stands, as ufw does.  Held when ufw keeps its tuple (for
IPv4 and IPv6 unless an address names one).  A rule that denies, rejects or
limits, or the removal of one that allows, is refused if it would cut the
deploying SSH connection, unless FORCE.  Unapplying deletes the rule."
  (:invariant (not (and (!= from_ "any") (!= to "any") (!= (_family from_) (_family to))))
              "FROM_ and TO are of different address families")
  (:invariant (or port (!= act :limit)) "a :limit rule needs a :port")
  (:desc (+ f"ufw {act.name} {dir.name}" (if on f" on {on}" "")
            (if (= proto :any) "" f" {proto.name}")
            f" from {from_} to {to}" (if port f" port {port}" "")))
  (:watch (lfor p RULES (watch-path p)))
  (:simulates True)
  (:apply (_has-rule (rule-tuples act port proto from_ to dir on)
                     (_rule-args act port proto from_ to dir on) force False))
  (:unapply (_has-rule (rule-tuples act port proto from_ to dir on)
                       (_rule-args act port proto from_ to dir on) force True)))

(defn _default-policy [chain-name policy force]
  (_refuse-in-chroot)
  (setv now (get (policies) chain-name))
  (when (= now policy) (return NO-CHANGE))
  (when (and (= chain-name "incoming") (!= policy "allow") (not force))
    (setv #(tuples _ on) (_state))
    (_check-keeps-connection tuples policy on f"a default incoming policy of {policy}"))
  (when (checking?)
    (inform f"default {chain-name} policy: {now} → {policy}")
    (return WOULD-CHANGE))
  (_ufw "default" policy chain-name)
  None)

(defprop default-policy :posix [#^ chain chain-name #^ policy pol * #^ boolean [force False]]
  "ufw's default policy for CHAIN-NAME (`:incoming`, `:outgoing`, `:routed`)
is POL (`:allow`, `:deny`, `:reject`): `(ufw.default-policy :incoming
:deny)`.  A default that is not allow for incoming connections is refused
if it would cut the deploying SSH connection, unless FORCE.  It is a
setting: to change it, say another."
  (:desc f"ufw default {chain-name.name} policy is {pol.name}")
  (:watch [(watch-path DEFAULTS)])
  (:simulates True)
  (:apply (_default-policy chain-name.name pol.name force)))

(defn _enabled [force]
  (_refuse-in-chroot)
  (when (active?) (return NO-CHANGE))
  (when (not force)
    (_check-keeps-connection (read-tuples) (get (policies) "incoming") True "enabling ufw"))
  (when (checking?) (return WOULD-CHANGE))
  (_ufw "--force" "enable")
  None)

(defn _disabled []
  (_refuse-in-chroot)
  (when (not (active?)) (return NO-CHANGE))
  (when (checking?) (return WOULD-CHANGE))
  (_ufw "disable")
  None)

(defprop enabled :posix [* #^ boolean [force False]]
  "ufw is on (`ufw --force enable`), now and at boot, with its rules and
policies.  Refused if it would cut the deploying SSH connection, unless
FORCE: give the rule that allows it first.  Unapplying turns it off
(`ufw disable`)."
  (:desc "ufw is enabled")
  (:watch [(watch-path CONF)])
  (:simulates True)
  (:apply (_enabled force))
  (:unapply (_disabled)))

(defprop disabled :posix []
  "ufw is off (`ufw disable`): its rules are kept, and not loaded."
  (:desc "ufw is disabled")
  (:watch [(watch-path CONF)])
  (:simulates True)
  (:apply (_disabled)))

(defn _logging [level]
  (_refuse-in-chroot)
  (setv text (or (read-text CONF) "")
        m (re.search r"^LOGLEVEL=(\w+)" text re.M)
        now (if m (.group m 1) "low"))
  ;; ufw writes LOGLEVEL=off when it is turned off.
  (when (= now level) (return NO-CHANGE))
  (when (checking?)
    (inform f"ufw logging: {now} → {level}")
    (return WOULD-CHANGE))
  (_ufw "logging" level)
  None)

(defprop logging :posix [#^ log-level level]
  "ufw logs at LEVEL (`:off`, `:low`, `:medium`, `:high`, `:full`),
as `ufw logging LEVEL` sets it."
  (:desc f"ufw logging is {level.name}")
  (:watch [(watch-path CONF)])
  (:simulates True)
  (:apply (_logging level.name)))

(export :objects [has-rule default-policy enabled disabled logging rule-tuples read-tuples
                  admits active? policies RULES])
