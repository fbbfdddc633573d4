"""A running `consfig converge` beside other deployments and other agents
under the same target user (one deployment lock): only a push of its own
host's other propspec supersedes it; a check, or a deployment of another
host, does not; a second agent for its host refuses to start (unless
--alongside); and agents never rescan each other's repairs."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agentcli import Converging  # noqa: E402
from clirun import consfig  # noqa: E402
from harness import wait_until  # noqa: E402


def site(tmp_path, content="hello\n", name="site.hy"):
    conv, other = tmp_path / "conv", tmp_path / "other"
    s = tmp_path / name
    s.write_text(f"""(require consfig *)
(import consfig *)
(use-props consfig.props [file])
(defhost conv.example {{:deploy [:local :python]}}
  (file.has-content "{conv}" "{content}"))
(defhost shell.example {{:deploy [:local :python]}}
  (file.has-content "{other}" "other\\n"))
""")
    return s, conv, other


def still_keeping(agent, f, text="hello\n"):
    f.write_text("edited\n")
    wait_until(lambda: f.read_text() == text, 10, "the agent still repairing")
    assert not agent.ended(), agent.stderr()


def test_a_deployment_of_another_host_does_not_supersede_the_agent(tmp_path):
    s, conv, other = site(tmp_path)
    with Converging(tmp_path, "--consfig", s, "conv") as agent:
        r = consfig("deploy", "--consfig", s, "shell")
        assert r.returncode == 0, r.stderr
        assert other.read_text() == "other\n"
        still_keeping(agent, conv)
        assert not agent.of("superseded"), agent.events()


def test_a_check_of_another_propspec_neither_supersedes_nor_rescans(tmp_path):
    s, conv, _ = site(tmp_path)
    edited, _, _ = site(tmp_path, "changed\n", "edited.hy")
    with Converging(tmp_path, "--consfig", s, "conv") as agent:
        r = consfig("deploy", "--consfig", edited, "--check", "conv")
        assert r.returncode == 0, r.stderr
        assert "would change" in r.stdout, r.stdout
        still_keeping(agent, conv)
        assert not agent.of("superseded"), agent.events()
        assert not agent.of("rescan"), f"a check changes nothing: {agent.events()}"


def test_a_push_of_the_hosts_other_propspec_supersedes_the_agent(tmp_path):
    s, conv, _ = site(tmp_path)
    edited, _, _ = site(tmp_path, "changed\n", "edited.hy")
    with Converging(tmp_path, "--consfig", s, "conv") as agent:
        r = consfig("deploy", "--consfig", edited, "conv")
        assert r.returncode == 0, r.stderr
        wait_until(agent.ended, 30, "the agent to stop")
        assert agent.of("superseded"), agent.events()
        assert conv.read_text() == "changed\n", "the push not undone"


def test_a_second_agent_for_a_host_refuses_to_start_saying_which_keeps_it(tmp_path):
    s, conv, _ = site(tmp_path)
    with Converging(tmp_path, "--consfig", s, "conv") as first:
        second = Converging(tmp_path, "--consfig", s, "conv", wait_watching=False, name="second")
        with second:
            assert second.proc.wait(120) == 1, second.stderr()
        # A --json run says its error as an `error` event on standard output.
        err = "\n".join(e.get("message", "") for e in second.events() if e.get("event") == "error")
        assert "another converging agent keeps conv.example" in err, err
        assert f"pid {first.watching['pid']}, since " in err, err
        assert "--alongside" in err, err
        assert not second.of("watching"), "it never started"
        still_keeping(first, conv)


def test_agents_beside_each_other_do_not_rescan_each_others_repairs(tmp_path):
    s, conv, other = site(tmp_path)
    with Converging(tmp_path, "--consfig", s, "conv") as first, \
         Converging(tmp_path, "--consfig", s, "conv", "--alongside", name="beside") as beside, \
         Converging(tmp_path, "--consfig", s, "shell", name="shell") as shell:
        # The first passes of those started later are pushes: the others
        # rescan after them, once each.
        wait_until(lambda: len(first.of("rescan")) >= 2 and len(beside.of("rescan")) >= 1, 10,
                   "the rescans after the later agents' first passes")
        before = [len(a.of("rescan")) for a in (first, beside, shell)]
        for _ in range(5):
            still_keeping(first, conv)
            still_keeping(shell, other, "other\n")
        assert [len(a.of("rescan")) for a in (first, beside, shell)] == before, \
            f"rescanned another agent's repair: {[a.of('rescan') for a in (first, beside, shell)]}"
