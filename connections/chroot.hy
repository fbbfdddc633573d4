"The `:chroot` hop: run everything inside a chroot on the upstream machine.

`[:chroot :into \"/srv/chroot/sid\"]` runs each script as `chroot DIR /bin/sh -c
SCRIPT` on the connection before it, which must be root there.  For the life
of the hop the chroot gets the pseudo-filesystems that package scripts expect
(/proc, /sys, /dev, /dev/pts); only those that are not mount points already
are mounted, so a chroot the user prepared is left as it is, and only what
the hop mounted is unmounted when it closes — also when the deployment fails.

A chroot is a system that is not running: nothing consfig does through the
hop may start a daemon there, which would run on the upstream machine with
its root in the chroot.  So the hop marks its connection \"no services\" (the
service and systemd properties say so and do nothing); for its duration a
/usr/sbin/policy-rc.d forbids package scripts to start services (one that
was there is put back afterwards); and when it closes, any process left with
its root in the chroot is sent TERM, then KILL, before the unmounting."

(import posixpath
        shlex
        consfig.errors [ConnectionFailed CommandFailed]
        consfig.transport.frames [OUTPUT-LIMIT]
        consfig.transport.hop [Connection Hop Script ABSOLUTE-PATH PROBE-TIMEOUT]
        consfig.apply.noservices [POLICY-RC-D FORBID-ALL WHILE-CHROOTED])

;; Mounted in this order, unmounted in the reverse one.  /dev is a bind mount
;; rather than a fresh devtmpfs so that it works inside containers, whose /dev
;; is often a tmpfs; a bind is not recursive, hence /dev/pts on its own.
(setv CHROOT-MOUNTS
      [["proc" ["-t" "proc" "-o" "nosuid,noexec,nodev" "proc"]]
       ["sys" ["-t" "sysfs" "-o" "nosuid,noexec,nodev,ro" "sysfs"]]
       ["dev" ["--bind" "/dev"]]
       ["dev/pts" ["--bind" "/dev/pts"]]])

(setv HOP-POLICY (.encode WHILE-CHROOTED))

