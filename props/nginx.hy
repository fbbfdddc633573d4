"nginx on Debian: sites in /etc/nginx/sites-available, enabled by a link in
/etc/nginx/sites-enabled.

Every change that nginx would read is tested with `nginx -t` before nginx
is asked to reload: a configuration that fails the test is put back as it
was (the old file, the old link) and the property fails, with what nginx
said, so a running nginx never sees it.  nginx reloads after a change where
services run (not in a chroot: see `service.without-starting-services`),
and only when it is running."

(eval-when-compile
  (require consfig.model.property [defprop]
           consfig.model.propspec [defproplist]))
(import consfig.model.watchspec [watch-path])
(import posixpath
        consfig.apply.actions [NO-CHANGE run run-ok? remote-exists?]
        consfig.apply.engine [WOULD-CHANGE checking? inform]
        consfig.errors [FailedChange]
        consfig.props.apt :as apt
        consfig.props.file [read-bytes content->bytes update-file]
        consfig.props.service [reload-if-running tested-or-undone]
        consfig.types *)

(setv site-name (matching "site-name"
                          "a site name (letters, digits, _ . and -, not starting with . or -)"
                          r"[A-Za-z0-9_][A-Za-z0-9_.-]*"))

(setv AVAILABLE "/etc/nginx/sites-available"
      ENABLED "/etc/nginx/sites-enabled"
      TEST ["nginx" "-t" "-q"])

(defn available-path [name] (posixpath.join AVAILABLE name))
(defn enabled-path [name] (posixpath.join ENABLED name))

(defproplist installed :posix []
  "nginx is installed."
  (:desc "nginx installed")
  (apt.installed "nginx"))

(defn _link [path]
  ;; Where the link PATH points; None when there is none, a failure when
  ;; PATH is something else, which is the administrator's, not ours.
  (cond (not (remote-exists? path)) None
        (run-ok? "test" "-L" path) (. (run "readlink" "-n" "--" path :timeout 60) stdout)
        True (raise (FailedChange f"{path} is not a symbolic link; not replacing it"))))

(defn _enabled? [name]
  (in (_link (enabled-path name)) #((available-path name) (posixpath.join "../sites-available" name))))

(defn _put-back [path old]
  ;; A file as it was: OLD bytes, or none at all.
  (if (is old None)
      (run "rm" "-f" "--" path :timeout 60)
      (update-file path old)))

(defn _relink [path target]
  (if (is target None)
      (run "rm" "-f" "--" path :timeout 60)
      (run "ln" "-sfn" "--" target path :timeout 60)))

(defn _change-site [name text enable]
  ;; Write TEXT (unless None) and make the link (when ENABLE); test what
  ;; nginx reads, undoing both if the test fails; reload.
  (setv path (available-path name)
        link (enabled-path name)
        old (read-bytes path)
        old-link (_link link)
        rewrite (and (is-not text None) (!= old (content->bytes text)))
        relink (and enable (not (_enabled? name))))
  (when (and enable (is text None) (is old None))
    (raise (FailedChange f"there is no {path}: give the site's text, or write it first (nginx.site-available)")))
  (when (not (or rewrite relink))
    (return NO-CHANGE))
  (when (checking?)
    (when rewrite (update-file path text))
    (when relink (inform f"{link} would link to {path}"))
    (return WOULD-CHANGE))
  (when rewrite (update-file path text))
  (when relink (run "ln" "-sfn" "--" path link :timeout 60))
  (when (or relink (_enabled? name))
    (tested-or-undone TEST (fn [] (when rewrite (_put-back path old))
                                  (when relink (_relink link old-link)))
                      f"nginx site {name}")
    (reload-if-running "nginx"))
  None)

(defn _disable-site [name]
  (setv link (enabled-path name))
  (cond (is (_link link) None) NO-CHANGE
        (checking?) (do (inform f"{link} would be removed") WOULD-CHANGE)
        True (do (run "rm" "-f" "--" link :timeout 60)
                 (reload-if-running "nginx")
                 None)))

(defprop site-available :posix [#^ site-name name #^ text text]
  "/etc/nginx/sites-available/NAME holds TEXT (a server block or
several).  When the site is enabled, the new text is tested with `nginx -t`
first, the old one put back if it fails, and nginx reloads; a site that is
not enabled is not read by nginx, so not tested.  Check mode shows the
diff.  Unapplying removes the file, and its link in sites-enabled."
  (:simulates True)
  (:desc f"nginx site {name} available")
  (:watch [(watch-path (available-path name))])
  (:apply (_change-site name text False))
  (:unapply
    (setv path (available-path name))
    (cond (not (remote-exists? path)) NO-CHANGE
          (checking?) (do (inform f"{path} would be removed") WOULD-CHANGE)
          True (do (_disable-site name)
                   (run "rm" "-f" "--" path :timeout 60)
                   None))))

(defprop site-enabled :posix [#^ site-name name #^ (optional text) [text None]]
  "nginx serves the site NAME: /etc/nginx/sites-enabled/NAME links to
/etc/nginx/sites-available/NAME, which holds TEXT when given (else it must
be there already).  The configuration is tested with `nginx -t` before
nginx reloads it: a site that fails is put back as it was (its old text,
no link) and the property fails.  Check mode shows the diff.  Unapplying
removes the link, not the site's file."
  (:simulates True)
  (:desc f"nginx site {name} enabled")
  (:watch [(watch-path (available-path name)) (watch-path (enabled-path name))])
  (:apply (_change-site name text True))
  (:unapply (_disable-site name)))

(defprop site-disabled :posix [#^ site-name name]
  "nginx does not serve the site NAME: there is no link
/etc/nginx/sites-enabled/NAME (Debian's `default` site, for one).  nginx
reloads when it was there.  The site's file stays in sites-available."
  (:simulates True)
  (:desc f"nginx site {name} disabled")
  (:watch [(watch-path (enabled-path name))])
  (:apply (_disable-site name)))

(defprop reloaded :posix []
  "nginx rereads its configuration, once `nginx -t` has passed (a failure
otherwise, and nginx keeps the configuration it has); always a change.
Use it after `on-change`, for a certificate renewed (`tls.certificate-installed`)."
  (:action "reloading is an event, not a state nginx is in")
  (:desc "nginx reloaded")
  (:apply (tested-or-undone TEST None "nginx's configuration")
          (reload-if-running "nginx")
          None))

(export :objects [installed site-available site-enabled site-disabled reloaded
                  available-path enabled-path site-name])
