;; The event constructors: plain JSON-compatible dicts of the five kinds.

(import json
        consfig.apply.events *)

(defn test-every-constructor-makes-json-data-of-its-kind []
  (for [[e kind] [[(start-event "d") "start"]
                  [(end-event "d" "ok") "end"]
                  [(output-event "t") "output"]
                  [(diff-event "/p" "-a\n+b\n") "diff"]
                  [(summary-event "changed" 1 0) "summary"]]]
    (assert (= (get e "event") kind) e)
    (assert (= (json.loads (json.dumps e)) e) "JSON round trip")))

(defn test-end-event-leaves-out-details-that-are-none []
  (setv e (end-event "d" "failed" :message "why" :traceback None :where None))
  (assert (= e {"event" "end" "desc" "d" "status" "failed" "message" "why"}) e))

(defn test-output-is-a-note-unless-said-otherwise []
  (assert (= (get (output-event "t") "stream") "note") "note")
  (assert (= (get (output-event "t" "command") "stream") "command") "command"))

(defn test-only-a-failure-with-a-message-is-a-first-report []
  (assert (first-report? (end-event "d" "failed" :message "why")) "first report")
  (assert (not (first-report? (end-event "d" "failed"))) "an enclosing property's line")
  (assert (not (first-report? (end-event "d" "changed" :message "x"))) "not a failure")
  (assert (not (first-report? (output-event "failed"))) "not an end event"))
