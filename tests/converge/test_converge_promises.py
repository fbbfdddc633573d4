"""What docs/converge.md promises of the agent, each through a real
`consfig converge HOST` process over [:local :python]: --noop and its
diffs, `unapplied` kept unapplied, an `on-change` kept whole, a property
that raises, a directory deleted and recreated, a fight reported once, a
push of the host's own propspec rescanned after, :retry in a repair, a
polled fact of a `during`, the lines it prints, and --follow."""

import os
import subprocess
import sys
import threading

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agentcli import Converging, write_site  # noqa: E402
from clirun import REPO, consfig  # noqa: E402
from harness import wait_until  # noqa: E402

LOCAL = "[:local :python]"


def test_noop_reports_each_drift_with_its_diff_and_repairs_nothing(tmp_path):
    f = tmp_path / "motd"
    f.write_text("hello\n")
    site = write_site(tmp_path / "site.hy", "noop.example", LOCAL,
                      f'(file.has-content "{f}" "hello\\n")')
    with Converging(tmp_path, "--consfig", site, "noop", "--noop", "--diff") as agent:
        f.write_text("edited\n")
        drift = wait_until(lambda: [d for d in agent.of("drift") if "-edited" in d.get("diff", "")],
                           10, "the drift reported")[0]
        assert drift["noop"] and "+hello" in drift["diff"], drift
        (tmp_path / "other").write_text("x")   # a second event in the same directory
        f.write_text("edited again\n")
        wait_until(lambda: [d for d in agent.of("drift") if "-edited again" in d.get("diff", "")],
                   10, "the changed drift reported again")
    assert f.read_text() == "edited again\n", "nothing repaired"
    assert not agent.of("repaired")


def test_a_property_inside_unapplied_is_kept_unapplied(tmp_path):
    f = tmp_path / "gone"
    site = write_site(tmp_path / "site.hy", "unapplied.example", LOCAL,
                      f'(unapplied (file.exists-with-content "{f}" "no\\n"))')
    with Converging(tmp_path, "--consfig", site, "unapplied") as agent:
        f.write_text("no\n")
        wait_until(lambda: not f.exists(), 10, "the file removed again")
        wait_until(lambda: agent.of("repaired"), 10, "the agent to say so")


def test_an_on_change_is_kept_whole_and_its_handler_runs_after_a_repair(tmp_path):
    conf, reloads = tmp_path / "conf", tmp_path / "reloads"
    site = write_site(tmp_path / "site.hy", "onchange.example", LOCAL, f"""
  (on-change (file.has-content "{conf}" "conf\\n")
    (cmd.single "sh" "-c" "echo reloaded >> \\"$0\\"" "{reloads}"))""", uses="file cmd")
    with Converging(tmp_path, "--consfig", site, "onchange") as agent:
        assert reloads.read_text() == "reloaded\n", "applied once, with its handler"
        conf.write_text("broken\n")
        wait_until(lambda: reloads.read_text() == "reloaded\nreloaded\n", 10,
                   "the handler run after the repair")
        assert conf.read_text() == "conf\n"
        wait_until(lambda: agent.of("repaired"), 10, "the agent to say so")


RAISES = """(defprop raises-when-flagged :posix [flag path]
  "PATH holds ok; the check raises while FLAG exists."
  (:desc f"{path} is ok")
  (:watch [(watch-path flag) (watch-path path)])
  (:check (do (when (os.path.exists flag) (raise (RuntimeError "flagged")))
              (and (os.path.exists path) (= (.read-text (pathlib.Path path)) "ok\\n"))))
  (:apply (.write-text (pathlib.Path path) "ok\\n")))
"""


