"The engine: apply (or unapply) a preprocessed propspec over a connection,
reporting every step as an event.

Events are plain dicts, so they can be rendered on the controller as they are
made or sent there from a target as they happen:

  {\"event\" \"start\" \"host\" H \"desc\" D \"depth\" N}
  {\"event\" \"end\" \"host\" H \"desc\" D \"depth\" N \"status\" S …}
  {\"event\" \"output\" \"host\" H \"depth\" N \"text\" T}

S is \"ok\" (nothing to do), \"changed\", \"failed\" (with \"message\", and
\"traceback\" for a property that raised something other than a failure) or
\"skipped\" (not reached because an earlier property in an `eseqprops` failed)."

(import contextvars
        traceback
        consfig.context [applying]
        consfig.errors [ConnectionFailed ConnectionLost ConsfigError FailedChange]
        consfig.host [get-hostname]
        consfig.property [Propapp call-subroutine find-property propapp-desc
                          propapp-type python-propapps]
        consfig.result [NO-CHANGE])

(defclass Run []
  "The state of one application: where events go and how deep we are."
  (defn __init__ [self sink]
    (setv self.sink sink
          self.depth 0
          self.failures 0
          self.changes 0)))

(setv current-run (contextvars.ContextVar "consfig-run"))

(defn emit [event]
  "Send EVENT, stamped with the host and depth, to the current run's sink."
  (setv run (.get current-run None))
  (when run
    (.setdefault event "host" (get-hostname))
    (.setdefault event "depth" run.depth)
    (run.sink event)))

(defn inform [text]
  "Report TEXT as output of the property being applied."
  (emit {"event" "output" "text" (str text)}))

(defn _call [prop which propapp]
  ;; Anything a property raises that is not a failure is a bug or an
  ;; unexpected state of the target: report it as a failure of that property,
  ;; with its traceback for -v, rather than ending the deployment.
  (try
    (call-subroutine prop which propapp)
    (except [FailedChange] (raise))
    (except [e ConnectionFailed]
      (raise (ConnectionLost (str e)) :from e))
    (except [e Exception]
      (setv failure (FailedChange (+ (if (isinstance e ConsfigError) "" f"{(. (type e) __name__)}: ")
                                     (str e))))
      (setv failure.traceback (traceback.format-exc))
      (raise failure :from e))))

(defn _result [r]
  (if (= r NO-CHANGE) NO-CHANGE (if (is r None) :changed r)))

(defn apply-propapp [propapp]
  "Apply PROPAPP (check first) without announcing it; return `:no-change`
or a changed result."
  (setv prop (find-property propapp.name))
  (cond (and prop.check (_call prop "check" propapp)) NO-CHANGE
        prop.apply (_result (_call prop "apply" propapp))
        True NO-CHANGE))

(defn unapply-propapp [propapp]
  "Unapply PROPAPP: nothing to do when its check says it is not applied."
  (setv prop (find-property propapp.name))
  (cond (and prop.check (not (_call prop "check" propapp))) NO-CHANGE
        prop.unapply (_result (_call prop "unapply" propapp))
        ;; A pure declaration (an OS, a mirror) has nothing to undo.
        (not prop.apply) NO-CHANGE
        True (raise (FailedChange f"{prop.short-name} cannot be unapplied: it has no :unapply"))))

(defn announced? [propapp]
  (. (find-property propapp.name) announce))

(defn apply-and-announce [propapp [unapply False] [silent False]]
  "Apply (or unapply) PROPAPP, announcing it with start and end events if it
is an announced property; return its result.  A failure is reported once, at
the innermost announced property, and raised on."
  (setv run (.get current-run None)
        announce (and run (not silent) (announced? propapp))
        desc (when announce (propapp-desc propapp)))
  (when announce
    (emit {"event" "start" "desc" desc})
    (+= run.depth 1))
  (try
    (setv result (if unapply (unapply-propapp propapp) (apply-propapp propapp)))
    (except [e FailedChange]
      (when announce
        (-= run.depth 1)
        (emit (_failed-event desc e))
        (when (not e.reported)
          (setv e.reported True)
          (+= run.failures 1)))
      (raise))
    (except [BaseException]
      (when announce (-= run.depth 1))
      (raise)))
  (when announce
    (-= run.depth 1)
    (when (!= result NO-CHANGE) (+= run.changes 1))
    (emit {"event" "end" "desc" desc
           "status" (if (= result NO-CHANGE) "ok" "changed")}))
  result)

(defn _failed-event [desc e]
  (setv event {"event" "end" "desc" desc "status" "failed"})
  (when (not e.reported)
    (setv (get event "message") (str e))
    (when (hasattr e "traceback")
      (setv (get event "traceback") e.traceback)))
  event)

(defn apply-sequence [propapps * [unapply False] [stop-on-failure True]
                      [silent False] [until None]]
  "Apply PROPAPPS in order (unapply them in reverse order).  Return
`:no-change` unless one of them made a change.

With STOP-ON-FAILURE the first failure ends the sequence and is raised on;
otherwise each failure is reported and skipped, and a failure summarising
them is raised at the end.  A lost connection always ends the sequence.  A failure that is an instance of UNTIL ends the
sequence without being raised on."
  (setv propapps (lfor p (if unapply (reversed propapps) propapps)
                       :if (is-not p None) p)
        result NO-CHANGE
        failed 0)
  (for [[i p] (enumerate propapps)]
    (try
      (when (!= (apply-and-announce p unapply silent) NO-CHANGE)
        (setv result :changed))
      (except [e FailedChange]
        (when (and until (isinstance e until) (not (isinstance e ConnectionLost)))
          (break))
        (when (or stop-on-failure (isinstance e ConnectionLost))
          (_announce-skipped (cut propapps (+ i 1) None) silent)
          (raise))
        (+= failed 1))))
  (when failed
    (setv e (FailedChange f"{failed} of {(len propapps)} properties failed")
          e.reported True)
    (raise e))
  result)

(defn _announce-skipped [propapps silent]
  (when (not silent)
    (for [p propapps]
      (when (announced? p)
        (emit {"event" "end" "desc" (propapp-desc p) "status" "skipped"})))))

(defclass Outcome []
  "What applying a host's propspec came to."
  (defn __init__ [self hostname changes failures]
    (setv self.hostname hostname
          self.changes changes
          self.failures failures))
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
    f"<Outcome {self.hostname} {self.status}>"))

(defn check-propspec-fits [propspec python? where]
  "Refuse, before anything is applied, a propspec with `:python` properties
over a connection (described by WHERE) that has no Python on the target."
  (when (and (not python?) (= (propapp-type propspec) "python"))
    (setv names (.join ", " (sfor p (python-propapps propspec) (. (find-property p.name) short-name))))
    (raise (ConsfigError
             (+ f"{names}: property of type :python, but the chain ends in a shell "
                f"({where}), not a Python on the target.\n"
                "  Add a :python hop at the end of the chain, e.g. [[:ssh …] :sudo :python].")))))

(defn apply-host [host connection sink [unapply False]]
  "Apply the preprocessed HOST's propspec through CONNECTION, sending events
to SINK; return an `Outcome`."
  (check-propspec-fits host.propspec connection.python? connection.where)
  (setv run (Run sink)
        token (.set current-run run))
  (try
    (with [(applying host connection)]
      (try
        (apply-and-announce host.propspec unapply)
        (except [e FailedChange]
          (when (not e.reported)
            (+= run.failures 1)
            (emit {"event" "end" "desc" (propapp-desc host.propspec)
                   "status" "failed" "message" (str e)}))))
      (setv outcome (Outcome host.hostname run.changes run.failures))
      (emit {"event" "summary" "status" outcome.status
             "changes" run.changes "failures" run.failures})
      outcome)
    (finally (.reset current-run token))))

(export :objects [NO-CHANGE emit inform apply-propapp unapply-propapp apply-and-announce
                  apply-sequence apply-host check-propspec-fits Outcome Run
                  current-run])
