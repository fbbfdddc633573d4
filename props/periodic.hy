"Applying expensive properties now and then rather than every time."

(eval-when-compile (require consfig.model.property [defprop]))
(import posixpath
        re
        consfig.apply.actions [NO-CHANGE Script run run-script output remote-exists?]
        consfig.apply.engine [WOULD-CHANGE apply-sequence checking? inform]
        consfig.util [keyword-name]
        consfig.types *)

(setv period (one-of (enum "each-reboot" "hourly" "daily" "weekly" "monthly" "yearly")
                     (predicate "seconds" "a number of seconds (a positive integer)"
                                (fn [v] (and (isinstance v int) (not (isinstance v bool)) (> v 0))))))

(setv PERIODS {"hourly" 3600
               "daily" 86400
               "weekly" (* 7 86400)
               "monthly" (* 30 86400)
               "yearly" (round (* 365.25 86400))})

(defn _period-name [period]
  (or (keyword-name period) period))


(defn flag-file [desc]
  "The flag file that records when the propapps described by DESC were last
applied, in the connecting user's cache on the target."
  (setv name (re.sub r"[^A-Za-z0-9_.-]" "_" desc))
  (+ (.rstrip (output (Script "printf '%s' \"${XDG_CACHE_HOME:-$HOME/.cache}\"")) "/")
     "/consfig/at-most/" name))

(defn fresh? [period desc]
  "Whether the propapps described by DESC were applied within PERIOD."
  (setv flag (flag-file desc)
        #(mtime now boot) (_times-of flag)
        p (_period-name period))
  (cond (is mtime None) False
        (= p "each-reboot") (> mtime boot)
        True (< now (+ mtime (if (isinstance p int) p (get PERIODS p))))))

(defn _times-of [flag]
  (setv r (run-script (+ "stat -c %Y -- \"$1\" 2>/dev/null || echo none; date +%s; "
                         "sed -n 's/^btime //p' /proc/stat 2>/dev/null")
                      flag
                      :check False)
        fields (+ (.split r.stdout) ["0" "0"]))
  #((if (= (get fields 0) "none") None (int (get fields 0)))
    (int (get fields 1))
    (int (get fields 2))))

(defprop at-most :posix [#^ period period #^ non-empty-line desc #^ propspec #* propapps]
  "Apply PROPAPPS (in order, stopping at the first failure) at most once
every PERIOD: `:each-reboot`, `:hourly`, `:daily`, `:weekly`, `:monthly` (30
days), `:yearly` or a number of seconds.  For properties that are expensive to
apply and need not be applied every time; not for running things at set
times (use `cron`).

A flag file named after DESC, in the cache of the user applying it on the
target, records the last successful application; DESC must be unique among
the host's uses of `at-most`.  A failed application is tried again next time.
Unapplying unapplies PROPAPPS and removes the flag."
  (:unwatched "time, not a resource, says when its propspec is applied again")
  (:desc desc)
  ;; No :check: a stale flag must not keep PROPAPPS from being unapplied.
  ;; In check mode, a fresh flag holds; a stale one would be renewed.
  (:simulates True)
  (:apply
    (when (fresh? period desc)
      (return NO-CHANGE))
    (setv result (apply-sequence propapps)
          flag (flag-file desc))
    (when (checking?)
      (inform f"{desc}: due, {flag} would be renewed")
      (return WOULD-CHANGE))
    (run "mkdir" "-p" "-m" "700" "--" (posixpath.dirname flag))
    (run "touch" "--" flag)
    result)
  (:unapply
    (setv result (apply-sequence propapps :unapply True)
          flag (flag-file desc))
    (cond (not (remote-exists? flag)) result
          (checking?) WOULD-CHANGE
          True (do (run "rm" "-f" "--" flag) :changed))))

(export :objects [PERIODS flag-file fresh? at-most])
