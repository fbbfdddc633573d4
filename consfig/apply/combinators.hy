"Property combinators: properties whose arguments are propapps.

They follow Consfigurator's semantics.  The sequencing ones (`eseqprops`,
`seqprops`, …) are not announced themselves — their elements are; the others
are announced under a description of their own or of the propapp they wrap.

In check mode they are run as they are (they are `:simulates`): each applies
the propapps it holds in check mode, so nothing changes.  `with-flagfile`
answers from its flag file."

(eval-when-compile (require consfig.model.property [defprop]))
(import contextvars
        posixpath
        hy.models [Keyword]
        consfig.apply.actions [NO-CHANGE run remote-exists?]
        consfig.model.context [commands-bounded-by current-host]
        consfig.apply.engine [Drift Reported apply-and-announce apply-propapp unapply-propapp
                              apply-sequence checking? emit inform unapplicable?]
        consfig.apply.events [output-event]
        consfig.errors [AbortedChange CommandFailed FailedChange PropspecError]
        consfig.model.fact [fact-application fact-application? fact-holds? fact-hostattrs fact-matches
                            fact-watch]
        consfig.model.dataspace [binder-names substitute]
        consfig.model.host [preserving-hostattrs]
        consfig.model.property [Propapp fact-of find-property free-binders preprocess-propapp
                                propapp-desc propapp-hostattrs propapps-in retractable? sequence?]
        consfig.model.propspec [propspec->data data->propspec]
        consfig.apply.targetstate [host-state-file read-state-file save-state-file]
        consfig.types [propspec seconds]
        consfig.util [keyword-name sha256-hex])

