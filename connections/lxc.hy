"The `:lxc` hop: run everything inside a running LXC container.

`[:lxc :name \"web1\"]` runs each script in the running system container
web1 (root's, in /var/lib/lxc, as `consfig.props.lxc` makes them) with
`lxc-attach -n web1 --clear-env -- /bin/sh -c SCRIPT` on the upstream
machine, which must be root there.  lxc-attach puts the command in the
container's namespaces, cgroup and security profile, with the
capabilities the container's configuration leaves it.

Standard input and output stay plain pipes: lxc-attach allocates a
terminal only when its own standard input is one, which a hop's never is,
so binary data and a `:python` hop after this one pass through, and the
exit code is the command's (lxc-attach's own failures are 1 and 255 before
the command starts).  The attached command stays in lxc-attach's process
group and session, so a timeout that kills the group kills it too: no
token is needed, as it is for `podman exec`, which detaches.

The environment is cleared (`--clear-env`, which leaves lxc-attach's PATH
and `container=lxc`) and given HOME and LANG, as the `:nspawn` hop does."

(import re
        shlex
        consfig.errors [ConnectionFailed]
        consfig.transport.frames [OUTPUT-LIMIT]
        consfig.transport.hop [ArgType Connection Hop PROBE-TIMEOUT])

;; Where root's containers live.  Given to every lxc-* command with -P, so
;; that consfig and its hop agree whatever /etc/lxc/lxc.conf says.
(setv LXC-PATH "/var/lib/lxc")

;; LXC itself takes almost any name as a directory name; a container is
;; also a host, so consfig takes a hostname's: dot-separated labels of
;; letters, digits, `-` and `_`, none empty and none starting with `-`, at
;; most 64 characters.  No `/`, no `..`, no newline, no leading dash.
(setv _NAME (re.compile r"[A-Za-z0-9_][A-Za-z0-9_-]*(\.[A-Za-z0-9_][A-Za-z0-9_-]*)*"))

(defn container-name? [v]
  "Whether V is a name consfig gives an LXC container (safe in a path and
an argv)."
  (bool (and (isinstance v str) (<= 1 (len v) 64) (re.fullmatch _NAME v))))

(setv CONTAINER-NAME (ArgType "an LXC container name (letters, digits, - _ and inner dots; at most 64)"
                              (fn [v] (if (container-name? v) v (raise (ValueError))))))

(defn lxc-argv [command name #* args]
  "The argv of the LXC tool COMMAND (`lxc-info`, `lxc-stop`, …) for root's
container NAME, followed by ARGS."
  [command "-P" LXC-PATH "-n" name #* args])

(defn attach-argv [name argv]
  "The argv that runs ARGV inside the running container NAME, on the
machine that runs it."
  (lxc-argv "lxc-attach" name "--clear-env" "--set-var" "HOME=/root" "--set-var" "LANG=C.UTF-8"
            "--" #* argv))

(defclass LxcConnection [Connection]
  "Scripts run with `lxc-attach -n NAME -- /bin/sh -c SCRIPT` on the upstream."
  (setv hop-name "lxc")

  (defn __init__ [self upstream name]
    (.__init__ (super) upstream)
    (setv self.name name))

  (defn describe [self] f"lxc:{self.name}")

  (defn run-script [self script input timeout * [limit OUTPUT-LIMIT]]
    (.run-script self.upstream
                  (shlex.join ["exec" #* (attach-argv self.name ["/bin/sh" "-c" script])])
                  input timeout :limit limit))

  (defn start-process [self argv]
    (.start-process self.upstream (attach-argv self.name argv))))

;; $1 the lxc path, $2 the name.  254: no LXC; 253: not running (its state
;; on stdout); else lxc-attach's own failure.
(setv _PROBE (.join "\n" [
  "command -v lxc-attach >/dev/null || { echo 'LXC is not installed (apt-get install lxc)' >&2; exit 254; }"
  "s=$(lxc-info -P \"$1\" -n \"$2\" -s -H 2>&1) || { echo \"$s\" >&2; exit 253; }"
  "[ \"$s\" = RUNNING ] || { echo \"$s\"; exit 253; }"
  "exec lxc-attach -P \"$1\" -n \"$2\" --clear-env -- /bin/sh -c :"]))

(defn establish [upstream * name]
  (setv probe (.run upstream ["/bin/sh" "-c" _PROBE "sh" LXC-PATH name]
                    :check False :timeout PROBE-TIMEOUT))
  (when (not probe.ok?)
    (raise (ConnectionFailed
             (+ f"cannot enter the LXC container {name}: "
                (if (= probe.exit-code 253)
                    (+ (if (.strip probe.stdout)
                           f"it is {(.lower (.strip probe.stdout))}"
                           f"no such container in {LXC-PATH}")
                       " (start it with lxc.container-running; `lxc-ls -f` lists them)")
                    (or (.strip (+ probe.stderr probe.stdout))
                        f"exit code {probe.exit-code}")))
             upstream.where)))
  (LxcConnection upstream name))

(setv HOP (Hop "lxc" {"name" CONTAINER-NAME} establish :required ["name"]))

(export :objects [LxcConnection HOP LXC-PATH CONTAINER-NAME container-name? lxc-argv attach-argv])
