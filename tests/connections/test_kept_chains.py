"""Kept chains (`consfig.python_hop.keep`): a deployment asked to persist, as the REPL
asks, leaves its [[:ssh …] :sudo :python] chain open; the next deployment of
the host over it uses that SSH connection and that Python on the target; an
idle limit, `(disconnect)`, or the chain's death closes it, and nothing it
started is left on the target.  Over an sshd of each test's own, whose
processes (its sessions, and all they run) are what is counted."""

import json
import os
import signal
import sys
import time

import pytest
import hy  # noqa: F401
from hy.models import Keyword as K

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from labservers import second_server, ssh_hop  # noqa: E402
from harness import wait_until  # noqa: E402

import consfig.deployer.deployment  # noqa: E402
import consfig.python_hop.keep as keep  # noqa: E402
import consfig.apply.lock  # noqa: E402
import consfig.python_hop.controller as remote  # noqa: E402
from consfig.transport.chain import close_chain, establish_chain, parse_chain  # noqa: E402
from consfig.apply.combinators import eseqprops  # noqa: E402
from consfig.model.context import establishing_for  # noqa: E402
from consfig.errors import ConsfigError  # noqa: E402
from consfig.model.host import make_host  # noqa: E402
from consfig.props import file  # noqa: E402

deploy = getattr(consfig.deployer.deployment, hy.mangle("deploy*"))


def _lab(sshlab, tmp_path, kind):
    server, config = second_server(sshlab, tmp_path)
    chain = [ssh_hop(config), K("sudo")] + ([K("python")] if kind == "python" else [])
    yield {"server": server, "chain": chain, "kind": kind, "path": str(tmp_path / "motd")}
    keep.disconnect()
    server.stop()


@pytest.fixture
def lab(sshlab, tmp_path):
    """An sshd of this test's own, a [[:ssh …] :sudo :python] chain to it,
    and a file to write; every kept chain closed afterwards."""
    yield from _lab(sshlab, tmp_path, "python")


@pytest.fixture(params=["python", "posix"])
def any_lab(sshlab, tmp_path, request):
    """The same, over [[:ssh …] :sudo :python] and over [[:ssh …] :sudo]."""
    yield from _lab(sshlab, tmp_path, request.param)


def write(lab, text, **kw):
    host = make_host("lab", None, None, eseqprops(file.has_content(lab["path"], text)))
    return deploy(lab["chain"], host, sink=lambda e: None, **kw)


def pythons(server):
    """The target's Pythons this server's sessions run."""
    out = []
    for pid in server.session_pids():
        try:
            if b"python" in open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0]:
                out.append(pid)
        except OSError:
            pass
    return out


def connections(server):
    """The sshd processes serving one connection each (the server's children)."""
    pid = server.proc.pid
    return sorted(open(f"/proc/{pid}/task/{pid}/children").read().split())


def test_a_second_deployment_reuses_the_kept_connection_and_python(lab):
    assert write(lab, "one\n", persist=60).status == "changed"
    sessions, processes = remote.stats["sessions"], sorted(lab["server"].session_pids())
    assert pythons(lab["server"]), "the target's Python waits for the next host"
    outcome = write(lab, "two\n", persist=60)
    assert outcome.status == "changed", outcome
    assert open(lab["path"]).read() == "two\n", "the second host was applied"
    assert remote.stats["sessions"] == sessions, "no Python was started for the second"
    assert sorted(lab["server"].session_pids()) == processes, \
        "the same SSH connection, sudo and Python served it"
    assert [h for h, _, _ in keep.kept_chains()] == ["lab"], keep.kept_chains()


def test_a_second_deployment_reuses_the_kept_ssh_connection(any_lab):
    lab = any_lab
    assert write(lab, "one\n", persist=60).status == "changed"
    ssh = connections(lab["server"])
    assert len(ssh) == 1, ssh
    outcome = write(lab, "two\n", persist=60)
    assert outcome.status == "changed", outcome
    assert open(lab["path"]).read() == "two\n", "the second host was applied"
    assert connections(lab["server"]) == ssh, "over the same SSH connection"


