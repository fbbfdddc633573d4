"""Root among users: an unprivileged user of the target plants symlinks in a
directory they own, and a site that manages a file there must not be led
into changing, reading or showing anything that user could not.

Each attack runs over a POSIX chain ([ssh, sudo]) and a `:python` chain
([ssh, sudo, :python]) against the SSH lab.  Over the POSIX chain, a path
through a directory the user owns is refused before anything is done, with
a message saying to add :python (a shell cannot hold what it checked: see
test_root_races.py); over `:python` the links are followed by the rule.  The attacker is the lab's real
unprivileged user (`lab.pwuser`), who makes the links with their own
account; the decoy is a root-owned directory standing for /etc, whose
files must keep their mode, owner and content, and gain no neighbour."""

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile

import pytest

import hy  # noqa: F401
from hy.models import Keyword as K

import consfig.deployer.deployment
from consfig.apply.combinators import seqprops
from consfig.model.host import make_host
from consfig.props import file

sys.path.insert(0, os.path.dirname(__file__))
from labservers import ssh_hop  # noqa: E402

deploy = getattr(consfig.deployer.deployment, hy.mangle("deploy*"))

SECRET = "decoy-secret-9f8e7d\n"

CHAINS = {
    "posix": lambda lab: [ssh_hop(lab.config), K("sudo")],
    "python": lambda lab: [ssh_hop(lab.config), K("sudo"), K("python")],
}


class Scene:
    """A user's home with a decoy /etc beside it, owned by root."""

    def __init__(self, lab):
        self.lab = lab
        self.root = tempfile.mkdtemp(dir=lab.root)
        os.chmod(self.root, 0o755)
        self.etc = f"{self.root}/etc"
        os.mkdir(self.etc, 0o755)
        self.shadow = f"{self.etc}/shadow"
        with open(self.shadow, "w") as f:
            f.write(SECRET)
        os.chmod(self.shadow, 0o600)
        self.home = f"{self.root}/home"
        os.mkdir(self.home, 0o755)
        shutil.chown(self.home, lab.pwuser, lab.pwuser)

    def as_user(self, *argv):
        subprocess.run(["runuser", "-u", self.lab.pwuser, "--", *argv], check=True,
                       capture_output=True, timeout=30)

    def plant(self, name, target):
        """The user links ~/NAME to TARGET."""
        self.as_user("ln", "-s", "--", target, f"{self.home}/{name}")
        return f"{self.home}/{name}"

    def decoy_intact(self):
        st = os.stat(self.shadow)
        assert stat.S_IMODE(st.st_mode) == 0o600, f"decoy mode now {oct(st.st_mode)}"
        assert (st.st_uid, st.st_gid) == (0, 0), f"decoy owner now {st.st_uid}:{st.st_gid}"
        assert open(self.shadow).read() == SECRET, "decoy content changed"
        assert os.listdir(self.etc) == ["shadow"], f"new in decoy /etc: {os.listdir(self.etc)}"


@pytest.fixture
def scene(sshlab):
    return Scene(sshlab)


def run(lab, chain_id, *propapps, check=False):
    events = []
    host = make_host("lab", None, None, seqprops())
    outcome = deploy(CHAINS[chain_id](lab), host, propspec=seqprops(*propapps),
                     sink=events.append, check=check, diff=check)
    return outcome, events


def failures(events):
    return [e.get("message") or "" for e in events
            if e["event"] == "end" and e["status"] == "failed"]


def refused_up_front(outcome, events, home):
    """Over a POSIX chain: every property failed, saying the user's
    directory HOME is why and that :python is the way."""
    said = failures(events)
    assert outcome.status == "failed", outcome.status
    assert said and all(home in m and "add :python" in m for m in said), said


@pytest.mark.parametrize("chain_id", CHAINS)
def test_has_mode_refuses_a_users_symlink_to_a_root_file(sshlab, scene, chain_id):
    victim = scene.plant("modefile", scene.shadow)
    outcome, events = run(sshlab, chain_id, file.has_mode(victim, 0o644))
    assert outcome.status == "failed", f"has-mode through a planted link: {outcome.status}"
    assert any(("symlink" if chain_id == "python" else "add :python") in m
               for m in failures(events)), failures(events)
    scene.decoy_intact()


