"Meta-parameters: how any propapp is applied, written around it.

  (with-meta {:retry 3 :delay 5} (apt.installed \"nginx\"))

`with-meta` is a combinator, so a propspec that uses it stays printable
data.  Its options are checked when the propapp is built (and again when a
propspec is read back from data):

  :retry N      a failing apply (or unapply) is tried again, up to N more
                times; each failed attempt but the last is a note, the last
                one's failure is the property's.
  :delay S      seconds (a float is fine) between those attempts.
  :noop B       the properties are checked and what would change is
                reported, with diffs, as check mode does; nothing is
                changed.  The host's summary counts them as drift.
  :reverse B    when a property applied under it has left the host's
                propspec, the next deployment unapplies it.
  :poll S       how often the converging agent re-checks a property that
                has no watch.
  :limit R      repairs per second the agent allows itself …
  :burst N      … and how many it may make at once (needs :limit).

Meta-parameters apply to the leaf propapps inside (those that hold no other
propapp); an inner `with-meta` wins over an outer one.  `effective-meta`
says what holds for each leaf, for the agent; `RepairLimit` is the token
bucket that `:limit` and `:burst` describe.

`:reverse` is kept on the target: each propapp applied under it is written
(before it is applied) in `reverse/HOSTNAME.json` in consfig's state
directory there (`consfig.apply.targetstate`, as for pending handlers).  At
the end of every deployment of the host's whole propspec, those recorded
that are no longer in the propspec are unapplied (what a sequence in them
holds, property by property, so that an edited proplist keeps what it still
holds), and forgotten once that succeeded; one that fails stays recorded
and is tried again the next time.
One still in the propspec but no longer under `:reverse` is forgotten."

(eval-when-compile (require consfig.model.property [defprop]))
(import json
        time
        hy.models [Keyword]
        consfig.model.context [current-host]
        consfig.apply.engine [NO-CHANGE Reported apply-and-announce apply-sequence checking? current-ending
                              current-meta describe-meta effective-meta inform meta-dict meta-in-force
                              meta-name unapplicable?]
        consfig.errors [FailedChange PropspecError]
        consfig.model.property [Propapp children did-you-mean find-property meta-of propapp-desc
                                propapp-hostattrs propapps-in sequence? site-where]
        consfig.model.propspec [data->propspec propspec->data]
        consfig.apply.targetstate [host-state-file read-state-file save-state-file]
        consfig.types [Type propspec show])

;; The meta-parameters: name -> #(accepts? phrase).
(defn _number? [v] (and (isinstance v #(int float)) (not (isinstance v bool))))
(defn _count? [v] (and (isinstance v int) (not (isinstance v bool))))

(setv PARAMETERS
      {"retry" #((fn [v] (and (_count? v) (>= v 0))) "a number of retries (an integer, 0 or more)")
       "delay" #((fn [v] (and (_number? v) (>= v 0))) "seconds between retries (a number, 0 or more)")
       "poll" #((fn [v] (and (_number? v) (> v 0))) "seconds between checks (a number above 0)")
       "limit" #((fn [v] (and (_number? v) (> v 0))) "repairs per second (a number above 0)")
       "burst" #((fn [v] (and (_count? v) (>= v 1))) "a number of repairs (an integer, 1 or more)")
       "noop" #((fn [v] (isinstance v bool)) "True or False")
       "reverse" #((fn [v] (isinstance v bool)) "True or False")})

(defn _explain [value]
  ;; What is wrong with VALUE as the options of a `with-meta`, or None.
  (when (not (isinstance value dict))
    (return f"must be a dict of meta-parameters such as {{:retry 3 :delay 5}}, not {(show value)}"))
  (for [[k v] (.items value)]
    (setv name (meta-name k))
    (when (not-in name PARAMETERS)
      (setv near (did-you-mean (or name (str k)) PARAMETERS))
      (return (+ f"has an unknown meta-parameter {(show k)}"
                 (if near f" (did you mean :{(cut near (len "; did you mean ") -1)}?)" "")
                 f"; the meta-parameters are {(.join " " (gfor p PARAMETERS f":{p}"))}")))
    (setv #(ok phrase) (get PARAMETERS name))
    (when (not (ok v))
      (return f":{name} must be {phrase}, not {(show v)}")))
  (setv names (sfor k value (meta-name k)))
  (when (and (in "burst" names) (not-in "limit" names))
    (return ":burst needs :limit (repairs per second); the burst is how many may come at once"))
  (when (and (in "delay" names) (not-in "retry" names))
    (return ":delay is the pause between retries, so it needs :retry"))
  None)

(setv meta-parameters (Type "meta-parameters" "a dict of meta-parameters" None))
(setv meta-parameters.explain _explain)

(defn _children-unapplicable? [propapps]
  (all (gfor p propapps (and (isinstance p Propapp) (unapplicable? (find-property p.name))))))

(defn _no-unapply [propapps]
  (setv names (lfor p propapps
                    :if (not (unapplicable? (find-property p.name)))
                    (. (find-property p.name) short-name)))
  (+ f":reverse needs properties that can be unapplied, but {(.join ", " names)} "
     "has no :unapply (docs/properties.md says which can be)"))

(defn _opened? [propapp]
  ;; Sequences (and `with-meta`) unapply what they hold; any other property
  ;; with an :unapply knows how it is undone.
  (or (sequence? propapp) (is-not (meta-of propapp) None)))

(defn _cannot-unapply [propapp]
  ;; The propapps inside PROPAPP (expanded) that unapplying it would meet
  ;; and that have no :unapply.
  (setv prop (find-property propapp.name))
  (cond (_opened? propapp)
        (sum (gfor p (propapps-in propapp.args) (_cannot-unapply p)) [])
        (unapplicable? prop) []
        True [propapp]))

(defn _check-expansions [propapps]
  ;; A defproplist passed the check at load (it has no :apply of its own);
  ;; once expanded, what it holds must be undoable too.
  (for [p propapps]
    (setv missing (_cannot-unapply p))
    (when missing
      (raise (PropspecError f"with-meta: {(_no-unapply missing)}, in {(propapp-desc p)}"
                            (site-where p))))))

(defprop with-meta :posix [#^ meta-parameters meta #^ propspec #* propapps]
  "Apply PROPAPPS in order (as `eseqprops`) under the meta-parameters META,
a dict such as `{:retry 3 :delay 5}`: `:retry`, `:delay`, `:noop`,
`:reverse`, `:poll`, `:limit`, `:burst`.  See `consfig.apply.meta`."
  (:simulates True)
  (:announce False)
  (:meta (meta-dict meta))
  (:invariant propapps "needs the properties it applies")
  (:invariant (or (not (.get (meta-dict meta) "reverse")) (_children-unapplicable? propapps))
              (_no-unapply propapps))
  (:hostattrs
    (for [p propapps] (propapp-hostattrs p))
    (when (.get (meta-dict meta) "reverse")
      (_check-expansions propapps)))
  (:apply
    (setv m (meta-dict meta))
    (with [(meta-in-force m)]
      (when (and (.get m "reverse") (not (checking?)))
        (_record propapps))
      (apply-sequence propapps)))
  (:unapply
    (with [(meta-in-force (meta-dict meta))]
      (apply-sequence propapps :unapply True))))

(defclass RepairLimit []
  "A token bucket: LIMIT repairs a second on average, BURST of them at
once.  CLOCK (by default `time.monotonic`) gives the time in seconds.

  (setv limit (RepairLimit 1 5))
  (when (.allow limit) (repair))   ; else wait until (.next-allowed limit)"
  (defn __init__ [self limit [burst 1] * [clock time.monotonic]]
    (when (not (and (_number? limit) (> limit 0)))
      (raise (ValueError f"limit must be a number of repairs per second above 0, not {limit !r}")))
    (when (not (and (_count? burst) (>= burst 1)))
      (raise (ValueError f"burst must be an integer, 1 or more, not {burst !r}")))
    (setv self.limit limit
          self.burst burst
          self.clock clock
          self.tokens (float burst)
          self.stamp (clock)))

  (defn _refill [self]
    (setv now (self.clock)
          self.tokens (min (float self.burst)
                           (+ self.tokens (* (- now self.stamp) self.limit)))
          self.stamp now))

  (defn allow [self]
    "Whether a repair may be made now; if so, it is counted."
    (self._refill)
    (if (>= self.tokens 1)
        (do (-= self.tokens 1) True)
        False))

  (defn next-allowed [self]
    "The time (on CLOCK) at which the next repair will be allowed: now, or
when the bucket holds a whole token again."
    (self._refill)
    (if (>= self.tokens 1)
        self.stamp
        (+ self.stamp (/ (- 1 self.tokens) self.limit))))

  (defn __repr__ [self]
    f"<RepairLimit {self.limit}/s burst {self.burst}>"))

;; `:reverse`, kept on the target.  The records of the deployment being
;; applied are in its `Ending`: "path", "records" (key -> {"propapp" data
;; "meta" meta}, in order) and "loaded".

(defn _key [propapp]
  ;; Equal propapps have equal data, whatever printed them.
  (json.dumps (propspec->data propapp) :sort-keys True))

(defn _state []
  (.setdefault (. (current-ending) state) "reverse"
               {"path" None "records" {} "loaded" False}))

(defn _path [st]
  (when (is (get st "path") None)
    (setv (get st "path") (host-state-file "reverse" (. (.get current-host) hostname))))
  (get st "path"))

(defn _load [st]
  (when (get st "loaded") (return))
  (setv path (_path st)
        data (try (read-state-file path)
                  (except [ValueError] "")))
  (setv entries (if (is data None)
                    []
                    (try (get data "applied")
                         (except [#(KeyError TypeError)] None))))
  (when (not (and (isinstance entries list)
                  (all (gfor e entries (and (isinstance e dict) (in "propapp" e))))))
    (raise (FailedChange (+ f"{path} is not a list of consfig's properties applied under "
                            ":reverse; look at it, and remove it if nothing is to be unapplied"))))
  ;; Recorded before this was read: after the older ones.
  (setv (get st "records") {#** (dfor e entries (json.dumps (get e "propapp") :sort-keys True) e)
                            #** (get st "records")}
        (get st "loaded") True))

(defn _save [st]
  (save-state-file (_path st) (when (get st "records")
                                {"host" (. (.get current-host) hostname)
                                 "applied" (list (.values (get st "records")))})))

(defn _record [propapps]
  ;; Written before they are applied: one that fails half-way is still
  ;; undone when it leaves the propspec.
  (setv st (_state)
        meta (dfor [k v] (.items (.get current-meta)) :if (!= k "reverse") k v))
  (_load st)
  (setv new False)
  (for [p propapps]
    (when (= (.get (or (meta-of p) {}) "reverse") False)
      (continue))
    (setv key (_key p))
    (when (not-in key (get st "records"))
      (setv (get st "records") {#** (get st "records")
                                key {"propapp" (propspec->data p) "meta" meta}}
            new True)))
  (when new
    (try
      (_save st)
      (except [e Exception]
        (raise (FailedChange (+ f"could not record what to unapply once it leaves the "
                                f"propspec ({(_path st)}): {e}")))))))

(defn _reversible [propspec]
  ;; The keys of the propapps of PROPSPEC applied under `:reverse`, and of
  ;; every propapp in it.
  (setv under #{}
        present #{})
  (defn walk [p]
    (.add present (_key p))
    (when (.get (or (meta-of p) {}) "reverse")
      (for [q (children p)] (.add under (_key q))))
    (when (not (. (find-property p.name) opaque-type))
      (for [q (propapps-in p.args)] (walk q))))
  (walk propspec)
  #(under present))

(defn _units [propapp meta]
  ;; What unapplying PROPAPP comes to, as `[propapp meta]`: the propapps a
  ;; sequence holds (and those they hold), each under the meta-parameters
  ;; it was applied with; any other propapp is undone whole.
  (setv own (meta-of propapp))
  (cond (is-not own None)
        (do (setv inner {#** meta #** (dfor [k v] (.items own) :if (!= k "reverse") k v)})
            (sum (gfor q (children propapp) (_units q inner)) []))
        (sequence? propapp)
        (sum (gfor q (propapps-in propapp.args) (_units q meta)) [])
        True [[propapp meta]]))

(defn _unapply-recorded [entry present]
  ;; Unapply, last first, what the recorded propapp holds that has left
  ;; the propspec: a proplist edited since keeps what it still holds.
  ;; Each under the meta-parameters it was applied with (its :retry too).
  ;; A failure is counted, and the others are still unapplied.
  (setv desc (find-property "consfig.combinators.desc")
        result NO-CHANGE
        failure None)
  (for [[p meta] (reversed (_units (data->propspec (get entry "propapp")) (get entry "meta")))]
    (when (in (_key p) present) (continue))
    (try
      (when (!= (apply-and-announce
                  (desc (+ "no longer in the propspec, unapplied: " (propapp-desc p))
                        (with-meta (dfor [k v] (.items meta) (Keyword k) v) p))
                  :unapply True)
                NO-CHANGE)
        (setv result :changed))
      (except [r Reported]
        (when r.lost? (raise))
        (setv failure (or failure r)))))
  (when failure (raise failure))
  result)

(defprop removed-unapplied :posix []
  "Unapply what was applied under `:reverse` and has left the host's
propspec since; applied by the engine at the end of every deployment of a
host's whole propspec.  See `consfig.apply.meta`."
  (:simulates True)
  (:announce False)
  (:apply
    (setv st (_state)
          propspec (. (.get current-host) propspec))
    (try
      (_path st)
      (except [FailedChange]
        ;; A hostname that cannot name a file: nothing was recorded for it.
        (return NO-CHANGE)))
    (_load st)
    (when (or (not (get st "records")) (is propspec None)) (return NO-CHANGE))
    (setv #(under present) (_reversible propspec)
          result NO-CHANGE
          failure None
          kept {})
    (for [[key entry] (.items (get st "records"))]
      (cond (in key under) (setv (get kept key) entry)
            (in key present)
            (inform (+ f"{(propapp-desc (data->propspec (get entry "propapp")))} is no longer "
                       "under :reverse: it stays applied, and is forgotten"))
            True
            (try
              (when (!= (_unapply-recorded entry present) NO-CHANGE)
                (setv result :changed))
              (when (checking?) (setv (get kept key) entry))
              (except [r Reported]
                (when r.lost? (raise))
                (setv (get kept key) entry
                      failure (or failure r)))
              (except [e PropspecError]
                ;; Its property is gone, or takes other arguments now.
                (inform (+ f"cannot unapply {(get entry "propapp")} any more ({e}); "
                           "it stays recorded in " (_path st)))
                (setv (get kept key) entry)))))
    (when (and (not (checking?)) (!= (list kept) (list (get st "records"))))
      (setv (get st "records") kept)
      (_save st))
    (when failure (raise failure))
    result))

(export :objects [with-meta effective-meta RepairLimit meta-parameters meta-dict
                  describe-meta removed-unapplied PARAMETERS])