def test_a_property_that_raises_is_reported_and_the_agent_goes_on(tmp_path):
    flag, p, other = tmp_path / "flag", tmp_path / "p", tmp_path / "other"
    site = tmp_path / "site.hy"
    site.write_text(f"""(require consfig *)
(import consfig * os pathlib)
(use-props consfig.props [file])
{RAISES}
(defhost raises.example {{:deploy {LOCAL}}}
  (raises-when-flagged "{flag}" "{p}")
  (file.has-content "{other}" "other\\n"))
""")
    with Converging(tmp_path, "--consfig", site, "raises") as agent:
        flag.touch()
        [failed] = wait_until(lambda: agent.of("failed"), 10, "the failure reported")
        assert "flagged" in failed["message"], failed
        other.write_text("edited\n")
        wait_until(lambda: agent.of("repaired", "other"), 10, "the others still kept")
        flag.unlink()
        p.write_text("bad\n")
        wait_until(lambda: p.read_text() == "ok\n", 10, "checked again at its next event")


def test_a_file_whose_directory_is_deleted_and_recreated_is_put_back(tmp_path):
    d = tmp_path / "d" / "e"
    f = d / "f"
    site = write_site(tmp_path / "site.hy", "dirs.example", LOCAL, f"""
  (file.directory-exists "{tmp_path / 'd'}")
  (file.directory-exists "{d}")
  (file.has-content "{f}" "f\\n")""")
    def removed(path):
        # The agent may put a directory back while rm empties it: rm then
        # fails, and is run again.
        return subprocess.run(["rm", "-rf", str(path)], capture_output=True).returncode == 0

    with Converging(tmp_path, "--consfig", site, "dirs"):
        wait_until(lambda: removed(tmp_path / "d"), 10, "the tree removed")
        wait_until(lambda: f.exists() and f.read_text() == "f\n", 10, "the tree put back")
        wait_until(lambda: removed(d), 10, "the inner directory removed")
        wait_until(lambda: f.exists() and f.read_text() == "f\n", 10, "put back again")


def test_two_agents_fighting_over_a_file_report_the_fight_once_and_keep_to_the_limit(tmp_path):
    f = tmp_path / "fought"
    site = tmp_path / "site.hy"
    site.write_text(f"""(require consfig *)
(import consfig *)
(use-props consfig.props [file])
(defhost one.example {{:deploy {LOCAL}}} (file.has-content "{f}" "one\\n"))
(defhost two.example {{:deploy {LOCAL}}} (file.has-content "{f}" "two\\n"))
""")
    with Converging(tmp_path, "--consfig", site, "one", "--limit", "2", "--burst", "3",
                    name="one") as one, \
         Converging(tmp_path, "--consfig", site, "two", "--limit", "2", "--burst", "3",
                    name="two") as two:
        # In a ping-pong only the agent whose repairs are held back meets
        # its limit (the other's bucket fills while it waits): that one
        # reports the fight.
        wait_until(lambda: one.of("fight") or two.of("fight"), 60, "the fight reported")
        start = [len(a.of("repaired")) for a in (one, two)]
        first = [a.of("repaired")[-1]["time"] if a.of("repaired") else 0 for a in (one, two)]
        wait_until(lambda: min(len(a.of("repaired")) for a in (one, two)) >= max(start) + 6, 90,
                   "the fight going on")
        for a, n, t in zip((one, two), start, first):
            last = a.of("repaired")[-1]["time"]
            made = len(a.of("repaired")) - n
            # A token bucket: in T seconds at most the burst plus T times
            # the limit (an agent the machine's load held back may find its
            # burst refilled), and one for the repair under way at the start.
            allowed = 3 + 2 * (last - t) + 1
            assert made <= allowed, (f"{made} repairs in {last - t:.1f} s, above the limit "
                                     f"of 2 a second with a burst of 3")
            assert len(a.of("fight")) <= 2, f"the fight reported once (or once more): {a.of('fight')}"


def test_a_push_of_the_hosts_own_propspec_is_waited_for_then_everything_checked(tmp_path):
    f = tmp_path / "motd"
    site = write_site(tmp_path / "site.hy", "pushed.example", LOCAL,
                      f'(file.has-content "{f}" "hello\\n")')
    with Converging(tmp_path, "--consfig", site, "pushed") as agent:
        r = consfig("deploy", "--consfig", site, "pushed")
        assert r.returncode == 0, r.stderr
        [rescan] = wait_until(lambda: agent.of("rescan"), 10, "a rescan after the push")
        assert "deploying pushed.example" in rescan["why"], rescan
        f.write_text("edited\n")
        wait_until(lambda: f.read_text() == "hello\n", 10, "still kept")
        assert not agent.of("superseded")