(defprop eseqprops :posix [#* propapps]
  "Apply PROPAPPS in order, stopping at the first failure.  Unapplying
unapplies them in reverse order."
  (:unwatched "it holds other properties, which are watched for themselves")
  (:simulates True)
  (:announce False)
  (:sequence True)
  (:apply (apply-sequence propapps))
  (:unapply (apply-sequence propapps :unapply True)))

(defprop seqprops :posix [#* propapps]
  "Apply PROPAPPS in order; a failure is reported and skipped, and the
sequence carries on.  The sequence fails if any element failed."
  (:unwatched "it holds other properties, which are watched for themselves")
  (:simulates True)
  (:announce False)
  (:sequence True)
  (:apply (apply-sequence propapps :stop-on-failure False))
  (:unapply (apply-sequence propapps :unapply True :stop-on-failure False)))

(defprop silent-seqprops :posix [#* propapps]
  "Like `seqprops`, but the elements are not announced one by one.
Failures are still reported."
  (:unwatched "it holds other properties, which are watched for themselves")
  (:simulates True)
  (:announce False)
  (:sequence True)
  (:apply (apply-sequence propapps :stop-on-failure False :silent True))
  (:unapply (apply-sequence propapps :unapply True :stop-on-failure False :silent True)))

(setv _CONDITIONS {"failed-change" FailedChange
                   "aborted-change" AbortedChange
                   "command-failed" CommandFailed})

(defn _condition [c]
  (setv name (or (keyword-name c) (str c)))
  (when (not-in name _CONDITIONS)
    (raise (PropspecError (+ f"eseqprops-until: unknown condition {(hy.repr c)}; use one of "
                             (.join " " (gfor k _CONDITIONS f":{k}"))))))
  (get _CONDITIONS name))

(defprop eseqprops-until :posix [condition #* propapps]
  "Like `eseqprops`, but a failure of kind CONDITION (`:failed-change`,
`:aborted-change` or `:command-failed`) just ends the sequence, without
failing it (the failed property is still reported, and counts in the
deployment's summary)."
  (:unwatched "it holds other properties, which are watched for themselves")
  (:simulates True)
  (:announce False)
  (:preprocess (do (_condition condition) [condition #* propapps]))
  (:apply (apply-sequence propapps :until (_condition condition)))
  (:unapply (apply-sequence propapps :unapply True :until (_condition condition))))

(defprop unapplied :posix [propapp]
  "Unapply PROPAPP when applied, and apply it when unapplied: its check is
negated and its :apply and :unapply are swapped."
  (:unwatched "it holds other properties, which are watched for themselves")
  (:simulates True)
  (:inverts True)
  (:retractable True)
  (:desc (+ "Unapplied: " (propapp-desc propapp)))
  ;; Hostattrs of an unapplied property only check compatibility: the host
  ;; does not get what the property would declare.
  (:invariant (_unapplicable? propapp) (_no-unapply propapp))
  (:hostattrs (preserving-hostattrs (fn [] (propapp-hostattrs propapp))))
  (:apply (unapply-propapp propapp))
  (:unapply (apply-propapp propapp)))

(defn _unapplicable? [propapp]
  ;; Checked where the propapp is written, not after connecting.
  (or (not (isinstance propapp Propapp))
      (unapplicable? (find-property propapp.name))))

(defn _no-unapply [propapp]
  (+ f"{(. (find-property propapp.name) short-name)} cannot be unapplied: it has no "
     ":unapply (docs/properties.md says which properties can be)"))

(defprop reapplied :posix [#* propapps]
  "Unapply PROPAPPS (in reverse order), then apply them again: for when a
fresh application is wanted even though the check says there is nothing to do."
  (:unwatched "it holds other properties, which are watched for themselves")
  (:simulates True)
  (:action "applies again each time, whatever the checks say: that is its point")
  (:desc (+ "Reapplied: " (.join "; " (map propapp-desc propapps))))
  (:apply
    (apply-sequence propapps :unapply True :silent True)
    (apply-sequence propapps :silent True)
    :changed))

(defn _split-unapply [propapps]
  (setv marker (Keyword "unapply"))
  (if (in marker propapps)
      (do (setv i (.index propapps marker))
          #((cut propapps 0 i) (cut propapps (+ i 1) None)))
      #(propapps None)))

(defprop with-unapply :posix [#* propapps]
  "Like `eseqprops`; but if `:unapply` appears among PROPAPPS, unapplying
applies the propapps after it instead of unapplying those before it.  A way to
give a list of properties an :unapply made of other properties."
  (:unwatched "it holds other properties, which are watched for themselves")
  (:simulates True)
  (:announce False)
  ;; With an :unapply of its own, unapplying it undoes what applying did.
  (:retractable (in (Keyword "unapply") propapps))
  (:children (propapps-in (get (_split-unapply (list propapps)) 0)))
  (:hostattrs
    (setv #(on-apply on-unapply) (_split-unapply (list propapps)))
    (for [p on-apply] (propapp-hostattrs p))
    (when on-unapply
      (preserving-hostattrs (fn [] (for [p on-unapply] (propapp-hostattrs p))))))
  (:apply (apply-sequence (get (_split-unapply (list propapps)) 0)))
  (:unapply
    (setv #(on-apply on-unapply) (_split-unapply (list propapps)))
    (if (is on-unapply None)
        (apply-sequence on-apply :unapply True)
        (apply-sequence on-unapply))))

(defprop on-change :posix [propapp #* on-change]
  "Apply PROPAPP; if applying or unapplying it made a change, apply each of
ON-CHANGE in order (restart a daemon after its configuration changed)."
  (:unwatched "the agent keeps it whole, watching what its first propapp watches")
  (:simulates True)
  (:trigger propapp)
  (:desc (_trigger-desc propapp))
  (:apply (_then-if-changed (apply-propapp propapp) on-change))
  (:unapply (_then-if-changed (unapply-propapp propapp) on-change)))

(defprop on-apply-change :posix [propapp #* on-change]
  "Like `on-change`, but only applying PROPAPP triggers ON-CHANGE."
  (:unwatched "the agent keeps it whole, watching what its first propapp watches")
  (:simulates True)
  (:trigger propapp)
  (:desc (_trigger-desc propapp))
  (:apply (_then-if-changed (apply-propapp propapp) on-change))
  (:unapply (unapply-propapp propapp)))

(defn _trigger-desc [propapp]
  ;; The line the consequents nest under names what triggers them: the
  ;; antecedent's own description, or, for a sequence (which has none worth
  ;; showing: \"eseqprops\"), those of the properties in it.
  (if (. (find-property propapp.name) announce)
      (propapp-desc propapp)
      (+ "after a change to: "
         (.join "; " (gfor p (propapps-in propapp.args) (_trigger-desc p))))))

(defn _then-if-changed [result on-change]
  (when (!= result NO-CHANGE)
    (apply-sequence on-change))
  result)

(defprop desc :posix [desc propapp]
  "Apply PROPAPP, announcing it as DESC."
  (:unwatched "it holds other properties, which are watched for themselves")
  (:simulates True)
  (:sequence True)
  (:desc desc)
  (:apply (apply-propapp propapp))
  (:unapply (unapply-propapp propapp)))

(defprop with-flagfile :posix [flagfile #* propapps]
  "Apply PROPAPPS unless FLAGFILE exists on the target, then create it; so
PROPAPPS are applied once.  Unapplying unapplies them and removes FLAGFILE."
  (:unwatched "it holds other properties, which are watched for themselves")
  (:announce False)
  (:check (or (remote-exists? flagfile)
              (Drift f"{flagfile} does not exist: what it guards would be applied")))
  (:apply
    (apply-sequence propapps)
    (run "mkdir" "-p" "--" (or (posixpath.dirname flagfile) "."))
    (run "touch" "--" flagfile)
    :changed)
  (:unapply
    (apply-sequence propapps :unapply True)
    (run "rm" "-f" "--" flagfile)
    :changed))

(defprop with-requirements :posix [propapp #* requirements]
  "Apply PROPAPP after REQUIREMENTS.  Each requirement depends on the one
after it, so they are applied last to first."
  (:unwatched "it holds other properties, which are watched for themselves")
  (:simulates True)
  (:announce False)
  (:apply (apply-sequence [#* (reversed requirements) propapp]))
  (:unapply (apply-sequence [#* (reversed requirements) propapp] :unapply True)))

(defprop with-command-timeout :posix [#^ seconds seconds #^ propspec #* propapps]
  "Like `eseqprops`, but every command PROPAPPS run that gives no timeout of
its own is stopped after SECONDS, and fails the property that ran it:
`(with-command-timeout 600 (apt.upgraded) (cmd.single \"make\" \"all\"))`.
The innermost `with-command-timeout` wins; a command's own `:timeout` wins
over all; outside any, the chain's :command-timeout holds."
  (:unwatched "it holds other properties, which are watched for themselves")
  (:simulates True)
  (:announce False)
  (:apply (with [(commands-bounded-by seconds)] (apply-sequence propapps)))
  (:unapply (with [(commands-bounded-by seconds)] (apply-sequence propapps :unapply True))))

;; During: properties that hold while a fact holds, after Syndicate's
;; `during`.  Which blocks were last applied is recorded on the target, in
;; during/HOSTNAME.json under the state directory (consfig.apply.targetstate).

(defprop during :posix [#^ fact-application fact #^ propspec #* propapps]
  "Apply PROPAPPS while FACT holds on the target; while it does not,
retract them:

  (during (fact.file-exists \"/etc/consfig/maintenance\")
    (file.has-content \"/etc/nginx/sites-enabled/maintenance\" conf)
    (systemd.stopped \"nginx\"))

FACT is a fact application (consfig.props.fact, or a site's `deffact`).
Retracting unapplies, in reverse order, each of PROPAPPS that can be
unapplied (they have an :unapply, or are declarations), always: unapplying
a property that is not applied changes nothing, so a host converges even
when the record of what was applied was lost.  One that cannot be unapplied
is dropped, not undone, with a note saying so.  A deployment evaluates the
fact once; the converging agent again whenever the fact's watch fires (see
`during-facts`).  Unapplying a `during` retracts its properties whatever
the fact."
  (:unwatched "its fact's watch says when its properties are applied or retracted; they are watched for themselves")
  (:simulates True)
  (:fact fact)
  (:retractable True)
  (:desc f"during {(propapp-desc fact)}")
  (:invariant (not (_unbound fact propapps))
              (_unbound-message fact propapps))
  (:invariant (any (gfor p propapps (is-not p None)))
              "needs the properties that hold while the fact does: (during FACT PROPAPP…)")
  (:invariant (not (any (map fact-application? propapps)))
              (_nested-fact-message propapps))
  (:hostattrs
    (fact-hostattrs fact)
    (for [p propapps :if (is-not p None)] (propapp-hostattrs p)))
  (:apply (_during fact propapps))
  (:unapply (_retract fact propapps :evaluated False)))

(defn _unbound [fact propapps]
  ;; The binders of PROPAPPS that FACT does not bind.
  (- (free-binders propapps) (set (binder-names fact))))

(defn _unbound-message [fact propapps]
  (setv names (sorted (_unbound fact propapps)))
  (+ (.join " " (gfor n names f"?{n}")) (if (> (len names) 1) " are" " is")
     f" not bound by {(propapp-desc fact)}: a binder stands for a field its pattern matched"))

(defn _nested-fact-message [propapps]
  (setv f (next (gfor p propapps :if (fact-application? p) p)))
  (+ f"{(. (find-property f.name) short-name)} is a fact, not a property: only the first "
     "argument of a during is its fact, the others are the properties it holds"))

(defn _during-key [fact propapps]
  ;; A block is known by what it says, printed.
  (sha256-hex (.encode (repr (Propapp during.name [fact #* propapps])) "utf-8" "surrogateescape")))

(defn _record-path []
  (host-state-file "during" (. (.get current-host) hostname)))

(defn _applied-blocks [path]
  ;; The target's record: key -> what the block was; {} when there is none.
  (setv blocks (try (get (or (read-state-file path) {"applied" {}}) "applied")
                    (except [#(ValueError KeyError TypeError)] None)))
  (when (not (and (isinstance blocks dict) (all (gfor k blocks (isinstance k str)))))
    (raise (FailedChange (+ f"{path} is not consfig's record of the during blocks applied; "
                            "look at it, and remove it to start afresh"))))
  blocks)

(defn _note-applied [key fact applied [blocks None]]
  ;; Record (APPLIED) or forget that the block KEY is applied, in BLOCKS
  ;; (the record as read, if it was); not in check mode.
  (when (checking?) (return))
  (setv path (_record-path)
        blocks (if (is blocks None) (_applied-blocks path) blocks))
  (when (= (in key blocks) applied) (return))
  (if applied
      (setv (get blocks key) {"fact" (repr fact)})
      (del (get blocks key)))
  (save-state-file path (when blocks
                          {"host" (. (.get current-host) hostname) "applied" blocks})))

;; While `during-reevaluated` runs with a list to fill: #(FACT HOLDS) for each
;; `during` it evaluated, outermost first, so that the converging agent says
;; what was done, not what the fact says a moment later.
(setv _decisions (contextvars.ContextVar "consfig-during-decisions" :default None))

(defn _decided [fact holds]
  (setv d (.get _decisions))
  (when (is-not d None) (.append d #(fact holds))))

(defn _during [fact propapps]
  (setv matches (fact-matches fact))
  (when (is-not matches None)
    (_decided fact (bool matches))
    (return (_during-facets fact propapps matches)))
  (setv holds (fact-holds? fact)
        label (propapp-desc fact))
  (_decided fact holds)
  (inform f"during {label}: {(if holds "holds" "does not hold")}")
  (if holds
      ;; Recorded first: a deployment that fails half-way still retracts
      ;; what it applied, once the fact no longer holds.
      (do (_note-applied (_during-key fact propapps) fact True)
          (apply-sequence propapps))
      (_retract fact propapps)))

(defn _facet [propapps bindings]
  ;; The properties a match holds: PROPAPPS with its binders bound, each
  ;; checked and preprocessed as the host's own were.
  (lfor p propapps :if (is-not p None) (preprocess-propapp (substitute p bindings))))

(defn _during-facets [fact propapps matches]
  ;; Syndicate's facets: the properties held once for each match, with its
  ;; binders bound; those of a match that went are retracted.  What each
  ;; facet applied is recorded, as data, so that it can be retracted when
  ;; the match (and the record that made it) is gone.
  (setv label (propapp-desc fact)
        key (_during-key fact propapps)
        path (_record-path)
        blocks (_applied-blocks path)
        recorded (dict (.get (.get blocks key {}) "facets" {}))
        now (dfor [k b] matches k b)
        result NO-CHANGE
        failed 0)
  (inform f"during {label}: {(len now)} match{(if (= (len now) 1) "" "es")}")
  (for [k (sorted recorded)]
    (when (not-in k now)
      (setv was (data->propspec (get recorded k)))
      (try (when (!= (_retract-facet was label) NO-CHANGE) (setv result :changed))
           (except [r Reported]
             (when r.lost? (raise))
             (+= failed 1)
             (continue)))
      (del (get recorded k))
      (_note-facets key fact recorded)))
  (for [k (sorted now)]
    (try
      (setv facet (_facet propapps (get now k)))
      (except [e PropspecError]
        ;; A value that fits its field but not the property it reaches.
        (emit (output-event f"during {label}: the match {k} does not fit: {e}"))
        (+= failed 1)
        (continue)))
    (setv (get recorded k) (propspec->data facet))
    (_note-facets key fact recorded)
    (try (when (!= (apply-sequence facet) NO-CHANGE) (setv result :changed))
         (except [r Reported]
           (when r.lost? (raise))
           (+= failed 1))))
  (when failed
    (raise (Reported (FailedChange f"{failed} of the matches of {label} could not be held"))))
  result)

(defn _retract-facet [propapps label]
  (setv result NO-CHANGE failed 0)
  (for [[p retractable] (_retraction propapps)]
    (if retractable
        (try
          (when (!= (apply-and-announce (unapplied p)) NO-CHANGE)
            (setv result :changed))
          (except [r Reported]
            (when r.lost? (raise))
            (+= failed 1)))
        (_dropped p label True)))
  (when failed
    (raise (Reported (FailedChange (+ f"{failed} of the properties held for a match of {label} "
                                      "could not be retracted")))))
  result)

(defn _note-facets [key fact facets]
  ;; Record the facets of the block KEY now held; not in check mode.
  (when (checking?) (return))
  (setv path (_record-path)
        blocks (_applied-blocks path))
  (if facets
      (setv (get blocks key) {"fact" (repr fact) "facets" facets})
      (when (in key blocks) (del (get blocks key))))
  (save-state-file path (when blocks
                          {"host" (. (.get current-host) hostname) "applied" blocks})))

(defn _retract [fact propapps * [evaluated True]]
  (setv key (_during-key fact propapps)
        label (propapp-desc fact)
        blocks (_applied-blocks (_record-path))
        was (in key blocks)
        result NO-CHANGE
        failed 0)
  (when (not evaluated)
    (inform f"during {label}: retracted"))
  (for [[k facet] (sorted (.items (.get (.get blocks key {}) "facets" {})))]
    (try (when (!= (_retract-facet (data->propspec facet) label) NO-CHANGE)
           (setv result :changed))
         (except [r Reported]
           (when r.lost? (raise))
           (+= failed 1))))
  (for [[p retractable] (_retraction (if (free-binders propapps) [] propapps))]
    (if retractable
        (try
          ;; Announced as retracted: "Unapplied: …".
          (when (!= (apply-and-announce (unapplied p)) NO-CHANGE)
            (setv result :changed))
          (except [r Reported]
            (when r.lost? (raise))
            (+= failed 1)))
        (_dropped p label was)))
  (when failed
    (raise (Reported (FailedChange (+ f"{failed} of the properties held during {label} "
                                      "could not be retracted")))))
  (_note-applied key fact False blocks)
  result)

(defn _retraction [propapps]
  ;; What retracting PROPAPPS does, in order: #(propapp unapply?) pairs,
  ;; last first, groups that cannot be unapplied whole opened up.
  (setv out [])
  (for [p (reversed (lfor p propapps :if (is-not p None) p))]
    ;; A sequence that cannot be unapplied as a whole is retracted member
    ;; by member: those that can be unapplied are, the others dropped.
    (cond (_retractable? p) (.append out #(p True))
          (sequence? p) (.extend out (_retraction (propapps-in p.args)))
          True (.append out #(p False))))
  out)

(defn _retractable? [p]
  ;; Whether unapplying P undoes all it did, never failing for want of an
  ;; :unapply somewhere inside.
  (setv prop (find-property p.name))
  (cond (retractable? p) True
        (not (unapplicable? prop)) False
        (and prop.simulates (not prop.opaque-type))
        (all (gfor q (propapps-in p.args) (_retractable? q)))
        True True))

(defn _dropped [p label was]
  ;; Under the during's own line, which says whether the fact holds.
  (setv what (propapp-desc p))
  (emit (if was
            {#** (output-event (+ (if (checking?) "would drop: " "dropped: ")
                                  f"{what} (it cannot be unapplied: what it did while "
                                  f"{label} held stays)"))
             "dropped" what}
            (output-event f"not applied: {what}"))))

(defn during-facts [propspec]
  "The `during` blocks in PROPSPEC (a host's preprocessed propspec),
outermost first, each a dict: \"during\", the block's propapp; \"fact\",
its fact application; \"watch\", the fact's watch specs (see
`consfig.model.fact.watch-spec-problem`; [] to poll at the host's interval).  What
a converging agent watches, to call `during-reevaluated` when a watch fires.
A deployment of another host inside PROPSPEC is not looked into."
  (setv found [])
  (defn walk [p]
    (setv fact (fact-of p))
    (when fact
      (.append found {"during" p "fact" fact "watch" (fact-watch fact)}))
    (when (not (. (find-property p.name) opaque-type))
      (for [q (propapps-in p.args)] (walk q))))
  (when propspec (walk propspec))
  found)

(defn during-reevaluated [block [decisions None]]
  "Evaluate the `during` BLOCK (a propapp, as `during-facts` gives) again,
as a deployment does: announced, its fact asked, its properties applied or
retracted, its record on the target kept.  Return `:no-change` or a changed
result; a failure is shown, counted and raised as a `Reported`.  Call it
while the host is applied (`consfig.model.context.applying`, in a
`consfig.apply.engine.Run`), when a watch of its fact fired.  DECISIONS, a
list, gets #(FACT HOLDS) for each `during` evaluated, outermost first:
whether its fact held when it was asked, which is what was applied or
retracted (the fact may have changed since)."
  (when (not (and (isinstance block Propapp) (fact-of block)))
    (raise (ValueError f"during-reevaluated: {block !r} is not a during block")))
  (setv token (.set _decisions decisions))
  (try
    (apply-and-announce block)
    (finally (.reset _decisions token))))

(export :objects [eseqprops seqprops silent-seqprops eseqprops-until unapplied
                  reapplied with-unapply on-change on-apply-change desc
                  with-flagfile with-requirements with-command-timeout
                  during during-facts during-reevaluated])
