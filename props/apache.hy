"Apache on Debian: sites, configuration snippets and modules, enabled and
disabled with Debian's a2ensite, a2enconf and a2enmod (asked with a2query).

Every change that Apache would read is tested with `apache2ctl
configtest` before Apache is asked to reload: a configuration that fails
the test is put back as it was (the old file; the links of mods-enabled,
sites-enabled and conf-enabled as they were, also those a2enmod changed for
a module's dependencies or conflicts) and the property fails, with what
Apache said.  Apache reloads (gracefully) after a change where services run
(not in a chroot: see `service.without-starting-services`), and only when it
is running.  Switching the MPM needs a restart: `service.restarted`."

(eval-when-compile
  (require consfig.model.property [defprop]
           consfig.model.propspec [defproplist]))
(import consfig.model.watchspec [watch-path])
(import posixpath
        consfig.apply.actions [NO-CHANGE run run-ok? output remote-exists?]
        consfig.apply.engine [WOULD-CHANGE checking? inform]
        consfig.errors [FailedChange]
        consfig.props.apt :as apt
        consfig.props.file [read-bytes content->bytes update-file]
        consfig.props.service [reload-if-running tested-or-undone]
        consfig.types *)

(setv apache-name (matching "apache-name"
                            "a name (letters, digits, _ . and -, not starting with . or -)"
                            r"[A-Za-z0-9_][A-Za-z0-9_.-]*"))

(setv ROOT "/etc/apache2"
      TEST ["apache2ctl" "configtest"]
      ;; What each kind is called by Debian's tools, and where it lives.
      KINDS {"site" {"dir" "sites" "flag" "-s" "enable" "a2ensite" "disable" "a2dissite"}
             "conf" {"dir" "conf" "flag" "-c" "enable" "a2enconf" "disable" "a2disconf"}
             "module" {"dir" "mods" "flag" "-m" "enable" "a2enmod" "disable" "a2dismod"}})

(defn available-path [kind name]
  "The file of the site or conf NAME (KIND \"site\" or \"conf\")."
  (posixpath.join ROOT f"{(get KINDS kind "dir")}-available" (+ name ".conf")))

(defn enabled-path [kind name]
  "The link that enables the site or conf NAME (KIND \"site\" or \"conf\")."
  (posixpath.join ROOT f"{(get KINDS kind "dir")}-enabled" (+ name ".conf")))

(defn module-enabled-path [name]
  "The link that enables the module NAME (its .load)."
  (posixpath.join ROOT "mods-enabled" (+ name ".load")))

(defproplist installed :posix []
  "Apache is installed."
  (:desc "Apache installed")
  (apt.installed "apache2"))

(defn enabled? [kind name]
  "Whether the KIND (\"site\", \"conf\", \"module\") NAME is enabled, as a2query says."
  (run-ok? "a2query" "-q" (get KINDS kind "flag") name :timeout 60))

(defn _links []
  ;; Every link of the *-enabled directories: path → target.
  (setv out (output "find" #* (gfor k (.values KINDS) (posixpath.join ROOT f"{(get k "dir")}-enabled"))
                    "-maxdepth" "1" "-type" "l" "-printf" "%p\\t%l\\n" :timeout 60))
  (dict (gfor l (.splitlines out) :if (in "\t" l) (.split l "\t" 1))))

(defn _restore-links [before]
  (setv now (_links))
  (for [[p t] (.items now) :if (!= (.get before p) t)]
    (run "rm" "-f" "--" p :timeout 60))
  (for [[p t] (.items before) :if (!= (.get now p) t)]
    (run "ln" "-sfn" "--" t p :timeout 60)))

(defn _undo [path old before]
  (fn []
    (when path
      (if (is old None)
          (run "rm" "-f" "--" path :timeout 60)
          (update-file path old)))
    (_restore-links before)))

(defn _change [kind name text enable]
  ;; Write TEXT (unless None) and enable NAME (when ENABLE); test what
  ;; Apache reads, undoing both if the test fails; reload.
  (setv path (when (!= kind "module") (available-path kind name))
        old (when path (read-bytes path))
        rewrite (and (is-not text None) (!= old (content->bytes text)))
        was-enabled (enabled? kind name)
        enabling (and enable (not was-enabled)))
  (when (and enabling path (is text None) (is old None))
    (raise (FailedChange f"there is no {path}: give the {kind}'s text")))
  (when (not (or rewrite enabling))
    (return NO-CHANGE))
  (when (checking?)
    (when rewrite (update-file path text))
    (when enabling (inform f"{kind} {name} would be enabled"))
    (return WOULD-CHANGE))
  (setv before (_links))
  (when rewrite (update-file path text))
  (when enabling (run (get KINDS kind "enable") "-q" name :timeout 120))
  (when (or enabling was-enabled)
    (tested-or-undone TEST (_undo (when rewrite path) old before) f"Apache {kind} {name}")
    (reload-if-running "apache2"))
  None)

(defn _disable [kind name]
  (cond (not (enabled? kind name)) NO-CHANGE
        (checking?) (do (inform f"{kind} {name} would be disabled") WOULD-CHANGE)
        True (do (setv before (_links))
                 (run (get KINDS kind "disable") "-q" name :timeout 120)
                 (tested-or-undone TEST (_undo None None before) f"Apache {kind} {name} disabled")
                 (reload-if-running "apache2")
                 None)))

(defn _remove-available [kind name]
  (setv path (available-path kind name))
  (cond (not (remote-exists? path)) NO-CHANGE
        (checking?) (do (inform f"{path} would be removed") WOULD-CHANGE)
        True (do (_disable kind name)
                 (run "rm" "-f" "--" path :timeout 60)
                 None)))

(defprop site-available :posix [#^ apache-name name #^ text text]
  "/etc/apache2/sites-available/NAME.conf holds TEXT (virtual hosts).  When
the site is enabled, the new text is tested with `apache2ctl configtest`
first, the old one put back if it fails, and Apache reloads.  Check mode
shows the diff.  Unapplying disables the site and removes the file."
  (:simulates True)
  (:desc f"Apache site {name} available")
  (:watch [(watch-path (available-path "site" name)) (watch-path (enabled-path "site" name))])
  (:apply (_change "site" name text False))
  (:unapply (_remove-available "site" name)))

(defprop site-enabled :posix [#^ apache-name name #^ (optional text) [text None]]
  "Apache serves the site NAME (`a2ensite`), whose file
/etc/apache2/sites-available/NAME.conf holds TEXT when given (else it must
be there already).  Tested with `apache2ctl configtest` before Apache
reloads: a site that fails is put back as it was and the property fails.
Check mode shows the diff.  Unapplying disables the site (`a2dissite`),
leaving its file."
  (:simulates True)
  (:desc f"Apache site {name} enabled")
  (:watch [(watch-path (available-path "site" name)) (watch-path (enabled-path "site" name))])
  (:apply (_change "site" name text True))
  (:unapply (_disable "site" name)))

(defprop site-disabled :posix [#^ apache-name name]
  "Apache does not serve the site NAME (`a2dissite`): Debian's
`000-default`, for one.  Its file stays in sites-available."
  (:simulates True)
  (:desc f"Apache site {name} disabled")
  (:watch [(watch-path (enabled-path "site" name))])
  (:apply (_disable "site" name)))

(defprop conf-enabled :posix [#^ apache-name name #^ (optional text) [text None]]
  "The configuration snippet NAME is enabled (`a2enconf`), and
/etc/apache2/conf-available/NAME.conf holds TEXT when given (else it must
be there already).  Tested and reloaded as `site-enabled`.  Unapplying
disables it (`a2disconf`), leaving its file."
  (:simulates True)
  (:desc f"Apache configuration {name} enabled")
  (:watch [(watch-path (available-path "conf" name)) (watch-path (enabled-path "conf" name))])
  (:apply (_change "conf" name text True))
  (:unapply (_disable "conf" name)))

(defprop module-enabled :posix [#^ apache-name name]
  "The Apache module NAME is enabled (`a2enmod`, which enables the modules
it depends on and disables those it conflicts with), tested with
`apache2ctl configtest` (all of it undone if that fails), and Apache
reloads.  Unapplying disables it (`a2dismod`, which refuses while an
enabled module depends on it)."
  (:simulates True)
  (:desc f"Apache module {name} enabled")
  (:watch [(watch-path (module-enabled-path name))])
  (:apply (_change "module" name None True))
  (:unapply (_disable "module" name)))

(defprop module-disabled :posix [#^ apache-name name]
  "The Apache module NAME is not enabled (`a2dismod`), tested with
`apache2ctl configtest` (undone if that fails), and Apache reloads."
  (:simulates True)
  (:desc f"Apache module {name} disabled")
  (:watch [(watch-path (module-enabled-path name))])
  (:apply (_disable "module" name)))

(defprop reloaded :posix []
  "Apache rereads its configuration gracefully, once `apache2ctl
configtest` has passed (a failure otherwise, and Apache keeps the
configuration it has); always a change.  For `on-change`, after a
certificate is renewed (`tls.certificate-installed`)."
  (:action "reloading is an event, not a state Apache is in")
  (:desc "Apache reloaded")
  (:apply (tested-or-undone TEST None "Apache's configuration")
          (reload-if-running "apache2")
          None))

(export :objects [installed site-available site-enabled site-disabled conf-enabled
                  module-enabled module-disabled reloaded enabled? available-path
                  apache-name])