RETRIED = """(defprop fails-first-attempt :posix [attempts path]
  "PATH holds ok; the first of every two attempts to apply it fails."
  (:desc f"{path} is ok")
  (:watch [(watch-path path)])
  (:check (and (os.path.exists path) (= (.read-text (pathlib.Path path)) "ok\\n")))
  (:apply (with [f (open attempts "a")] (.write f "attempt\\n"))
          (when (% (len (.splitlines (.read-text (pathlib.Path attempts)))) 2)
            (raise (RuntimeError "the first attempt fails")))
          (.write-text (pathlib.Path path) "ok\\n")))
"""


def test_a_repair_is_retried_under_its_retry_meta_parameter(tmp_path):
    attempts, p = tmp_path / "attempts", tmp_path / "p"
    attempts.write_text("attempt\n")      # the first pass succeeds at once
    site = tmp_path / "site.hy"
    site.write_text(f"""(require consfig *)
(import consfig * os pathlib)
{RETRIED}
(defhost retried.example {{:deploy {LOCAL}}}
  (with-meta {{:retry 2}} (fails-first-attempt "{attempts}" "{p}")))
""")
    with Converging(tmp_path, "--consfig", site, "retried") as agent:
        p.write_text("bad\n")
        wait_until(lambda: agent.of("repaired"), 10, "repaired at the second attempt")
        notes = [e for e in agent.events() if e.get("event") == "output" and e.get("attempt")]
        assert notes and notes[0]["attempt"] == 1, agent.events()
        assert not agent.of("failed"), agent.events()


def _polled_page_site(tmp_path, hostname, command):
    """A site whose page is there while COMMAND succeeds (polled every 0.2 s):
    its path, the flag file and the page."""
    flag, page = tmp_path / "flag", tmp_path / "page"
    site = write_site(tmp_path / "site.hy", hostname, LOCAL, f"""
  (during (fact.command-succeeds {command(flag)} :poll 0.2)
    (file.exists-with-content "{page}" "down\\n"))""")
    return site, flag, page


def test_a_polled_fact_is_kept_live_like_a_watched_one(tmp_path):
    site, flag, page = _polled_page_site(tmp_path, "polled.example",
                                         lambda f: f'["test" "-e" "{f}"]')
    with Converging(tmp_path, "--consfig", site, "polled") as agent:
        flag.touch()
        wait_until(page.exists, 10, "the branch applied at the next poll")
        flag.unlink()
        wait_until(lambda: not page.exists(), 10, "retracted at the next poll")
        wait_until(lambda: agent.of("applied") and agent.of("retracted"), 10, "the agent to say so")


def test_the_agent_says_applied_when_it_applied_though_the_fact_went_at_once(tmp_path):
    # The agent said what a second asking of the fact gave, after the apply:
    # a fact gone in between made an applied branch "retracted" (seen under
    # load with a flag removed as soon as the page appeared).  This fact is
    # gone as soon as it was asked.
    site, flag, page = _polled_page_site(tmp_path, "once.example",
                                         lambda f: f'["sh" "-c" "test -e {f} && rm -- {f}"]')
    with Converging(tmp_path, "--consfig", site, "once") as agent:
        flag.touch()
        wait_until(lambda: agent.of("applied") or agent.of("retracted"), 10, "the agent to say")
        said = [e["what"] for e in agent.events() if e.get("event") == "converge"
                and e["what"] in ("applied", "retracted")]
        assert said[0] == "applied", said
        wait_until(lambda: agent.of("retracted"), 10, "retracted at the next poll")
        assert not page.exists(), "retracted, the page is gone"


