"The `:nspawn` hop: run everything inside a booted systemd-nspawn container.

`[:nspawn :machine \"web1\"]` runs each script in the running container web1
on the upstream machine, which must be root there.  Each command enters the
container's namespaces with `nsenter --target LEADER --all`, LEADER being
the container's PID 1 as the host sees it, and runs `/bin/sh -c SCRIPT`
there with a clean environment.

Why nsenter, and not `systemd-run -M` or `machinectl shell`: both of those go
through systemd-machined and D-Bus, on the host and in the container, so
they need a host whose PID 1 is systemd — and consfig boots containers on
hosts where it is not (`consfig.props.container`).  `machinectl shell` also
gives the command a terminal, which mangles the binary pipe a `:python` hop
after this one speaks over and mixes stderr into stdout.  nsenter is a
plain exec: standard input and output stay the pipes they were, the exit
code is the command's, and the command is in the upstream's process group,
so a timeout that kills the group kills it too.

The leader is looked up afresh for every command (from machinectl where
systemd-machined runs, else from the pid file consfig's own runner keeps),
and a leader whose PID namespace is the host's own is refused: a container
that stopped, its PID taken by a host process, must never turn a command
meant for the container into one run on the host."

(import re
        shlex
        consfig.errors [ConnectionFailed]
        consfig.transport.frames [OUTPUT-LIMIT]
        consfig.transport.hop [ArgType Connection Hop Script PROBE-TIMEOUT])

;; Where consfig's runner keeps the state of a container it booted itself,
;; on a host with no systemd-machined: NAME.pid (systemd-nspawn's PID) and
;; NAME.log (the container's console).
(setv RUN-DIR "/run/consfig/nspawn")

;; systemd's own rule for machine names (a valid hostname of at most 64
;; characters), narrowed: dot-separated labels of letters, digits, `-` and
;; `_`, none empty and none starting with `-`.  So no `/`, no `..`, no
;; newline and no leading dash, whatever reaches a path or an argv.
(setv _MACHINE-NAME (re.compile r"[A-Za-z0-9_][A-Za-z0-9_-]*(\.[A-Za-z0-9_][A-Za-z0-9_-]*)*"))

(defn machine-name? [v]
  "Whether V is a name systemd-nspawn accepts for a machine and that is safe
in a path and an argv."
  (bool (and (isinstance v str) (<= 1 (len v) 64) (re.fullmatch _MACHINE-NAME v))))

(setv MACHINE-NAME (ArgType "a machine name (letters, digits, - _ and inner dots; at most 64)"
                            (fn [v] (if (machine-name? v) v (raise (ValueError))))))

;; On the upstream machine: `cf_leader NAME` prints the container's PID 1 as
;; the host sees it.  The runner's pid file names systemd-nspawn; its child
;; whose PID in its own namespace is 1 is the container's init.
(setv LEADER (.join "\n" [
  "cf_leader() {"
  "  if [ -d /run/systemd/system ] &&"
  "     l=$(machinectl show --property=Leader --value -- \"$1\" 2>/dev/null) && [ -n \"$l\" ]; then"
  "    echo \"$l\"; return 0"
  "  fi"
  f"  p=$(cat \"{RUN-DIR}/$1.pid\" 2>/dev/null) || return 1"
  "  [ \"$(cat \"/proc/$p/comm\" 2>/dev/null)\" = systemd-nspawn ] || return 1"
  "  for c in $(cat /proc/\"$p\"/task/*/children 2>/dev/null); do"
  "    case $(grep '^NSpid:' \"/proc/$c/status\" 2>/dev/null) in"
  "      *\"\t1\") echo \"$c\"; return 0 ;;"
  "    esac"
  "  done"
  "  return 1"
  "}"
  ""]))

;; `sh -c ENTER sh NAME ARGV…`: ARGV run in the container NAME.  Exit code
;; 255 (with a message) when it is not running.
(setv _ENTER (+ LEADER
                "m=$1; shift\n"
                "l=$(cf_leader \"$m\") &&"
                " [ \"$(readlink \"/proc/$l/ns/pid\")\" != \"$(readlink /proc/self/ns/pid)\" ] ||"
                " { echo \"consfig: the container $m is not running\" >&2; exit 255; }\n"
                "exec nsenter --target \"$l\" --all -- env -i"
                " PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
                " HOME=/root LANG=C.UTF-8 \"$@\""))

(defn enter-argv [machine argv]
  "The argv that runs ARGV inside the running container MACHINE, on the
machine that runs it."
  ["/bin/sh" "-c" _ENTER "sh" machine #* argv])

(defclass NspawnConnection [Connection]
  "Scripts run with `nsenter --target LEADER --all` on the upstream."
  (setv hop-name "nspawn")

  (defn __init__ [self upstream machine]
    (.__init__ (super) upstream)
    (setv self.machine machine))

  (defn describe [self] f"nspawn:{self.machine}")

  (defn run-script [self script input timeout * [limit OUTPUT-LIMIT]]
    (.run-script self.upstream
                  (shlex.join ["exec" #* (enter-argv self.machine ["/bin/sh" "-c" script])])
                  input timeout :limit limit))

  (defn start-process [self argv]
    (.start-process self.upstream (enter-argv self.machine argv))))

(defn establish [upstream * machine]
  (setv probe (.run upstream (Script (+ "command -v nsenter >/dev/null || "
                                        "{ echo 'nsenter is not installed (util-linux)' >&2; exit 254; }\n"
                                        _ENTER)
                                     machine "/bin/sh" "-c" ":")
                    :check False :timeout PROBE-TIMEOUT))
  (when (not probe.ok?)
    (raise (ConnectionFailed
             (+ f"cannot enter the container {machine}: "
                (if (= probe.exit-code 255)
                    (+ "no such container is running (start it with container.nspawn-running; "
                       "`machinectl list` shows those systemd knows)")
                    (or (.strip (+ probe.stderr probe.stdout))
                        f"exit code {probe.exit-code}")))
             upstream.where)))
  (NspawnConnection upstream machine))

(setv HOP (Hop "nspawn" {"machine" MACHINE-NAME} establish :required ["machine"]))

(export :objects [NspawnConnection HOP RUN-DIR LEADER MACHINE-NAME machine-name? enter-argv])
