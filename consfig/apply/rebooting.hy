"Waiting for a host to come back from the reboot its deployment scheduled
(`reboot.at-end`), on the side that established the chain to it.

The target says it will reboot in a note whose event also carries
\"reboot\": {\"boot-id\" …, \"wait\" seconds} (`reboot-event`).  Whoever
established the chain — `run-prepared` for a deployment from the controller,
`deploy-nested` for one made from a host — watches for that note.  Once the
deployment and its chain are over, when the chain leaves this machine (it
has an `:ssh` hop), it connects again and again over the chain's hops up to
its last `:ssh` one (no sudo, no Python: anyone may read a boot id), every
`PROBE-INTERVAL` seconds, until the host answers with another boot id, or
the wait is over (`await-return`).  A host that does not come back in time
is a failure of the deployment."

(import time
        consfig.transport.chain [with-chain]
        consfig.errors [FailedChange]
        consfig.apply.events [end-event output-event start-event]
        consfig.transport.hop [Script])

(setv BOOT-ID-SCRIPT "cat /proc/sys/kernel/random/boot_id"
      PROBE-INTERVAL 5
      ;; The longest one attempt to connect, or to read the boot id, may take.
      PROBE-TIMEOUT 30)

(defn reboot-event [text boot-id wait]
  "The note of a target that reboots: TEXT for people, its BOOT-ID before
(None when it cannot tell) and how many seconds to WAIT for it."
  {"event" "output" "stream" "note" "text" text
   "reboot" {"boot-id" boot-id "wait" wait}})

(defn reboot-note [event]
  "What EVENT announces of a reboot, `{\"boot-id\" … \"wait\" …}`, or None
(also when the target sent something that is not that)."
  (setv r (and (isinstance event dict) (= (.get event "event") "output")
               (.get event "reboot")))
  (when (and (isinstance r dict)
             (isinstance (.get r "wait") #(int float)) (not (isinstance (.get r "wait") bool))
             (< 0 (get r "wait") 86401)
             (or (is (.get r "boot-id") None)
                 (and (isinstance (get r "boot-id") str) (< 0 (len (get r "boot-id")) 100))))
    r))

(defn probe-chain [chain]
  "The hops of the parsed CHAIN up to its last `:ssh` one, over which to ask
a host that reboots for its boot id; None when the chain never leaves this
machine."
  (setv last (next (gfor [i [name _]] (reversed (list (enumerate chain))) :if (= name "ssh") i)
                   None))
  (when (is-not last None)
    (cut chain 0 (+ last 1))))

(defn _bounded [chain seconds]
  ;; Each :ssh hop gives up connecting after SECONDS at most.
  (lfor [name kwargs] chain
        #(name (if (= name "ssh")
                   {#** kwargs "timeout" (min (.get kwargs "timeout" PROBE-TIMEOUT) seconds)}
                   kwargs))))

(defn _boot-id [chain upstream probe seconds]
  (with [conns (with-chain (_bounded chain seconds) upstream)]
    (.strip (. (.run (get conns -1) (Script probe) :timeout seconds) stdout))))

(defn await-return [chain note * [upstream None] [probe BOOT-ID-SCRIPT]
                    [interval PROBE-INTERVAL]]
  "Wait for the host at the end of CHAIN (parsed, leaving this machine;
from the connection UPSTREAM, or the controller) to come back from the
reboot NOTE announced: until it answers PROBE (shell code printing its boot
id) with another boot id than NOTE's, trying every INTERVAL seconds, for
NOTE's wait at most.  Return how many seconds it took; `FailedChange` when
it did not come back in time, saying what was last seen."
  (setv hops (probe-chain chain)
        started (time.monotonic)
        deadline (+ started (get note "wait"))
        before (get note "boot-id")
        last "no attempt")
  (while True
    (setv remaining (- deadline (time.monotonic)))
    (when (<= remaining 0) (break))
    (try
      (setv now (_boot-id hops upstream probe (max 1 (min PROBE-TIMEOUT remaining))))
      (if (and now (!= now before))
          (return (- (time.monotonic) started))
          (setv last (+ "it answered, with the boot id it had before "
                        "(it has not rebooted yet, or will not)")))
      (except [e Exception]
        (setv last f"it did not answer: {(.strip (str e))}")))
    (time.sleep (max 0 (min interval (- deadline (time.monotonic))))))
  (raise (FailedChange (+ f"did not come back within {(get note "wait")} s of the reboot "
                          f"its deployment scheduled; last, {last}"))))

(defclass RebootWatch []
  "A sink that passes events on to SINK and keeps what a deployment of
HOSTNAME announced of a reboot (`note`).  Once it has, the deployment's
summary is held back, for `release` to send once the wait for the host is
over, with what that wait came to."
  (defn __init__ [self sink hostname]
    (setv self.sink sink
          self.hostname hostname
          self.note None
          self.summary None))

  (defn __call__ [self event]
    (when (= (.get event "host") self.hostname)
      (setv r (reboot-note event))
      (when r (setv self.note r))
      (when (and self.note (= (.get event "event") "summary"))
        (setv self.summary event)
        (return)))
    (self.sink event))

  (defn release [self [failed False]]
    "Send the summary held back; FAILED: the host did not come back, one
failure more."
    (setv summary self.summary
          self.summary None)
    (when summary
      (when failed
        (setv summary {#** summary "status" "failed" "failures" (+ (get summary "failures") 1)}))
      (self.sink summary))))

(defn back-line [hostname]
  "The description of the line that says HOSTNAME came back."
  f"{hostname} is back after its reboot")

(defn back-after [seconds]
  "The note under that line."
  f"back after {(round seconds)} s, with a new boot id")

(defn await-return-reported [chain note sink hostname]
  "`await-return` from the controller, reported to SINK as a line of
HOSTNAME's deployment, at its top: ok, or failed with why.  Return whether
the host came back."
  (setv desc (back-line hostname)
        stamp {"host" hostname "depth" 0})
  (sink {#** (start-event desc) #** stamp})
  (try
    (setv seconds (await-return chain note))
    (except [e FailedChange]
      (sink {#** (end-event desc "failed" :message (str e) :property "reboot.at-end") #** stamp})
      (return False)))
  (sink {#** (output-event (back-after seconds)) #** stamp "depth" 1})
  (sink {#** (end-event desc "ok") #** stamp})
  True)

(export :objects [reboot-event reboot-note probe-chain await-return await-return-reported
                  RebootWatch back-line back-after BOOT-ID-SCRIPT PROBE-INTERVAL])
