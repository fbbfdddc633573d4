"""Waiting for a host to come back from the reboot its deployment scheduled
(consfig.apply.rebooting), over the SSH lab: a server of the lab's own is stopped
and started again on the same port, and what the host answers as its boot
id is a file the test changes, since this machine itself never reboots."""

import os
import shlex
import shutil
import socket
import tempfile
import threading
import time

import pytest

import hy  # noqa: F401
from hy.models import Keyword as K

import consfig.deployer.deployment
from consfig.transport.chain import parse_chain
from consfig.model.context import establishing_for
from consfig.nested.deploys import deploys
from consfig.errors import FailedChange
from consfig.model.host import Host, make_host
from consfig.props import reboot
from consfig.apply.rebooting import await_return
from harness import wait_until
from sshlab import Sshd

deploy = getattr(consfig.deployer.deployment, hy.mangle("deploy*"))


@pytest.fixture
def own_sshd(sshlab, tmp_path):
    """A server of the lab's for this test alone, and an ssh_config for it."""
    server = sshlab.start_sshd()
    known = tmp_path / "known_hosts"
    key = open(sshlab.host_key + ".pub").read().split()
    known.write_text(f"[127.0.0.1]:{server.port} {key[0]} {key[1]}\n")
    config = sshlab.write_config(str(tmp_path / "ssh_config"), server.port,
                                 known_hosts=str(known))
    servers = [server]
    yield servers, config
    for s in servers:
        s.stop()


@pytest.fixture
def shared_dir():
    """A directory the lab's user can read and write."""
    d = tempfile.mkdtemp(prefix="consfig-reboot-")
    os.chmod(d, 0o777)
    yield d
    shutil.rmtree(d)


def ssh(config):
    return [K("ssh"), K("config"), config, K("host"), "lab"]


def waiting(chain, note, probe, interval):
    with establishing_for(Host("lab", None, hostattrs={"hostname": ["lab"]})):
        return await_return(parse_chain(chain), note, probe=probe, interval=interval)


def test_it_waits_through_the_old_boot_and_the_down_time_for_a_new_boot_id(
        sshlab, own_sshd, shared_dir):
    servers, config = own_sshd
    port = servers[0].port
    boot, seen = os.path.join(shared_dir, "boot_id"), os.path.join(shared_dir, "seen")
    with open(boot, "w") as f:
        f.write("old-boot\n")
    probe = f"echo x >> {shlex.quote(seen)}; cat {shlex.quote(boot)}"
    refused = []

    def reboot_the_host():
        # Twice answered with the old boot id; then down (a connection that
        # gets no SSH greeting); then up again, booted anew.
        wait_until(lambda: os.path.exists(seen) and len(open(seen).read()) >= 4, 30,
                   "the old boot id to be read twice")
        servers[0].kill()
        with open(boot, "w") as f:
            f.write("new-boot\n")
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            s.listen()
            s.settimeout(30)
            conn, _ = s.accept()
            conn.close()
            refused.append(True)
        servers.append(Sshd(sshlab.sshd_config, port, sshlab.log))

    t = threading.Thread(target=reboot_the_host, daemon=True)
    t.start()
    seconds = waiting([ssh(config)], {"boot-id": "old-boot", "wait": 120}, probe, 0.2)
    t.join(30)
    assert refused, "it came back without ever being down"
    assert open(seen).read().count("x") >= 3, "the new boot id was read after the old one"
    assert 0 < seconds < 120


def test_it_gives_up_after_its_bound_and_says_what_it_saw_last(own_sshd, shared_dir):
    servers, config = own_sshd
    servers[0].kill()
    started = time.monotonic()
    with pytest.raises(FailedChange, match=r"did not come back within 3 s .* it did not answer"):
        waiting([ssh(config)], {"boot-id": "old-boot", "wait": 3}, "cat /nonexistent", 0.5)
    assert time.monotonic() - started < 15, "the bound holds, each attempt within it"


def test_a_host_that_answers_with_its_old_boot_id_has_not_rebooted(own_sshd, shared_dir):
    servers, config = own_sshd
    with pytest.raises(FailedChange, match="with the boot id it had before"):
        waiting([ssh(config)], {"boot-id": "same", "wait": 2}, "echo same", 0.5)


@pytest.mark.parametrize("chain_id", ["ssh-sudo-python", "ssh-sudo"])
def test_a_deployment_whose_host_does_not_come_back_fails_after_the_bound(
        own_sshd, chain_id, events):
    # `true` schedules nothing: the host keeps its boot id, as one whose
    # reboot never happens.
    servers, config = own_sshd
    chain = [ssh(config), K("sudo")] + ([K("python")] if chain_id.endswith("python") else [])
    host = make_host("lab", None, None, reboot.at_end(command=["true"], wait=3))
    outcome = deploy(chain, host, sink=events)
    assert outcome.status == "failed", events.ends()
    assert events.status_of("Rebooted at the end of the deployment") == "changed"
    assert events.status_of("lab is back after its reboot") == "failed"
    failed = [e for e in events.events if e.get("message")]
    assert "did not come back within 3 s" in failed[-1]["message"], failed
    assert "with the boot id it had before" in failed[-1]["message"], failed
    summary = events.events[-1]
    assert summary["event"] == "summary", "the summary comes last, once the wait is over"
    assert (summary["status"], summary["failures"]) == ("failed", 1), summary


def test_a_host_deploying_another_reports_it_not_coming_back(own_sshd, events):
    servers, config = own_sshd
    inner = make_host("lab", None, None, reboot.at_end(command=["true"], wait=2))
    outer = make_host("outer.consfig.invalid", None, None, deploys([ssh(config)], inner))
    outcome = deploy([K("local")], outer, sink=events)
    assert outcome.status == "failed", events.ends()
    assert events.status_of("lab is back after its reboot") == "failed"
    assert events.status_of("Deployed lab") == "failed"
