"Mounted filesystems (Linux: /proc/self/mountinfo, findmnt(8) and umount(8) from util-linux)."

(eval-when-compile (require consfig.model.property [defprop]))
(import consfig.model.watchspec [watch-path watch-poll])
(import ctypes
        os
        posixpath
        re
        consfig.apply.actions [NO-CHANGE run run-ok? run-script]
        consfig.errors [FailedChange]
        consfig.model.context [connection]
        consfig.transport.hop [SAFE-WALK walk-refusal]
        consfig.transport.safepath [walk]
        consfig.props.os [required]
        consfig.types *)

;; How often the agent looks at what is mounted: no inotify event says so.
(setv MOUNT-POLL 30)

(defn _unescape [b]
  ;; The kernel writes a space in a mount point as \040, and so on.
  (.decode (re.sub rb"\\([0-7]{3})" (fn [m] (bytes [(int (.group m 1) 8)])) b)
           "utf-8" "surrogateescape"))

(defn mountinfo []
  "What is mounted on the target, as its kernel lists it in
/proc/self/mountinfo: `#(mount-id mount-point)` for each mount, in the
order they were mounted."
  (lfor line (.splitlines (.read-file (connection) "/proc/self/mountinfo" :follow True))
        :if (.strip line)
        :setv fields (.split line)
        #((int (get fields 0)) (_unescape (get fields 4)))))

(defn mount-points []
  "Every mount point on the target, as /proc/self/mountinfo lists them."
  (lfor #(_ p) (mountinfo) p))

(defn _below? [p d and-at]
  (or (.startswith p (+ (.rstrip d "/") "/")) (and and-at (= p d))))

(defn mounts-below [directory [and-at True] [points None]]
  "The mount points below DIRECTORY (and at it, when AND-AT), outermost of
each subtree only, in order; of POINTS (by default, `mount-points`)."
  (setv d (posixpath.normpath directory)
        below (sorted (sfor p (if (is points None) (mount-points) points) :if (_below? p d and-at) p)))
  (lfor p below
        :if (not (any (gfor q below (and (!= q p) (.startswith p (+ (.rstrip q "/") "/"))))))
        p))

(defn unmount-below [directory [and-at True]]
  "Unmount everything mounted below DIRECTORY (and at it, when AND-AT),
each outermost mount with all that is inside it.  A busy mount is detached
lazily rather than left behind.  Return `:no-change` when nothing was
mounted there.

Only what /proc/self/mountinfo lists is unmounted, and never through a
link: a user who may rename a directory on the way must not turn it into
an unmount of something else (docs/security.md).  A target's Python opens
each mount point by the safe walk, checks that it holds the very mount the
kernel listed, and detaches that one through its descriptor; over a POSIX
chain every mount point below is walked first, and a path through a
directory a user controls is refused before anything is unmounted."
  (setv d (posixpath.normpath directory)
        ;; One listing for both: what is walked is what is unmounted.
        listed (mount-points)
        points (mounts-below d and-at listed))
  (cond (not points) NO-CHANGE
        (. (connection) python?) (_detach-below d and-at)
        True (_unmount-walked (lfor p listed :if (_below? p d and-at) p) points)))

(setv _MNT-DETACH 2
      ;; Each pass detaches the outermost mounts; what was under one
      ;; mounted at the same place shows on the next.
      _PASSES 100)

(defn _detach-below [d and-at]
  (for [_ (range _PASSES)]
    (setv listed (lfor #(i p) (mountinfo) :if (_below? p d and-at) #(i p)))
    (when (not listed) (return None))
    (for [p (mounts-below d and-at (lfor #(_ q) listed q))]
      (_detach p (sfor #(i q) listed :if (= q p) i))))
  (raise (FailedChange f"{d}: still something mounted below it after {_PASSES} unmounts")))

(defn _detach [point ids]
  ;; POINT opened as a directory, never through a link at its end, and
  ;; unmounted only if the mount there is one of IDS, the ones listed
  ;; there.  Holding it makes it busy, so it is detached (MNT_DETACH, as
  ;; umount --lazy); once the descriptor is closed, nothing else holding
  ;; it, it is gone.
  (setv #(dirfd name) (walk point))
  (try
    (setv fd (os.open name (| os.O-PATH os.O-DIRECTORY os.O-NOFOLLOW os.O-CLOEXEC) :dir-fd dirfd))
    (except [e OSError]
      (raise (FailedChange f"{point}: not unmounted, it is no longer a directory ({e.strerror})")))
    (finally (os.close dirfd)))
  (try
    (setv mine (_mount-id fd))
    (when (not-in mine ids)
      (raise (FailedChange (+ f"{point}: not unmounted, what is there now is not the mount "
                              "listed there (a directory on the way was moved)"))))
    (setv libc (ctypes.CDLL None :use-errno True))
    (when (!= 0 (libc.umount2 (.encode f"/proc/self/fd/{fd}") _MNT-DETACH))
      (setv e (ctypes.get-errno))
      (raise (FailedChange f"could not unmount {point}: {(os.strerror e)}")))
    (finally (os.close fd))))

(defn _mount-id [fd]
  (with [f (open f"/proc/self/fdinfo/{fd}")]
    (for [line f]
      (when (.startswith line "mnt_id:")
        (return (int (get (.split line) 1))))))
  (raise (FailedChange "this kernel does not say which mount a descriptor is on (no mnt_id)")))

(defn _unmount-walked [below points]
  ;; Over a POSIX chain: once the walk has passed every mount point below
  ;; (none through a directory a user may change, none a link), umount's
  ;; own walks by name meet only what root may change.
  (setv r (run-script (+ SAFE-WALK
                         "n=$1; shift\n"
                         "i=0; for p; do i=$((i + 1)); [ \"$i\" -le \"$n\" ] || break\n"
                         "  cf_walk \"$p\" 0; [ ! -L \"$p\" ] || { echo \"$p is a symlink\" >&2; exit 78; }\n"
                         "done\n"
                         "shift \"$n\"\n"
                         "for p; do umount --recursive -- \"$p\" 2>/dev/null || umount --recursive --lazy -- \"$p\" || exit 1; done")
                      (str (len below)) #* below #* points
                      :check False :timeout 240)
        refusal (walk-refusal r.exit-code r.stderr (.join ", " points) (. (connection) where)))
  (when refusal (raise refusal))
  (when (not r.ok?)
    (raise (FailedChange (+ f"could not unmount {(.join ", " points)}: "
                            (or (.strip r.stderr) f"exit {r.exit-code}"))))))

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

(export :objects [mountinfo mount-points mounts-below unmount-below mounted? mounted
                  unmounted-below])
