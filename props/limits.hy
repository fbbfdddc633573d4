"Resource limits of login sessions: drop-ins of /etc/security/limits.d,
which pam_limits reads."

(eval-when-compile (require consfig.model.property [defprop]))
(import consfig.model.watchspec [watch-path])
(import re
        consfig.props.file [remove-files update-file]
        consfig.types *)

(setv DIRECTORY "/etc/security/limits.d")

(setv _DOMAIN r"\*|[@%]?[a-z_][a-z0-9_-]{0,31}\$?|@?[0-9]*:[0-9]*"
      _ITEMS #("core" "data" "fsize" "memlock" "nofile" "rss" "stack" "cpu" "nproc" "as"
               "maxlogins" "maxsyslogins" "nonewprivs" "priority" "locks" "sigpending"
               "msgqueue" "nice" "rtprio" "chroot"))

(defn _limit-value? [v]
  (or (and (isinstance v int) (not (isinstance v bool)))
      (in v #("unlimited" "infinity"))))

(defn _entry? [e]
  (and (isinstance e #(list tuple)) (= (len e) 4)
       (isinstance (get e 0) str) (re.fullmatch _DOMAIN (get e 0))
       (in (get e 1) #("soft" "hard" "-"))
       (in (get e 2) _ITEMS)
       (_limit-value? (get e 3))))

(setv limits-name (matching "limits-name"
                            "a drop-in name (letters, digits, _ . and -, not starting with . or -)"
                            r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
      limit (predicate "limit"
                       (+ "a [domain type item value] list: a user, @group, % or *; \"soft\", "
                          "\"hard\" or \"-\"; an item of limits.conf(5) such as \"nofile\"; "
                          "an integer, \"unlimited\" or \"infinity\"")
                       _entry?))

(defn limits-path [name]
  "The drop-in NAME in /etc/security/limits.d (pam_limits reads *.conf only)."
  (+ DIRECTORY "/" name ".conf"))

(defn limits-text [entries]
  "The text of a limits.conf(5) drop-in with ENTRIES."
  (+ "# Written by consfig.\n"
     (.join "" (gfor e entries (+ (.join "\t" (map str e)) "\n")))))

(defprop configured :posix [#^ limits-name name #^ limit #* entries]
  "/etc/security/limits.d/NAME.conf holds ENTRIES, each `[domain type item
value]` as in limits.conf(5), and nothing else; sessions opened afterwards
get those limits.  Unapplying removes the file.

  (limits.configured \"postgres\" [\"postgres\" \"-\" \"nofile\" 65536])"
  (:watch [(watch-path (limits-path name))])
  (:simulates True)
  (:invariant entries "needs at least one limit")
  (:desc f"limits {name}: {(.join ", " (gfor e entries (.join " " (map str e))))}")
  (:apply (update-file (limits-path name) (limits-text entries) :mode 0o644))
  (:unapply (remove-files (limits-path name))))

(export :objects [DIRECTORY limits-path limits-text configured])
