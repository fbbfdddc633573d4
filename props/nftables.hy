"The firewall, with nftables: the whole ruleset, from a file of the site.

  (nftables.has-ruleset-from-site \"firewall/web.nft\")

The ruleset is checked on the target with `nft -c -f` before anything is
changed, loaded with `nft -f` — one transaction: the rules are replaced all
at once or not at all — and only then written to /etc/nftables.conf, which
nftables.service loads at boot (enable it with `systemd.enabled`).  A
ruleset that does not start by flushing the old one gets `flush ruleset`
first, so that what is loaded is what the file says, whatever was there.

A ruleset that would cut the deploying SSH connection is refused, unless
:force true.  That connection is the one whose SSH_CONNECTION the target's
commands inherit (from the session the chain's last `:ssh` hop opened, or an
operator's own session when consfig runs on the target): before the ruleset
is loaded, it is loaded instead into a scratch pair of network namespaces
whose addresses are those of the connection, where a new TCP connection
from the controller's address to the SSH port is tried; the ruleset is
refused unless that connection gets through its input hook.  In a chroot,
the ruleset is checked and written, never loaded (it would be the firewall
of the machine the chroot is on)."

(eval-when-compile (require consfig.model.property [defprop]))
(import consfig.model.watchspec [watch-path watch-poll])
(import re
        consfig.apply.actions [NO-CHANGE Script run output]
        consfig.model.context [connection]
        consfig.data.items [get-data-string on-target? provide-data require-data]
        consfig.apply.engine [Drift WOULD-CHANGE checking? inform]
        consfig.errors [ConsfigError FailedChange]
        consfig.apply.noservices [no-services-reason]
        consfig.props.file [read-text update-file]
        consfig.props.reboot [CHROOT-TEST]
        consfig.site.files [site-path]
        consfig.types *)

(setv CONF "/etc/nftables.conf"
      ;; What nftables.service loads is /etc/nftables.conf; another ruleset
      ;; file (`include`d from it, or loaded by a unit of the site's) is
      ;; named *.nft, or nftables*.conf.  Never a file of anything else: the
      ;; ruleset replaces it, mode 0755.
      nft-conf (predicate "nft-conf"
                          "an nftables file: an absolute path whose file name ends in .nft, or is nftables….conf (/etc/nftables.conf)"
                          (fn [v] (and (.accepts abs-path v)
                                       (re.search r"/([^/]+\.nft|nftables[^/]*\.conf)$" v)))))

(setv _TABLE (re.compile r"^\s*(?:add\s+)?table\s+(?:(ip|ip6|inet|arp|bridge|netdev)\s+)?([A-Za-z_][\w.-]*)"
                         re.M))

(defn ruleset-text [ruleset]
  "RULESET as /etc/nftables.conf holds it: `flush ruleset` first unless it
flushes it itself before it defines anything, and a final newline."
  (setv text (if (.endswith ruleset "\n") ruleset (+ ruleset "\n"))
        first (next (gfor l (.splitlines text)
                          :if (and (.strip l) (not (.startswith (.strip l) "#")))
                          (.strip l))
                    ""))
  (cond (= (.split first) ["flush" "ruleset"]) text
        (.startswith text "#!") (let [#(shebang _ rest) (.partition text "\n")]
                                  (+ shebang "\nflush ruleset\n" rest))
        True (+ "#!/usr/sbin/nft -f\nflush ruleset\n" text)))

(defn declared-tables [text]
  "The tables the ruleset TEXT defines, as `nft list tables` names them:
`table inet filter`."
  (sfor [family name] (.findall _TABLE text) f"table {(or family "ip")} {name}"))

(defn _chroot []
  (or (no-services-reason (connection))
      (and (. (run (Script CHROOT-TEST) :check False :timeout 30) ok?) "in a chroot")))

(defn _live-tables []
  (setv r (run "nft" "list" "tables" :check False :timeout 60))
  (when r.ok? (set (lfor l (.splitlines r.stdout) :if (.strip l) (.strip l)))))

(defn _holds [text conf chroot]
  ;; The file says it, and (on a running system) its tables are loaded:
  ;; tables of other programs' (fail2ban's, say) are not ours to judge.
  (setv live (when (not chroot) (_live-tables))
        missing (cond chroot #{}
                      (is live None) (declared-tables text)
                      True (- (declared-tables text) live)))
  (cond (!= (read-text conf) text) (Drift f"{conf} would change")
        missing (Drift (+ f"{conf} holds the ruleset, but it is not loaded: there is no "
                          (.join ", " (sorted missing))))
        True True))

;; Where the deploying SSH connection comes from, as the target sees it: the
;; SSH_CONNECTION of this shell or of the nearest of its ancestors that has
;; one (sudo and su do not pass it on, but their parent has it).
(setv _SSH-CONNECTION "
p=$$
while [ -n \"$p\" ] && [ \"$p\" -gt 1 ]; do
  c=$(tr '\\000' '\\n' < /proc/$p/environ 2>/dev/null | sed -n 's/^SSH_CONNECTION=//p' | head -n 1)
  if [ -n \"$c\" ]; then printf '%s\\n' \"$c\"; exit 0; fi
  p=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -d ' ' -f 2)
done")

(setv _ADDRESS (re.compile r"[0-9A-Fa-f.:]+"))

(defn ssh-connection []
  "The deploying SSH connection as the target sees it, `#(client-address
server-address server-port)`, or None when the target's commands do not run
under an SSH session."
  (setv text (.strip (output (Script _SSH-CONNECTION) :timeout 30)))
  (when (not text) (return None))
  (setv parts (.split text))
  (when (not (and (= (len parts) 4) (all (gfor a [(get parts 0) (get parts 2)] (.fullmatch _ADDRESS a)))
                  (.isdigit (get parts 3))))
    (raise (FailedChange (+ f"cannot tell the deploying SSH connection from SSH_CONNECTION={text !r}; "
                            "give :force true to load the ruleset all the same"))))
  #((get parts 0) (get parts 2) (int (get parts 3))))

;; $1 the ruleset; $2 the client's address, $3 the server's, $4 its port; $5
;; the name of the server's interface.  Exit 0: a new connection gets
;; through; 3: it does not; anything else: it could not be told (why, on
;; standard error).  The pair of namespaces goes however this ends.
(setv _PROBE "
case $2 in *:*) v=-6 host=128 ;; *) v=-4 host=32 ;; esac
s=consfig-probe-$$-s c=consfig-probe-$$-c
trap 'ip netns del $s 2>/dev/null; ip netns del $c 2>/dev/null' EXIT
command -v ip >/dev/null 2>&1 || { echo 'there is no ip(8) (iproute2) here' >&2; exit 4; }
ip netns add $s || exit 4
ip -n $s link set lo up || exit 4
if [ \"$5\" = lo ]; then
  ip -n $s addr add \"$3/$host\" dev lo 2>/dev/null
  ip -n $s addr add \"$2/$host\" dev lo 2>/dev/null
  from=$s
else
  ip netns add $c || exit 4
  ip link add \"$5\" netns $s type veth peer name peer0 netns $c || exit 4
  ip -n $c link set lo up && ip -n $s link set \"$5\" up && ip -n $c link set peer0 up || exit 4
  ip -n $s addr add \"$3/$host\" dev \"$5\" nodad || exit 4
  ip -n $c addr add \"$2/$host\" dev peer0 nodad || exit 4
  ip -n $s $v route add \"$2/$host\" dev \"$5\" || exit 4
  ip -n $c $v route add \"$3/$host\" dev peer0 || exit 4
  from=$c
fi
ip netns exec $s nft -f \"$1\" >&2 || exit 4
family=ip; [ $v = -6 ] && family=ip6
printf '%s\\n' 'table inet consfig_probe {' ' chain input {' \\
  '  type filter hook input priority 2147483647;' \\
  \"  $family saddr $2 tcp dport $4 counter\" ' }' '}' | ip netns exec $s nft -f - >&2 || exit 4
ip netns exec $from timeout 2 bash -c 'exec 3<>\"/dev/tcp/$0/$1\"' \"$3\" \"$4\" 2>/dev/null
ip netns exec $s nft list table inet consfig_probe | grep -q 'packets [1-9]' || exit 3")

(defn interface-of [address]
  "The name of the interface that holds ADDRESS on the target (\"eth0\" when
none does, or it cannot be told)."
  (setv r (run "ip" "-o" "addr" "show" "to" address :check False :timeout 30)
        words (when r.ok? (.split r.stdout)))
  (if (and words (>= (len words) 2) (re.fullmatch r"[A-Za-z0-9_.:-]{1,15}" (get words 1)))
      (get words 1)
      "eth0"))

(defn _loopback? [client server]
  (or (= client server) (.startswith client "127.") (= client "::1")))

(defn _check-keeps-connection [path]
  (setv conn (ssh-connection))
  (when (is conn None)
    (inform "no SSH connection to keep (the target's commands run under none)")
    (return))
  (setv #(client server port) conn
        ;; The interface the connection came in by, under its own name in
        ;; the scratch namespace, for rules that match it (`iifname \"eth0\"`).
        device (if (_loopback? client server) "lo" (interface-of server))
        r (run (Script _PROBE path client server port device) :check False :timeout 120))
  (cond (= r.exit-code 0) (inform f"a new SSH connection from {client} to {server} port {port} still gets through")
        (= r.exit-code 3)
        (raise (FailedChange (+ f"this ruleset would cut the deploying SSH connection: a new "
                                f"connection from {client} to port {port} ({server}) does not get "
                                "through it.  Accept it (e.g. `tcp dport " (str port) " accept`), "
                                "or give :force true to load it all the same")))
        True
        (raise (FailedChange (+ "cannot check whether this ruleset keeps the deploying SSH "
                                f"connection ({client} to {server} port {port}): "
                                (or (.strip r.stderr) f"exit {r.exit-code}")
                                "; give :force true to load it all the same")))))

(defn _nft-check [path]
  (setv r (run "nft" "-c" "-f" path :check False :timeout 120))
  (when (= r.exit-code 127)
    (raise (FailedChange "nft is not installed here: add (apt.installed \"nftables\") before")))
  (when (not r.ok?)
    (raise (FailedChange (+ "the ruleset is not valid (nft -c -f):\n"
                            (.strip (.replace (+ r.stderr r.stdout) path "RULESET")))))))

(defn ensure-ruleset [ruleset force [conf CONF]]
  "Make the target's firewall the nftables RULESET (text): checked with
`nft -c`, refused if it would cut the deploying SSH connection (unless
FORCE), loaded atomically, then written to CONF.  In a chroot, checked and
written only.  `:no-change` when it holds already."
  (setv text (ruleset-text ruleset)
        chroot (_chroot)
        held (_holds text conf chroot))
  (when (is held True) (return NO-CHANGE))
  (setv tmp (.strip (output "mktemp" :timeout 30)))
  (try
    (_scratch-file tmp text)
    (_nft-check tmp)
    (when (and (not chroot) (not force))
      (_check-keeps-connection tmp))
    (when (checking?)
      ;; A file that would change says so with its diff.
      (when (= (update-file conf text) NO-CHANGE)
        (inform held.explanation))
      (return WOULD-CHANGE))
    (if chroot
        (inform f"not loaded: this runs {chroot}, whose firewall is the machine's it is on")
        (let [r (run "nft" "-f" tmp :check False :timeout 120)]
          (when (not r.ok?)
            (raise (FailedChange (+ "nft -f refused the ruleset; the firewall is as it was:\n"
                                    (.strip (+ r.stderr r.stdout))))))))
    (update-file conf text :mode 0o755)
    ;; Loaded, if only that.
    :changed
    (finally
      (run "rm" "-f" "--" tmp :check False :timeout 30))))

(defn _scratch-file [path text]
  ;; A scratch file of ours, also in check mode: it changes nothing the
  ;; host is configured with, and nft reads the ruleset from a file.
  (.write-file (connection) path (.encode text "utf-8") :mode 0o600))

(defn _site-ruleset [source]
  (setv path (site-path source "nftables ruleset"))
  (try
    (with [f (open path "rb")] (.decode (.read f) "utf-8"))
    (except [e OSError]
      (raise (ConsfigError f"nftables ruleset {path}: {e.strerror}")))
    (except [UnicodeDecodeError]
      (raise (ConsfigError f"nftables ruleset {path} is not UTF-8 text")))))

;; How often the agent compares the loaded ruleset with the file's: the
;; kernel tells nobody when `nft` changes it.
(setv LIVE-POLL 1)

(defn ruleset-watches [conf]
  "What the agent watches for a ruleset kept in CONF: the file, and the
loaded ruleset, by a poll."
  [(watch-path conf) (watch-poll LIVE-POLL)])

(defprop has-ruleset-from-site :posix [#^ path source * #^ boolean [force False]
                                       #^ nft-conf [conf CONF]]
  "The firewall is the nftables ruleset in SOURCE, a file of the site
(relative to the directory of the consfig that defines the host): checked
with `nft -c -f`, loaded atomically with `nft -f`, and written to CONF
(/etc/nftables.conf, which nftables.service loads at boot).  A ruleset that
would cut the deploying SSH connection is refused, unless FORCE.  It holds
when CONF has that ruleset and the tables it defines are loaded.  See
`consfig.props.nftables`."
  (:desc f"Firewall has the nftables ruleset {source}")
  (:watch (ruleset-watches conf))
  (:simulates True)
  (:hostattrs
    (if (on-target?)
        (require-data "--nftables" conf)
        (provide-data "--nftables" conf (_site-ruleset source))))
  (:apply (ensure-ruleset (get-data-string "--nftables" conf) force conf)))

(defprop has-ruleset :posix [#^ text ruleset * #^ boolean [force False] #^ nft-conf [conf CONF]]
  "The firewall is the nftables RULESET, given inline, as
`has-ruleset-from-site` makes it from a file."
  (:desc "Firewall has an nftables ruleset")
  (:watch (ruleset-watches conf))
  (:simulates True)
  (:apply (ensure-ruleset ruleset force conf)))

(export :objects [has-ruleset-from-site has-ruleset ruleset-text declared-tables ssh-connection
                  interface-of ensure-ruleset CONF])
