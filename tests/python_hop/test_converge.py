"""The converging agent over a chain (`consfig converge`): [:local :python]
and the SSH lab's [[:ssh] :sudo :python].  The controller applies the host,
the target's Python stays and repairs drift, SIGTERM ends it after the repair
in progress, and `--follow` reads its events over the chain."""

import os
import pwd
import signal
import subprocess
import sys
import threading

import hy  # noqa: F401  -- imports the Hy modules below
from hy.models import Keyword as K

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import wait_until  # noqa: E402
import converge_testprops as ct  # noqa: E402

from consfig.converge.controller import converge_host, follow_host  # noqa: E402
from consfig.model.host import Host  # noqa: E402
from consfig.model.property import find_property  # noqa: E402

has_content = find_property("consfig.props.file.has-content")
seqprops = find_property("consfig.combinators.seqprops")


def ssh(config, host="lab"):
    return [K("ssh"), K("host"), host, K("config"), config]


class Agent:
    """`converge_host` in a thread of its own, its events in EVENTS."""

    def __init__(self, chain, host, **kw):
        self.events = []
        self.outcome = self.error = None
        self.thread = threading.Thread(target=self._run, args=(chain, host), kwargs=kw,
                                       daemon=True)
        self.thread.start()
        # The first time, the libraries are sent and compiled there.
        wait_until(lambda: self.error or self.of("watching"), 300, "the agent to watch")
        assert not self.error, self.error
        self.pid = self.of("watching")[0]["pid"]

    def _run(self, chain, host, **kw):
        try:
            self.outcome = converge_host(host, self.events.append, chain=chain, **kw)
        except BaseException as e:  # noqa: B902 -- reported by the test
            self.error = e

    def of(self, what):
        return [e for e in self.events if e["event"] == "converge" and e["what"] == what]

    def stop(self):
        os.kill(self.pid, signal.SIGTERM)
        self.thread.join(60)
        assert not self.thread.is_alive(), "the controller's side ended with the agent"
        assert not self.error, self.error


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def children_of(pid):
    r = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return r.stdout.split()


def converges_then_stops_mid_repair(chain, d, log):
    motd, slow, marker = d / "motd", d / "slow", d / "started"
    host = Host("converge.example", seqprops(has_content(str(motd), "hello\n"),
                                             ct.slowly_written(str(marker), str(slow), "whole\n")))
    agent = Agent(chain, host, log=str(log))
    assert motd.read_text() == "hello\n", "applied once first"
    assert agent.outcome is None, "and still running"

    # Written whole (a rename): a write that truncates first could be seen,
    # and repaired, as an empty file before the edited one.
    (d / "motd.new").write_text("edited\n")
    os.replace(d / "motd.new", motd)
    wait_until(lambda: motd.read_text() == "hello\n", 10, "the edit repaired")
    # The file is written before the events that say so reach us.
    wait_until(lambda: agent.of("repaired"), 10, "the repair reported")
    assert [e["desc"] for e in agent.of("drift")] == [f"{motd} has content"], agent.events

    marker.unlink()
    slow.write_text("partial")
    wait_until(marker.exists, 10, "the slow repair to begin")
    agent.stop()
    assert slow.read_text() == "whole\n", "the repair in progress finished, whole"
    assert agent.of("stopped"), "the agent said it stopped"
    assert agent.outcome.failures == 0, agent.events
    wait_until(lambda: not alive(agent.pid), 10, "the agent's process to end")
    assert [p.name for p in d.iterdir() if p.name.startswith(".")] == [], "no temporary file"
    logged = (log / "converge" / "converge.example.jsonl").read_text()
    assert '"what": "repaired"' in logged, "its events are in its log"


def test_local_python_converges_and_ends_cleanly_mid_repair(tmp_path):
    d = tmp_path / "target"
    d.mkdir()
    converges_then_stops_mid_repair([K("local"), K("python")], d, tmp_path / "log")


