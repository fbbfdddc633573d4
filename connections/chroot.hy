"The `:chroot` hop: run everything inside a chroot on the upstream machine.

`[:chroot :into \"/srv/chroot/sid\"]` runs each script as `chroot DIR /bin/sh -c
SCRIPT` on the connection before it, which must be root there.  For the life
of the hop the chroot gets the pseudo-filesystems that package scripts expect
(/proc, /sys, /dev, /dev/pts); only those that are not mount points already
are mounted, so a chroot the user prepared is left as it is, and only what
the hop mounted is unmounted when it closes — also when the deployment fails."

(import posixpath
        shlex
        consfig.connection [Connection Hop]
        consfig.errors [ConnectionFailed CommandFailed])

;; Mounted in this order, unmounted in the reverse one.  /dev is a bind mount
;; rather than a fresh devtmpfs so that it works inside containers, whose /dev
;; is often a tmpfs; a bind is not recursive, hence /dev/pts on its own.
(setv CHROOT-MOUNTS
      [["proc" ["-t" "proc" "-o" "nosuid,noexec,nodev" "proc"]]
       ["sys" ["-t" "sysfs" "-o" "nosuid,noexec,nodev,ro" "sysfs"]]
       ["dev" ["--bind" "/dev"]]
       ["dev/pts" ["--bind" "/dev/pts"]]])

(setv MOUNT-TIMEOUT 60)

(defclass ChrootConnection [Connection]
  "Scripts run by `chroot INTO /bin/sh -c` on the upstream connection."
  (setv hop-name "chroot")

  (defn __init__ [self upstream into]
    (.__init__ (super) upstream)
    (setv self.into into
          self.mounted []))

  (defn describe [self] f"chroot:{self.into}")

  (defn _run-script [self script input timeout]
    (._run-script self.upstream
                  (shlex.join ["exec" "chroot" self.into "/bin/sh" "-c" script])
                  input timeout))

  (defn start-process [self argv]
    ;; chroot(8) itself says 127 when the program is not in the chroot.
    (.start-process self.upstream ["chroot" self.into #* argv]))

  (defn _mount-all [self]
    (for [[target args] CHROOT-MOUNTS]
      (setv point (posixpath.join self.into target)
            q (shlex.quote point)
            ;; A symlink in the chroot could point anywhere on the host: never
            ;; mount through one.  A missing directory means a chroot not made
            ;; for booting; it does without that filesystem.
            r (.run self.upstream
                    (+ f"if [ -d {q} ] && [ ! -L {q} ] && ! mountpoint -q {q}; then "
                       (shlex.join ["mount" #* args point])
                       " && echo mounted; fi")
                    :timeout MOUNT-TIMEOUT))
      (when (= (.strip r.stdout) "mounted")
        (.append self.mounted point))))

  (defn close [self]
    "Unmount, innermost first, what this hop mounted.  A mount still busy
(a daemon started inside the chroot) is detached lazily rather than left."
    (setv failures [])
    (while self.mounted
      (setv point (.pop self.mounted)
            q (shlex.quote point)
            r (.run self.upstream f"umount -- {q} || umount -l -- {q}"
                    :timeout MOUNT-TIMEOUT :check False))
      (when (not r.ok?)
        (.append failures f"{point}: {(.strip r.stderr)}")))
    (when failures
      (raise (ConnectionFailed (+ "could not unmount " (.join "; " failures))
                               self.where)))))

(defn establish [upstream * into]
  (when (not (and (isinstance into str) (posixpath.isabs into)))
    (raise (ConnectionFailed f":chroot :into wants an absolute directory, not {(hy.repr into)}"
                             upstream.where)))
  (setv into (.rstrip (posixpath.normpath into) "/")
        conn (ChrootConnection upstream into)
        q (shlex.quote into)
        probe (.run upstream (+ f"test -d {q} || {{ echo 'no such directory' >&2; exit 1; }}; "
                                f"exec chroot {q} /bin/sh -c :")
                    :check False :timeout MOUNT-TIMEOUT))
  (when (not probe.ok?)
    (raise (ConnectionFailed (+ f"cannot chroot into {into}: "
                                (or (.strip (+ probe.stderr probe.stdout))
                                    f"exit code {probe.exit-code}"))
                             upstream.where)))
  (try
    (._mount-all conn)
    (except [e CommandFailed]
      (try (.close conn) (except [ConnectionFailed] None))
      (raise (ConnectionFailed f"could not mount the chroot's filesystems: {e}"
                               upstream.where) :from e)))
  conn)

(setv HOP (Hop "chroot" ["into"] establish))

(export :objects [ChrootConnection HOP])