def test_a_deployment_not_asked_to_persist_leaves_nothing_open(any_lab):
    lab = any_lab
    assert write(lab, "one\n").status == "changed"
    assert keep.kept_chains() == [], "consfig deploy keeps nothing"
    wait_until(lambda: not lab["server"].session_pids(), 15, "the SSH connection to close")


def test_a_kept_chain_is_closed_once_idle_for_its_limit(any_lab):
    lab = any_lab
    assert write(lab, "one\n", persist=1).status == "changed"
    assert lab["server"].session_pids(), "kept at first"
    wait_until(lambda: not keep.kept_chains() and not lab["server"].session_pids(), 20,
               "the timer to close the chain idle for 1 s, and its processes to end")


def test_disconnect_closes_the_chain_and_leaves_no_process_on_the_target(any_lab):
    lab = any_lab
    assert write(lab, "one\n", persist=60).status == "changed"
    assert keep.disconnect("lab") == 1, "one chain to lab was kept"
    assert keep.kept_chains() == []
    wait_until(lambda: not lab["server"].session_pids(), 15,
               "the SSH session and the target's Python to end")
    assert keep.disconnect() == 0, "nothing left to close"


def test_a_killed_target_python_is_replaced_without_a_failure(lab):
    assert write(lab, "one\n", persist=60).status == "changed"
    [python] = pythons(lab["server"])
    sessions = remote.stats["sessions"]
    os.kill(python, signal.SIGKILL)
    outcome = write(lab, "two\n", persist=60)
    assert outcome.status == "changed" and not outcome.failures, outcome
    assert open(lab["path"]).read() == "two\n"
    assert remote.stats["sessions"] == sessions + 1, "one fresh Python, started once"


def test_a_chain_whose_server_dropped_it_is_established_again(any_lab):
    lab = any_lab
    assert write(lab, "one\n", persist=60).status == "changed"
    for pid in lab["server"].session_pids():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    outcome = write(lab, "two\n", persist=60)
    assert outcome.status == "changed" and not outcome.failures, outcome
    assert open(lab["path"]).read() == "two\n"


def test_a_kept_session_that_went_silent_is_replaced_well_before_the_timeout(lab):
    # Its connection stays open but nothing comes back (a network gone, a
    # host suspended): stopped, not killed, so that nothing says so.
    assert write(lab, "one\n", persist=60).status == "changed"
    stopped = lab["server"].session_pids()
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        outcome = write(lab, "two\n", persist=60)
        took = time.monotonic() - started
    finally:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert outcome.status == "changed" and not outcome.failures, outcome
    assert open(lab["path"]).read() == "two\n"
    assert took < 30, f"took {took:.1f} s: the hop's 60 s timeout, not the kept session's ticks"


def test_a_kept_chain_takes_the_target_lock_for_each_deployment(any_lab, monkeypatch):
    lab = any_lab
    assert write(lab, "one\n", persist=60).status == "changed"
    monkeypatch.setattr(consfig.apply.lock, "LOCK_WAIT", 1)
    with establishing_for(make_host("lab", None, None, eseqprops())):
        conns = establish_chain(parse_chain(lab["chain"][:2]))
    try:
        with consfig.apply.lock.holding_target_lock(conns[-1], "holder.example"):
            with pytest.raises(ConsfigError) as e:
                write(lab, "two\n", persist=60)
    finally:
        close_chain(conns)
    assert "another deployment holds this target" in str(e.value), str(e.value)
    assert "deploying holder.example" in str(e.value), str(e.value)
    assert open(lab["path"]).read() == "one\n", "nothing was applied under another's lock"
    assert write(lab, "three\n", persist=60).status == "changed", "the lock was given back"


def test_the_repl_keeps_chains_when_deploy_is_not_told(lab, monkeypatch):
    monkeypatch.setattr(keep, "persist_by_default", True)
    assert write(lab, "one\n").status == "changed"
    assert [h for h, _, _ in keep.kept_chains()] == ["lab"], keep.kept_chains()
    assert keep.kept_chains()[0][2] > keep.IDLE_LIMIT - 10, "for the documented idle limit"


SITE = """(require consfig *)
(import consfig *)
(use-props consfig.props [file])
(defhost lab {:deploy [[:ssh :host "lab" :config %s] :sudo :python]}
  (file.has-content %s "from the REPL\\n"))
"""