def test_the_agents_lines_say_when_what_and_which_property(tmp_path):
    f = tmp_path / "motd"
    site = write_site(tmp_path / "site.hy", "lines.example", LOCAL,
                      f'(file.has-content "{f}" "hello\\n")')
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    p = subprocess.Popen([sys.executable, "-m", "consfig", "converge", "--consfig", str(site),
                          "lines"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=REPO, env=env)
    out = []
    reader = threading.Thread(target=lambda: out.extend(p.stdout), daemon=True)
    reader.start()
    try:
        wait_until(lambda: any("watching: 1 properties, 1 watches" in line for line in out), 120,
                   "the agent to watch")
        f.write_text("edited\n")
        wait_until(lambda: any(" repaired: " in line for line in out), 10, "the repair")
    finally:
        p.send_signal(2)
        p.wait(60)
        reader.join(10)
    text = "".join(out)
    assert f"drift: {f} has content ({f} would change)" in text, text
    assert f"lines.example :: {f} has content ... done" in text, text


def test_follow_shows_the_events_of_an_agent_running_on_the_host(tmp_path):
    f = tmp_path / "motd"
    site = write_site(tmp_path / "site.hy", "followed.example", LOCAL,
                      f'(file.has-content "{f}" "hello\\n")')
    with Converging(tmp_path, "--consfig", site, "followed"):
        with Converging(tmp_path, "--consfig", site, "followed", "--follow", "--lines", "50",
                        name="follower") as follower:
            f.write_text("edited\n")
            wait_until(lambda: follower.of("repaired"), 10, "the follower to see the repair")
            assert follower.watching["host"] == "followed.example"


def _descendants(pid):
    """PID's children, theirs, and so on (from /proc)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                kids = [int(c) for c in f.read().split()]
        except OSError:
            kids = []
        out += kids
        todo += kids
    return out


# A site whose property takes two seconds to repair, saying when it began
# (MARKER), with something said halfway.
SLOW_SITE = """(require consfig *)
(import consfig *
        consfig.apply.actions [read-remote-file remote-exists? write-remote-file]
        consfig.model.watchspec [watch-path])
{uses}
(defprop slowly-written :posix [marker path content]
  "PATH holds CONTENT, written whole two seconds after the repair began,
which it says by creating MARKER, and says something halfway."
  (:desc f"{{path}} slowly written")
  (:watch [(watch-path path)])
  (:check (and (remote-exists? path) (= (read-remote-file path) content)))
  (:apply (run "sh" "-c" "touch -- \\"$1\\"; sleep 1; echo halfway; sleep 1" "sh" marker)
          (write-remote-file path content)))
(defhost sigterm.example {{:deploy {chain}}}
  (slowly-written "{marker}" "{slow}" "whole\\n"){more})
"""


@pytest.mark.parametrize("to", ["the controller", "every process", "the controller, SIGKILL, over ssh"])
def test_a_sigterm_mid_repair_lets_the_repair_finish_whole_and_ends_the_agent(tmp_path, to, request):
    # `kill` of the command, or a service manager stopping all of it, while
    # a repair is half done; or the controller killed outright, which an
    # agent over ssh hears of as its connection's end, the repair's output
    # finding no reader.  (Over [:local :python] the controller's reaper
    # ends its local children with it, as it ends a push's.)
    chain = LOCAL
    if "ssh" in to:
        from agentcli import lab_chain
        chain = lab_chain(request.getfixturevalue("sshlab"), ":sudo :python")
    slow, marker = tmp_path / "slow", tmp_path / "started"
    site = tmp_path / "site.hy"
    site.write_text(SLOW_SITE.format(chain=chain, marker=marker, slow=slow, more="", uses=""))
    with Converging(tmp_path, "--consfig", site, "sigterm") as agent:
        target = agent.watching["pid"]
        processes = [agent.proc.pid, *_descendants(agent.proc.pid)]
        assert target in processes or "ssh" in to, f"no Python on the target under the controller: {processes}"
        processes.append(target)
        marker.unlink()
        slow.write_text("partial")
        wait_until(marker.exists, 10, "the slow repair to begin")
        for p in (processes if to == "every process" else processes[:1]):
            os.kill(p, 9 if "SIGKILL" in to else 15)
        status = agent.proc.wait(60)
        if "SIGKILL" in to:
            wait_until(lambda: not os.path.exists(f"/proc/{target}"), 30,
                       "the agent to end after its repair")
        assert slow.read_text() == "whole\n", "the repair in progress did not finish whole"
        if "SIGKILL" not in to:
            assert agent.of("stopped"), f"the agent did not say it stopped: {agent.stderr()[-2000:]}"
            assert status == 0, f"exit status {status}: {agent.stderr()[-2000:]}"
            assert "Traceback" not in agent.stderr(), agent.stderr()
    wait_until(lambda: not any(os.path.exists(f"/proc/{p}") for p in processes), 10,
               "every process of the agent to end")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [], "a temporary is left"


def test_events_lost_to_an_inotify_overflow_are_made_up_by_a_rescan(tmp_path):
    # While the agent is busy with a slow repair, a local user's churn
    # overflows its inotify queue, and a change that matters is among the
    # events lost.  The agent must say so, rescan, and repair it.
    slow, marker, noise = tmp_path / "slow", tmp_path / "started", tmp_path / "noise"
    other = tmp_path / "other"
    noise.write_text("")
    site = tmp_path / "site.hy"
    site.write_text(SLOW_SITE.format(chain=LOCAL, marker=marker, slow=slow, more=f"""
  (file.has-mode "{noise}" 0o644)
  (file.has-content "{other}" "x")""", uses="(use-props consfig.props [file])"))
    limit = int(open("/proc/sys/fs/inotify/max_queued_events").read())
    with Converging(tmp_path, "--consfig", site, "sigterm") as agent:
        marker.unlink()
        slow.write_text("partial")
        wait_until(marker.exists, 10, "the slow repair to begin")
        # Two files in turn: inotify folds an event into the one before it
        # when they are the same.
        for _ in range(limit):
            os.utime(slow)
            os.utime(other)
        # Past the queue's end: this event is lost.
        os.chmod(noise, 0o600)
        said = wait_until(lambda: [e for e in agent.of("rescan") if "overflowed" in e.get("why", "")],
                          30, "the agent to rescan for the events lost")
        assert not agent.of("waiting"), "a push, not the overflow, made it rescan"
        wait_until(lambda: noise.stat().st_mode & 0o777 == 0o644, 30, "the lost change repaired")
        assert said and slow.read_text() == "whole\n"


def test_a_repair_that_waits_for_a_push_says_who_holds_the_lock(tmp_path):
    f = tmp_path / "motd"
    site = write_site(tmp_path / "site.hy", "waiting.example", LOCAL,
                      f'(file.has-content "{f}" "hello\\n")')
    lockdir = os.path.join(os.environ["XDG_CACHE_HOME"], "consfig")
    with Converging(tmp_path, "--consfig", site, "waiting") as agent:
        # -o: the lock is flock's alone, so that killing it lets it go.
        holder = subprocess.Popen(
            ["flock", "-o", os.path.join(lockdir, "deploy.lock"), "sh", "-c",
             'echo "a push from the test (pid $$)" >"$1/deploy.holder"; exec sleep 120', "sh", lockdir])
        try:
            wait_until(lambda: "a push from the test" in open(os.path.join(lockdir, "deploy.holder")).read(),
                       10, "the test's push to hold the lock")
            f.write_text("edited\n")
            [said] = wait_until(lambda: agent.of("waiting"), 10, "the agent to say it waits")
            assert "a push from the test" in said["why"], said
            assert f.read_text() == "edited\n", "repaired while the push held the lock"
        finally:
            holder.kill()
            holder.wait(10)
        wait_until(lambda: f.read_text() == "hello\n", 30, "the repair once the push ended")
        assert len(agent.of("waiting")) == 1, "the wait said more than once"
