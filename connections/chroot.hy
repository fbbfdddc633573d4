"The `:chroot` hop: run everything inside a chroot on the upstream machine.

`[:chroot :into \"/srv/chroot/sid\"]` runs each script as `chroot DIR /bin/sh -c
SCRIPT` on the connection before it, which must be root there.  For the life
of the hop the chroot gets the pseudo-filesystems that package scripts expect
(/proc, /sys, /dev, /dev/pts); only those that are not mount points already
are mounted, so a chroot the user prepared is left as it is, and only what
the hop mounted is unmounted when it closes — also when the deployment fails."

(import posixpath
        shlex
        consfig.errors [ConnectionFailed CommandFailed]
        consfig.hop [Connection Hop Script ABSOLUTE-PATH PROBE-TIMEOUT])

;; Mounted in this order, unmounted in the reverse one.  /dev is a bind mount
;; rather than a fresh devtmpfs so that it works inside containers, whose /dev
;; is often a tmpfs; a bind is not recursive, hence /dev/pts on its own.
(setv CHROOT-MOUNTS
      [["proc" ["-t" "proc" "-o" "nosuid,noexec,nodev" "proc"]]
       ["sys" ["-t" "sysfs" "-o" "nosuid,noexec,nodev,ro" "sysfs"]]
       ["dev" ["--bind" "/dev"]]
       ["dev/pts" ["--bind" "/dev/pts"]]])

(defclass ChrootConnection [Connection]
  "Scripts run by `chroot INTO /bin/sh -c` on the upstream connection."
  (setv hop-name "chroot")

  (defn __init__ [self upstream into]
    (.__init__ (super) upstream)
    (setv self.into into
          self.mounted []))

  (defn describe [self] f"chroot:{self.into}")

  (defn run-script [self script input timeout]
    (.run-script self.upstream
                  (shlex.join ["exec" "chroot" self.into "/bin/sh" "-c" script])
                  input timeout))

  (defn start-process [self argv]
    ;; chroot(8) itself says 127 when the program is not in the chroot.
    (.start-process self.upstream ["chroot" self.into #* argv]))

  (defn _mount-all [self]
    (for [[target args] CHROOT-MOUNTS]
      (setv point (posixpath.join self.into target)
            ;; A symlink in the chroot could point anywhere on the host: never
            ;; mount through one.  A missing directory means a chroot not made
            ;; for booting; it does without that filesystem.
            r (.run self.upstream
                    (Script (+ "p=$1; shift; if [ -d \"$p\" ] && [ ! -L \"$p\" ] && "
                               "! mountpoint -q \"$p\"; then mount \"$@\" \"$p\" && echo mounted; fi")
                            point #* args)
                    :timeout PROBE-TIMEOUT))
      (when (= (.strip r.stdout) "mounted")
        (.append self.mounted point))))

  (defn close [self]
    "Unmount, innermost first, what this hop mounted.  A mount still busy
(a daemon started inside the chroot) is detached lazily rather than left."
    (setv failures [])
    (while self.mounted
      (setv point (.pop self.mounted)
            r (.run self.upstream (Script "umount -- \"$1\" || umount -l -- \"$1\"" point)
                    :timeout PROBE-TIMEOUT :check False))
      (when (not r.ok?)
        (.append failures f"{point}: {(.strip r.stderr)}")))
    (when failures
      (raise (ConnectionFailed (+ "could not unmount " (.join "; " failures))
                               self.where)))))

(defn establish [upstream * into]
  (setv conn (ChrootConnection upstream into)
        probe (.run upstream (Script (+ "test -d \"$1\" || { echo 'no such directory' >&2; exit 1; }; "
                                        "exec chroot \"$1\" /bin/sh -c :")
                                     into)
                    :check False :timeout PROBE-TIMEOUT))
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

(setv HOP (Hop "chroot" {"into" ABSOLUTE-PATH} establish :required ["into"]))

(export :objects [ChrootConnection HOP])