def repl(lab, tmp_path, script):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "ui"))
    from clirun import consfig
    config = lab["chain"][0][lab["chain"][0].index(K("config")) + 1]
    site = tmp_path / "site.hy"
    site.write_text(SITE % (json.dumps(config), json.dumps(lab["path"])))
    return consfig("repl", site, stdin=script)


def test_deployments_from_the_repl_share_one_chain_until_disconnect(lab, tmp_path):
    result = repl(lab, tmp_path, "(lab)\n(lab)\n(import consfig.python_hop.controller)\n"
                                 '(print "sessions" (get consfig.python_hop.controller.stats "sessions"))\n'
                                 '(print "kept" (len (kept-chains)))\n'
                                 '(print "closed" (disconnect))\n(print "kept" (len (kept-chains)))\n')
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert open(lab["path"]).read() == "from the REPL\n", out
    printed = [line.replace("=> ", "") for line in result.stdout.splitlines()]
    assert printed[-5:-1] == ["sessions 1", "kept 1", "closed 1", "kept 0"], out


def test_leaving_the_repl_closes_its_kept_chains(lab, tmp_path):
    result = repl(lab, tmp_path, '(lab)\n(print "kept" (len (kept-chains)))\n')
    assert "kept 1" in result.stdout, result.stdout + result.stderr
    wait_until(lambda: not lab["server"].session_pids(), 15,
               "the REPL's kept chain to be closed when it exits")


EDITED = """(require consfig *)
(import consfig *)
(use-props consfig.props [file])
(defprop motd :python [text]
  "The message of the day, %s: code of the site's, which travels in the bundle."
  (:apply (with [f (open %s "w")] (.write f text)) None))
(defhost kept.example (motd "%s\\n"))
"""


def test_an_edited_site_is_taken_in_place_by_the_kept_python_over_ssh(lab, tmp_path):
    # The site is a layer of its own: the kept Python forgets the old site's
    # modules and imports the new ones, with no new Python and no new SSH
    # connection (only a change of the libraries would need another Python).
    from consfig.site.load import load_consfig
    site = tmp_path / "edited.hy"
    outcomes = []
    for text in ["one", "three"]:
        site.write_text(EDITED % (text, json.dumps(lab["path"]), text))
        load_consfig(str(site))
        outcomes.append(deploy(lab["chain"], "kept.example", sink=lambda e: None, persist=60))
        if text == "one":
            sessions, ssh = remote.stats["sessions"], connections(lab["server"])
            [python] = pythons(lab["server"])
    assert [o.status for o in outcomes] == ["changed", "changed"], outcomes
    assert open(lab["path"]).read() == "three\n", "the edited property was not the one applied"
    assert remote.stats["sessions"] == sessions, "the edited site started another Python"
    assert pythons(lab["server"]) == [python], "the kept Python was replaced"
    assert connections(lab["server"]) == ssh, "over the same SSH connection"


KILLED = """
import sys, time
import hy
from hy.models import Keyword as K
import consfig.deployer.deployment
from consfig.apply.combinators import eseqprops
from consfig.model.host import make_host
from consfig.props import file
deploy = getattr(consfig.deployer.deployment, hy.mangle("deploy*"))
chain = [[K("ssh"), K("host"), "lab", K("config"), sys.argv[1]], K("sudo"), K("python")]
host = make_host("lab", None, None, eseqprops(file.has_content(sys.argv[2], "x\\n")))
assert deploy(chain, host, sink=lambda e: None, persist=600).status == "changed"
print("kept", flush=True)
time.sleep(600)
"""


def test_a_killed_repl_leaves_nothing_on_the_target(lab):
    import subprocess
    config = lab["chain"][0][lab["chain"][0].index(K("config")) + 1]
    controller = subprocess.Popen([sys.executable, "-c", KILLED, config, lab["path"]],
                                  stdout=subprocess.PIPE, text=True)
    try:
        assert controller.stdout.readline() == "kept\n"
        assert pythons(lab["server"]), "the chain is kept while the controller lives"
    finally:
        controller.kill()
        controller.wait(10)
    wait_until(lambda: not lab["server"].session_pids(), 15,
               "the target's Python and the SSH session to end with their controller")
