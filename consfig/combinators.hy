"Property combinators: properties whose arguments are propapps.

They follow Consfigurator's semantics.  The sequencing ones (`eseqprops`,
`seqprops`, …) are not announced themselves — their elements are; the others
are announced under a description of their own or of the propapp they wrap.

In check mode they are run as they are (they are `:simulates`): each applies
the propapps it holds in check mode, so nothing changes.  `with-flagfile`
answers from its flag file."

(eval-when-compile (require consfig.property [defprop]))
(import posixpath
        hy.models [Keyword]
        consfig.actions [NO-CHANGE run remote-exists?]
        consfig.context [commands-bounded-by]
        consfig.engine [Drift apply-propapp unapply-propapp apply-sequence unapplicable?]
        consfig.errors [AbortedChange CommandFailed FailedChange PropspecError]
        consfig.host [preserving-hostattrs]
        consfig.property [Propapp find-property propapp-desc propapp-hostattrs propapps-in]
        consfig.types [propspec seconds]
        consfig.util [keyword-name])

(defprop eseqprops :posix [#* propapps]
  "Apply PROPAPPS in order, stopping at the first failure.  Unapplying
unapplies them in reverse order."
  (:simulates True)
  (:announce False)
  (:apply (apply-sequence propapps))
  (:unapply (apply-sequence propapps :unapply True)))

(defprop seqprops :posix [#* propapps]
  "Apply PROPAPPS in order; a failure is reported and skipped, and the
sequence carries on.  The sequence fails if any element failed."
  (:simulates True)
  (:announce False)
  (:apply (apply-sequence propapps :stop-on-failure False))
  (:unapply (apply-sequence propapps :unapply True :stop-on-failure False)))

(defprop silent-seqprops :posix [#* propapps]
  "Like `seqprops`, but the elements are not announced one by one.
Failures are still reported."
  (:simulates True)
  (:announce False)
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
  (:simulates True)
  (:announce False)
  (:preprocess (do (_condition condition) [condition #* propapps]))
  (:apply (apply-sequence propapps :until (_condition condition)))
  (:unapply (apply-sequence propapps :unapply True :until (_condition condition))))

(defprop unapplied :posix [propapp]
  "Unapply PROPAPP when applied, and apply it when unapplied: its check is
negated and its :apply and :unapply are swapped."
  (:simulates True)
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
  (:simulates True)
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
  (:simulates True)
  (:announce False)
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
  (:simulates True)
  (:desc (_trigger-desc propapp))
  (:apply (_then-if-changed (apply-propapp propapp) on-change))
  (:unapply (_then-if-changed (unapply-propapp propapp) on-change)))

(defprop on-apply-change :posix [propapp #* on-change]
  "Like `on-change`, but only applying PROPAPP triggers ON-CHANGE."
  (:simulates True)
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
  (:simulates True)
  (:desc desc)
  (:apply (apply-propapp propapp))
  (:unapply (unapply-propapp propapp)))

(defprop with-flagfile :posix [flagfile #* propapps]
  "Apply PROPAPPS unless FLAGFILE exists on the target, then create it; so
PROPAPPS are applied once.  Unapplying unapplies them and removes FLAGFILE."
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
  (:simulates True)
  (:announce False)
  (:apply (with [(commands-bounded-by seconds)] (apply-sequence propapps)))
  (:unapply (with [(commands-bounded-by seconds)] (apply-sequence propapps :unapply True))))

(export :objects [eseqprops seqprops silent-seqprops eseqprops-until unapplied
                  reapplied with-unapply on-change on-apply-change desc
                  with-flagfile with-requirements with-command-timeout])
