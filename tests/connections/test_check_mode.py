"""Check mode over real chains: connect, say what would change, change nothing.

The same host — a file of old content, a missing directory, a file with the
wrong mode, a link pointing elsewhere — is checked over :local, over a POSIX
chain ([ssh, sudo]) and over [ssh, sudo, :python]; the target directory is
compared byte for byte (contents, modes, links) before and after."""

import hashlib
import io
import os
import sys

import pytest
from rich.console import Console

import hy  # noqa: F401
from hy.models import Keyword as K

import consfig.deployer.deployment
from consfig.apply.combinators import on_change, seqprops
from consfig.model.host import make_host
from consfig.props import cmd, file
from consfig.deployer.report import Reporter

sys.path.insert(0, os.path.dirname(__file__))
from labservers import ssh_hop  # noqa: E402

deploy = getattr(consfig.deployer.deployment, hy.mangle("deploy*"))


def snapshot(root):
    """Every path under ROOT with its mode, link target or content hash."""
    seen = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            if os.path.islink(p):
                what = "-> " + os.readlink(p)
            elif os.path.isfile(p):
                what = hashlib.sha256(open(p, "rb").read()).hexdigest()
            else:
                what = "dir"
            seen[os.path.relpath(p, root)] = (st.st_mode, st.st_uid, what)
    return seen


def propspec(root):
    return seqprops(
        file.has_content(f"{root}/conf", "new line\n"),
        file.directory_exists(f"{root}/missing/dir"),
        file.has_mode(f"{root}/script", 0o750),
        file.symlinked(from_=f"{root}/current", to=f"{root}/v2"),
        on_change(file.contains_lines(f"{root}/list", "b"),
                  cmd.single("touch", f"{root}/ran")))


def make_target(root):
    os.makedirs(root)
    with open(f"{root}/conf", "w") as f:
        f.write("old line\n")
    with open(f"{root}/script", "w") as f:
        f.write("#!/bin/sh\n")
    os.chmod(f"{root}/script", 0o644)
    with open(f"{root}/list", "w") as f:
        f.write("a\n")
    os.symlink(f"{root}/v1", f"{root}/current")


CHAINS = {
    "local": lambda lab: [K("local")],
    "ssh-sudo": lambda lab: [ssh_hop(lab.config), K("sudo")],
    "ssh-sudo-python": lambda lab: [ssh_hop(lab.config), K("sudo"), K("python")],
}


def check(chain, root, diff=True):
    out = io.StringIO()
    reporter = Reporter(console=Console(file=out, width=300, highlight=False),
                        check=True, diff=diff)
    host = make_host("lab", None, None, propspec(root))
    outcome = deploy(chain, host, sink=reporter, check=True)
    reporter.finish()
    return outcome, out.getvalue()


@pytest.mark.parametrize("name", list(CHAINS))
def test_check_reports_what_would_change_and_changes_nothing(sshlab, tmp_path, name):
    root = str(tmp_path / "target")
    make_target(root)
    os.chmod(tmp_path, 0o755)
    before = snapshot(root)
    outcome, text = check(CHAINS[name](sshlab), root)
    assert snapshot(root) == before, "the target is byte for byte unchanged"
    assert outcome.exit_code(True) == 2, text
    assert f"{root}/conf has content ... would change" in text, text
    assert "-old line" in text and "+new line" in text, "the unified diff"
    assert f"{root}/missing/dir would be created" in text, text
    assert f"{root}/script: mode 644 → 750" in text, text
    assert f"{root}/current: link {root}/v1 → {root}/v2" in text, text
    assert f"Ran touch {root}/ran ... would change" in text, "on-change shows its consequent"
    assert "Changes would be made." in text, text


@pytest.mark.parametrize("name", list(CHAINS))
def test_check_of_a_host_that_holds_exits_0(sshlab, tmp_path, name):
    root = str(tmp_path / "target")
    make_target(root)
    os.chmod(tmp_path, 0o755)
    host = make_host("lab", None, None, propspec(root))
    assert deploy([K("local")], host, sink=lambda e: None).status == "changed"
    outcome, text = check(CHAINS[name](sshlab), root)
    assert outcome.exit_code(True) == 0, text
    assert "Nothing would change." in text, text


def test_diffs_are_shown_only_when_asked(sshlab, tmp_path):
    root = str(tmp_path / "target")
    make_target(root)
    outcome, text = check([K("local")], root, diff=False)
    assert "+new line" not in text, text
    assert f"{root}/conf would change" in text, "the note still says so"
