"Postfix: main.cf settings, aliases, and relaying through a smarthost.

  (use-props consfig.props [postfix])
  (postfix.installed)
  (postfix.satellite \"[smtp.example.com]:587\")
  (postfix.has-alias \"root\" \"admin@example.com\")
  (postfix.relay-password \"[smtp.example.com]:587\" \"alice\")

main.cf is changed with `postconf -e` — each setting one argument, never
through a shell — and every change is checked with `postfix check`: when it
objects, main.cf is put back as it was and the property fails with what it
said.  A running Postfix is reloaded after a change (not where services are
not started, such as a chroot).

A relay's password comes from prerequisite data, a secret: it goes into
/etc/postfix/sasl_passwd (mode 0600, never shown in a diff) by a file
write, and `postmap` makes the table from that file, so it never reaches a
command line, a log or the output."

(eval-when-compile
  (require consfig.model.property [defprop]
           consfig.model.propspec [defproplist]))
(import re
        consfig.apply.actions [NO-CHANGE run]
        consfig.apply.engine [WOULD-CHANGE checking? inform]
        consfig.data.items [get-data-string require-data]
        consfig.errors [FailedChange]
        consfig.model.host [get-hostname]
        consfig.model.watchspec [watch-path]
        consfig.props.apt :as apt
        consfig.props.debconf :as debconf
        consfig.props.file [map-file-lines read-text update-file]
        consfig.props.service [no-services?]
        consfig.types *)

(setv MAIN-CF "/etc/postfix/main.cf"
      ALIASES "/etc/aliases"
      SASL-PASSWD "/etc/postfix/sasl_passwd"
      SENDER-RELAY "/etc/postfix/sender_relay")

(setv parameter (matching "postfix-parameter" "a main.cf parameter name (lower-case letters, digits and _)"
                          r"[a-z][a-z0-9_]{0,99}")
      value (matching "postfix-value" "a main.cf value on one line (may be empty; no leading or trailing whitespace)"
                      r"(?:[^\s\x00](?:[^\n\r\x00]*[^\s\x00])?)?")
      alias-name (matching "alias-name" "an alias name (letters, digits, _ . + and -, not starting with - or .)"
                           r"[A-Za-z0-9_+][A-Za-z0-9_.+-]{0,63}")
      alias-target (matching "alias-target"
                             "an alias target: an address, a local user, or a |command or /file, on one line without commas"
                             r"[^\s,\x00-][^\n\r,\x00]*[^\s,\x00]|[^\s,\x00-]")
      relay (matching "relay" "a relay as main.cf writes one: [host]:port, host:port or host"
                      r"\[[A-Za-z0-9.:-]+\](?::[0-9]{1,5})?|[A-Za-z0-9][A-Za-z0-9.-]*(?::[0-9]{1,5})?")
      sender (matching "sender" "a sender address (user@domain) or @domain"
                       r"[A-Za-z0-9_.+=-]*@[A-Za-z0-9][A-Za-z0-9.-]*")
      address (matching "address" "a mail address (user@domain) or @domain"
                        r"[A-Za-z0-9_.+=-]*@[A-Za-z0-9][A-Za-z0-9.-]*")
      destination (matching "destination" "an address or local user, one word without commas"
                            r"[A-Za-z0-9_.+=-]+(@[A-Za-z0-9][A-Za-z0-9.-]*)?")
      mail-domain (matching "mail-domain" "a domain (example.org), or .example.org for its subdomains"
                            r"\.?[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*")
      nexthop (matching "nexthop" "a transport and next hop as transport(5) writes them: smtp:[host]:25, relay:host, error:text without spaces"
                        r"[a-z][a-z0-9-]*:[^\s\x00]*")
      sasl-user (matching "sasl-user" "a user name for the relay (one word: no whitespace or :)"
                          r"[^\s:\x00]+"))

(defproplist installed :posix []
  "Postfix is installed, its debconf question answered \"Local only\": a
main.cf that delivers here and listens on loopback alone, for the other
properties to build on."
  (:desc "Postfix installed")
  (debconf.preseeded "postfix" "postfix/main_mailer_type" "select" "Local only")
  (apt.installed "postfix"))

(defn _postconf [name]
  (setv r (run "postconf" "-h" "--" name :check False :timeout 60))
  (when (= r.exit-code 127)
    (raise (FailedChange "postconf is not there: install Postfix first (postfix.installed)")))
  (when (not r.ok?)
    (raise (FailedChange (+ f"postconf -h {name} failed: " (.strip (+ r.stderr r.stdout))))))
  (.rstrip r.stdout "\n"))

(defn _pairs [pairs]
  ;; Alternating names and values, or a dict, as a dict.
  (if (and (= (len pairs) 1) (isinstance (get pairs 0) dict))
      (dict (get pairs 0))
      (dict (zip (cut pairs 0 None 2) (cut pairs 1 None 2)))))

(defn _pairs-problem [pairs]
  (if (and (= (len pairs) 1) (isinstance (get pairs 0) dict))
      (for [[k v] (.items (get pairs 0))]
        (when (not (.accepts parameter k)) (return (+ "each name " (.explain parameter k))))
        (when (not (.accepts value v)) (return (+ "each value " (.explain value v)))))
      (cond (or (not pairs) (% (len pairs) 2)) "takes names and values in pairs"
            True (for [[k v] (zip (cut pairs 0 None 2) (cut pairs 1 None 2))]
                   (when (not (.accepts parameter k)) (return (+ "each name " (.explain parameter k))))
                   (when (not (.accepts value v)) (return (+ "each value " (.explain value v))))))))

(defn reload-if-running []
  "Reload a running Postfix (nothing where services are not started, or it
is not running)."
  (when (and (not (no-services?))
             (. (run "postfix" "status" :check False :timeout 60) ok?))
    (run "postfix" "reload" :timeout 120)))

(defn checked-change [thunk]
  "Run THUNK, which changes Postfix's configuration, then `postfix check`:
when that fails, main.cf is put back as it was and the change fails with
what it said; else a running Postfix is reloaded."
  (setv old (read-text MAIN-CF))
  (thunk)
  (setv r (run "postfix" "check" :check False :timeout 120))
  (when (not r.ok?)
    (when (is-not old None) (update-file MAIN-CF old))
    (raise (FailedChange (+ "postfix check refused the change, and main.cf is as it was:\n"
                            (.strip (+ r.stderr r.stdout))))))
  (reload-if-running))

(defn _has-settings [wanted]
  (setv changes (dfor [k v] (.items wanted) :setv have (_postconf k) :if (!= have v) k #(have v)))
  (cond (not changes) NO-CHANGE
        (checking?) (do (for [[k [old new]] (.items changes)]
                          (inform f"{MAIN-CF}: {k} = {old} → {new}"))
                        WOULD-CHANGE)
        True (do (checked-change (fn [] (run "postconf" "-e" "--"
                                             #* (gfor [k [_ v]] (.items changes) f"{k}={v}")
                                             :timeout 60)))
                 None)))

(defn _lacks-settings [names]
  (setv text (or (read-text MAIN-CF) "")
        present (lfor n names :if (re.search (+ "^" n r"\s*=") text re.M) n))
  (cond (not present) NO-CHANGE
        (checking?) (do (inform f"{MAIN-CF}: {(.join ", " present)} would go") WOULD-CHANGE)
        True (do (checked-change (fn [] (run "postconf" "-X" "--" #* present :timeout 60)))
                 None)))

(defprop has-settings :posix [#^ (one-of value (dict-of parameter value)) #* pairs]
  "main.cf has each setting of PAIRS (alternating names and values, or a
dict): `(postfix.has-settings \"inet_interfaces\" \"loopback-only\")`.  Set
with `postconf -e`, checked with `postfix check` (see
`consfig.props.postfix`).  Held when `postconf -h` gives each value.
Unapplying removes the settings from main.cf (`postconf -X`), back to
Postfix's defaults."
  (:invariant (not (_pairs-problem pairs)) (_pairs-problem pairs))
  (:desc (+ "Postfix " (.join ", " (gfor [k v] (.items (_pairs pairs)) f"{k} = {v}"))))
  (:watch [(watch-path MAIN-CF)])
  (:simulates True)
  (:apply (_has-settings (_pairs pairs)))
  (:unapply (_lacks-settings (list (_pairs pairs)))))

(defproplist satellite :posix [#^ relay relayhost]
  "A satellite: mail is sent on to RELAYHOST (`[smtp.example.com]:587`), and
none is received from the network or delivered here (local mail too goes
to the relay, as Debian's \"Satellite system\" does)."
  (:desc f"Postfix satellite of {relayhost}")
  (has-settings {"relayhost" relayhost
                 "inet_interfaces" "loopback-only"
                 "mydestination" ""
                 "local_transport" "error:local delivery is disabled"
                 "myhostname" (or (get-hostname) "localhost")}))

(defn _alias-line [name targets]
  (+ name ": " (.join ", " targets)))

(defn _alias-key [line]
  (setv m (re.match r"\s*([^\s:#]+)\s*:" line))
  (when m (.lower (.group m 1))))

(defn _newaliases []
  (when (not (checking?))
    (run "newaliases" :timeout 120)))

(defn _set-alias [name targets]
  (setv line (_alias-line name targets)
        key (.lower name))
  (defn edit [lines]
    (setv out [] done False)
    (for [l lines]
      (if (= (_alias-key l) key)
          (when (not done) (.append out line) (setv done True))
          (.append out l)))
    (when (not done) (.append out line))
    out)
  (setv r (map-file-lines ALIASES edit :create True))
  (when (!= r NO-CHANGE) (_newaliases))
  r)

(defn _unset-alias [name]
  (setv key (.lower name)
        r (map-file-lines ALIASES (fn [lines] (lfor l lines :if (!= (_alias-key l) key) l))))
  (when (!= r NO-CHANGE) (_newaliases))
  r)

(defprop has-alias :posix [#^ alias-name name #^ alias-target #* targets]
  "/etc/aliases sends mail for NAME to TARGETS (the line `NAME: T1, T2`,
replacing any other line for NAME), and `newaliases` has rebuilt the
table after a change.  Unapplying removes NAME's line."
  (:invariant targets "needs at least one target")
  (:desc f"Mail for {name} goes to {(.join ", " targets)}")
  (:watch [(watch-path ALIASES)])
  (:simulates True)
  (:apply (_set-alias name targets))
  (:unapply (_unset-alias name)))

(defn _postmap [path]
  (when (not (checking?))
    (run "postmap" "--" (+ "hash:" path) :timeout 120)))

(defn _map-line [path key line * [secret False] [mode None] [remove False]]
  ;; PATH, a lookup table, has LINE as KEY's entry (or, REMOVE, none);
  ;; postmap after a change.
  (setv old (or (read-text path) "")
        kept (lfor l (.splitlines old) :if (!= (get (+ (.split l) [""]) 0) key) l)
        new (+ (.join "\n" (if remove kept [#* kept line])) (if (or kept (not remove)) "\n" ""))
        r (if (and remove (= new old))
              NO-CHANGE
              (update-file path new :secret secret :mode mode)))
  (when (!= r NO-CHANGE) (_postmap path))
  r)

(defn password-iden1 []
  "The first identifier of the current host's relay passwords:
`--postfix-relay--HOSTNAME` (the second is the relay)."
  (+ "--postfix-relay--" (get-hostname)))

(defn _relay-item [relay iden1 iden2]
  #((or iden1 (password-iden1)) (or iden2 relay)))

(defn _relay-password [relay iden1 iden2]
  (setv #(i1 i2) (_relay-item relay iden1 iden2)
        p (.reveal (get-data-string i1 i2)))
  (when (.endswith p "\n") (setv p (cut p 0 -1)))
  (when (or (not p) (re.search "[\n\r\x00]" p))
    (raise (FailedChange (+ f"the data item ({i1} {i2}) is not a password: "
                            "it must be one line, not empty (its content is not shown)"))))
  p)

(defn _relay-password-set [relay user iden1 iden2]
  (setv line f"{relay} {user}:{(_relay-password relay iden1 iden2)}"
        table (_map-line SASL-PASSWD relay line :secret True :mode 0o600)
        settings (_has-settings {"smtp_sasl_auth_enable" "yes"
                                 "smtp_sasl_password_maps" f"hash:{SASL-PASSWD}"
                                 "smtp_sasl_security_options" "noanonymous"
                                 "smtp_sender_dependent_authentication" "yes"}))
  (cond (= table settings NO-CHANGE) NO-CHANGE
        (checking?) WOULD-CHANGE
        True None))

(defprop relay-password :posix [#^ relay relay #^ sasl-user user
                                * #^ (optional non-empty-line) [iden1 None]
                                #^ (optional non-empty-line) [iden2 None]]
  "Postfix logs in to RELAY as USER with the password held as prerequisite
data, a secret: the item (`--postfix-relay--HOSTNAME` RELAY), or (IDEN1
IDEN2).  Its line goes in /etc/postfix/sasl_passwd (mode 0600, no diff),
made a table with postmap, and main.cf turns SASL on for relays
(smtp_sasl_password_maps, per sender too).  The password never reaches a
command line.  Unapplying removes RELAY's line."
  (:desc f"Postfix logs in to {relay} as {user}")
  (:hostattrs (require-data #* (_relay-item relay iden1 iden2) :secret True))
  (:watch [(watch-path SASL-PASSWD)])
  (:simulates True)
  (:apply (_relay-password-set relay user iden1 iden2))
  (:unapply (_map-line SASL-PASSWD relay "" :secret True :remove True)))

(defn _table-entry [path parameter key value remove]
  ;; KEY's line "KEY VALUE" in the lookup table PATH (or, REMOVE, none),
  ;; made a table with postmap, and main.cf's PARAMETER naming it.
  (setv table (_map-line path key f"{key} {value}" :mode 0o644 :remove remove))
  (when remove (return table))
  (setv settings (_has-settings {parameter f"hash:{path}"}))
  (cond (= table settings NO-CHANGE) NO-CHANGE
        (checking?) WOULD-CHANGE
        True None))

(defn _sender-relay [from-sender relay remove]
  (_table-entry SENDER-RELAY "sender_dependent_relayhost_maps" from-sender relay remove))

(defprop sender-relay :posix [#^ sender from-sender #^ relay relay]
  "Mail from FROM-SENDER (an address, or @domain for a whole domain) is
relayed through RELAY: its line in /etc/postfix/sender_relay, made a table
with postmap, which main.cf's sender_dependent_relayhost_maps names.  With
`relay-password` for RELAY, each sender's relay gets its own login.
Unapplying removes the line."
  (:desc f"Postfix relays mail from {from-sender} through {relay}")
  (:watch [(watch-path SENDER-RELAY)])
  (:simulates True)
  (:apply (_sender-relay from-sender relay False))
  (:unapply (_sender-relay from-sender relay True)))

(setv VIRTUAL "/etc/postfix/virtual"
      TRANSPORT "/etc/postfix/transport"
      SENDER-CANONICAL "/etc/postfix/sender_canonical")

(defprop virtual-alias :posix [#^ address addr #^ destination #* destinations]
  "Mail for ADDR (or a whole @domain) goes to DESTINATIONS: its line in
/etc/postfix/virtual, made a table with postmap, which main.cf's
virtual_alias_maps names.  A domain whose mail is all aliased goes in
virtual_alias_domains (`has-settings`).  Unapplying removes the line."
  (:invariant destinations "needs at least one destination")
  (:desc f"Postfix virtual alias {addr} → {(.join ", " destinations)}")
  (:watch [(watch-path VIRTUAL)])
  (:simulates True)
  (:apply (_table-entry VIRTUAL "virtual_alias_maps" addr (.join ", " destinations) False))
  (:unapply (_table-entry VIRTUAL "virtual_alias_maps" addr "" True)))

(defprop transport :posix [#^ mail-domain domain #^ nexthop via]
  "Mail for DOMAIN (.example.org: its subdomains) is delivered by VIA
(`smtp:[mx.example.org]:25`, `relay:host`, `error:no_mail_here`): its line
in /etc/postfix/transport, made a table with postmap, which main.cf's
transport_maps names.  Unapplying removes the line."
  (:desc f"Postfix sends mail for {domain} by {via}")
  (:watch [(watch-path TRANSPORT)])
  (:simulates True)
  (:apply (_table-entry TRANSPORT "transport_maps" domain via False))
  (:unapply (_table-entry TRANSPORT "transport_maps" domain "" True)))

(defprop sender-canonical :posix [#^ address from-address #^ address to-address]
  "Mail sent from FROM-ADDRESS (or @domain) leaves as from TO-ADDRESS: its
line in /etc/postfix/sender_canonical, made a table with postmap, which
main.cf's sender_canonical_maps names.  Unapplying removes the line."
  (:desc f"Postfix rewrites sender {from-address} to {to-address}")
  (:watch [(watch-path SENDER-CANONICAL)])
  (:simulates True)
  (:apply (_table-entry SENDER-CANONICAL "sender_canonical_maps" from-address to-address False))
  (:unapply (_table-entry SENDER-CANONICAL "sender_canonical_maps" from-address "" True)))

(export :objects [installed has-settings satellite has-alias relay-password sender-relay
                  virtual-alias transport sender-canonical
                  checked-change reload-if-running password-iden1 MAIN-CF ALIASES SASL-PASSWD
                  SENDER-RELAY])
