"Mounted filesystems (Linux: findmnt(8) and umount(8) from util-linux)."

(eval-when-compile (require consfig.model.property [defprop]))
(import consfig.model.watchspec [watch-path watch-poll])
(import posixpath
        consfig.apply.actions [NO-CHANGE run run-ok? output]
        consfig.props.os [required]
        consfig.types *)

;; How often the agent looks at what is mounted: no inotify event says so.
(setv MOUNT-POLL 30)

(defn _unescape [s]
  ;; findmnt -r writes a space as \x20, and so on.
  (.decode (.encode s "latin-1" "backslashreplace") "unicode_escape"))

(defn mount-points []
  "Every mount point on the target, as findmnt sees them."
  (lfor line (.splitlines (output "findmnt" "-rn" "-o" "TARGET"))
        :if (.strip line)
        (_unescape (.strip line))))

(defn mounts-below [directory [and-at True]]
  "The mount points below DIRECTORY (and at it, when AND-AT), outermost of
each subtree only, in order."
  (setv d (.rstrip (posixpath.normpath directory) "/")
        below (sorted (sfor p (mount-points)
                            :if (or (.startswith p (+ d "/")) (and and-at (= p (or d "/"))))
                            p)))
  (lfor p below
        :if (not (any (gfor q below (and (!= q p) (.startswith p (+ (.rstrip q "/") "/"))))))
        p))

(defn unmount-below [directory [and-at True]]
  "Unmount everything mounted below DIRECTORY (and at it, when AND-AT), each
outermost mount with all that is inside it.  A busy mount is detached
lazily rather than left behind.  Return `:no-change` when nothing was
mounted there."
  (setv points (mounts-below directory and-at))
  (for [p points]
    (run "umount" "--recursive" "--" p :check False :timeout 120)
    (when (in p (mount-points))
      (run "umount" "--recursive" "--lazy" "--" p :timeout 120)))
  (if points None NO-CHANGE))

(defn mounted? [target]
  "Whether something is mounted at TARGET."
  (run-ok? "findmnt" "--mountpoint" target))

(defprop mounted :posix [#^ abs-path target]
  "TARGET, a mount point listed in /etc/fstab, is mounted.  Mainly a
prerequisite of properties that would do the wrong thing if it were not.
Unapplying unmounts it."
  (:watch [(watch-path "/etc/fstab") (watch-poll MOUNT-POLL)])
  (:desc f"{target} mounted")
  (:hostattrs (required "linux"))
  (:check (mounted? target))
  (:apply
    (run "mkdir" "-p" "--" target)
    (run "mount" "--" target :timeout 300))
  (:unapply (run "umount" "--" target :timeout 300)))

(defprop unmounted-below :posix [#^ abs-path directory * #^ boolean [and-at True]]
  "Nothing is mounted below DIRECTORY, nor at it unless AND-AT is false.
Mounts made with --rbind should first be made slaves (`mount
--make-rslave`), or unmounting them also unmounts what they were bound
from."
  (:watch [(watch-poll MOUNT-POLL)])
  (:desc f"Nothing mounted below {directory}")
  (:hostattrs (required "linux"))
  (:check (not (mounts-below directory and-at)))
  (:apply (unmount-below directory and-at)))

(export :objects [mount-points mounts-below unmount-below mounted? mounted
                  unmounted-below])
