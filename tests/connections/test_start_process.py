"""`start-process` over every hop, against the SSH lab: a process started
through a chain reads what is written to it until end of file, can be killed
without leaving anything behind on the target, says 127 for a missing
program, and never shows a sudo password."""

import os
import sys
import threading
import time

import pytest

import hy  # noqa: F401
from hy.models import Keyword as K

sys.path.insert(0, os.path.dirname(__file__))

from consfig.apply.combinators import eseqprops  # noqa: E402
from consfig.transport.chain import close_chain, establish_chain, parse_chain
from consfig.model.context import establishing_for  # noqa: E402
from consfig.model.host import make_host  # noqa: E402
from minichroot import make_minichroot  # noqa: E402
from harness import running, wait_until  # noqa: E402
from sshlab import processes_seen, sudo_password_known  # noqa: E402


def ssh(lab, host="lab"):
    return [K("ssh"), K("config"), lab.config, K("host"), host]


def chains(lab, chroot_dir):
    return {
        "local-sudo": [K("local"), [K("sudo"), K("user"), lab.user]],
        "ssh": [ssh(lab)],
        "ssh-sudo": [ssh(lab), K("sudo")],
        "ssh-sudo-password": [ssh(lab, "lab-pw"), [K("sudo"), K("from"), "pw@lab"]],
        "ssh-as": [ssh(lab), [K("as"), K("user"), lab.pwuser]],
        "jump-sudo-su": [ssh(lab, "lab-jump"), K("sudo"), [K("su"), K("to"), lab.pwuser]],
        "ssh-sudo-chroot": [ssh(lab), K("sudo"), [K("chroot"), K("into"), chroot_dir]],
    }


CHAIN_IDS = ["local-sudo", "ssh", "ssh-sudo", "ssh-sudo-password", "ssh-as",
             "jump-sudo-su", "ssh-sudo-chroot"]


@pytest.fixture(scope="module")
def established(sshlab, tmp_path_factory):
    """Every chain, established once for the module's tests."""
    chroot_dir = str(tmp_path_factory.mktemp("chroot"))
    make_minichroot(chroot_dir)
    made = {}
    try:
        host = make_host("lab", None, None, eseqprops())
        with sudo_password_known(sshlab.password):
            for chain_id, chain in chains(sshlab, chroot_dir).items():
                with establishing_for(host):
                    made[chain_id] = establish_chain(parse_chain(chain))
        yield {k: conns[-1] for k, conns in made.items()}
    finally:
        for conns in made.values():
            close_chain(conns)


@pytest.mark.parametrize("chain_id", CHAIN_IDS)
def test_closing_stdin_gives_the_process_end_of_file(established, chain_id):
    data = bytes(range(256)) * 1024 + b"\n\x00end"
    p = established[chain_id].start_process(["cat"])
    writer = threading.Thread(target=lambda: (p.stdin.write(data), p.stdin.close()))
    writer.start()
    out = p.stdout.read()
    writer.join(10)
    assert p.wait(10) == 0, (chain_id, p.stderr.read())
    assert out == data, (chain_id, len(out), out[:80])


@pytest.mark.parametrize("chain_id", CHAIN_IDS)
def test_a_missing_program_exits_127(established, chain_id):
    p = established[chain_id].start_process(["consfig-no-such-program", "x"])
    p.stdin.close()
    assert p.wait(10) == 127, (chain_id, p.stderr.read())


@pytest.mark.parametrize("chain_id", CHAIN_IDS)
def test_kill_leaves_no_process_on_the_target(established, chain_id):
    # A sleep that ignores its stdin, long and odd enough to be told from any other.
    marker = f"{time.time_ns() % 10**7}.3"
    p = established[chain_id].start_process(["sleep", marker])
    # The sleep itself, not a sudo or su whose command line names it: killed
    # while still setting up, sudo can die of the TERM before it has a
    # command to relay it to, and the command then starts regardless.
    wait_until(lambda: running(f"^sleep {marker}"), 10, f"{chain_id}: sleep {marker} to start")
    started = time.monotonic()
    p.kill()
    assert time.monotonic() - started < 5, f"{chain_id}: kill took too long"
    wait_until(lambda: not running(f"sleep {marker}"), 10, f"{chain_id}: sleep {marker} to end")
    assert p.wait(10) is not None, chain_id


@pytest.mark.parametrize("chain_id", CHAIN_IDS)
def test_wait_returns_none_while_the_process_runs(established, chain_id):
    p = established[chain_id].start_process(["cat"])
    started = time.monotonic()
    assert p.wait(0.3) is None, chain_id
    assert time.monotonic() - started < 2, chain_id
    p.stdin.close()
    assert p.wait(10) == 0, chain_id


def test_a_sudo_password_never_shows_in_ps_nor_reaches_the_process(established, sshlab):
    secret = sshlab.password.encode()
    with processes_seen() as seen:
        p = established["ssh-sudo-password"].start_process(
            ["/bin/sh", "-c", "sleep 1; id -un; cat"])
        p.stdin.write(b"what the caller wrote\n")
        p.stdin.close()
        out = p.stdout.read()
        assert p.wait(10) == 0, p.stderr.read()
    assert out == b"root\nwhat the caller wrote\n", out
    assert seen.samples > 10, seen.samples
    assert not [s for s in seen if secret in s], "the password showed in ps or an environ"
