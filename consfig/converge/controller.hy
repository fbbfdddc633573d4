"The controller's side of the converging agent (`consfig converge`).

`converge-host` starts the agent over the host's chain: the chain ends in a
`:python` hop, whose Python applies the host once (under the deployment
lock, as a push does) and then stays, keeping the host converged
(`consfig.converge.agent`) and streaming its events back, until the controller
goes away or the agent is told to stop (SIGTERM on the target).

`follow-host` attaches to an agent already running on the host (installed
as a service by `converge.running`): it reads the agent's event log, a file
of JSON lines in consfig's private state directory, with `tail -F` through
the chain's hops before `:python`.  A file, rather than the journal: it is
there without systemd (a container, a chroot), its lines are the very
events `--json` prints, it is private to the agent's user, and any chain
that can run a command can read it; the agent also prints its lines to its
standard output, which systemd sends to the journal."

(import json
        consfig.transport.chain [parse-chain with-chain]
        consfig.model.context [establishing-for]
        consfig.deployer.deployment [prepare-deployment]
        consfig.errors [ConsfigError]
        consfig.apply.lock [lock-request]
        consfig.util [STATE-DIRECTORY-SCRIPT]
        consfig.model.host [find-host]
        consfig.options [ConvergeSettings RunOptions])

;; $1 the hostname, $2 how many past lines to show first.
(setv _FOLLOW (+ STATE-DIRECTORY-SCRIPT "
exec tail -n \"$2\" -F -- \"$d/converge/$1.jsonl\" 2>/dev/null"))

(defn _python-ended [prepared]
  ;; The agent runs in the chain's last Python, and acts there itself.
  (setv chain prepared.chain)
  (when (!= (get (get chain -1) 0) "python")
    (raise (ConsfigError
             (+ f"consfig converge {prepared.hostname}: the chain must end in a :python hop "
                "(the agent runs in a Python on the target), e.g. [[:ssh] :sudo :python]; "
                f"it ends in :{(get (get chain -1) 0)}")))))

(defn converge-host [host sink * [chain None] [noop False] [interval None] [unit-poll None]
                     [verbosity 0] [log None] [limit None] [burst None] [alongside False]]
  "Apply HOST over CHAIN (its default chain when None) and keep it converged
from the Python at the chain's end, sending events to SINK, until the
target's agent stops.  NOOP: report drift, repair nothing (the first pass
is a check).  INTERVAL: seconds between checks of a property that watches
nothing.  LOG: the directory of the agent's event log on the target (None:
consfig's state directory there).  LIMIT, BURST: how many repairs of one
property a second, in a row (`consfig.converge.agent.RepairLimit`), where its
meta-parameters do not say.  ALONGSIDE: run even while another agent keeps
the host (`consfig.converge.agent.keeping`).  Return the first pass's `Outcome`."
  (setv options (RunOptions :check noop :verbosity verbosity
                            :converge (ConvergeSettings :noop noop :interval interval
                                                        :unit-poll unit-poll :log log
                                                        :limit limit :burst burst
                                                        :alongside alongside))
        prepared (prepare-deployment chain host))
  (_python-ended prepared)
  (with [_ (establishing-for prepared.host)
         conns (with-chain prepared.chain)]
    (.apply-remotely (get conns -1) prepared.host sink options
                     :lock (lock-request prepared.hostname))))

(defn follow-host [host sink * [chain None] [lines 20] [until None]]
  "Send SINK the events of the agent that runs on HOST (installed as a
service), the last LINES of them first, then each as it comes, until
interrupted (or, given UNTIL, a function, until it says True of an event)."
  (setv host (find-host host)
        parsed (parse-chain (or chain host.deploy
                                (raise (ConsfigError f"host {host.hostname} has no default chain; give --via")))))
  (when (!= (get (get parsed -1) 0) "python")
    (raise (ConsfigError f"consfig converge --follow {host.hostname}: the chain must end in a :python hop")))
  (setv posix (cut parsed 0 -1))
  (with [_ (establishing-for host)
         conns (with-chain (or posix [#("local" {})]))]
    (setv process (.start-process (get conns -1) ["/bin/sh" "-c" _FOLLOW "sh" host.hostname
                                                  (str lines)]))
    (try
      (for [line (iter process.stdout.readline b"")]
        (try (setv event (json.loads line))
             (except [ValueError] (continue)))
        (when (isinstance event dict)
          (.setdefault event "host" host.hostname)
          (.setdefault event "depth" 0)
          (sink event)
          (when (and until (until event)) (break))))
      (finally (.kill process)))))

(export :objects [converge-host follow-host])
