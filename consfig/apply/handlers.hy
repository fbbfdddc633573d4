"Handlers: properties applied once, at the end of a deployment, when
others notified them — Ansible's `notify`, without its way of losing one.

  (notifies \"restart-nginx\" (file.has-content \"/etc/nginx/nginx.conf\" conf))
  (handler \"restart-nginx\" (cmd.single \"systemctl\" \"restart\" \"nginx\"))

A `notifies` whose properties made a change notifies its handlers; each
handler notified runs once, however often it was notified, after the rest of
the deployment (or at a `flush-handlers`), in the order of the first
notification.  A handler is defined anywhere in the host's propspec (its
place there does not matter), once per name; a `notifies` naming a handler
the propspec does not define is refused when the consfig is loaded.

Ansible forgets a notification when the run fails after it: the next run
sees nothing to change, and the service is never restarted.  Here a
notification is written on the target before the deployment goes on, in
`handlers/HOSTNAME.json` under the target user's state directory
(/var/lib/consfig for root, see `consfig.util.state-directory`), and a
handler leaves that file only once it has run successfully.  A deployment
that failed runs no handler: they stay pending, and the next deployment of
the host runs them at its end, even when nothing else changes.  In check
mode, the handlers that would run are applied in check mode, so they show as
would-change (or cannot-check)."

(eval-when-compile (require consfig.model.property [defprop]))
(import consfig.apply.combinators [desc eseqprops]
        consfig.model.context [current-host]
        consfig.apply.engine [NO-CHANGE Reported WOULD-CHANGE apply-and-announce at-end
                              checking? current-ending failed-so-far? inform noop?]
        consfig.errors [FailedChange PropspecError]
        consfig.model.property [find-property handler-of hostattrs-of propapp-hostattrs propapps-in
                                site-where]
        consfig.apply.targetstate [host-state-file read-state-file save-state-file]
        consfig.types [named non-empty-line non-empty-list-of one-of propspec])

(setv handler-names (named "handler-names" (one-of non-empty-line (non-empty-list-of non-empty-line))
                           "a handler's name (one line), or a list of them"))

(defn _names [names]
  (if (isinstance names str) [names] (list names)))

(defn handler-definitions [propspec]
  "The handlers PROPSPEC defines: name → list of the `handler` propapps of
that name, in order.  A deployment of another host inside it (`deploys`)
has handlers of its own, and is not looked into."
  (setv found {})
  (defn walk [p]
    (setv prop (find-property p.name)
          name (handler-of p))
    (when (is-not name None)
      (.append (.setdefault found name []) p))
    (when (not prop.opaque-type)
      (for [q (propapps-in p.args)] (walk q))))
  (when propspec (walk propspec))
  found)

(defn _host-definitions []
  ;; While a host is preprocessed, its propspec is set before its
  ;; hostattrs are computed: None when only its hostattrs are wanted (those
  ;; of its own propspec, for a deploy-these).
  (setv host (.get current-host None))
  (when (and host (is-not host.propspec None))
    (handler-definitions host.propspec)))

(defn _refuse [message]
  (raise (PropspecError message (site-where (.get hostattrs-of)))))

(defn _check-defined [names]
  (setv defined (_host-definitions))
  (when (is defined None) (return))
  (for [n (_names names)]
    (when (not-in n defined)
      (_refuse (+ f"notifies {(hy.repr n)}: the host's propspec defines no handler of that name"
                  (if defined
                      f" (it defines {(.join ", " (map hy.repr (sorted defined)))})"
                      "")
                  f"; add (handler {(hy.repr n)} PROPAPP…)")))))

(defn _check-unique [name]
  (setv defined (_host-definitions))
  (when (and defined (> (len (.get defined name [])) 1))
    (_refuse (+ f"handler {(hy.repr name)} is defined "
                f"{(len (get defined name))} times in the host's propspec"
                (let [wheres (lfor p (get defined name) :if (site-where p) (site-where p))]
                  (if wheres f" (at {(.join ", " wheres)})" ""))
                "; give each handler a name of its own"))))

;; The pending handlers of the deployment being applied, in its `Ending`:
;; "path" of the file on the target, "pending" (names, in order; read from
;; the file when first needed), "loaded".

(defn _state []
  (.setdefault (. (current-ending) state) "handlers"
               {"path" None "pending" [] "loaded" False}))

(defn _pending-path [st]
  (when (is (get st "path") None)
    (setv (get st "path") (host-state-file "handlers" (. (.get current-host) hostname))))
  (get st "path"))

(defn _load [st]
  (when (get st "loaded") (return))
  (setv path (_pending-path st)
        data (try (read-state-file path)
                  (except [ValueError] "")))
  (setv pending (if (is data None)
                    []
                    (try (get data "pending")
                         (except [#(KeyError TypeError)] None))))
  (when (not (and (isinstance pending list) (all (gfor n pending (isinstance n str)))))
    (raise (FailedChange (+ f"{path} is not a list of pending handlers of consfig's; "
                            "look at it, and remove it if no handler is owed"))))
  ;; Notified before this was read: after the older ones.
  (setv (get st "pending") (list (dict.fromkeys (+ pending (get st "pending"))))
        (get st "loaded") True))

(defn _save [st]
  (setv path (_pending-path st))
  (save-state-file path (when (get st "pending")
                         {"host" (. (.get current-host) hostname)
                          "pending" (get st "pending")})))

(defn notify [names]
  "Notify the handlers NAMES (a name or a list): they run at the end of the
deployment being applied (or at its next `flush-handlers`).  Outside check
mode they are written among the target's pending handlers first."
  (setv names (_names names))
  (when (noop?)
    ;; Drift reported under :noop sets nothing off.
    (inform (+ "would notify " (.join ", " (map hy.repr names)) ": not notified, under :noop"))
    (return))
  (setv st (_state))
  (_load st)
  (setv new (lfor n names :if (not-in n (get st "pending")) n))
  (.extend (get st "pending") new)
  (when (and new (not (checking?)))
    (try
      (_save st)
      (except [e Exception]
        (raise (FailedChange (+ f"could not record that {(.join ", " names)} must run "
                                f"({(_pending-path st)}): {e}"))))))
  (inform (+ (if (checking?) "would notify " "notified ") (.join ", " (map hy.repr names))))
  (at-end "handlers" run-pending))

(defn _forget [st name]
  (.remove (get st "pending") name)
  (_save st))

(defn run-pending [failed]
  "Run the pending handlers of the deployment being applied — those
notified in it and those still owed from earlier ones — each once, in order,
unless it FAILED: then they stay pending.  A handler that succeeds leaves the
target's file of pending handlers; one that fails stays there."
  (setv st (_state))
  (_load st)
  (when (not (get st "pending")) (return NO-CHANGE))
  (when failed
    (inform (+ f"handlers not run, as this deployment failed: "
               (.join ", " (map hy.repr (get st "pending")))
               "; they stay pending, and run at the end of the next deployment"))
    (return NO-CHANGE))
  (setv defined (or (handler-definitions (. (.get current-host) propspec)) {})
        ran #{}
        result NO-CHANGE
        failure None)
  ;; A handler may notify another (or itself): each runs at most once here.
  (while (is-not (setx name (next (gfor n (get st "pending") :if (not-in n ran) n) None)) None)
    (.add ran name)
    (if (not-in name defined)
        (inform (+ f"handler {(hy.repr name)} is owed from an earlier deployment, but this "
                   "host's propspec defines no handler of that name: it stays pending"))
        (try
          (when (!= (apply-and-announce (_handler-body name (get defined name))) NO-CHANGE)
            (setv result :changed))
          (when (not (checking?)) (_forget st name))
          (except [r Reported]
            (when r.lost? (raise))
            (setv failure (or failure r))))))
  (when failure (raise failure))
  result)

(defn _handler-body [name definitions]
  (desc f"handler {name}" (eseqprops #* (cut (. (get definitions 0) args) 1 None))))

(defprop notifies :posix [#^ handler-names names #^ propspec #* propapps]
  "Apply PROPAPPS in order; if one of them made a change (or unapplying
one did), notify the handlers NAMES (a name, or a list of names): they run
once, at the end of the deployment.  A change is recorded on the target
before anything else is applied, so that a deployment failing later still
leaves the handler owed, for the next one to run.  See `consfig.apply.handlers`."
  (:simulates True)
  (:announce False)
  (:invariant propapps "needs properties whose changes notify")
  (:hostattrs
    (for [p propapps] (propapp-hostattrs p))
    (_check-defined names))
  (:apply (_notifying names propapps False))
  (:unapply (_notifying names propapps True)))

(defn _notifying [names propapps unapply]
  (setv changed False)
  (try
    (for [p (if unapply (reversed propapps) propapps)]
      (when (!= (apply-and-announce p unapply) NO-CHANGE)
        (setv changed True)))
    (finally
      ;; A change made before a failure still owes the handler.
      (when changed (notify names))))
  (if changed (if (checking?) WOULD-CHANGE :changed) NO-CHANGE))

(defprop handler :posix [#^ non-empty-line name #^ propspec #* propapps]
  "Define the handler NAME: PROPAPPS, applied in order (stopping at the first
failure) at the end of a deployment in which a `notifies` naming it made a
change, or which owes it from an earlier one that failed.  Where it is
written in the host's propspec does not matter; applying it there only
makes sure the handlers owed run at the end.  See `consfig.apply.handlers`."
  (:simulates True)
  (:announce False)
  (:desc f"handler {name}")
  (:handler name)
  (:invariant propapps "needs the properties it applies")
  (:hostattrs
    (for [p propapps] (propapp-hostattrs p))
    (_check-unique name))
  (:apply (_owed))
  (:unapply (_owed)))

(defn _owed []
  (at-end "handlers" run-pending)
  NO-CHANGE)

(defprop flush-handlers :posix []
  "Run now the handlers notified so far (and those owed from earlier
deployments), rather than at the end of the deployment; unless the
deployment has failed so far.  Handlers notified after it run at the end."
  (:simulates True)
  (:announce False)
  (:apply (run-pending (failed-so-far?))))

(export :objects [notifies handler flush-handlers notify])
