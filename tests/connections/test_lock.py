"""One deployment at a time on a target: a second one waits, then fails
naming the holder; the lock goes with the connection that held it."""

import os
import subprocess
import sys
import threading
import time

import pytest

import hy  # noqa: F401
from hy.models import Keyword as K

import consfig.deployer.deployment
import consfig.apply.lock
from consfig.transport.chain import close_chain, establish_chain, parse_chain
from consfig.apply.combinators import eseqprops
from consfig.model.context import establishing_for
from consfig.errors import ConnectionFailed, ConsfigError
from consfig.model.host import make_host
from consfig.props import file

deploy = getattr(consfig.deployer.deployment, hy.mangle("deploy*"))


def chain(config):
    return [[K("ssh"), K("config"), config, K("host"), "lab"], K("sudo")]


def establish(config):
    with establishing_for(make_host("lab", None, None, eseqprops())):
        return establish_chain(parse_chain(chain(config)))


def deploy_lines(config, path, lines):
    return deploy(chain(config), make_host("lab", None, None, eseqprops()),
                  propspec=eseqprops(*[file.contains_lines(path, line) for line in lines]),
                  sink=lambda e: None)


@pytest.fixture
def held(sshlab):
    """The lab's target, locked by a deployment of `holder.example`."""
    conns = establish(sshlab.config)
    lock = consfig.apply.lock.holding_target_lock(conns[-1], "holder.example")
    lock.__enter__()
    yield conns
    lock.__exit__(None, None, None)
    close_chain(conns)


def test_a_second_deployment_waits_then_fails_naming_the_holder(sshlab, held, tmp_path, monkeypatch):
    monkeypatch.setattr(consfig.apply.lock, "LOCK_WAIT", 1)
    start = time.monotonic()
    with pytest.raises(ConnectionFailed) as e:
        deploy_lines(sshlab.config, str(tmp_path / "f"), ["x"])
    took = time.monotonic() - start
    assert 1 <= took < 10, f"waited {took:.1f} s"
    message = str(e.value)
    assert "another deployment holds this target" in message, message
    assert "deploying holder.example" in message and "pid" in message, message
    assert not (tmp_path / "f").exists(), "nothing was applied"


def test_a_python_hop_takes_the_same_lock_on_the_target(sshlab, held, tmp_path, monkeypatch):
    # The target's Python takes the lock itself, before it applies: it
    # waits for the holder a POSIX deployment started, then fails naming it.
    monkeypatch.setattr(consfig.apply.lock, "LOCK_WAIT", 1)
    with pytest.raises(ConsfigError) as e:
        deploy(chain(sshlab.config) + [K("python")], make_host("lab", None, None, eseqprops()),
               propspec=eseqprops(file.contains_lines(str(tmp_path / "f"), "x")),
               sink=lambda e: None)
    message = str(e.value)
    assert "another deployment holds this target" in message, message
    assert "deploying holder.example" in message, message
    assert not (tmp_path / "f").exists(), "nothing was applied"


def test_a_waiting_deployment_goes_ahead_once_the_lock_is_released(sshlab, tmp_path, monkeypatch):
    monkeypatch.setattr(consfig.apply.lock, "LOCK_WAIT", 30)
    conns = establish(sshlab.config)
    lock = consfig.apply.lock.holding_target_lock(conns[-1], "holder.example")
    lock.__enter__()
    releaser = threading.Timer(1, lambda: lock.__exit__(None, None, None))
    releaser.start()
    try:
        outcome = deploy_lines(sshlab.config, str(tmp_path / "f"), ["x"])
    finally:
        releaser.join()
        close_chain(conns)
    assert outcome.status == "changed"
    assert (tmp_path / "f").read_text() == "x\n"


HOLDER = """
import sys, time
import hy
from hy.models import Keyword as K
import consfig.apply.lock
from consfig.transport.chain import establish_chain, parse_chain
from consfig.apply.combinators import eseqprops
from consfig.model.context import establishing_for
from consfig.model.host import make_host
with establishing_for(make_host("lab", None, None, eseqprops())):
    conns = establish_chain(parse_chain([[K("ssh"), K("config"), sys.argv[1], K("host"), "lab"],
                                         K("sudo")]))
    with consfig.apply.lock.holding_target_lock(conns[-1], "killed.example"):
        print("held", flush=True)
        time.sleep(600)
"""


def test_the_lock_goes_with_a_killed_controller(sshlab, tmp_path, monkeypatch):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, sshlab.config],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
    finally:
        holder.kill()
        holder.wait(10)
    monkeypatch.setattr(consfig.apply.lock, "LOCK_WAIT", 20)
    start = time.monotonic()
    outcome = deploy_lines(sshlab.config, str(tmp_path / "f"), ["x"])
    assert outcome.status == "changed"
    assert time.monotonic() - start < 15, "the lock went when its connection did"


