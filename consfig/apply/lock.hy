"The deployment lock: one deployment at a time on a target.

Two deployments of the same target at once would each read a file, change
it and write it back, and one's changes would be lost.  So a deployment
takes a lock on its target, once the chain is established, before anything
is applied: flock(1) on `consfig/deploy.lock` in the target user's cache
directory, held by a process started through the chain whose standard input
is the connection itself.  However the deployment ends — finished, failed,
the controller killed, the connection dropped — that input ends and the lock
goes with it; nothing is left to clean up.

The holder is also the deployment's reaper.  Every command the deployment
runs through that connection carries a random token in its environment
(`CONSFIG_DEPLOYMENT`); when the holder's input ends, however that happens,
it ends every process on the target that carries the token (TERM, then
KILL), so that no command outlives the deployment that started it — not
after a Ctrl-C, nor after the controller is killed.

A second deployment waits up to `LOCK-WAIT` seconds, then fails naming the
holder (who, from where, since when), which the holder records beside the
lock.  A deployment nested in another (a chroot, a host deployed from one)
that reaches the same target through the same connection already holds the
lock.  A target without flock(1), or reached by a hop that cannot start a
process, is deployed without a lock."

(import contextlib
        os
        re
        time
        consfig.model.context [deployment-cache]
        consfig.errors [CannotStartProcess ConnectionFailed ConsfigError]
        fcntl)

