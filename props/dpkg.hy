"dpkg's own state: diversions and foreign architectures."

(eval-when-compile (require consfig.model.property [defprop]))
(import consfig.model.watchspec [watch-path])
(import consfig.apply.actions [NO-CHANGE output run]
        consfig.apply.engine [Drift]
        consfig.errors [FailedChange]
        consfig.props.apt [sources-changed]
        consfig.props.os [required]
        consfig.types *)

(setv architecture (matching "architecture" "a Debian architecture name such as i386 or arm64"
                             r"[a-z0-9][a-z0-9-]*"))

(defn diversion [path]
  "Who diverts PATH and where to, as `#(package divert-to)` (the package
is \"LOCAL\" for a local diversion), or None when it is not diverted."
  (setv by (.strip (output "dpkg-divert" "--listpackage" path :timeout 60)))
  (when by
    #(by (.strip (output "dpkg-divert" "--truename" path :timeout 60)))))

(defn _divert-to [path to] (or to (+ path ".distrib")))

(defprop diverted :posix [#^ abs-path path * #^ (optional abs-path) [to None]]
  "PATH is diverted, locally, to TO (by default PATH.distrib): the file a
package ships for PATH is installed at TO instead, now and on every upgrade,
and PATH is the administrator's.  A file already at PATH moves to TO.  A
diversion of PATH by a package is a failure.  Unapplying removes the
diversion, and the file at TO moves back.

  (dpkg.diverted \"/etc/issue\")"
  (:watch [(watch-path "/var/lib/dpkg/diversions")])
  (:desc f"{path} diverted to {(_divert-to path to)}")
  (:hostattrs (required "debian"))
  (:check (setv have (diversion path))
          (or (= have #("LOCAL" (_divert-to path to)))
              (Drift (if have f"{path}: diverted to {(get have 1)} → {(_divert-to path to)}"
                         f"{path} would be diverted to {(_divert-to path to)}"))))
  (:apply
    (setv have (diversion path))
    (when (and have (!= (get have 0) "LOCAL"))
      (raise (FailedChange f"{path} is diverted by the package {(get have 0)}, not locally; leaving it")))
    (when have
      (run "dpkg-divert" "--local" "--rename" "--remove" path :timeout 60))
    (run "dpkg-divert" "--local" "--rename" "--divert" (_divert-to path to) "--add" path
         :timeout 60))
  (:unapply
    (if (= (get (or (diversion path) #(None)) 0) "LOCAL")
        (run "dpkg-divert" "--local" "--rename" "--remove" path :timeout 60)
        NO-CHANGE)))

(defn _architectures []
  (set [(.strip (output "dpkg" "--print-architecture" :timeout 60))
        #* (.split (output "dpkg" "--print-foreign-architectures" :timeout 60))]))

(defprop architecture-added :posix [#^ architecture arch]
  "dpkg installs packages of the architecture ARCH besides the native one
(multiarch, `dpkg --add-architecture`); the next apt property that installs
updates the package indexes first.  Unapplying removes ARCH again, which dpkg
refuses while packages of it are installed."
  (:watch [(watch-path "/var/lib/dpkg/arch")])
  (:desc f"dpkg architecture {arch} added")
  (:hostattrs (required "debian"))
  (:check (or (in arch (_architectures)) (Drift f"dpkg would add the architecture {arch}")))
  (:apply (run "dpkg" "--add-architecture" arch :timeout 60)
          (sources-changed))
  (:unapply
    (if (in arch (.split (output "dpkg" "--print-foreign-architectures" :timeout 60)))
        (do (run "dpkg" "--remove-architecture" arch :timeout 60)
            (sources-changed))
        NO-CHANGE)))

(export :objects [diversion diverted architecture-added])
