"""Fabric users deploy consfig hosts: the `:fabric` hop over a Connection of
theirs, and `consfig.deployer.fabric.deploy` in a fabfile run by the real `fab`
command, against the SSH lab."""

import os
import re
import subprocess
import sys

import pytest

import hy  # noqa: F401
from hy.models import Keyword as K
import fabric

import consfig.deployer.deployment
from consfig.transport.chain import parse_chain
from consfig.apply.combinators import eseqprops
from consfig.errors import ChainError, ConnectionFailed
from consfig.model.host import make_host
from consfig.props import file

deploy = getattr(consfig.deployer.deployment, hy.mangle("deploy*"))

FAB = os.path.join(os.path.dirname(sys.executable), "fab")

SITE = """(require consfig *)
(import consfig *)
(use-props consfig.props [file cmd])

(defhost lab.example {{:deploy [[:ssh :user "nobody"] :sudo :python]}}
  (file.has-content "{out}/lab" "deployed by fab\\n"))

(defhost lab-jump {{:deploy [[:ssh :user "nobody"] :sudo :python]}}
  (file.has-content "{out}/lab-jump" "through the jump\\n"))

(defhost failing.example {{:deploy [:ssh :sudo]}}
  (cmd.single "false"))
"""

FABFILE = """from fabric import ThreadingGroup, task
from consfig.deployer.fabric import deploy

SITE = {site!r}


@task
def converge(c):
    deploy(c, consfig=SITE)


@task
def fleet(c):
    outcomes = deploy(ThreadingGroup("lab", "lab-jump", config=c.config), consfig=SITE)
    print(sorted((name, o.status) for name, o in outcomes.items()))


@task
def failing(c):
    deploy(c, "failing.example", consfig=SITE)
"""


@pytest.fixture
def fabfile(sshlab, tmp_path):
    """A directory with a site consfig and a fabfile that deploys it; the
    site's files go to its `out` directory."""
    out = tmp_path / "out"
    out.mkdir()
    site = tmp_path / "site.hy"
    site.write_text(SITE.format(out=out))
    (tmp_path / "fabfile.py").write_text(FABFILE.format(site=str(site)))
    return tmp_path


def fab(directory, config, *args):
    return subprocess.run([FAB, "-S", config, *args], cwd=directory, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)


def test_a_fab_task_deploys_the_host_named_like_its_connection(sshlab, fabfile):
    r = fab(fabfile, sshlab.config, "-H", "lab", "converge")
    assert r.returncode == 0, r.stdout + r.stderr
    path = fabfile / "out" / "lab"
    assert path.read_text() == "deployed by fab\n"
    assert path.stat().st_uid == 0, "applied after the :sudo hop of the host's chain"
    again = fab(fabfile, sshlab.config, "-H", "lab", "converge")
    assert again.returncode == 0 and "No changes" in again.stdout, again.stdout + again.stderr


def test_a_fab_task_deploys_over_a_group_with_a_proxyjump(sshlab, fabfile):
    r = fab(fabfile, sshlab.config, "fleet")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[('lab-jump', 'changed'), ('lab.example', 'changed')]" in r.stdout, r.stdout
    assert (fabfile / "out" / "lab-jump").read_text() == "through the jump\n"


def test_a_failed_deployment_fails_the_fab_command_in_one_line(sshlab, fabfile):
    r = fab(fabfile, sshlab.config, "-H", "lab", "failing")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "consfig: the deployment failed: failing.example over lab" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr, r.stderr


def test_a_connection_to_no_consfig_host_fails_the_fab_command_naming_it(sshlab, fabfile):
    r = fab(fabfile, sshlab.config, "-H", "lab-pw", "converge")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "unknown host lab-pw" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr, r.stderr


def readme_fabfile():
    readme = open(os.path.join(os.path.dirname(__file__), "..", "..", "README.md")).read()
    section = readme.split("## Deploying from Fabric\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readmes_fabfile_checks_and_deploys_a_host(sshlab, tmp_path):
    (tmp_path / "fabfile.py").write_text(readme_fabfile())
    motd = tmp_path / "motd"
    (tmp_path / "consfig.hy").write_text(f"""(require consfig *)
(import consfig *)
(use-props consfig.props [file])

(defhost lab.example {{:deploy [[:ssh :user "root"] :sudo :python]}}
  (file.has-content "{motd}" "hello from the fabfile\\n"))
""")
    check = fab(tmp_path, sshlab.config, "-H", "lab", "converge", "--check")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "would change" in check.stdout.lower(), check.stdout
    assert not motd.exists(), "check mode changed nothing"
    r = fab(tmp_path, sshlab.config, "-H", "lab", "converge")
    assert r.returncode == 0, r.stdout + r.stderr
    assert motd.read_text() == "hello from the fabfile\n"


def lab_connection(config):
    return fabric.Connection("lab", config=fabric.Config(runtime_ssh_path=config))


def test_the_fabric_hop_leaves_an_open_connection_open(sshlab, tmp_path):
    c = lab_connection(sshlab.config)
    c.open()
    try:
        outcome = deploy([[K("fabric"), K("connection"), c], K("sudo")],
                         make_host("lab", None, None, eseqprops()),
                         propspec=file.has_content(str(tmp_path / "f"), "x\n"),
                         sink=lambda e: None)
        assert outcome.status == "changed", outcome
        assert c.is_connected, "the hop closed a connection that is not its own"
        assert c.run("true", hide=True, in_stream=False).ok
    finally:
        c.close()


def test_the_fabric_hop_checks_the_host_key_of_a_connection_it_opens(sshlab, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text("")
    config = sshlab.write_config(str(tmp_path / "config"), sshlab.port, known_hosts=str(known))
    with pytest.raises(ConnectionFailed, match=r"the host key of \[127\.0\.0\.1\]:\d+ is not known"):
        deploy([[K("fabric"), K("connection"), lab_connection(config)]],
               make_host("lab", None, None, eseqprops()),
               propspec=file.has_content(str(tmp_path / "f"), "x\n"), sink=lambda e: None)
    assert not (tmp_path / "f").exists()
    assert known.read_text() == ""


def test_the_fabric_hop_wants_a_connection():
    with pytest.raises(ChainError, match=r":connection wants a fabric\.Connection, not \"lab\""):
        parse_chain([[K("fabric"), K("connection"), "lab"]])


def test_the_fabric_hop_starts_a_chain(sshlab):
    c = lab_connection(sshlab.config)
    with pytest.raises(ChainError, match=":fabric starts a chain"):
        deploy([K("local"), [K("sudo"), K("user"), sshlab.user], [K("fabric"), K("connection"), c]],
               make_host("lab", None, None, eseqprops()), sink=lambda e: None)
    assert not c.is_connected