;; `consfig.boot.cache_directory` in the shell: the two must agree, or a
;; POSIX and a `:python` deployment of one target would lock different files.
(setv CACHE-DIRECTORY-SCRIPT "
consfig_safe() {
  [ -d \"$1\" ] && [ -O \"$1\" ] &&
    [ -z \"$(find -H \"$1\" -prune \\( -perm -020 -o -perm -002 \\) -print)\" ]
}
consfig_cache() {
  home=$(getent passwd \"$(id -u)\" 2>/dev/null | cut -d: -f6)
  for root in \"$XDG_CACHE_HOME\" \"${home:-$HOME}/.cache\"; do
    case $root in /*) ;; *) continue;; esac
    if [ \"$1\" = make ]; then
      [ -e \"$root\" ] || mkdir -p -m 700 \"$root\" 2>/dev/null
      consfig_safe \"$root\" && mkdir -m 700 \"$root/consfig\" 2>/dev/null
    fi
    if consfig_safe \"$root\" && [ ! -L \"$root/consfig\" ] && consfig_safe \"$root/consfig\"; then
      [ \"$1\" = make ] && chmod 700 \"$root/consfig\"
      printf '%s\\n' \"$root/consfig\"
      return 0
    fi
  done
  return 1
}
")

;; How long a deployment waits for another one on the same target to end.
(setv LOCK-WAIT 60)

;; $1: seconds to wait; $2: who we are, for whoever waits on us; $3: the
;; token the deployment's commands carry.  The reaper runs once the input
;; ends: TERM to what carries the token, KILL to what is left after 2 s.
(setv _HOLD-LOCK (+ CACHE-DIRECTORY-SCRIPT "
carrying() {
  grep -lzx \"CONSFIG_DEPLOYMENT=$1\" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3
}
reap() {
  pids=$(carrying \"$1\"); [ -n \"$pids\" ] || return 0
  kill -TERM $pids 2>/dev/null
  i=0
  while [ $i -lt 10 ]; do
    pids=$(carrying \"$1\"); [ -n \"$pids\" ] || return 0
    sleep 0.2; i=$((i + 1))
  done
  kill -KILL $pids 2>/dev/null
  return 0
}
command -v flock >/dev/null 2>&1 || { echo unlocked; cat >/dev/null; reap \"$3\"; exit 0; }
d=$(consfig_cache make) || { echo 'no cache directory of this user is safe to use'; exit 1; }
exec 9>>\"$d/deploy.lock\"
if ! flock -w \"$1\" 9; then
  printf 'busy %s\\n' \"$(cat \"$d/deploy.holder\" 2>/dev/null)\"
  exit 75
fi
printf '%s\\n' \"$2\" >\"$d/deploy.holder\"
echo locked
cat >/dev/null
reap \"$3\""))

(defn _since []
  (time.strftime "%Y-%m-%d %H:%M:%S %Z"))

(defn _holder [hostname [digest None] [check False]]
  ;; getpass, socket and secrets (below) are imported where they are used:
  ;; a :python target imports this module and takes the lock without them.
  (import getpass socket)  ; start-up: 2 ms
  (+ f"{(getpass.getuser)}@{(socket.gethostname)} (pid {(os.getpid)}), "
     f"{(if check "checking" "deploying")} {hostname}, since {(_since)}"
     (if (and digest (not check)) f", propspec {digest}" "")))

(defn agent-holder [hostname]
  "What the converging agent of HOSTNAME says it is, holding the lock for a
repair: no push, which other agents on the target must not take it for."
  f"the converging agent of {hostname} (pid {(os.getpid)}), since {(_since)}")

(defn holder-digest [holder]
  "The propspec digest (`consfig.model.propspec.propspec-digest`) a lock's HOLDER
line names: that of the host's whole propspec its deployment applies; None
when it names none (a deploy-these, a check, an older consfig)."
  (setv #(_ found digest) (.rpartition (or holder "") ", propspec "))
  (when (and found (re.fullmatch r"[0-9a-f]{64}" digest)) digest))

(defn holder-says [holder]
  "What a lock's HOLDER line says of its deployment, as a dict: \"what\",
\"push\" (a deployment, which may change anything), \"check\" (changes
nothing) or \"agent\" (a converging agent's repair of one property), None
when it cannot tell; \"host\", the host deployed, checked or kept (None when
not said); \"digest\", as `holder-digest`."
  (setv holder (or holder "")
        agent (re.match r"the converging agent of (\S+) \(pid \d+\)" holder)
        other (re.search r"\(pid \d+\), (deploying|checking) ([^\s,]+), since " holder))
  (cond agent {"what" "agent" "host" (.group agent 1) "digest" None}
        other {"what" (if (= (.group other 1) "checking") "check" "push")
               "host" (.group other 2) "digest" (holder-digest holder)}
        True {"what" None "host" None "digest" (holder-digest holder)}))

(defn lock-request [hostname [digest None] * [check False]]
  "What the target's Python of a `:python` hop is told in order to take the
lock itself for a deployment of HOSTNAME (of the propspec whose DIGEST is
given, when it is the host's whole one; CHECK: a check, which changes
nothing and names no digest): how long to wait, and who holds it, for
whoever waits."
  {"wait" LOCK-WAIT "holder" (_holder hostname digest check)})

(defn _acquire [connection hostname wait [digest None] [check False]]
  (import secrets)  ; start-up: 4 ms
  (setv token (secrets.token-hex 16))
  (try
    (setv process (.start-process connection ["/bin/sh" "-c" _HOLD-LOCK "sh"
                                              (str wait) (_holder hostname digest check) token]))
    ;; A hop that cannot start a process (one of a site's own that
    ;; implements only run-script) cannot hold a lock either.
    (except [CannotStartProcess] (return None)))
  (setv answer (.decode (.readline process.stdout) "utf-8" "replace"))
  (cond
    (in (.strip answer) #("locked" "unlocked"))
    (do (setv connection.deployment-token token)
        process)
    (.startswith answer "busy")
    (do (.kill process)
        (raise (ConnectionFailed
                 (+ f"another deployment holds this target: {(.strip (cut answer 5 None))}; "
                    f"waited {wait} s for it to end")
                 connection.where)))
    True (do (.kill process)
             (raise (ConnectionFailed
                      (+ "could not take the deployment lock"
                         (if answer f": {(.strip answer)}" ""))
                      connection.where)))))

(defn _release [process]
  ;; End of file on its input ends the holder, and the lock with it.
  (try (.close process.stdin) (except [Exception] None))
  (when (is (.wait process 10) None)
    (.kill process)))

(defn _lock-holder [connection]
  ;; A `:python` hop starts its processes through the hop before it, where
  ;; the lock file is too: that is the target the lock is on.
  (while (.apply-remotely? connection)
    (setv connection connection.upstream))
  connection)

(defn lock-held? [connection * [within None]]
  "Whether the target of CONNECTION is under a deployment lock already: one
this process holds (`holding-target-lock`), or the lock of the deployment
applied through WITHIN when a nested deployment's target is that same
connection (`[:local :python]` from it) — which may be held by the
controller, out of this process's sight."
  (setv connection (_lock-holder connection))
  (or (in connection.where (.get (deployment-cache) "target-locks" #{}))
      (is connection within)))

(defn [contextlib.contextmanager] holding-target-lock [connection hostname * [within None]
                                                       [digest None] [check False]]
  "Hold the deployment lock on the target of CONNECTION while the body runs,
waiting up to `LOCK-WAIT` seconds for another deployment to release it
(DIGEST, as in `lock-request`).  A
deployment nested in the one applied through WITHIN whose target is that
same connection (`[:local :python]` from it) is under its lock already —
which may be held by the controller, out of this process's sight."
  (setv connection (_lock-holder connection)
        held (.setdefault (deployment-cache) "target-locks" (set))
        key connection.where)
  (setv process (when (not (lock-held? connection :within within))
                  (_acquire connection hostname LOCK-WAIT digest check)))
  (if (is process None)
      (yield)
      (do (.add held key)
          (try
            (yield)
            (finally
              (.discard held key)
              (setv connection.deployment-token None)
              (_release process))))))

(defn read-holder [cache]
  "Who holds (or last held) the deployment lock in the cache directory CACHE,
as they said; None when nobody has said."
  (try (with [f (open (os.path.join cache "deploy.holder"))] (.strip (.read f)))
       (except [OSError] None)))

(defn [contextlib.contextmanager] target-lock-held [cache request * [stopping None]]
  "Hold the deployment lock in the cache directory CACHE while the body runs:
the same flock(2) on the same file as the holder started over a POSIX chain,
taken by the target's Python itself (a `:python` hop's, for each apply of a
kept session too; the converging agent's, for each repair), without the
round trip of starting one.  REQUEST: None (someone else holds the lock for
us) or {wait holder} (`lock-request`).  STOPPING, a function: when it says
True while we wait, give up (the agent is told to end)."
  (if (not request)
      (yield)
      (do
          (setv wait (get request "wait")
                deadline (+ (time.monotonic) wait)
                fd (os.open (os.path.join cache "deploy.lock")
                            (| os.O-WRONLY os.O-APPEND os.O-CREAT) 0o600))
          (try
            (while True
              (try (fcntl.flock fd (| fcntl.LOCK-EX fcntl.LOCK-NB))
                   (break)
                   (except [BlockingIOError]
                     (when (or (> (time.monotonic) deadline) (and stopping (stopping)))
                       (raise (ConsfigError
                                (+ "another deployment holds this target: "
                                   (or (read-holder cache) "(unknown)")
                                   f"; waited {wait} s for it to end"))))
                     (time.sleep 0.1))))
            (with [f (open (os.path.join cache "deploy.holder") "w")]
              (.write f (+ (get request "holder") "\n")))
            (yield)
            (finally (os.close fd))))))

(export :objects [holding-target-lock lock-held? lock-request holder-digest holder-says
                  agent-holder LOCK-WAIT CACHE-DIRECTORY-SCRIPT
                  target-lock-held read-holder])
