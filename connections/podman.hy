"The `:podman` hop: run everything inside a running Podman container.

`[:podman :container \"web\"]` runs each script in the running container web
with `podman exec -i web /bin/sh -c SCRIPT` on the upstream machine (root
there: the system's containers, as `consfig.props.podman` runs them).
`[:podman :container \"web\" :user \"alice\"]` enters alice's rootless
container web instead: podman runs as alice (through runuser(1) when the
upstream is root), with her runtime directory.  The
command gets the container's own environment, user and capabilities;
standard input and output are plain pipes (no terminal), so binary data
and a `:python` hop after this one pass through, and the exit code is the
command's (podman's own failures are 125 to 127).

Killing `podman exec` does not kill what it started in the container:
podman only detaches from it.  So every command carries a token in its
environment (CONSFIG_EXEC, inherited by what it starts), and when the hop's
command is ended (a timeout, a deployment interrupted) a trap on the
upstream kills every process in the container whose environment holds that
token, from a `podman exec` of its own in a session of its own that the
process-group kill cannot reach."

(import re
        secrets
        shlex
        consfig.errors [ConnectionFailed]
        consfig.transport.frames [OUTPUT-LIMIT]
        consfig.transport.hop [ArgType Connection Hop PROBE-TIMEOUT])

;; Podman's own rule for container names, with a bound on the length: no
;; `/`, no newline, no leading dash or dot.
(setv _CONTAINER-NAME (re.compile r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}"))

(defn container-name? [v]
  "Whether V is a name Podman accepts for a container (and safe in an argv)."
  (bool (and (isinstance v str) (re.fullmatch _CONTAINER-NAME v))))

(setv USER-NAME (ArgType "a user name (lower-case letters, digits, _ and -, not starting with a digit or -)"
                         (fn [v] (if (and (isinstance v str) (re.fullmatch r"[a-z_][a-z0-9_-]{0,31}" v))
                                     v
                                     (raise (ValueError))))))

;; `sh -c AS-USER sh USER ARGV…`: ARGV run as USER (directly when that is who
;; runs it already, else through runuser, which needs root), from /, with
;; USER's runtime directory where there is one (/run/user/UID, made by
;; logind or lingering); elsewhere podman picks its own under /tmp.
(setv _AS-USER (.join "\n" [
  "u=$1; shift"
  "cd / || exit 1"
  "d=/run/user/$(id -u -- \"$u\") || exit 1"
  "if [ -d \"$d\" ]; then export XDG_RUNTIME_DIR=\"$d\"; else unset XDG_RUNTIME_DIR; fi"
  "unset DBUS_SESSION_BUS_ADDRESS"
  "if [ \"$(id -un)\" = \"$u\" ]; then exec \"$@\"; fi"
  ;; The caller's TMPDIR is no place of the user's (root's may be root's
  ;; own): podman would fall back to a run directory under the user's home
  ;; that it does not make.
  "unset TMPDIR"
  "exec runuser -u \"$u\" -- \"$@\""]))

(defn as-podman-user [user argv]
  "ARGV as USER runs podman: as USER, with USER's runtime directory; ARGV
itself when USER is None (root's containers)."
  (if user ["/bin/sh" "-c" _AS-USER "sh" user #* argv] argv))

(setv CONTAINER-NAME (ArgType "a container name (letters, digits, _ . and -, not starting with _ . or -; at most 128)"
                              (fn [v] (if (container-name? v) v (raise (ValueError))))))

;; In the container: kill -KILL every process whose environment holds
;; CONSFIG_EXEC=$1 (this shell is started without it).
(setv _KILL-TOKEN (.join "\n" [
  "for d in /proc/[0-9]*; do"
  "  if tr '\\0' '\\n' < \"$d/environ\" 2>/dev/null | grep -qxF \"CONSFIG_EXEC=$1\"; then"
  "    kill -KILL \"${d#/proc/}\" 2>/dev/null"
  "  fi"
  "done"]))

;; On the upstream: `sh -c EXEC sh TOKEN CONTAINER ARGV…`.  `podman exec`
;; runs in the background so that the trap can run while it waits; a
;; background command's standard input would be /dev/null, hence the
;; copy of it kept on descriptor 3 (dash ignores a plain `<&0` there).
(setv _EXEC (.join "\n" [
  "t=$1; c=$2; shift 2"
  "exec 3<&0"
  "podman exec -i --env \"CONSFIG_EXEC=$t\" -- \"$c\" \"$@\" <&3 3<&- &"
  "p=$!"
  (+ "trap 'setsid -f podman exec -- \"$c\" /bin/sh -c \"$k\" sh \"$t\" </dev/null >/dev/null 2>&1;"
     " kill -KILL $p 2>/dev/null; exit 143' TERM INT HUP")
  "wait $p"]))

(defn exec-argv [container argv [token None] * [user None]]
  "The argv that runs ARGV inside the running CONTAINER (USER's rootless
one, when given), on the machine that runs it, with TOKEN (a new one if
None) marking what it starts."
  (as-podman-user user ["env" f"k={_KILL-TOKEN}" "/bin/sh" "-c" _EXEC "sh"
                        (or token (secrets.token-hex 12)) container #* argv]))

(defclass PodmanConnection [Connection]
  "Scripts run with `podman exec -i CONTAINER /bin/sh -c` on the upstream."
  (setv hop-name "podman")

  (defn __init__ [self upstream container user]
    (.__init__ (super) upstream)
    (setv self.container container
          self.user user))

  (defn describe [self] (+ f"podman:{self.container}" (if self.user f"@{self.user}" "")))

  (defn run-script [self script input timeout * [limit OUTPUT-LIMIT]]
    (.run-script self.upstream
                  (shlex.join ["exec" #* (exec-argv self.container ["/bin/sh" "-c" script]
                                                    :user self.user)])
                  input timeout :limit limit))

  (defn start-process [self argv]
    (.start-process self.upstream (exec-argv self.container argv :user self.user))))

(setv _PROBE (+ "command -v podman >/dev/null || { echo 'podman is not installed' >&2; exit 254; }\n"
                "s=$(podman container inspect --format '{{.State.Status}}' -- \"$1\" 2>&1) ||"
                " { echo \"$s\" >&2; exit 255; }\n"
                "[ \"$s\" = running ] || { echo \"the container $1 is $s\" >&2; exit 253; }"))

(defn establish [upstream * container [user None]]
  (setv probe (.run upstream (as-podman-user user ["/bin/sh" "-c" _PROBE "sh" container])
                    :check False :timeout PROBE-TIMEOUT))
  (when (not probe.ok?)
    (raise (ConnectionFailed
             (+ f"cannot enter the container {container}" (if user f" of {user}" "") ": "
                (.strip (+ probe.stderr probe.stdout))
                (cond (= probe.exit-code 255)
                      " (`podman ps -a` lists the containers; podman.container-running runs one)"
                      (= probe.exit-code 253)
                      " (start it with podman.container-running)"
                      True ""))
             upstream.where)))
  (PodmanConnection upstream container user))

(setv HOP (Hop "podman" {"container" CONTAINER-NAME "user" USER-NAME} establish
               :required ["container"]))

(export :objects [PodmanConnection HOP CONTAINER-NAME container-name? exec-argv as-podman-user])
