;; An example site: a web server and a build box on Debian.  Copy it, change
;; the names, keys and addresses, and deploy:
;;
;;   consfig deploy --consfig hosts/example.hy athena --dry-run
;;
;; The tests check that every host preprocesses (its hostattrs compute and
;; its arguments fit), and deploy athena into a booted container, after which
;; `consfig deploy --check --detailed-exitcode` must say that nothing would
;; change (tests/props/test_library_walk.py).

(require consfig *)
(import consfig *)
(use-props consfig.props [apt chroot cron file hostname os periodic
                          service ssh sshd timezone user])

(setv admin-keys
      ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBvJ0FTE7GkVxvOiLh4C8PvbxhvYbpG8xAr5Hq1d2ruo alice@laptop"
       "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHX7aZ4mk2bV0fA9JtRyZLwbI3qGuWp4gKc6QsV5nDf1 bob@desk"])

(setv mirror "http://deb.debian.org/debian")

(defproplist admin-account [name key]
  "NAME can log in with KEY and use sudo; no password logins."
  (:desc f"admin account {name}")
  (user.has-account name)
  (user.has-login-shell name "/bin/bash")
  (user.has-groups name "sudo" "adm")
  (user.has-locked-password name)
  (ssh.authorized-keys name key))

(defproplist debian-base []
  "What every Debian host here has: the standard archive via our mirror, a
few tools, UTC, and SSH that takes keys only."
  (:desc "Debian base")
  (apt.mirrors mirror)
  (on-change (apt.standard-sources-list :components ["main" "non-free-firmware"])
    (apt.updated))
  (periodic.at-most :daily "apt indexes refreshed" (apt.updated))
  (apt.installed "sudo" "less" "vim-tiny" "ca-certificates")
  (timezone.configured "Etc/UTC")
  (hostname.configured)
  (hostname.mailname-configured)
  (apt.installed "openssh-server")
  (sshd.configured "PermitRootLogin" "prohibit-password"
                   "X11Forwarding" "no")
  (sshd.no-passwords)
  (admin-account "alice" (get admin-keys 0))
  (admin-account "bob" (get admin-keys 1)))

(setv site-conf
      ["server {"
       "    listen 80 default_server;"
       "    listen [::]:80 default_server;"
       "    root /var/www/example.org;"
       "    index index.html;"
       "    location / { try_files $uri $uri/ =404; }"
       "}"])

(defproplist static-site [name]
  "nginx serves /var/www/NAME, which a deploy user owns."
  (:desc f"static site {name}")
  (apt.service-installed-running "nginx")
  (user.has-account "deploy")
  (ssh.authorized-keys "deploy" #* admin-keys)
  (file.directory-exists f"/var/www/{name}")
  (file.has-ownership f"/var/www/{name}" :user "deploy" :group "www-data")
  (file.exists-with-content f"/var/www/{name}/index.html"
                            ["<!doctype html>" f"<title>{name}</title>" "<p>It works.</p>"])
  (on-change (file.has-content f"/etc/nginx/sites-available/{name}" site-conf)
    (service.reloaded "nginx"))
  (file.symlinked :from f"/etc/nginx/sites-enabled/{name}"
                  :to f"/etc/nginx/sites-available/{name}")
  (file.does-not-exist "/etc/nginx/sites-enabled/default"))

(defhost athena.example.org {:deploy [[:ssh :user "root"] :python]}
  "Web server."
  (os.debian-stable "bookworm" :amd64)
  (debian-base)
  (static-site "example.org")
  (apt.installed "php-fpm")
  (file.contains-ini-settings "/etc/php/8.2/fpm/php.ini"
                              ["PHP" "upload_max_filesize" "16M"]
                              ["PHP" "expose_php" "Off"])
  (cron.system-job "logs compressed" :daily "root"
                   "find /var/log/nginx -name '*.log.[0-9]*' -mtime +7 -delete"))

(defhost hermes.example.org {:deploy [[:ssh :user "alice"] :sudo :python]}
  "Build box: a clean sid chroot for building packages."
  (os.debian-stable "bookworm" :amd64)
  (debian-base)
  (apt.installed "debootstrap" "sbuild")
  (user.has-groups "alice" "sbuild")
  (chroot.os-bootstrapped* {:variant "buildd"} "/srv/chroot/sid-amd64"
    (os.debian-unstable :amd64)
    (hostname.is "sid-amd64")
    (apt.mirrors mirror)
    (apt.standard-sources-list)
    (apt.installed-minimally "build-essential" "fakeroot" "eatmydata")
    (apt.cache-cleaned))
  (os.typecase
    :debian-stable (file.has-content "/etc/motd" "hermes: stable, with a sid chroot.\n")
    :otherwise (file.has-content "/etc/motd" "hermes\n")))