@pytest.mark.parametrize("chain_id", CHAINS)
def test_mode_argument_on_matching_content_never_reaches_the_links_target(sshlab, scene,
                                                                           chain_id):
    victim = scene.plant("victim.conf", scene.shadow)
    outcome, events = run(sshlab, chain_id, file.has_content(victim, SECRET, mode=0o644))
    scene.decoy_intact()
    if chain_id == "posix":
        return refused_up_front(outcome, events, scene.home)
    assert outcome.status == "changed", failures(events)
    st = os.lstat(victim)
    assert stat.S_ISREG(st.st_mode), "the planted link was not replaced by a regular file"
    assert stat.S_IMODE(st.st_mode) == 0o644, oct(st.st_mode)


@pytest.mark.parametrize("chain_id", CHAINS)
def test_symlinked_parent_directory_does_not_redirect_a_write(sshlab, scene, chain_id):
    cfgdir = scene.plant("cfgdir", scene.etc)
    outcome, events = run(sshlab, chain_id, file.has_content(f"{cfgdir}/x", "planted\n"))
    assert outcome.status == "failed", f"write through a planted directory link: {outcome.status}"
    message = " ".join(failures(events))
    assert cfgdir in message and scene.lab.pwuser in message, message
    scene.decoy_intact()


@pytest.mark.parametrize("chain_id", CHAINS)
def test_symlinked_parent_directory_does_not_redirect_a_removal_or_chown(sshlab, scene,
                                                                          chain_id):
    cfgdir = scene.plant("cfgdir", scene.etc)
    outcome, events = run(sshlab, chain_id,
                          file.does_not_exist(f"{cfgdir}/shadow"),
                          file.has_ownership(f"{cfgdir}/shadow", user=scene.lab.pwuser),
                          file.has_mode(f"{cfgdir}/shadow", 0o666))
    assert outcome.status == "failed", outcome.status
    assert len(failures(events)) == 3, failures(events)
    scene.decoy_intact()


@pytest.mark.parametrize("chain_id", CHAINS)
def test_check_mode_diff_never_shows_what_a_planted_link_leads_to(sshlab, scene, chain_id):
    victim = scene.plant("victim.conf", scene.shadow)
    outcome, events = run(sshlab, chain_id, file.has_content(victim, "mine\n"), check=True)
    shown = json.dumps(events)
    assert "decoy-secret" not in shown, "the decoy's content is in the check-mode events"
    if chain_id == "posix":
        refused_up_front(outcome, events, scene.home)
    else:
        assert any(e["event"] == "diff" for e in events), "check mode showed no diff"
    scene.decoy_intact()
    assert os.path.islink(victim), "check mode changed the link"


@pytest.mark.parametrize("chain_id", CHAINS)
def test_follow_true_follows_a_link_to_what_its_owner_owns(sshlab, scene, chain_id):
    own = f"{scene.home}/real"
    scene.as_user("sh", "-c", f"printf old > '{own}'")
    link = scene.plant("link", own)
    outcome, events = run(sshlab, chain_id,
                          file.has_content(link, "new\n", follow=True),
                          file.has_mode(link, 0o600, follow=True))
    if chain_id == "posix":
        refused_up_front(outcome, events, scene.home)
        assert open(own).read() == "old", "her file changed"
        return
    assert outcome.status == "changed", failures(events)
    assert os.path.islink(link), "the link itself was replaced"
    assert open(own).read() == "new\n"
    assert stat.S_IMODE(os.stat(own).st_mode) == 0o600


@pytest.mark.parametrize("chain_id", CHAINS)
def test_follow_true_still_refuses_a_users_link_to_a_root_file(sshlab, scene, chain_id):
    victim = scene.plant("victim", scene.shadow)
    outcome, events = run(sshlab, chain_id, file.has_mode(victim, 0o644, follow=True),
                          file.has_content(victim, "x\n", follow=True))
    assert outcome.status == "failed", outcome.status
    assert all("refusing" in m for m in failures(events)), failures(events)
    scene.decoy_intact()


@pytest.mark.parametrize("chain_id", CHAINS)
def test_a_root_owned_link_is_followed_where_asked(sshlab, scene, chain_id):
    # A link root made (an alternatives link, say) is root's own decision.
    target = f"{scene.etc}/managed"
    with open(target, "w") as f:
        f.write("old\n")
    link = f"{scene.root}/rootlink"
    os.symlink(target, link)
    outcome, events = run(sshlab, chain_id, file.has_content(link, "new\n", follow=True))
    assert outcome.status == "changed", failures(events)
    assert open(target).read() == "new\n"
    assert os.path.islink(link)
