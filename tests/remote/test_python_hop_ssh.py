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

from remote_helpers import (deploy, hop_streams, mixed_host, no_leftover,  # noqa: E402
                            seqprops, shape, single)

from consfig.errors import ConnectionFailed  # noqa: E402
from consfig.host import Host  # noqa: E402


pytestmark = pytest.mark.skipif(
    not (hop_streams("ssh") and hop_streams("sudo")),
    reason="the :ssh and :sudo hops cannot start a streaming process yet (start-process)")


def ssh(config, **kw):
    hop = [K("ssh"), K("host"), "lab", K("config"), config]
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
    server = sshlab.start_sshd()
    known = tmp_path / "known_hosts"
    key = open(sshlab.host_key + ".pub").read().split()
    known.write_text(f"[127.0.0.1]:{server.port} {key[0]} {key[1]}\n")
    config = sshlab.write_config(str(tmp_path / "ssh_config"), server.port, known_hosts=str(known))
    # A sleep long and odd enough to be told from any other.
    marker = f"sleep 7{os.getpid()}"
    host = Host("lab.example", seqprops(single(marker)))

    def sink(event):
        if event["event"] == "start":
            time.sleep(0.5)
            server.kill()

    started = time.monotonic()
    with pytest.raises(ConnectionFailed) as e:
        deploy([ssh(config), K("python")], host, sink=sink)
    assert time.monotonic() - started < 30, "the drop was noticed only after a long wait"
    assert "lab.example" in str(e.value), str(e.value)
    assert no_leftover(marker), "the command is still running on the target"