;; On the upstream machine: every process whose root is the chroot $1 (or a
;; directory below it) gets TERM, then, if still there after 5 s, KILL.  The
;; link /proc/PID/root shows a process's root as the reader sees paths; one
;; find(1) reads them all (a readlink per process takes seconds on a busy
;; machine, which the 5 s would not be).
(setv _END-ROOTED "
root=$(realpath -e -- \"$1\") || exit 0
[ \"$root\" != / ] || exit 0
rooted() {
  find /proc -mindepth 2 -maxdepth 2 -name root -type l -printf '%h %l\\n' 2>/dev/null |
  while read -r dir r; do
    case $r in \"$root\"|\"$root\"/*) echo \"${dir#/proc/}\" ;; esac
  done
}
gone() {
  i=0
  while [ $i -lt 25 ]; do
    [ -z \"$(rooted)\" ] && return 0
    sleep 0.2; i=$((i + 1))
  done
  return 1
}
[ -n \"$(rooted)\" ] || exit 0
kill -TERM $(rooted) 2>/dev/null
gone && exit 0
kill -KILL $(rooted) 2>/dev/null
gone || { echo \"still running with their root in $root: $(rooted)\" >&2; exit 1; }
")

;; On the upstream machine: exit 0 when no user but root can reach the
;; chroot $1, so that a walk in it has nobody to guard against (see
;; `Connection.others-excluded?`): a directory on the way to it, or it, is
;; root's and may be entered by no one else (no x for others, nor for a group
;; but root's), and no process but root's has a way in already (its root, its
;; working directory or an open descriptor there).  A chroot made in a
;; private temporary directory (a disk image's mount point) is so; one in
;; /srv is not, and a path through a user's directory in it needs :python.
(setv _ONLY-ROOT-REACHES "
r=$(realpath -e -- \"$1\") || exit 1
d=$r
while :; do
  set -- $(stat -c '%u %g %a' -- \"$d\") || exit 1
  a=$((0$3))
  if [ \"$1\" = 0 ] && [ $((a & 1)) = 0 ] && { [ $((a & 8)) = 0 ] || [ \"$2\" = 0 ]; }; then
    find /proc/[0-9]*/cwd /proc/[0-9]*/root /proc/[0-9]*/fd -maxdepth 1 -type l ! -user 0 \\
      -printf '%l\\n' 2>/dev/null | while IFS= read -r t; do
        case $t in \"$r\"|\"$r\"/*) exit 1 ;; esac
      done
    exit $?
  fi
  [ \"$d\" != / ] || exit 1
  d=${d%/*}; [ -n \"$d\" ] || d=/
done
")

(defclass ChrootConnection [Connection]
  "Scripts run by `chroot INTO /bin/sh -c` on the upstream connection."
  (setv hop-name "chroot")

  (defn __init__ [self upstream into]
    (.__init__ (super) upstream)
    (setv self.into into
          self.mounted []
          self.policy-written False
          self.policy-backup None
          self.alone False
          (get self.connattrs "no-services") "in a chroot"))

  (defn describe [self] f"chroot:{self.into}")

  (defn others-excluded? [self] self.alone)

  (defn run-script [self script input timeout * [limit OUTPUT-LIMIT]]
    (.run-script self.upstream
                  (shlex.join ["exec" #* _ENTER self.into "/bin/sh" "-c" script])
                  input timeout :limit limit))

  (defn start-process [self argv]
    ;; chroot(8) itself says 127 when the program is not in the chroot.
    (.start-process self.upstream [#* _ENTER self.into #* argv]))

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

  (defn _forbid-service-starts [self]
    ;; Only where invoke-rc.d would look for a policy.  One that is consfig's
    ;; forbid-all already (the chroot's own `service.no-services`) is left
    ;; alone.  One that is the hop's was left by a deployment that was
    ;; killed: not the operator's, so not backed up.
    (when (not (. (.run self ["test" "-d" "/usr/sbin"] :check False :timeout PROBE-TIMEOUT) ok?))
      (return))
    (setv existing (self._policy))
    (when (= existing (.encode FORBID-ALL))
      (return))
    (when (and (.exists? self POLICY-RC-D) (!= existing HOP-POLICY))
      (setv self.policy-backup
            (.strip (. (.run self (Script (+ "set -e; b=$(mktemp /usr/sbin/.policy-rc.d.consfig-XXXXXXXX); "
                                             "cp -a --remove-destination -- \"$1\" \"$b\"; echo \"$b\"")
                                          POLICY-RC-D)
                             :timeout PROBE-TIMEOUT)
                       stdout))))
    (.write-file self POLICY-RC-D HOP-POLICY :mode 0o755)
    (setv self.policy-written True))

  (defn _policy [self]
    (try (.read-file self POLICY-RC-D) (except [FileNotFoundError] None)))

  (defn _allow-service-starts [self]
    ;; A policy-rc.d that something in the deployment wrote in place of ours
    ;; (`service.no-services`) is the host's own: it stays.
    (when self.policy-written
      (setv self.policy-written False
            backup self.policy-backup
            self.policy-backup None)
      (cond (!= (self._policy) HOP-POLICY)
            (when backup (.run self ["rm" "-f" "--" backup] :timeout PROBE-TIMEOUT))
            backup (.run self ["mv" "-f" "--" backup POLICY-RC-D] :timeout PROBE-TIMEOUT)
            True (.run self ["rm" "-f" "--" POLICY-RC-D] :timeout PROBE-TIMEOUT))))

  (defn _end-rooted-processes [self]
    (.run self.upstream (Script _END-ROOTED self.into) :timeout PROBE-TIMEOUT))

  (defn close [self]
    "Put back the policy-rc.d there was, end every process left with its
root in the chroot, and unmount, innermost first, what this hop mounted.  A
mount still busy is detached lazily rather than left."
    (setv failures [])
    ;; Each step is tried whatever became of the one before: the mounts
    ;; must go in any case.
    (for [step [self._allow-service-starts self._end-rooted-processes]]
      (try (step)
           (except [e Exception]
             (.append failures (str e)))))
    (while self.mounted
      (setv point (.pop self.mounted)
            r (.run self.upstream (Script "umount -- \"$1\" || umount -l -- \"$1\"" point)
                    :timeout PROBE-TIMEOUT :check False))
      (when (not r.ok?)
        (.append failures f"could not unmount {point}: {(.strip r.stderr)}")))
    (when failures
      (raise (ConnectionFailed (.join "; " failures) self.where)))))

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
  (setv conn.alone (. (.run upstream (Script _ONLY-ROOT-REACHES into) :check False
                             :timeout PROBE-TIMEOUT)
                       ok?))
  (try
    (._mount-all conn)
    (except [e CommandFailed]
      (try (.close conn) (except [ConnectionFailed] None))
      (raise (ConnectionFailed f"could not mount the chroot's filesystems: {e}"
                               upstream.where) :from e)))
  (try
    (._forbid-service-starts conn)
    (except [e CommandFailed]
      (try (.close conn) (except [ConnectionFailed] None))
      (raise (ConnectionFailed f"could not forbid service starts in the chroot ({POLICY-RC-D}): {e}"
                               upstream.where) :from e)))
  conn)

;; How a command enters the chroot.  TMPDIR names a directory outside it (the
;; controller's, or the user's): inside, mktemp would fail on it, in a
;; package's maintainer script too, so the chroot's own /tmp is used.  So do
;; the cache and state directories a user (or a test run) may have set:
;; inside, the chroot's own root keeps its cache and state where it would.
(setv _ENTER ["env" "-u" "TMPDIR" "-u" "XDG_CACHE_HOME" "-u" "XDG_STATE_HOME"
              "-u" "STATE_DIRECTORY" "chroot"])

(setv HOP (Hop "chroot" {"into" ABSOLUTE-PATH} establish :required ["into"]))

(export :objects [ChrootConnection HOP])
