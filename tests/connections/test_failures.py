"""Every way a chain can fail ends with a clear message, within a bounded
time, against a real sshd (the `sshlab` fixture)."""

import itertools
import os
import signal
import sys
import socket
import threading
import time

import pytest

import hy  # noqa: F401
from hy.models import Keyword as K

import consfig.connections.sudo as sudo
import consfig.deployer.deployment
from consfig.apply.combinators import eseqprops
from consfig.transport.chain import close_chain, establish_chain, parse_chain
from consfig.model.context import establishing_for
from consfig.errors import ChainError, CommandTimedOut, ConnectionFailed
from consfig.model.host import make_host

sys.path.insert(0, os.path.dirname(__file__))
from labservers import second_server, ssh_hop as ssh  # noqa: E402
from consfig.props import cmd, file
from harness import running, wait_until
from sshlab import sudo_password_known

deploy = getattr(consfig.deployer.deployment, hy.mangle("deploy*"))


class Within:
    """Asserts that the block it guards ends within SECONDS."""

    def __init__(self, seconds):
        self.seconds = seconds

    def __enter__(self):
        self.start = time.monotonic()

    def __exit__(self, *exc):
        took = time.monotonic() - self.start
        assert took < self.seconds, f"took {took:.1f} s, more than {self.seconds} s"


def establish(chain, hostname="lab"):
    with establishing_for(make_host(hostname, None, None, eseqprops())):
        return establish_chain(parse_chain(chain))


def fail_to_establish(chain, match, seconds=10):
    with Within(seconds), pytest.raises(ConnectionFailed, match=match) as info:
        close_chain(establish(chain))
    return str(info.value)


