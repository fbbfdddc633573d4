"""The :python hop over the SSH lab: [:ssh :python] and [[:ssh …] :sudo :python]
give what a local run gives, and a dropped connection leaves nothing behind."""

import os
import pwd
import subprocess
import sys
import time

import pytest
from hy.models import Keyword as K

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import running, wait_until  # noqa: E402
from remote_helpers import (deploy, mixed_host, rp,  # noqa: E402
                            seqprops, shape, single)


from consfig.errors import ConnectionFailed  # noqa: E402
from consfig.model.host import Host  # noqa: E402
from sshlab import processes_seen, sudo_password_known  # noqa: E402


def ssh(config, host="lab", **kw):
    hop = [K("ssh"), K("host"), host, K("config"), config]
    for k, v in kw.items():
        hop += [K(k), v]
    return hop


def mixed(d):
    return mixed_host(d, "lab.example")


def local_events(tmp_path, events):
    d = tmp_path / "local"
    d.mkdir()
    deploy(K("local"), mixed(d), sink=events)
    out = shape(events.events, d)
    events.events.clear()
    return out


def fresh_dir(owner, name):
    d = os.path.join(pwd.getpwnam(owner).pw_dir, name)
    subprocess.run(["rm", "-rf", d], check=True)
    return d


def own_sshd(sshlab, tmp_path):
    """A server of the lab's of its own, for a test that kills it, and an
    ssh_config for it."""
    server = sshlab.start_sshd()
    known = tmp_path / "known_hosts"
    key = open(sshlab.host_key + ".pub").read().split()
    known.write_text(f"[127.0.0.1]:{server.port} {key[0]} {key[1]}\n")
    return server, sshlab.write_config(str(tmp_path / "ssh_config"), server.port,
                                       known_hosts=str(known))


def test_ssh_python_gives_the_same_results_and_events_as_a_local_run(sshlab, tmp_path, events):
    expected = local_events(tmp_path, events)
    d = fresh_dir(sshlab.user, "python-hop")
    outcome = deploy([ssh(sshlab.config), K("python")], mixed(d), sink=events)
    assert outcome.status == "changed", events.ends()
    assert shape(events.events, d) == expected
    assert os.stat(f"{d}/etc/py").st_uid == pwd.getpwnam(sshlab.user).pw_uid
    events.events.clear()
    assert deploy([ssh(sshlab.config), K("python")], mixed(d), sink=events).status == "no-change"


def test_ssh_sudo_python_applies_as_root(sshlab, tmp_path, events):
    expected = local_events(tmp_path, events)
    d = str(tmp_path / "as-root")
    outcome = deploy([ssh(sshlab.config), K("sudo"), K("python")], mixed(d), sink=events)
    assert outcome.status == "changed", events.ends()
    assert shape(events.events, d) == expected
    assert os.stat(f"{d}/etc/py").st_uid == 0


def sessions_started(sshlab, since):
    """How many SSH sessions (commands) the lab's servers started since the
    log was SINCE bytes long."""
    with open(sshlab.log, "rb") as f:
        f.seek(since)
        return f.read().count(b"Starting session:")


def test_ssh_sudo_python_runs_one_command_over_ssh(sshlab, tmp_path, events):
    # sudo's own check rides on the start of the target's Python: no round
    # trip of its own before it.
    mark = os.path.getsize(sshlab.log)
    d = str(tmp_path / "one-session")
    outcome = deploy([ssh(sshlab.config), K("sudo"), K("python")], mixed(d), sink=events)
    assert outcome.status == "changed", events.ends()
    assert sessions_started(sshlab, mark) == 1, open(sshlab.log).read()[mark:]


def test_ssh_sudo_python_where_sudo_wants_a_password_says_so(sshlab, tmp_path):
    d = str(tmp_path / "refused")
    with pytest.raises(ConnectionFailed,
                       match=r"(?s)sudo to root needs a password here.*:from \"user@host\""):
        deploy([ssh(sshlab.config, "lab-pw"), K("sudo"), K("python")], mixed(d),
               sink=lambda e: None)
    assert not os.path.exists(d), "something was applied"


def test_sudo_python_where_there_is_no_sudo_says_so(tmp_path, monkeypatch):
    # A PATH with no sudo in it (nor anything else: /bin/sh is called by path).
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConnectionFailed, match="there is no sudo here"):
        deploy([K("local"), K("sudo"), K("python")], mixed(str(tmp_path / "d")),
               sink=lambda e: None)


