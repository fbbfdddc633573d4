"The engine: apply (or unapply) a preprocessed propspec over a connection,
reporting every step as an event (see `consfig.apply.events` for their kinds).

Every failure is shown and counted exactly once, where the engine first
catches it: see `apply-and-announce` and `Reported`."

(import contextlib
        contextvars
        time
        traceback
        consfig.model.context [applying current-host]
        consfig.errors [AbortedChange ConnectionFailed ConnectionLost ConsfigError FailedChange
                        site-location]
        consfig.apply.events [start-event end-event output-event diff-event summary-event
                              retry-event first-report?]
        consfig.model.host [get-hostname]
        consfig.options [RunOptions]
        consfig.model.property [call-subroutine default-desc find-property propapp-desc
                                propapps-in propapp-type python-propapps]
        hy.models [Keyword])

;; What a property's `:apply` or `:unapply` returns when it changed nothing.
(setv NO-CHANGE (Keyword "no-change"))

(defclass Reported [Exception]
  "A failure that has been shown and counted, on its way out through the
properties that enclose the one that failed: they end `failed` without
repeating why, and a sequence decides from CAUSE whether to carry on.

Whether a failure has been counted is a matter of type, not of a flag: the
engine turns every other exception into a `Reported` exactly once, where it
first catches it."
  (defn __init__ [self cause]
    (.__init__ (super) (str cause))
    (setv self.cause cause))
  (defn [property] lost? [self]
    "Whether the connection broke, so that nothing more can be applied."
    (isinstance self.cause #(ConnectionLost ConnectionFailed))))

(setv WOULD-CHANGE (hy.models.Keyword "would-change")
      CANNOT-CHECK (hy.models.Keyword "cannot-check"))

(defclass Drift []
  "What a `:check` found different from what its property wants.  It is
false, as a check result, and says what differs (EXPLANATION, such as
`mode 644 → 640`, and a unified DIFF of a file at PATH) so that check mode can
report it: `(:check (if (= have want) True (Drift f\"mode {have} → {want}\")))`."
  (defn __init__ [self [explanation None] * [diff None] [path None]]
    (setv self.explanation explanation
          self.diff diff
          self.path path))
  (defn __bool__ [self] False)
  (defn __repr__ [self] f"<Drift {self.explanation !r}>"))

(defclass SinkFailed [BaseException]
  "The sink events go to failed (the reader of a pipe went away): nothing
can be reported any more, so the deployment stops.  Not an `Exception`, so
that no property is blamed for it."
  (defn __init__ [self cause]
    (.__init__ (super) (str cause))
    (setv self.cause cause)))

(defclass Run []
  "The state of one application: where events go, its `RunOptions` (a
check changes nothing), how deep we are, and the tally of what happened,
kept from the events themselves."
  (defn __init__ [self sink [options None]]
    (setv self.sink sink
          self.options (or options (RunOptions))
          self.depth 0
          self.failures 0
          self.changes 0
          ;; What a property under `:noop` would have changed, outside check mode.
          self.drift 0
          ;; Functions shown every event, for as long as `watching-events` says.
          self.watchers []))

  (defn [property] check [self]
    "Whether this run is a check: nothing may change."
    self.options.check)

  (defn record [self event]
    "Count EVENT, show it to the watchers and pass it on to the sink.  Events
of a deployment nested in this one (applied by another Python) come through
here too, so that their failures and changes count."
    (when (= (get event "event") "end")
      (cond (first-report? event) (+= self.failures 1)
            (= (get event "status") "changed") (+= self.changes 1)
            (in (get event "status") #("would-change" "cannot-check"))
            (if self.check (+= self.changes 1) (+= self.drift 1))))
    (for [w self.watchers] (w event))
    (try
      (self.sink event)
      (except [e Exception]
        (raise (SinkFailed e) :from e))))

  (defn start [self desc]
    (emit (start-event desc))
    (+= self.depth 1))

  (defn finish [self desc status]
    (-= self.depth 1)
    (emit (end-event desc status)))

  (defn fail [self desc propapp e]
    "Show and count the failure E of PROPAPP, announced as DESC; return the
`Reported` to raise in its place."
    (emit (end-event desc "failed" #** (_failure-details propapp e)))
    (Reported e)))

(setv current-run (contextvars.ContextVar "consfig-run"))

(defn [contextlib.contextmanager] watching-events [f]
  "The context in which F is called with every event the current run
records (those of deployments nested in it too); outside a run, nothing."
  (setv run (.get current-run None))
  (when run (.append run.watchers f))
  (try
    (yield)
    (finally
      (when run (.remove run.watchers f)))))

(defn emit [event]
  "Send EVENT, stamped with the host and depth, to the current run."
  (setv run (.get current-run None))
  (when run
    (.setdefault event "host" (get-hostname))
    (.setdefault event "depth" run.depth)
    (.record run event)))

(defn inform [text]
  "Report TEXT, a note for the operator, from the property being applied."
  (emit (output-event text)))

(defn report-output [text]
  "Report TEXT, a command's output, from the property being applied (shown
at -v)."
  (when text
    (emit (output-event text "command"))))

(defn checking? []
  "Whether the current deployment is a check, or the property being applied
is under the meta-parameter `:noop`: nothing may be changed.  A property
whose :apply is run in check mode (one defined with `(:simulates True)`)
asks this before changing anything, and returns what it would do."
  (setv run (.get current-run None))
  (bool (or (and run run.check) (.get (.get current-meta) "noop"))))

(defn noop? []
  "Whether the property being applied is under `:noop` in a deployment that
is not a check: what it would do is reported, and nothing it would set off
(a handler) is owed."
  (setv run (.get current-run None))
  (bool (and (.get (.get current-meta) "noop") (not (and run run.check)))))

;; The meta-parameters in force (see `consfig.apply.meta`): a dict by name,
;; those of the innermost `with-meta` over those of the ones around it.
(setv current-meta (contextvars.ContextVar "consfig-meta" :default {}))

(defn [contextlib.contextmanager] meta-in-force [meta]
  "The context in which the meta-parameters META (a dict by name: \"retry\",
\"delay\", \"noop\", …) hold, over those already in force."
  (setv token (.set current-meta {#** (.get current-meta) #** meta}))
  (try (yield) (finally (.reset current-meta token))))

(defn describe-meta [meta]
  "META (a dict by name) as a person reads it: `retry 3, delay 5 s`; \"\"
when there is none."
  (setv parts [])
  (for [[k v] (.items meta)]
    (.append parts (cond (= k "delay") f"delay {v} s"
                         (= k "poll") f"poll {v} s"
                         (= k "limit") f"limit {v}/s"
                         (in k #("noop" "reverse")) (if v k f"{k} false")
                         True f"{k} {v}")))
  (.join ", " parts))

(defn leaf? [propapp]
  "Whether PROPAPP holds no other propapp: what meta-parameters apply to."
  (not (propapps-in propapp.args)))

(defn _retryable? [e]
  ;; A mistake, a refusal or a lost connection is no better the next time;
  ;; a failure that was shown and counted already is not this property's.
  (not (isinstance e #(Reported ConnectionLost ConnectionFailed AbortedChange ConsfigError))))

(defn _attempting [propapp unapply]
  ;; Apply (unapply) PROPAPP; a leaf under `:retry N` is tried up to N more
  ;; times, `:delay` seconds apart, each failed attempt but the last
  ;; reported as a note; the last one's failure is the property's.
  (setv meta (if (and (leaf? propapp) (not (checking?))) (.get current-meta) {})
        tries (+ 1 (.get meta "retry" 0))
        delay (.get meta "delay" 0))
  (for [attempt (range 1 (+ tries 1))]
    (try
      (return (if unapply (unapply-propapp propapp) (apply-propapp propapp)))
      (except [e Exception]
        (when (or (= attempt tries) (not (_retryable? e)))
          (raise))
        (emit (retry-event attempt tries delay (get (_failure-details propapp e) "message")))
        (when delay (time.sleep delay))))))

(defn _drifted [result]
  ;; A check said no: in check mode, say what differs.
  (when (isinstance result Drift)
    (when result.explanation (inform result.explanation))
    (when result.diff (emit (diff-event result.path result.diff))))
  WOULD-CHANGE)

(defn _checked [prop propapp unapply]
  ;; Check mode: never an :apply or :unapply that changes things.  A
  ;; property with a :check answers from it; one that simulates (the
  ;; combinators, the file properties) is run, changing nothing; any other
  ;; one cannot be checked.
  (cond prop.check
        (do (setv result (call-subroutine prop "check" propapp))
            (cond (and (not unapply) result) NO-CHANGE
                  (and unapply (not result)) NO-CHANGE
                  unapply WOULD-CHANGE
                  True (_drifted result)))
        (not (if unapply (or prop.unapply prop.apply) prop.apply)) NO-CHANGE
        prop.simulates
        (_result (call-subroutine prop (if unapply "unapply" "apply") propapp))
        True CANNOT-CHECK))

(defn _failure-details [propapp e * [name None]]
  ;; A failure of the property itself (FailedChange) or a mistake
  ;; (ConsfigError) is its message.  Anything else is a bug in the property
  ;; or an unexpected state of the target: say what was raised, and where,
  ;; when that is in site code, with the traceback for -v.  NAME stands for
  ;; the property when there is none (an action run at the end).
  (setv expected (isinstance e #(FailedChange ConsfigError)))
  {"property" (or name (_short-name propapp))
   "message" (if expected (str e) f"{(. (type e) __name__)}: {e}")
   "where" (when (not expected) (site-location e))
   "traceback" (when (not expected)
                 (.join "" (traceback.format-exception (type e) e e.__traceback__)))})

(defn _short-name [propapp]
  (try (. (find-property propapp.name) short-name)
       (except [Exception] propapp.name)))

(defn _fallback-desc [propapp]
  ;; What to call a property whose :desc itself failed, or one that is not
  ;; announced: what describes it without a :desc; its bare name when even
  ;; that fails (an unknown property, arguments that cannot be shown).
  (try (default-desc propapp)
       (except [Exception] (_short-name propapp))))

(defn _result [r]
  (if (= r NO-CHANGE) NO-CHANGE (if (is r None) :changed r)))

(defn apply-propapp [propapp]
  "Apply PROPAPP (check first) without announcing it; return `:no-change`
or a changed result."
  (setv prop (find-property propapp.name))
  (when (checking?)
    (return (_checked prop propapp False)))
  (cond (and prop.check (call-subroutine prop "check" propapp)) NO-CHANGE
        prop.apply (_result (call-subroutine prop "apply" propapp))
        True NO-CHANGE))

(defn unapplicable? [prop]
  "Whether the property PROP can be unapplied: it has an :unapply, or it is
a pure declaration (an OS, a mirror) with nothing to undo."
  (or (bool prop.unapply) (not prop.apply)))

(defn unapply-propapp [propapp]
  "Unapply PROPAPP: nothing to do when its check says it is not applied."
  (setv prop (find-property propapp.name))
  (when (checking?)
    (return (_checked prop propapp True)))
  (cond (and prop.check (not (call-subroutine prop "check" propapp))) NO-CHANGE
        prop.unapply (_result (call-subroutine prop "unapply" propapp))
        (unapplicable? prop) NO-CHANGE
        True (raise (FailedChange f"{prop.short-name} cannot be unapplied: it has no :unapply"))))

(defn announced? [propapp]
  (. (find-property propapp.name) announce))

(defn announced-count [propspec]
  "How many announced properties PROPSPEC holds (a deployment's progress
counts them)."
  (+ (if (announced? propspec) 1 0)
     (sum (gfor p (propapps-in propspec.args) (announced-count p)))))

(defn apply-and-announce [propapp [unapply False] [silent False]]
  "Apply (or unapply) PROPAPP, announcing it with start and end events if it
is an announced property; return its result.

Anything PROPAPP raises — in its :desc, :check, :apply or :unapply — is a
failure of PROPAPP: it is shown and counted here, on a `failed` line of its
own (under its name when it is not announced), and a `Reported` is raised
in its place.  A `Reported` from inside it ends it `failed` without a message."
  (setv run (.get current-run None))
  (when (is run None)
    (return (if unapply (unapply-propapp propapp) (apply-propapp propapp))))
  (setv desc None
        started False)
  (try
    (when (and (not silent) (announced? propapp))
      (setv desc (+ (propapp-desc propapp) (_meta-note propapp run)))
      (.start run desc)
      (setv started True))
    (setv result (_attempting propapp unapply))
    (except [Reported]
      (when started (.finish run desc "failed"))
      (raise))
    (except [e Exception]
      (when started (-= run.depth 1))
      (raise (.fail run (or desc (_fallback-desc propapp)) propapp e) :from e))
    (except [BaseException]
      (when started (-= run.depth 1))
      (raise)))
  (when started
    (.finish run desc (_status result (checking?))))
  result)

(defn _meta-note [propapp run]
  ;; Check mode shows the meta-parameters a leaf is applied under.
  (setv meta (.get current-meta))
  (if (and run.check meta (leaf? propapp))
      f" ({(describe-meta meta)})"
      ""))

(defn announce-action [desc thunk]
  "Call THUNK (which returns `:no-change` or a changed result), announced
under DESC as a property is: its line ends ok, changed (or would-change), or
failed, its failure shown and counted once, a `Reported` raised in its place."
  (setv run (.get current-run None))
  (when (is run None) (return (thunk)))
  (.start run desc)
  (try
    (setv result (_result (thunk)))
    (except [Reported]
      (.finish run desc "failed")
      (raise))
    (except [e Exception]
      (-= run.depth 1)
      (emit (end-event desc "failed" #** (_failure-details None e :name desc)))
      (raise (Reported e) :from e))
    (except [BaseException]
      (-= run.depth 1)
      (raise)))
  (.finish run desc (_status result (checking?)))
  result)

(defn _status [result check]
  (cond (= result NO-CHANGE) "ok"
        (not check) "changed"
        (= result CANNOT-CHECK) "cannot-check"
        True "would-change"))

(defn apply-sequence [propapps * [unapply False] [stop-on-failure True]
                      [silent False] [until None]]
  "Apply PROPAPPS in order (unapply them in reverse order).  Return
`:no-change` unless one of them made a change.

With STOP-ON-FAILURE the first failure ends the sequence, the rest are
reported `skipped` and the failure is raised on; otherwise each failure is
counted and the sequence carries on, failing at the end.  A lost connection
always ends the sequence.  A failure whose cause is an instance of UNTIL ends
the sequence without failing it."
  (setv propapps (lfor p (if unapply (reversed propapps) propapps)
                       :if (is-not p None) p)
        result NO-CHANGE
        failed 0)
  (for [[i p] (enumerate propapps)]
    (try
      (when (!= (apply-and-announce p unapply silent) NO-CHANGE)
        (setv result :changed))
      (except [r Reported]
        (cond (and until (isinstance r.cause until) (not r.lost?)) (break)
              (or stop-on-failure r.lost?)
              (do (_announce-skipped (cut propapps (+ i 1) None) silent)
                  (raise))
              True (+= failed 1)))))
  (when failed
    (raise (Reported (FailedChange f"{failed} of {(len propapps)} properties failed"))))
  result)

(defn _announce-skipped [propapps silent]
  (when (not silent)
    (for [p propapps]
      (when (try (announced? p) (except [Exception] False))
        (setv desc (try (propapp-desc p) (except [Exception] (_fallback-desc p))))
        (emit (end-event desc "skipped"))))))

(defclass Ending []
  "What the (sub)deployment being applied does once its propspec has been
applied: the ACTIONS its properties asked for with `at-end` (key → `#(f
last)`), and STATE they keep meanwhile (a dict, by key: which handlers were
notified).  FAILURES is the run's count of failures when it began, so that
`failed-so-far?` speaks of this deployment alone, not of the one that nested
it."
  (defn __init__ [self run]
    (setv self.actions {}
          self.state {}
          self.run run
          self.failures (if run run.failures 0)))
  (defn failed? [self]
    (bool (and self.run (> self.run.failures self.failures))))
  (defn _next [self]
    ;; The first action asked for, but those asked to come last after all
    ;; others (a reboot after the handlers), even those asked for meanwhile.
    (or (next (gfor [k [f last]] (.items self.actions) :if (not last) k) None)
        (next (iter self.actions) None)))
  (defn finish [self]
    "Run the actions, each once, in the order they were asked for (those
asked to come LAST after the others), each told whether the deployment has
failed so far; an action may ask for more.  A failing action is counted and
the next one runs, unless the connection is lost.  Return `:no-change`
unless one made a change; raise the first failure after all have run."
    (setv result NO-CHANGE
          first-failure None)
    (while (is-not (setx key (self._next)) None)
      (setv #(f _) (.pop self.actions key))
      (try
        (try
          (when (!= (f (self.failed?)) NO-CHANGE)
            (setv result :changed))
          (except [e Exception]
            ;; An action's own failure, outside any property it announced.
            (when (isinstance e Reported) (raise))
            (emit (end-event key "failed" #** (_failure-details None e :name key)))
            (raise (Reported e) :from e)))
        (except [r Reported]
          (when r.lost? (raise))
          (when (is first-failure None) (setv first-failure r)))))
    (when first-failure (raise first-failure))
    result))

(setv _ending (contextvars.ContextVar "consfig-ending" :default None))

(defn current-ending []
  "The `Ending` of the (sub)deployment being applied; `ConsfigError` outside
one."
  (or (.get _ending)
      (raise (ConsfigError "at-end: no deployment is being applied here"))))

(defn at-end [key f * [last False]]
  "Call F once the (sub)deployment being applied has applied its propspec,
with whether it failed so far; F returns `:no-change` or a changed result,
and reports as a property does (announcing what it applies with
`apply-and-announce`).  Asked for again under the same KEY, F runs once
(the first F asked for is kept).  With LAST, after every action without it:
a reboot after the handlers."
  (setv ending (current-ending))
  (when (not-in key ending.actions)
    (setv (get ending.actions key) #(f last))))

(defn failed-so-far? []
  "Whether the (sub)deployment being applied has had a failure so far."
  (.failed? (current-ending)))

(defn apply-deployment [propspec [unapply False] * [meta None]]
  "Apply (or unapply) PROPSPEC, a (sub)deployment's whole propspec, as
`apply-and-announce` does; then, whether it failed or not (unless its
connection was lost), what its properties asked to run at its end
(`at-end`).  Return its result, or raise its failure once those have run.
META: the meta-parameters in force for PROPSPEC (a dict by name), none by
default (the converging agent re-applies a leaf under those of its
`with-meta`)."
  (setv ending (Ending (.get current-run None))
        token (.set _ending ending)
        meta-token (.set current-meta (or meta {}))
        failure None
        result NO-CHANGE)
  (try
    (_reverse-removed)
    (try
      (setv result (apply-and-announce propspec unapply))
      (except [r Reported]
        (setv failure r)))
    (when (not (and failure failure.lost?))
      (try
        (when (!= (.finish ending) NO-CHANGE)
          (setv result :changed))
        (except [r Reported]
          (setv failure (or failure r)))))
    (finally (.reset _ending token)
             (.reset current-meta meta-token)))
  (when failure (raise failure))
  result)

(defn _reverse-removed []
  ;; Every deployment of a host's whole propspec ends by unapplying what
  ;; was applied under `:reverse` in an earlier one and has left it
  ;; (`consfig.apply.meta`, found by name as any property is).  One of just some
  ;; properties (`deploy-these`) leaves the record alone.
  (setv host (.get current-host None))
  (when (and host (not (getattr host "partial" False)))
    (setv prop (find-property "consfig.meta.removed-unapplied"))
    (at-end "reverse" (fn [failed] (apply-and-announce (prop))))))

(defclass Outcome []
  "What applying a host's propspec came to."
  (defn __init__ [self hostname changes failures * [check False] [drift 0]]
    (setv self.hostname hostname
          self.changes changes
          self.failures failures
          ;; Would-change properties under `:noop`, outside check mode.
          self.drift drift
          ;; A check: its changes are those it would make.
          self.check check))
  (defn [property] status [self]
    (cond self.failures "failed"
          self.changes "changed"
          True "no-change"))
  (defn exit-code [self [detailed False]]
    "0 success; 1 failures.  DETAILED: 0 no changes, 2 changes, 1 failures."
    (cond (= self.status "failed") 1
          (and detailed (= self.status "changed")) 2
          True 0))
  (defn __repr__ [self]
    (setv status (if (and self.check (= self.status "changed")) "would-change" self.status))
    f"<Outcome {self.hostname} {status}>"))

(defn check-propspec-fits [propspec python? where]
  "Refuse, before anything is applied, a propspec with `:python` properties
over a connection (described by WHERE) that has no Python on the target."
  (when (and (not python?) (= (propapp-type propspec) "python"))
    (setv names (.join ", " (sfor p (python-propapps propspec) (. (find-property p.name) short-name))))
    (raise (ConsfigError
             (+ f"{names}: property of type :python, but the chain ends in a shell "
                f"({where}), not a Python on the target.\n"
                "  Add a :python hop at the end of the chain, e.g. [[:ssh …] :sudo :python].")))))

(defn apply-host [host connection sink [options None]]
  "Apply the preprocessed HOST's propspec through CONNECTION, sending events
to SINK; return an `Outcome`.  OPTIONS, a `RunOptions` (default: apply):
with its CHECK, change nothing: report what holds and what would change;
with its UNAPPLY, undo the propspec."
  (check-propspec-fits host.propspec connection.python? connection.where)
  (setv run (Run sink options)
        check run.check
        token (.set current-run run))
  (try
    (with [(applying host connection)]
      (try
        (setv result (apply-deployment host.propspec run.options.unapply))
        ;; A change no announced property's line reported (an unannounced
        ;; property's own) still makes the deployment one that changed.
        (when (and (!= result NO-CHANGE) (not run.changes) (not run.drift))
          (setv run.changes 1))
        ;; Shown and counted where it happened.
        (except [Reported] None))
      (setv outcome (Outcome host.hostname run.changes run.failures :check check
                             :drift run.drift))
      (emit (summary-event outcome.status run.changes run.failures check :drift run.drift))
      outcome)
    (finally (.reset current-run token))))

(export :objects [NO-CHANGE emit inform report-output checking? Drift WOULD-CHANGE
                  CANNOT-CHECK announced-count apply-propapp unapply-propapp
                  apply-and-announce apply-sequence apply-host check-propspec-fits
                  Outcome Run Reported SinkFailed current-run unapplicable?
                  Ending at-end current-ending failed-so-far? apply-deployment
                  watching-events announce-action current-meta meta-in-force
                  describe-meta leaf? noop?])
