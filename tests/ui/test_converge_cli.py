"""`consfig converge` and the drift summary of `consfig deploy --check --json`,
as a user runs them."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from clirun import consfig  # noqa: E402


def site(tmp_path, chain=":local"):
    f = tmp_path / "motd"
    f.write_text("drifted\n")
    s = tmp_path / "site.hy"
    s.write_text(f"""(require consfig *)
(import consfig *)
(use-props consfig.props [file])
(defhost drifty.example {{:deploy [{chain}] :groups ["web"]}}
  (file.has-content "{f}" "hello\\n"))
(defhost steady.example {{:deploy [{chain}] :groups ["web"]}}
  (file.directory-exists "{tmp_path}"))
""")
    return s, f


def test_deploy_check_json_ends_with_a_drift_summary_per_host(tmp_path):
    s, f = site(tmp_path)
    r = consfig("deploy", "--consfig", s, "--check", "--json", "@web")
    last = json.loads(r.stdout.splitlines()[-1])
    assert last["event"] == "drift-summary", r.stdout
    assert last["hosts"]["drifty.example"]["drifted"] == 1, last
    assert last["hosts"]["steady.example"]["drifted"] == 0, last
    assert last["drifted"] == ["drifty.example"] and last["failed"] == [], last
    assert f.read_text() == "drifted\n", "a check changes nothing"


def test_converge_over_a_chain_without_python_is_refused_before_connecting(tmp_path):
    s, f = site(tmp_path)
    r = consfig("converge", "--consfig", s, "drifty")
    assert r.returncode == 1, r
    assert "must end in a :python hop" in r.stderr, r.stderr
    assert f.read_text() == "drifted\n", "nothing applied"


def test_converge_json_streams_the_agents_events_and_ctrl_c_ends_the_agent(tmp_path):
    import signal
    import subprocess
    from clirun import REPO
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from harness import wait_until

    s, f = site(tmp_path, ":local :python")
    out = tmp_path / "events"

    def seen(what):
        lines = out.read_text().splitlines() if out.exists() else []
        return [e for e in map(json.loads, lines)
                if e["event"] == "converge" and e["what"] == what]

    with open(out, "w") as o:
        cli = subprocess.Popen([sys.executable, "-m", "consfig", "converge", "--consfig", str(s),
                                "drifty", "--json"], stdout=o, stderr=subprocess.PIPE,
                               cwd=REPO, text=True)
    try:
        [watching] = wait_until(lambda: cli.poll() is not None or seen("watching"), 300,
                                "the agent to watch")
        assert f.read_text() == "hello\n", "applied first"
        f.write_text("edited\n")
        wait_until(lambda: seen("repaired"), 10, "the drift repaired")
        cli.send_signal(signal.SIGINT)
        assert cli.wait(30) == 130, cli.stderr.read()
    finally:
        if cli.poll() is None:
            cli.kill()
    # The target's Python learns it from its input's end, and stops.
    wait_until(lambda: not os.path.exists(f"/proc/{watching['pid']}"), 30,
               "the agent's process to end")


def json_lines(text):
    """Each line of TEXT read as JSON: a line that is not fails the test."""
    events = []
    for line in text.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"a --json run printed a line that is not JSON: {line!r}")
    return events


def test_an_unknown_host_on_a_json_run_is_a_json_error(tmp_path):
    s, f = site(tmp_path, ":local :python")
    for command in (["deploy"], ["converge"], ["deploy", "--check"]):
        r = consfig(*command, "--consfig", s, "nosuch", "--json")
        assert r.returncode == 1, r
        [error] = json_lines(r.stdout)
        assert error["event"] == "error" and "unknown host nosuch" in error["message"], error
        assert r.stderr == "", f"{command}: the error is on stdout, as JSON: {r.stderr!r}"


def test_ctrl_c_on_converge_json_sends_a_stopped_event(tmp_path):
    import signal
    import subprocess
    from clirun import REPO
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from harness import wait_until

    s, f = site(tmp_path, ":local :python")
    out = tmp_path / "events"

    def events():
        return json_lines(out.read_text()) if out.exists() else []

    def seen(what):
        return [e for e in events() if e["event"] == "converge" and e["what"] == what]

    # As a terminal's Ctrl-C: SIGINT to the whole foreground process group,
    # the controller and the agent's Python over :local alike.
    with open(out, "w") as o:
        cli = subprocess.Popen([sys.executable, "-m", "consfig", "converge", "--consfig", str(s),
                                "drifty", "--json"], stdout=o, stderr=subprocess.PIPE,
                               cwd=REPO, text=True, start_new_session=True)
    try:
        wait_until(lambda: cli.poll() is not None or seen("watching"), 300, "the agent to watch")
        f.write_text("edited\n")
        wait_until(lambda: seen("repaired"), 10, "the drift repaired")
        os.killpg(cli.pid, signal.SIGINT)
        assert cli.wait(30) == 130, cli.stderr.read()
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
            cli.wait(10)
    stopped = seen("stopped")
    assert len(stopped) == 1, f"one stopped event, as the last: {events()}"
    assert events()[-1] == stopped[0], events()
    assert stopped[0]["repairs"] == 1 and stopped[0]["failures"] == 0, stopped
    assert stopped[0]["host"] == "drifty.example", stopped
    assert "interrupted" not in cli.stderr.read(), "a --json run says it in JSON"


def test_a_lock_timeout_on_a_converge_json_run_is_a_json_error(tmp_path, monkeypatch, capsys):
    # In this process, for a wait of 1 s rather than the minute a user gets;
    # the lock is a real one, held by a deployment of another host.
    import hy  # noqa: F401
    from hy.models import Keyword
    import consfig.apply.lock
    from consfig.apply.combinators import eseqprops
    from consfig.model.context import establishing_for
    from consfig.model.host import make_host
    from consfig.transport.chain import close_chain, establish_chain, parse_chain
    from consfig.ui.cli import main

    s, f = site(tmp_path, ":local :python")
    monkeypatch.setattr(consfig.apply.lock, "LOCK_WAIT", 1)
    with establishing_for(make_host("holder.example", None, None, eseqprops())):
        conns = establish_chain(parse_chain([Keyword("local")]))
    try:
        with consfig.apply.lock.holding_target_lock(conns[-1], "holder.example"):
            status = main(["converge", "--consfig", str(s), "drifty", "--json"])
    finally:
        close_chain(conns)
    out, err = capsys.readouterr()
    assert status == 1, (out, err)
    error = json_lines(out)[-1]
    assert error["event"] == "error", out
    assert "another deployment holds this target" in error["message"], error
    assert "deploying holder.example" in error["message"], error
    assert err == "", f"the error is on stdout, as JSON: {err!r}"
    assert f.read_text() == "drifted\n", "nothing applied"


def test_converge_with_an_interval_of_zero_is_refused_before_connecting(tmp_path):
    s, f = site(tmp_path, ":local :python")
    r = consfig("converge", "--consfig", s, "drifty", "--interval", "0")
    assert r.returncode == 1, r
    assert "run option :interval wants a number of seconds above 0" in r.stderr, r.stderr
    assert f.read_text() == "drifted\n", "nothing applied"
