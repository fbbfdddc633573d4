"""A fleet over the real SSH lab: a sudo password that several hosts need
is asked for once, before they start, and never from several threads."""

import fcntl
import os
import select
import subprocess
import sys
import termios
import textwrap
import time

import hy  # noqa: F401
import pytest
from hy.models import Keyword as K

import consfig.fleet
from consfig.combinators import eseqprops
from consfig.host import make_host
from consfig.props import file

sys.path.insert(0, os.path.dirname(__file__))
from clirun import REPO  # noqa: E402
from sshlab import sudo_password_known  # noqa: E402

deploy_hosts = getattr(consfig.fleet, hy.mangle("deploy-hosts*"))

PROMPT = b"sudo password for pw@lab"


def root_only_directory(tmp_path):
    """A directory only root may write to (and enter): the lab's password
    user reaches it only through sudo."""
    d = tmp_path / "root-only"
    d.mkdir(mode=0o700)
    return d


def test_a_password_two_hosts_need_is_got_once_on_the_main_thread(sshlab, tmp_path):
    asked = []

    d = root_only_directory(tmp_path)
    chain = [[K("ssh"), K("config"), sshlab.config, K("host"), "lab-pw"],
             [K("sudo"), K("from"), "pw@lab"]]
    hosts = [make_host(f"pw{i}.fleet.test", None, None,
                       eseqprops(file.has_content(f"{d}/f{i}", "x\n")))
             for i in range(2)]
    with sudo_password_known(sshlab.password, asked=asked):
        outcomes = deploy_hosts(chain, hosts, sink=lambda event: None, jobs=2)
    assert [o.status for o in outcomes] == ["changed", "changed"], outcomes
    assert asked == [("pw@lab", True)], asked
    assert sorted(p.name for p in d.iterdir()) == ["f0", "f1"]


def _read_until(fd, predicate, timeout, seen):
    """Read the pty at FD into SEEN (a bytearray) until PREDICATE(SEEN) or
    the end of its output; fail after TIMEOUT seconds."""
    deadline = time.monotonic() + timeout
    while not predicate(seen):
        left = deadline - time.monotonic()
        assert left > 0, f"waited {timeout} s on the terminal, which shows: {bytes(seen)!r}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                return seen
            if not chunk:
                return seen
            seen += chunk
    return seen


@pytest.mark.parametrize("after", ['[:sudo :from "pw@lab"]', ':python [:sudo :from "pw@lab"]'],
                         ids=["sudo", "python-then-sudo"])
def test_the_sudo_prompt_of_a_fleet_is_shown_and_read_once(sshlab, tmp_path, after):
    # After :python, sudo runs on the target, and its password travels there
    # with the host's data: still asked for once, here, before hosts start.
    d = root_only_directory(tmp_path)
    site = tmp_path / "site.hy"
    site.write_text(textwrap.dedent(f"""\
        (require consfig *)
        (import consfig *)
        (use-props consfig.props [file])
        (for [i (range 3)]
          (make-host f"pw{{i}}.test"
                     {{:deploy [[:ssh :config "{sshlab.config}" :host "lab-pw"]
                               {after}]}}
                     None
                     (eseqprops (file.has-content f"{d}/f{{i}}" "x\\n"))))
        """))
    primary, secondary = os.openpty()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "consfig", "deploy", "--consfig", str(site), "*", "-j", "3"],
        stdin=secondary, stdout=secondary, stderr=secondary, cwd=REPO, env=env,
        start_new_session=True,
        # The pty becomes the command's controlling terminal, where getpass asks.
        preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
    os.close(secondary)
    seen = bytearray()
    try:
        _read_until(primary, lambda s: PROMPT in s, 60, seen)
        os.write(primary, sshlab.password.encode() + b"\n")
        _read_until(primary, lambda s: False, 120, seen)
        assert proc.wait(timeout=30) == 0, bytes(seen).decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        os.close(primary)
    assert seen.count(PROMPT) == 1, bytes(seen).decode(errors="replace")
    assert sorted(p.name for p in d.iterdir()) == ["f0", "f1", "f2"]