def test_two_deployments_at_once_lose_no_update(sshlab, tmp_path, monkeypatch):
    monkeypatch.setattr(consfig.apply.lock, "LOCK_WAIT", 120)
    path = str(tmp_path / "lines")
    outcomes = {}

    def run(name):
        outcomes[name] = deploy_lines(sshlab.config, path, [f"{name} {i}" for i in range(40)])

    threads = [threading.Thread(target=run, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert [o.status for o in outcomes.values()] == ["changed", "changed"], outcomes
    assert len(open(path).read().splitlines()) == 80, "every line of both survives"


def test_a_hop_that_cannot_start_a_process_deploys_unlocked():
    from consfig.transport.hop import Connection

    class ScriptOnly(Connection):
        hop_name = "script-only"

        def run_script(self, script, input, timeout):
            return 0, b"", b""

    conn = ScriptOnly()
    ran = []
    with establishing_for(make_host("lab", None, None, eseqprops())):
        with consfig.apply.lock.holding_target_lock(conn, "x.example"):
            ran.append(conn.deployment_token)
    assert ran == [None], f"the body ran once, with no lock token: {ran}"


# The scenario runs in a child whose root's ~/.cache is its own
# (harness.run_with_a_private_home_cache): every environment here falls
# back to the password database's home, which is root's real one.
_CONTEND = """
import sys
import hy
from hy.models import Keyword as K
import consfig.apply.lock
import consfig.deployer.deployment
from consfig.apply.combinators import eseqprops
from consfig.errors import ConsfigError
from consfig.model.context import establishing_for
from consfig.model.host import make_host
from consfig.props import file
from consfig.transport.chain import close_chain, establish_chain, parse_chain

deploy = getattr(consfig.deployer.deployment, hy.mangle("deploy*"))
target = sys.argv[1]
with establishing_for(make_host("holder.example", None, None, eseqprops())):
    conns = establish_chain(parse_chain([K("local")]))
    lock = consfig.apply.lock.holding_target_lock(conns[-1], "holder.example")
    lock.__enter__()
consfig.apply.lock.LOCK_WAIT = 1
try:
    deploy([K("local"), K("python")], make_host("lab", None, None, eseqprops()),
           propspec=eseqprops(file.contains_lines(target, "x")), sink=lambda e: None)
    print("applied, not refused")
except ConsfigError as e:
    print(e)
finally:
    lock.__exit__(None, None, None)
    close_chain(conns)
"""


@pytest.mark.parametrize("environment", ["home-not-the-password-databases", "cache-home-relative",
                                         "cache-home-writable-by-others"])
def test_a_posix_and_a_python_deployment_of_one_target_contend_for_one_lock(
        tmp_path, environment):
    # Where $HOME or $XDG_CACHE_HOME say something the target's Python
    # does not take (consfig.boot.cache_directory), the POSIX holder must
    # still lock the file the Python locks: the two deployments contend.
    from harness import run_with_a_private_home_cache
    env = {k: v for k, v in os.environ.items() if k != "XDG_CACHE_HOME"}
    if environment == "home-not-the-password-databases":
        (tmp_path / "home").mkdir()
        env["HOME"] = str(tmp_path / "home")
    elif environment == "cache-home-relative":
        env["XDG_CACHE_HOME"] = "relative-cache"
    else:
        (tmp_path / "open").mkdir(mode=0o777)
        (tmp_path / "open").chmod(0o777)
        env["XDG_CACHE_HOME"] = str(tmp_path / "open")
    home_cache = tmp_path / "roots-home-cache"
    result = run_with_a_private_home_cache(
        [sys.executable, "-c", _CONTEND, str(tmp_path / "f")], home_cache,
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "deploying holder.example" in result.stdout, result.stdout + result.stderr
    assert not (tmp_path / "f").exists(), "nothing was applied"
    assert (home_cache / "consfig" / "deploy.lock").exists(), \
        "both took the lock in the password database's home"


lock_held = getattr(consfig.apply.lock, hy.mangle("lock-held?"))


def test_a_python_hop_over_the_locked_connection_is_under_its_lock(monkeypatch):
    # What a nested `[:local :python]` deployment relies on: its target's
    # Python is told to take no lock of its own, which would wait for ours.
    monkeypatch.setattr(consfig.apply.lock, "LOCK_WAIT", 300)
    with establishing_for(make_host("lab", None, None, eseqprops())):
        conns = establish_chain(parse_chain([K("local"), K("python")]))
        try:
            assert not lock_held(conns[-1]), "not before the lock is taken"
            with consfig.apply.lock.holding_target_lock(conns[0], "outer.example"):
                assert lock_held(conns[-1]), "the Python's target is the locked one"
            assert not lock_held(conns[-1]), "nor after it is released"
        finally:
            close_chain(conns)


def test_a_lock_holder_names_the_digest_of_the_whole_propspec_it_deploys():
    # What a converging agent on the target reads to tell a push of another
    # propspec (it stops) from one of its own (it checks again).
    from consfig.apply.lock import holder_digest, lock_request
    digest = "ab" * 32
    assert holder_digest(lock_request("web.test", digest)["holder"]) == digest
    assert holder_digest(lock_request("web.test")["holder"]) is None, "a deploy-these names none"
    assert holder_digest("someone, propspec $(rm -rf /)") is None, "only a digest is read"
    assert holder_digest(None) is None
