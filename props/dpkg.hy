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

;; dpkg-statoverride takes no `--`; PATH, an absolute path, cannot be read
;; as an option.
(defn stat-override [path]
  "dpkg's override of PATH's owner and mode, as `#(user group mode)` (the
mode an octal string such as \"2750\"), or None when there is none."
  (setv r (run "dpkg-statoverride" "--list" path :check False :timeout 60))
  (when (and r.ok? (.strip r.stdout))
    (setv words (.split (get (.splitlines r.stdout) 0)))
    #((get words 0) (get words 1) (.lstrip (get words 2) "0"))))

(defn _mode-text [mode] (.lstrip (format mode "o") "0"))

(defprop stat-overridden :posix [#^ abs-path path #^ user-name user #^ group-name group
                                 #^ file-mode mode]
  "dpkg keeps PATH owned by USER:GROUP with MODE, whatever a package ships
for it, now and on every upgrade (`dpkg-statoverride --update --add`): the
Debian way to give a packaged program or directory other permissions.  An
override of PATH with other values is replaced; PATH itself is changed
where it exists.  USER and GROUP must exist.  Unapplying removes the
override (the file keeps its owner and mode until the package sets them).

  (dpkg.stat-overridden \"/usr/bin/ping\" \"root\" \"netadmin\" 0o4750)"
  (:watch [(watch-path "/var/lib/dpkg/statoverride")])
  (:desc f"dpkg keeps {path} {user}:{group} {(oct mode)}")
  (:hostattrs (required "debian"))
  (:check (setv have (stat-override path)
                want #(user group (_mode-text mode)))
          (or (= have want)
              (Drift (if have
                         f"{path}: overridden as {(.join " " have)} → {(.join " " want)}"
                         f"{path} would be overridden as {(.join " " want)}"))))
  (:apply
    (when (stat-override path)
      (run "dpkg-statoverride" "--remove" path :timeout 60))
    (run "dpkg-statoverride" "--update" "--add" user group (format mode "o") path
         :timeout 60))
  (:unapply
    (if (stat-override path)
        (run "dpkg-statoverride" "--remove" path :timeout 60)
        NO-CHANGE)))

(export :objects [diversion diverted architecture-added stat-override stat-overridden])
