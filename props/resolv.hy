"The resolver's configuration, /etc/resolv.conf, where nothing else
manages it."

(eval-when-compile (require consfig.model.property [defprop]))
(import consfig.model.watchspec [watch-path])
(import consfig.apply.actions [run-ok?]
        consfig.errors [FailedChange]
        consfig.props.file [update-file]
        consfig.props.hosts [ip-address]
        consfig.types *)

(setv RESOLV-CONF "/etc/resolv.conf")

(setv resolver-option (matching "resolver-option"
                                "a resolv.conf(5) option such as rotate, edns0 or timeout:2"
                                r"[a-z][a-z0-9_-]*(:[0-9]+)?"))

(defn resolv-text [nameservers search options]
  "The text of a resolv.conf with NAMESERVERS, SEARCH domains and OPTIONS."
  (+ "# Written by consfig.\n"
     (if search f"search {(.join " " search)}\n" "")
     (.join "" (gfor n nameservers f"nameserver {n}\n"))
     (if options f"options {(.join " " options)}\n" "")))

(defprop configured :posix [#^ ip-address #* nameservers #^ (list-of hostname) [search []]
                            #^ (list-of resolver-option) [options []]]
  "/etc/resolv.conf asks NAMESERVERS (at most three, as the C library
reads no more), trying SEARCH domains for short names, with OPTIONS, and says
nothing else.  Where /etc/resolv.conf is a symlink (systemd-resolved,
resolvconf or NetworkManager manage it), it is a failure: configure that
instead.

  (resolv.configured \"192.0.2.53\" \"192.0.2.54\" :search [\"example.com\"])"
  (:watch [(watch-path RESOLV-CONF)])
  (:simulates True)
  (:invariant (<= 1 (len nameservers) 3) "needs one to three name servers")
  (:desc f"resolv.conf asks {(.join " " nameservers)}")
  (:apply
    (when (run-ok? "test" "-L" RESOLV-CONF)
      (raise (FailedChange (+ f"{RESOLV-CONF} is a symlink: something else (systemd-resolved, "
                              "resolvconf, NetworkManager) manages it; configure that instead"))))
    (update-file RESOLV-CONF (resolv-text nameservers search options) :mode 0o644)))

(export :objects [RESOLV-CONF resolv-text configured])
