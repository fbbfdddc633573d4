"Time from the network with systemd-timesyncd, the small SNTP client of
systemd."

(eval-when-compile (require consfig.model.propspec [defpropspec]))
(import consfig.apply.combinators [eseqprops on-change]
        consfig.props [apt systemd]
        consfig.props.hosts [ip-address]
        consfig.types *)

(setv ntp-server (named "ntp-server" (one-of hostname ip-address) "a server's name or IP address"))

(defpropspec uses-servers :posix [#^ ntp-server #* servers
                                  #^ (list-of ntp-server) [fallback []]]
  "systemd-timesyncd is installed and takes the time from SERVERS (names or
addresses), then from FALLBACK when none answers (by default, the Debian
pool as packaged), through the drop-in
/etc/systemd/timesyncd.conf.d/consfig.conf; it restarts when that changes,
where a systemd runs.  Unapplying removes the drop-in.

  (timesyncd.uses-servers \"ntp1.example.com\" \"ntp2.example.com\")"
  (:desc f"timesyncd uses {(.join " " servers)}")
  (:invariant servers "needs at least one server")
  (eseqprops (apt.installed "systemd-timesyncd")
             (on-change (systemd.configured "timesyncd" "Time" "NTP" (.join " " servers)
                                            #* (if fallback ["FallbackNTP" (.join " " fallback)] []))
                        (systemd.restarted "systemd-timesyncd"))))

(export :objects [uses-servers])
