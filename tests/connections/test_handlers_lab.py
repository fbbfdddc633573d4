"""Handlers over real chains (the `sshlab` fixture): a notification made
before a failure is kept on the target, and the next deployment, which
changes nothing else, runs the handler — through a `:python` hop and
through a shell alone."""

import json
import os
import pathlib
import pwd
import shutil

import pytest

import hy  # noqa: F401
from hy.models import Keyword as K

import consfig.deployer.deployment
from consfig.apply.combinators import seqprops
from consfig.apply.handlers import handler, notifies
from consfig.model.host import make_host
from consfig.image.build import state_directory
from consfig.props import cmd, file

deploy_these = getattr(consfig.deployer.deployment, hy.mangle("deploy-these*"))


def ssh(lab):
    return [K("ssh"), K("config"), lab.config, K("host"), "lab"]


CHAINS = {
    "ssh-sudo-python": lambda lab: [ssh(lab), K("sudo"), K("python")],
    "ssh-sudo": lambda lab: [ssh(lab), K("sudo")],
    "local": lambda lab: [K("local")],
    # As a user: the pending handlers are under ~/.local/state.
    "ssh": lambda lab: [ssh(lab)],
}


class Target:
    """Where a deployment over CHAIN_ID keeps its files and its pending
    handlers: as root, this machine's; as the lab's user, in its home."""

    def __init__(self, lab, chain_id, tmp_path):
        self.hostname = f"handlers-{chain_id}-{os.getpid()}.consfig.invalid"
        if chain_id == "ssh":
            home = pathlib.Path(lab.home(lab.user))
            self.dir = home / f"handlers-{os.getpid()}"
            self.dir.mkdir()
            user = pwd.getpwnam(lab.user)
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            state = home / ".local/state/consfig"
        else:
            self.dir, state = tmp_path, pathlib.Path(state_directory())
        self.pending_file = state / "handlers" / f"{self.hostname}.json"

    def pending(self):
        if not self.pending_file.exists():
            return []
        return json.loads(self.pending_file.read_text())["pending"]


@pytest.fixture
def target(sshlab, request, tmp_path):
    t = Target(sshlab, request.node.callspec.params["chain_id"], tmp_path)
    t.pending_file.unlink(missing_ok=True)
    yield t
    t.pending_file.unlink(missing_ok=True)
    if t.dir != tmp_path:
        shutil.rmtree(t.dir)


@pytest.mark.parametrize("chain_id", list(CHAINS))
def test_a_handler_owed_by_a_failed_run_runs_in_the_next_one_that_changes_nothing(
        sshlab, target, chain_id, events):
    chain = CHAINS[chain_id](sshlab)
    conf, restarts = str(target.dir / "site.conf"), str(target.dir / "restarts")

    def propspec(fail):
        return seqprops(
            notifies("reload-site", file.has_content(conf, "listen 80;\n")),
            cmd.single("false") if fail else cmd.single("true"),
            handler("reload-site", cmd.script('echo reloaded >> "$1"', restarts)))

    host = make_host(target.hostname, None, None, seqprops())
    first = deploy_these(chain, host, propspec(True), sink=events)
    assert first.status == "failed", events.ends()
    assert not os.path.exists(restarts), "a failed deployment runs no handler"
    assert target.pending() == ["reload-site"], "the notification is kept on the target"

    events.events.clear()
    second = deploy_these(chain, host, propspec(False), sink=events)
    assert events.status_of(f"{conf} has content") == "ok", "nothing else changed"
    assert events.status_of("handler reload-site") == "changed", events.ends()
    assert open(restarts).read() == "reloaded\n"
    assert second.status == "changed", events.ends()
    assert target.pending() == [], "a handler that ran is no longer owed"

    events.events.clear()
    deploy_these(chain, host, propspec(False), sink=events)
    assert open(restarts).read() == "reloaded\n", "it ran once"
