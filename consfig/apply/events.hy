"The events a deployment reports, and the constructors that build them.

An event is a plain dict of JSON-compatible values, so that it can be rendered
on the controller as it is made, or sent there from a target as it happens.
Every event has an \"event\" kind, the \"host\" it concerns and the \"depth\" of
nesting at which it happened (both stamped by the engine when it emits it).
The five kinds:

  start    an announced property begins.
           \"desc\": its description.
  end      a property's outcome.  \"desc\", and \"status\", one of
           \"ok\" (nothing to do), \"changed\", \"failed\" or \"skipped\" (not
           reached: an earlier property of an `eseqprops` failed); in check
           mode also \"would-change\" and \"cannot-check\" (no :check, and its
           :apply would run).  A failed
           end event that is the first report of a failure has a \"message\"
           (what went wrong), and for a property that raised something other
           than a failure also a \"traceback\" and, where the bug is in site
           code, \"where\" (file:line in the consfig); the failed end events
           of the properties enclosing it have no message.  A \"property\"
           names the property (its short name) on failed events.
  output   text a property reports: \"text\", and \"stream\": \"note\" (something
           the operator should read; always shown), \"command\" (a
           command's output; shown at -v), \"data\" (an item of prerequisite
           data was sent to the target: also \"iden1\", \"iden2\",
           \"version\", never the content; shown at -v), \"run\" (a command about to
           run, as a person would type it; shown at -vv) or \"wire\" (a
           frame of the :python hop's protocol; shown at -vvv).
           A note that an attempt of a property under `:retry` failed
           also has \"attempt\", \"attempts\", \"delay\" and \"message\".
  diff     a unified diff of a change to a file.  \"path\", \"text\".
  summary  the last event of a deployment.  \"status\": \"no-change\",
           \"changed\" or \"failed\"; \"changes\" and \"failures\", counts
           (in check mode, changes are the properties that would change);
           \"check\": whether it was a check; \"drift\", when not 0,
           the properties under `:noop` that would have changed.  Among several hosts, one
           that was never started (--max-fail was reached) has a summary
           of its own, with status \"not-started\".

The converging agent (`consfig converge`, docs/converge.md) adds a sixth:

  converge what the agent saw or did about one property, between the start
           and end events of its checks and repairs.  \"what\": \"watching\"
           (it started: \"properties\", \"watches\" counts), \"drift\" (a
           check found the property undone: \"desc\", and what differs as
           \"explanation\" and \"diff\"), \"repaired\", \"failed\" (its
           check or repair raised: \"message\"), \"fight\" (repairs come
           faster than its limit allows: something keeps undoing it;
           \"limit\", \"burst\", \"retry-in\"), \"rescan\" (every property is
           checked again: after a push, or when events were lost), \"waiting\"
           (for the deployment lock, which another holds: \"why\" says who
           and since when), \"replaced\"
           (its image was), \"superseded\" (a push deployed another
           propspec of its host: it stops rather than undo it), \"applied\"
           and \"retracted\" (a `during`'s fact began or stopped holding:
           \"desc\" is the during's), \"repeated\" (a failure said
           again: \"of\", \"count\", \"message\"), \"log\" (its log
           cannot be written: \"message\"), \"log-resumed\" (in its log:
           \"lost\") and \"stopped\".  With noop, a drift is reported and
           not repaired (\"noop\": true).

`consfig deploy --check --json` ends with a \"drift-summary\" line: for each
host, under \"hosts\", its \"drifted\" and \"failures\" counts and its
\"status\"; \"drifted\" and \"failed\" list the hosts concerned, and
\"not-started\" counts those never reached (--max-fail).

`consfig deploy --json` writes these events, one JSON object per line, each
stamped with \"time\" (seconds since the epoch)."

(import base64)

(defn start-event [desc]
  "An announced property with description DESC begins."
  {"event" "start" "desc" desc})

(defn end-event [desc status #** details]
  "The property described by DESC ended with STATUS (\"ok\", \"changed\",
\"failed\", \"skipped\"); DETAILS add \"message\", \"traceback\", \"where\",
\"property\" to a failure."
  {"event" "end" "desc" desc "status" status
   #** (dfor [k v] (.items details) :if (is-not v None) k v)})

(defn output-event [text [stream "note"]]
  "TEXT reported by the property being applied: a \"note\" for the operator
or a \"command\"'s output."
  {"event" "output" "text" (str text) "stream" stream})

(defn diff-event [path text]
  "A unified diff TEXT of a change to the file at PATH."
  {"event" "diff" "path" path "text" text})

(defn summary-event [status changes failures [check False] * [drift 0]]
  "The end of a deployment (a CHECK, or not): its STATUS and counts; DRIFT,
when there was any, the properties under `:noop` that would have changed."
  {"event" "summary" "status" status "changes" changes "failures" failures
   "check" check #** (if drift {"drift" drift} {})})

(defn retry-event [attempt attempts delay message]
  "Attempt ATTEMPT of ATTEMPTS (a property under `:retry`) failed with
MESSAGE; the next one comes after DELAY seconds."
  {"event" "output" "stream" "note"
   "text" (+ f"attempt {attempt} of {attempts} failed: {message}\n"
             (if delay f"trying again in {delay} s" "trying again"))
   "attempt" attempt "attempts" attempts "delay" delay "message" message})

(defn converge-event [what [desc None] #** details]
  "The converging agent's report WHAT (\"drift\", \"repaired\", …) about
the property described by DESC; DETAILS are added as they are, but None."
  {"event" "converge" "what" what
   #** (if (is desc None) {} {"desc" desc})
   #** (dfor [k v] (.items details) :if (is-not v None) k v)})

(defn drift-summary-event [outcomes]
  "The last line of `consfig deploy --check --json`: for each host of
OUTCOMES, how many properties drifted (would change) and failed, for
monitoring to read."
  (setv done (lfor o outcomes :if (is-not o None) o))
  {"event" "drift-summary"
   "hosts" (dfor o done o.hostname {"drifted" o.changes "failures" o.failures
                                    "status" o.status})
   "drifted" (sorted (gfor o done :if o.changes o.hostname))
   "failed" (sorted (gfor o done :if o.failures o.hostname))
   "not-started" (- (len outcomes) (len done))})

(defn fetched-event [path dest mode content]
  "The file PATH of the target, whose CONTENT (bytes) goes to DEST, mode
MODE, where the deployment runs from (`consfig.deployer.fetch`).  The
content travels as base64; the controller writes it and passes on a note
in its place."
  {"event" "fetched" "path" path "dest" dest "mode" mode
   "content" (.decode (base64.b64encode content) "ascii")})

(defn first-report? [event]
  "Whether EVENT is the first report of a failure (one to count)."
  (and (= (get event "event") "end")
       (= (get event "status") "failed")
       (in "message" event)))

(export :objects [start-event end-event output-event diff-event summary-event
                  retry-event converge-event drift-summary-event fetched-event first-report?])