def test_unreachable_port_is_connection_refused(sshlab, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = sshlab.write_config(str(tmp_path / "config"), port)
    fail_to_establish([ssh(config)], rf"ssh lab: connection refused by 127\.0\.0\.1:{port}", 5)


def test_server_that_never_speaks_times_out(sshlab, tmp_path):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        config = sshlab.write_config(str(tmp_path / "config"), listener.getsockname()[1])
        fail_to_establish([ssh(config, timeout=1)], "sent no SSH greeting within 1 s", 5)


def test_unresolvable_host(sshlab):
    fail_to_establish([ssh(sshlab.config, host="no-such-host.invalid")],
                      "cannot resolve host name no-such-host.invalid", 15)


def test_refused_key(sshlab):
    fail_to_establish([ssh(sshlab.config, identity=sshlab.other_key)],
                      f"authentication failed for {sshlab.user}@127.0.0.1", 10)


def test_unknown_host_key_is_refused_by_default(sshlab, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text("")
    config = sshlab.write_config(str(tmp_path / "config"), sshlab.port, known_hosts=str(known))
    message = fail_to_establish([ssh(config)], r"the host key of \[127\.0\.0\.1\]:\d+ is not known")
    assert "SHA256:" in message and "ssh-keyscan" in message
    assert known.read_text() == ""


def test_unknown_host_key_accepted_when_asked(sshlab, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text("")
    config = sshlab.write_config(str(tmp_path / "config"), sshlab.port, known_hosts=str(known))
    close_chain(establish([ssh(config, strict_host_key_checking="accept-new")]))
    assert f"[127.0.0.1]:{sshlab.port} ssh-ed25519 " in known.read_text()
    close_chain(establish([ssh(config)]))


def test_changed_host_key_is_refused(sshlab, tmp_path):
    impostor = open(sshlab.other_key + ".pub").read().split()
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshlab.port} {impostor[0]} {impostor[1]}\n")
    config = sshlab.write_config(str(tmp_path / "config"), sshlab.port, known_hosts=str(known))
    message = fail_to_establish([ssh(config, strict_host_key_checking="accept-new")],
                                "REMOTE HOST KEY CHANGED")
    assert "ssh-keygen -R" in message


def test_missing_config_file(sshlab, tmp_path):
    fail_to_establish([ssh(str(tmp_path / "nope"))], "cannot read SSH config")


def test_ssh_after_sudo_is_a_chain_error(sshlab):
    with pytest.raises(ChainError, match=":ssh can follow :local or another :ssh hop"):
        establish([ssh(sshlab.config), K("sudo"), ssh(sshlab.config)])


def test_unknown_hop_argument_fails_before_connecting():
    with pytest.raises(ChainError, match="hop :ssh has no argument :hots"):
        parse_chain([[K("ssh"), K("hots"), "x"]])


def test_wrong_sudo_password(sshlab):
    with sudo_password_known("not-the-password"):
        message = fail_to_establish([ssh(sshlab.config, host="lab-pw"),
                                     [K("sudo"), K("from"), "pw@lab"]],
                                    "wrong sudo password for pw@lab", 15)
    assert "not-the-password" not in message


def test_sudo_needing_a_password_without_from(sshlab):
    fail_to_establish([ssh(sshlab.config, host="lab-pw"), K("sudo")],
                      "(?s)sudo to root needs a password here.*:from", 10)


def test_su_needing_a_password(sshlab):
    fail_to_establish([ssh(sshlab.config), [K("su"), K("to"), sshlab.pwuser]],
                      f"su to {sshlab.pwuser} failed", 15)


def test_no_password_and_no_terminal(sshlab, monkeypatch):
    monkeypatch.setattr(sudo, "_ask", lambda designator, where: (_ for _ in ()).throw(
        ConnectionFailed("no terminal", where)))
    fail_to_establish([ssh(sshlab.config, host="lab-pw"), [K("sudo"), K("from"), "pw@lab"]],
                      "no terminal", 10)


def test_password_is_asked_once_per_deployment(sshlab, monkeypatch):
    asked = []

    def ask(designator, where):
        asked.append(designator)
        return sshlab.password

    monkeypatch.setattr(sudo, "_ask", ask)
    chain = [ssh(sshlab.config, host="lab-pw"), [K("sudo"), K("from"), "pw@lab"]]
    host = make_host("lab", None, None, eseqprops())
    with establishing_for(host):
        close_chain(establish_chain(parse_chain(chain)))
        close_chain(establish_chain(parse_chain(chain)))
    assert asked == ["pw@lab"]


def test_failed_hop_closes_the_ones_before(sshlab, tmp_path):
    server, config = second_server(sshlab, tmp_path)
    try:
        with pytest.raises(ConnectionFailed):
            establish([ssh(config), [K("su"), K("to"), sshlab.pwuser]])
        wait_until(lambda: server.session_pids() == [], 10,
                   "the SSH connections of the failed chain to close")
    finally:
        server.stop()


def test_command_hanging_past_its_timeout(sshlab):
    conns = establish([ssh(sshlab.config), K("sudo")])
    try:
        with Within(5), pytest.raises(CommandTimedOut, match="timed out after 1 s"):
            conns[-1].run(["sleep", "60"], timeout=1)
        assert conns[-1].run(["echo", "still usable"]).stdout == "still usable\n"
    finally:
        close_chain(conns)


_calls = itertools.count()


def _deploy_while(action, chain):
    """Deploy a long command over CHAIN, doing ACTION once the command runs;
    return the outcome and the messages of the end events."""
    events, errors = [], []
    # A sleep of this call's own: one an earlier call left on the target
    # (its server killed under it) would be taken for this one.
    seconds = f"8.{os.getpid()}{next(_calls)}"
    marker = f"sleep {seconds}"
    propspec = eseqprops(cmd.single("sleep", seconds),
                         file.has_content("/tmp/consfig-never", "x"))

    def act():
        try:
            wait_until(lambda: running(marker), 10, f"{marker} to run on the target")
            action()
        except Exception as e:
            errors.append(e)

    actor = threading.Thread(target=act, daemon=True)
    actor.start()
    outcome = deploy(chain, make_host("lab", None, None, eseqprops()), propspec=propspec,
                     sink=events.append)
    actor.join(10)
    assert not errors, errors
    return outcome, [e.get("message") or "" for e in events if e["event"] == "end"]


def test_sshd_killed_mid_deployment(sshlab, tmp_path):
    server, config = second_server(sshlab, tmp_path)
    with Within(5):
        outcome, messages = _deploy_while(server.kill, [ssh(config), K("sudo")])
    assert outcome.status == "failed" and outcome.exit_code() == 1
    assert "the SSH connection was lost" in messages[0], messages
    assert not os.path.exists("/tmp/consfig-never")
    server.stop()


def test_sshd_frozen_mid_deployment(sshlab, tmp_path):
    # A stopped server keeps the TCP connection open and answers nothing:
    # only the keepalive (ServerAliveInterval 1, CountMax 2 in the lab's
    # ssh_config) can tell.
    server, config = second_server(sshlab, tmp_path)
    try:
        with Within(7):
            outcome, messages = _deploy_while(lambda: server.kill(signal.SIGSTOP),
                                              [ssh(config), K("sudo")])
    finally:
        server.stop()
    assert outcome.status == "failed"
    assert "no answer from the server" in messages[0], messages


def test_a_failing_command_over_a_python_chain_says_where_it_ran(sshlab):
    events = []
    outcome = deploy([ssh(sshlab.config), K("sudo"), K("python")],
                     make_host("lab", None, None, eseqprops()),
                     propspec=eseqprops(cmd.single("false")), sink=events.append)
    assert outcome.status == "failed", outcome
    [message] = [e.get("message") for e in events
                 if e["event"] == "end" and e["status"] == "failed"]
    assert "on local:" not in message, message
    assert "ssh:" in message and "sudo" in message and "python" in message, message


def test_a_keepalive_probe_on_a_connection_that_died_leaves_no_traceback_and_no_answer(
        sshlab, tmp_path, monkeypatch):
    # The probe asks the server from a thread of its own while a command is
    # quiet; when the connection dies under it, the command's loop says so
    # (`the SSH connection was lost`).  The probe's own failure is no news,
    # and must not end its thread with a traceback on the user's terminal.
    # Here its request cannot be sent (our side of the socket is shut for
    # writing) while paramiko still holds the connection for alive (the
    # server is frozen: nothing comes to say otherwise).
    import socket as sockets
    escaped = []
    monkeypatch.setattr(threading, "excepthook", escaped.append)
    server, config = second_server(sshlab, tmp_path)
    conns = establish([ssh(config)])
    try:
        hop = conns[-1]
        server.kill(signal.SIGSTOP)
        hop.transport.sock.shutdown(sockets.SHUT_WR)
        hop._last_alive = time.monotonic() - 10 * hop.alive_interval
        alive = getattr(hop, hy.mangle("_alive?"))
        alive()
        probe = hop._probe
        assert probe is not None, "a quiet connection is probed"
        probe.join(10)
        assert not probe.is_alive(), "the probe ended"
        assert not escaped, f"the probe's thread ended with {escaped[0].exc_type.__name__}"
        assert not alive(), "a probe that was never answered does not count as an answer"
    finally:
        close_chain(conns)
        server.stop()