def test_ssh_python_sudo_starts_a_root_python_from_the_user_python(sshlab, tmp_path, events):
    d = str(tmp_path / "nested")
    outcome = deploy([ssh(sshlab.config), K("python"), K("sudo")], mixed(d), sink=events)
    assert outcome.status == "changed", events.ends()
    assert os.stat(f"{d}/etc/py").st_uid == 0


def test_no_python_over_ssh_is_a_clear_error(sshlab, tmp_path):
    chain = [ssh(sshlab.config), [K("python"), K("interpreter"), "/nonexistent/python3"]]
    with pytest.raises(ConnectionFailed) as e:
        deploy(chain, mixed(str(tmp_path)), sink=lambda e: None)
    msg = str(e.value)
    assert "lab.example" in msg and "/nonexistent/python3" in msg and "ssh:" in msg, msg


def test_a_dropped_ssh_connection_fails_fast_and_leaves_nothing_on_the_target(sshlab, tmp_path):
    server, config = own_sshd(sshlab, tmp_path)
    # A sleep long and odd enough to be told from any other.
    marker = f"sleep 7{os.getpid()}"
    host = Host("lab.example", seqprops(single(*marker.split())))

    def sink(event):
        if event["event"] == "start":
            wait_until(lambda: running(marker), 10, f"{marker} to run on the target")
            server.kill()

    started = time.monotonic()
    with pytest.raises(ConnectionFailed) as e:
        deploy([ssh(config), K("python")], host, sink=sink)
    assert time.monotonic() - started < 30, "the drop was noticed only after a long wait"
    assert "lab.example" in str(e.value), str(e.value)
    wait_until(lambda: not running(marker), 10, "the command on the target to end")


def test_ssh_sudo_python_with_a_sudo_password(sshlab, tmp_path, events):
    d = str(tmp_path / "with-password")
    chain = [ssh(sshlab.config, "lab-pw"), [K("sudo"), K("from"), "pw@lab"], K("python")]
    with sudo_password_known(sshlab.password):
        with processes_seen() as seen:
            outcome = deploy(chain, mixed(d), sink=events)
            assert outcome.status == "changed", events.ends()
            assert os.stat(f"{d}/etc/py").st_uid == 0
            events.events.clear()
            assert deploy(chain, mixed(d), sink=events).status == "no-change", events.ends()
    assert seen.samples > 10, seen.samples
    assert not [s for s in seen if sshlab.password.encode() in s], \
        "the password showed in ps or an environ"
    assert sshlab.password not in repr(events.events)


def test_sshd_killed_during_a_root_python_apply_fails_fast_and_leaves_nothing(sshlab, tmp_path):
    server, config = own_sshd(sshlab, tmp_path)
    marker = f"sleep 6{os.getpid()}"
    pid_file = tmp_path / "pid"
    host = Host("lab.example", seqprops(rp.pid_recorded(str(pid_file)), single(*marker.split())))

    def sink(event):
        if event["event"] == "start" and "sleep" in event["desc"]:
            wait_until(lambda: running(marker), 10, f"{marker} to run on the target")
            server.kill()

    started = time.monotonic()
    with pytest.raises(ConnectionFailed) as e:
        deploy([ssh(config), K("sudo"), K("python")], host, sink=sink)
    assert time.monotonic() - started < 30, "the drop was noticed only after a long wait"
    msg = str(e.value)
    assert "lab.example" in msg and "SSH connection was lost" in msg, msg
    wait_until(lambda: not running(marker), 10, "the command on the target to end")
    pid = int(pid_file.read_text().split()[0])
    wait_until(lambda: not os.path.exists(f"/proc/{pid}"), 10,
               "the target's root Python to end")


@pytest.mark.parametrize("after", [[K("python")], [K("sudo"), K("python")],
                                   [K("python"), K("sudo")]],
                         ids=["python", "sudo-python", "python-sudo"])
def test_the_ssh_hops_command_timeout_holds_after_python(sshlab, tmp_path, events, after):
    marker = f"sleep 3{os.getpid()}{len(after)}{len(after[0].name)}"
    host = Host("lab.example", seqprops(single(*marker.split())))
    started = time.monotonic()
    outcome = deploy([ssh(sshlab.config, **{"command-timeout": 2}), *after], host, sink=events)
    assert time.monotonic() - started < 30, "the command ran past the hop's :command-timeout"
    assert outcome.status == "failed", events.ends()
    [failed] = [e for e in events.events if e["event"] == "end" and e["status"] == "failed"]
    assert "timed out after 2 s" in failed["message"], failed
    wait_until(lambda: not running(marker), 10, "the command on the target to end")
