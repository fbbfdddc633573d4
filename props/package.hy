"Packages, through whichever package manager the target has."

(eval-when-compile (require consfig.model.property [defprop]))
(import consfig.model.watchspec [watch-dpkg])
(import consfig.apply.actions [run run-ok?]
        consfig.model.context [get-connattr set-connattr]
        consfig.errors [FailedChange]
        consfig.props.apt :as apt
        consfig.types *)

;; The managers we know, in the order they are looked for, with how to ask
;; whether a package is installed and how to install packages.
(setv MANAGERS
      [["apt-get" None None]
       ["dnf" ["rpm" "-q" "--"] ["dnf" "-y" "install" "--"]]
       ["yum" ["rpm" "-q" "--"] ["yum" "-y" "install" "--"]]
       ["zypper" ["rpm" "-q" "--"] ["zypper" "--non-interactive" "install" "--"]]
       ["pacman" ["pacman" "-Q" "--"] ["pacman" "-S" "--noconfirm" "--needed" "--"]]
       ["apk" ["apk" "info" "-e" "--"] ["apk" "add" "--"]]])

(defn package-manager []
  "The first package manager of `MANAGERS` present on the target (asked once
per connection)."
  (when (is (get-connattr "package-manager") None)
    (set-connattr "package-manager"
                  (next (gfor m MANAGERS :if (run-ok? "command" "-v" (get m 0) :timeout 60) m)
                        False)))
  (or (get-connattr "package-manager")
      (raise (FailedChange (+ "no package manager found on the target (looked for "
                              (.join ", " (gfor m MANAGERS (get m 0))) ")")))))

(defn _flatten [xs]
  (setv out [])
  (for [x xs]
    (if (isinstance x #(list tuple)) (.extend out (_flatten x)) (.append out (str x))))
  out)

(defprop installed :posix [#^ (one-of package-name (list-of package-name)) #* packages]
  "Each of PACKAGES is installed, by the target's own package manager: apt
on Debian and derivatives (as `apt.installed`), else dnf, yum, zypper, pacman
or apk.  Package names differ between distributions; use `os.typecase` where
they do."
  (:watch [(watch-dpkg)])
  (:desc f"package installed {(.join " " (_flatten packages))}")
  (:preprocess (_flatten packages))
  (:check
    (setv [name query _] (package-manager))
    (if (= name "apt-get")
        (apt.installed? #* packages)
        (all (gfor p packages (run-ok? #* query p :timeout 120)))))
  (:apply
    (setv [name _ install] (package-manager))
    (if (= name "apt-get")
        (apt.install-packages [] packages)
        (run #* install #* packages :timeout apt.APT-TIMEOUT))))

(export :objects [installed package-manager MANAGERS])
