"""A fleet over the real SSH lab: a sudo password that several hosts need
is asked for once, before they start, and never from several threads."""

import os
import sys
import textwrap

import hy  # noqa: F401
import pytest
from hy.models import Keyword as K

import consfig.deployer.fleet
from consfig.apply.combinators import eseqprops
from consfig.model.host import make_host
from consfig.props import file

sys.path.insert(0, os.path.dirname(__file__))
from clirun import Terminal  # noqa: E402
from sshlab import sudo_password_known  # noqa: E402

deploy_hosts = getattr(consfig.deployer.fleet, hy.mangle("deploy-hosts*"))

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
    with Terminal("deploy", "--consfig", site, "*", "-j", "3") as terminal:
        terminal.read_until(lambda s: PROMPT in s, 60)
        terminal.write(sshlab.password.encode() + b"\n")
        terminal.read_to_end(120)
        assert terminal.proc.wait(timeout=30) == 0, terminal.text()
    assert terminal.seen.count(PROMPT) == 1, terminal.text()
    assert sorted(p.name for p in d.iterdir()) == ["f0", "f1", "f2"]