def test_ssh_sudo_python_converges_and_ends_cleanly_mid_repair(sshlab, tmp_path):
    d = tmp_path / "target"
    d.mkdir()
    converges_then_stops_mid_repair([ssh(sshlab.config), K("sudo"), K("python")], d,
                                    tmp_path / "log")


def test_noop_over_ssh_reports_drift_with_its_diff_and_repairs_nothing(sshlab, tmp_path):
    d = tmp_path / "noop"
    d.mkdir()
    motd = d / "motd"
    motd.write_text("hello\n")
    agent = Agent([ssh(sshlab.config), K("sudo"), K("python")],
                  Host("noop.example", has_content(str(motd), "hello\n")),
                  noop=True, log=str(tmp_path / "log"))
    motd.write_text("edited\n")
    # The write truncates first: the agent may see (and report) the empty
    # file before the edited one.
    drift = wait_until(lambda: [d for d in agent.of("drift") if "-edited" in d.get("diff", "")],
                       10, "the drift reported")[0]
    assert drift["noop"] and "+hello" in drift["diff"], drift
    agent.stop()
    assert motd.read_text() == "edited\n", "nothing repaired"
    assert not agent.of("repaired")


def test_follow_reads_a_running_agents_events_over_the_chain(sshlab, tmp_path):
    # As the lab's user, whose state directory is ~/.local/state/consfig.
    home = pwd.getpwnam(sshlab.user).pw_dir
    d = os.path.join(home, "follow")
    subprocess.run(["rm", "-rf", d], check=True)
    motd = os.path.join(d, "motd")
    chain = [ssh(sshlab.config), K("python")]
    host = Host("follow.example", seqprops(find_property("consfig.props.file.directory-exists")(d),
                                           has_content(motd, "hello\n")))
    agent = Agent(chain, host)
    seen = []

    def until(event):
        # A repair the follower saw drift first: tail starts at the end of
        # the log, perhaps in the middle of one.
        return event.get("what") == "repaired" and any(e.get("what") == "drift" for e in seen)

    follower = threading.Thread(
        target=follow_host, args=(host, seen.append),
        kwargs={"chain": chain, "lines": 0, "until": until}, daemon=True)
    follower.start()
    # Edited again until the follower has seen a repair: tail starts at the
    # end of the log, and may start after a first repair.
    def repaired_seen():
        if follower.is_alive() and not any(e.get("what") == "drift" for e in seen):
            subprocess.run(["sh", "-c", f"echo edited > {motd}"], check=True)
        return not follower.is_alive()
    wait_until(repaired_seen, 30, "the follower to see a repair")
    assert any(e.get("what") == "drift" and e["host"] == "follow.example" for e in seen), seen
    agent.stop()
    assert not children_of(agent.pid)


def test_an_idle_agent_ends_on_a_sigterm_that_another_of_its_threads_takes(tmp_path):
    # A signal sent to a process goes to any of its threads that does not
    # block it: systemd's shutdown ("Sending SIGTERM to remaining
    # processes") reached the agent's reader thread, and the agent slept on
    # in poll(2) until its interval, renewing its dataspace lease, until
    # the SIGKILL.  tgkill(2) sends it to one thread that is not the main one.
    import ctypes
    motd = tmp_path / "motd"
    agent = Agent([K("local"), K("python")], Host("converge.example", has_content(str(motd), "hi\n")),
                  interval=600, log=str(tmp_path / "log"))
    others = [int(t) for t in os.listdir(f"/proc/{agent.pid}/task") if int(t) != agent.pid]
    assert others, "the agent's Python runs threads besides its main one"
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.tgkill(agent.pid, others[0], signal.SIGTERM) == 0, os.strerror(ctypes.get_errno())
    wait_until(lambda: agent.of("stopped"), 10, "the agent to stop on SIGTERM")
    agent.thread.join(30)
    assert not agent.thread.is_alive(), "the controller's side ended with the agent"
    wait_until(lambda: not alive(agent.pid), 10, "the agent's process to end")
