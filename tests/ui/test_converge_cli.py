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
