"Bounded waits: for a port to open or close, for a fact to hold.

  (use-props consfig.props [wait fact systemd])
  (systemd.restarted \"postgresql\")
  (wait.port-open \"127.0.0.1\" 5432 :timeout 30)
  (wait.until (fact.file-exists \"/run/app/ready\") :timeout 120)

A wait holds already when what it waits for holds: then it is `ok` at once
(and in check mode that is all it says).  Otherwise it looks again every
INTERVAL seconds until it holds — still `ok`: waiting changes nothing on the
host — or until TIMEOUT seconds have gone by, when it fails, saying what it
waited for and for how long.  A wait orders a deployment and repairs
nothing, so it watches nothing: the converging agent has nothing to re-apply
when it stops holding (its `:check` says whether it holds)."

(eval-when-compile (require consfig.model.property [defprop]))
(import time
        consfig.apply.actions [NO-CHANGE Script run]
        consfig.apply.engine [inform]
        consfig.errors [FailedChange]
        consfig.model.fact [fact-application fact-holds? fact-hostattrs]
        consfig.model.property [propapp-desc]
        consfig.props.hosts [ip-address]
        consfig.types *)

(setv port (named "port" (int-range 1 65535) "a TCP port (1 to 65535)")
      address (named "address" (one-of ip-address hostname)
                     "a hostname or an IP address (192.0.2.1, 2001:db8::1)"))

;; $1 the address, $2 the port, $3 the timeout in seconds, $4 "open" or
;; "closed".  Exit 0: the port got to be so; 3: not within the timeout.  One
;; attempt lasts two seconds at most (a dropped SYN), one a second at least.
(setv _PORT-WAIT "
command -v bash >/dev/null 2>&1 || { echo 'there is no bash here (its /dev/tcp opens the connection)' >&2; exit 4; }
end=$(( $(date +%s) + $3 ))
while :; do
  if timeout 2 bash -c 'exec 3<>\"/dev/tcp/$0/$1\"' \"$1\" \"$2\" 2>/dev/null; then
    [ \"$4\" = open ] && exit 0
  else
    [ \"$4\" = closed ] && exit 0
  fi
  [ \"$(date +%s)\" -ge \"$end\" ] && exit 3
  sleep 1
done")

(defn port-state? [address port state [timeout 0]]
  "Whether a TCP connection from the target to ADDRESS:PORT is accepted
(STATE \"open\") or refused (\"closed\"), within TIMEOUT seconds (0: just
once)."
  (setv r (run (Script _PORT-WAIT address (str port) (str (int timeout)) state)
               :check False :timeout (+ timeout 30)))
  (cond (= r.exit-code 0) True
        (= r.exit-code 3) False
        True (raise (FailedChange (+ f"cannot try a connection to {address} port {port}: "
                                     (or (.strip r.stderr) f"exit {r.exit-code}"))))))

(defn _port-wait [address port state timeout]
  (when (not (port-state? address port state timeout))
    (raise (FailedChange (+ f"{address} port {port} was not {state} after {timeout} s"
                            (if (= state "open")
                                ": is the service there started, and listening on that address?"
                                ": something still listens there")))))
  (inform f"{address} port {port} is {state}")
  NO-CHANGE)

(defprop port-open :posix [#^ address address #^ port port * #^ seconds [timeout 60]]
  "A TCP connection from the target to ADDRESS port PORT is accepted (a
server listens there): waited for, up to TIMEOUT seconds, trying every
second.  Needs bash (its /dev/tcp) and coreutils' timeout on the target, as
Debian has.  A wait: see `consfig.props.wait`."
  (:desc f"{address} port {port} is open")
  (:check (port-state? address port "open"))
  (:apply (_port-wait address port "open" timeout)))

(defprop port-closed :posix [#^ address address #^ port port * #^ seconds [timeout 60]]
  "A TCP connection from the target to ADDRESS port PORT is refused (nothing
listens there any more): waited for, up to TIMEOUT seconds, as `port-open`
waits.  A wait: see `consfig.props.wait`."
  (:desc f"{address} port {port} is closed")
  (:check (port-state? address port "closed"))
  (:apply (_port-wait address port "closed" timeout)))

(defn _until [fact timeout interval]
  (setv deadline (+ (time.monotonic) timeout))
  (while (not (fact-holds? fact))
    (when (>= (time.monotonic) deadline)
      (raise (FailedChange f"{(propapp-desc fact)}: still not so after {timeout} s")))
    ;; A wait on the target (or from the controller over the chain), each
    ;; look a read of the fact; never past the deadline.
    (time.sleep (max 0 (min interval (- deadline (time.monotonic))))))
  (inform f"now: {(propapp-desc fact)}")
  NO-CHANGE)

(defprop until :posix [#^ fact-application fact * #^ seconds [timeout 60] #^ seconds [interval 1]]
  "FACT (a fact of `consfig.props.fact`, or of the site's `deffact`) holds:
waited for, looking every INTERVAL seconds, up to TIMEOUT seconds.  The
fact reads the target over the chain, so this works over any chain.  A
wait: see `consfig.props.wait`."
  (:invariant (<= interval timeout) f"the interval ({interval} s) is longer than the timeout ({timeout} s)")
  (:desc (+ "Until: " (propapp-desc fact)))
  ;; FACT is read, never applied.
  (:children [])
  (:opaque-type True)
  (:hostattrs (fact-hostattrs fact))
  (:check (fact-holds? fact))
  (:apply (_until fact timeout interval)))

(export :objects [port-open port-closed until port-state? port address])
