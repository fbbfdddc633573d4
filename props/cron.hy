"cron jobs: system jobs in /etc/cron.*, and users' crontabs."

(eval-when-compile
  (require consfig.model.property [defprop]
           consfig.model.propspec [defproplist defpropspec]))
(import consfig.model.watchspec [watch-path])
(import posixpath
        re
        shlex
        hy.models [Keyword]
        consfig.apply.combinators [with-unapply unapplied]
        consfig.apply.actions [run]
        consfig.props [file package service]
        consfig.types *)

;; Where cron keeps users' crontabs (Debian's), watched whole: the user may
;; be the connecting one, which only the target knows.
(setv CRONTAB-DIRECTORY "/var/spool/cron/crontabs")

(setv PERIODIC #("hourly" "daily" "weekly" "monthly"))
(setv PATH "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")

(defn job-name [desc]
  "DESC as a file name that cron and run-parts accept."
  (re.sub r"[^A-Za-z0-9_-]" "_" desc))

;; A crontab(5) time is five fields (or an @ nickname) on one line: anything
;; else in a schedule would write lines of its own into /etc/cron.d.
(setv schedule (one-of (enum #* PERIODIC)
                       (matching "crontab-time"
                                 "a crontab time such as \"0 3 * * *\" (five fields, or @daily & co.)"
                                 r"@[a-z]+|[0-9A-Za-z*/,-]+([ \t]+[0-9A-Za-z*/,-]+){4}")))

(defn _periodic [schedule]
  (when (isinstance schedule Keyword) schedule.name))

(defn job-path [desc schedule]
  "Where the job DESC runs from: /etc/cron.d, or /etc/cron.daily & co."
  (posixpath.join f"/etc/cron.{(or (_periodic schedule) "d")}" (job-name desc)))

(defn script-path [desc]
  "The script that runs the job DESC, which can be run by hand too."
  (posixpath.join "/usr/local/bin" (+ (job-name desc) "_cronjob")))

(defn script-text [desc command]
  "The job's script: no overlapping runs, and output only when it fails,
so that cron mails it then and only then."
  (setv lock (shlex.quote (script-path desc)))
  (.join "\n" ["#!/bin/sh"
               f"# consfig cron job: {desc}"
               "log=$(mktemp) || exit 1"
               "trap 'rm -f \"$log\"' EXIT"
               f"if ! flock -n {lock} sh -c {(shlex.quote command)} >\"$log\" 2>&1; then"
               "    cat \"$log\""
               "    exit 1"
               "fi"
               ""]))

(defn _runner [user script]
  (if (= user "root")
      script
      f"runuser -u {(shlex.quote user)} -- {script}"))

(defn job-text [desc schedule user]
  "The file cron reads for the job DESC."
  (setv script (shlex.quote (script-path desc)))
  (if (_periodic schedule)
      (.join "\n" ["#!/bin/sh" f"# consfig cron job: {desc}" "set -e" PATH
                   f"exec {(_runner user script)}" ""])
      (.join "\n" [f"# consfig cron job: {desc}" "SHELL=/bin/sh" PATH ""
                   f"{schedule}\t{user}\t{script}" ""])))

(defpropspec system-job :posix [#^ non-empty-line desc #^ schedule schedule #^ user-name user
                                #^ non-empty-string command]
  "cron runs the shell COMMAND as USER on SCHEDULE: `:hourly`, `:daily`,
`:weekly`, `:monthly` (from /etc/cron.daily & co.) or a crontab(5) time such
as \"0 3 * * *\" (from /etc/cron.d).  DESC names the job and its files, so it
must be unique.  Runs never overlap, and the job's output is mailed only
when it fails.  Installs cron and keeps it running.  Unapplying removes the
job (and leaves cron installed).  Debian and derivatives."
  (:desc f"Cron job {desc}")
  ;; Code, not a walked propspec: SCHEDULE may be a keyword, which a walked
  ;; function call would take for a keyword argument.
  (setv job (job-path desc schedule)
        script (script-path desc))
  (with-unapply
    (package.installed "cron")
    (service.running "cron")
    (file.has-content script (script-text desc command) :mode 0o755)
    (file.has-content job (job-text desc schedule user)
                      :mode (if (_periodic schedule) 0o755 0o644))
    :unapply
    (file.does-not-exist job script)))

(defproplist nice-system-job :posix [#^ non-empty-line desc #^ schedule schedule #^ user-name user
                                     #^ non-empty-string command]
  "Like `system-job`, but COMMAND runs niced (by 10) and with idle I/O
priority (`ionice -c 3`)."
  (:desc f"Cron job {desc} (niced)")
  (system-job desc schedule user f"nice ionice -c 3 sh -c {(shlex.quote command)}"))

(defn crontab-text [content env]
  "A crontab: a header, ENV (a dict) as variable settings, and CONTENT (a
string or a list of lines)."
  (+ "# Installed by consfig: changes made here will be overwritten.\n"
     (.join "" (gfor [k v] (.items (or env {})) f"{k}={v}\n"))
     (if (isinstance content str)
         (+ content (if (.endswith content "\n") "" "\n"))
         (.join "" (gfor l content (+ l "\n"))))))

(defn _crontab-argv [user]
  (if user ["crontab" "-u" user] ["crontab"]))

(defn installed-crontab [[user None]]
  "USER's crontab (the connecting user's by default), or None."
  (setv r (run #* (_crontab-argv user) "-l" :check False :timeout 60))
  (when r.ok? r.stdout))

(defprop crontab-installed :posix [#^ (one-of string (list-of line)) content
                                   * #^ user-name [user None] #^ (dict-of shell-identifier line) [env None]]
  "USER's crontab (by default that of the user the connection runs as) is
exactly CONTENT, after a header and the variable settings ENV (a dict, such as
`{\"MAILTO\" \"admin@example.org\"}`).  Does not install cron: see
`user-crontab-installed`.  Unapplying removes the crontab."
  (:watch [(watch-path CRONTAB-DIRECTORY)])
  (:desc f"crontab of {(or user "the connecting user")} installed")
  (:check (= (installed-crontab user) (crontab-text content env)))
  (:apply (run #* (_crontab-argv user) "-" :input (crontab-text content env) :timeout 60))
  (:unapply (run #* (_crontab-argv user) "-r" :timeout 60)))

(defproplist user-crontab-installed :posix [#^ (one-of string (list-of line)) content
                                            * #^ user-name [user None]
                                            #^ (dict-of shell-identifier line) [env None]]
  "cron is installed and running, and USER's crontab is exactly CONTENT
(see `crontab-installed`).  Unapplying removes the crontab and leaves cron
installed."
  (:desc f"crontab of {(or user "the connecting user")} installed")
  (with-unapply
    (package.installed "cron")
    (service.running "cron")
    (crontab-installed content :user user :env env)
    :unapply
    (unapplied (crontab-installed content :user user :env env))))

(export :objects [job-name job-path script-path script-text job-text system-job
                  nice-system-job crontab-text installed-crontab
                  crontab-installed user-crontab-installed])
