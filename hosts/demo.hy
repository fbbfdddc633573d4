;; The demo site: one host, this machine, deployed over :local with no setup.
;;
;;   consfig deploy demo          (or: consfig deploy --consfig hosts/demo.hy demo)
;;
;; Everything it touches lives under one directory it owns:
;; $CONSFIG_DEMO_DIR, or ~/.cache/consfig-demo.  It never touches system files.

(require consfig *)
(import consfig *
        os)
(use-props consfig.props [file cmd])

(setv root (os.path.abspath
             (or (.get os.environ "CONSFIG_DEMO_DIR")
                 (os.path.expanduser "~/.cache/consfig-demo"))))

(defproplist static-site [name]
  "A tiny static web site: a document root with an index page."
  (:desc f"static site {name}")
  (file.directory-exists f"{root}/www/{name}")
  (file.has-content f"{root}/www/{name}/index.html"
                    ["<!doctype html>"
                     f"<title>{name}</title>"
                     f"<p>Deployed by consfig to {name}.</p>"]))

(defhost demo.localhost {:deploy :local}
  "This machine, configured under a directory of its own."
  (file.directory-exists root)
  (static-site "example.org")
  (file.directory-exists f"{root}/etc")
  ;; Configuration that restarts its (pretend) service when it changes.
  (on-change (file.has-content f"{root}/etc/demo.conf"
                               ["listen = 8080" "workers = 4"]
                               :mode 0o640)
    (cmd.script "date >> \"$1\"" f"{root}/restarts.log"))
  (file.contains-lines f"{root}/etc/hosts.allow" "sshd: 10.0.0.0/8" "sshd: 127.0.0.1")
  (file.symlinked :from f"{root}/current" :to f"{root}/www/example.org")
  ;; Dotted form: the trailing propapps become desc's last argument.
  (desc* "log directory with a README"
    (file.directory-exists f"{root}/log")
    (file.has-content f"{root}/log/README" "Logs of the demo live here.\n"))
  ;; A file that must not be there.
  (file.does-not-exist f"{root}/www/example.org/debug.html"))
