"""Root among users, racing: the lab's real unprivileged user swaps a
directory of her own with a symlink to a root-owned decoy (a directory
standing for /, holding an /etc with a 0600 file and a subdirectory), with
renameat2(RENAME_EXCHANGE) in a tight loop, while a deployment applies a
property to a path under her directory a bounded number of times.

Over `[[:ssh] :sudo :python]` the target's Python holds what it walked
(descriptors), so no attempt may touch the decoy.  Over `[[:ssh] :sudo]` a
shell cannot hold anything, so the deployment must refuse her directory up
front, before writing anything, and say to add `:python`."""

import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading

import pytest

import hy  # noqa: F401
from hy.models import Keyword as K

import consfig.deployer.deployment
from consfig.apply.combinators import seqprops, unapplied
from consfig.model.host import make_host
from consfig.props import file, mount, ssh
from consfig.props import os as os_

sys.path.insert(0, os.path.dirname(__file__))
from labservers import ssh_hop  # noqa: E402

from harness import wait_until  # noqa: E402

deploy = getattr(consfig.deployer.deployment, hy.mangle("deploy*"))

ATTEMPTS = 40
# Hers: the controller's own Python may be where she cannot reach it.
SYSTEM_PYTHON = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
SECRET = "decoy-secret-9f8e7d\n"

CHAINS = {
    "posix": lambda lab: [ssh_hop(lab.config), K("sudo")],
    "python": lambda lab: [ssh_hop(lab.config), K("sudo"), K("python")],
}

# Mallory's swapper: exchanges her directory and her link to the decoy as
# fast as it can.
_SWAPPER = r"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
a, b, ready = sys.argv[1].encode(), sys.argv[2].encode(), sys.argv[3]
open(ready, "w").close()
end = time.monotonic() + 600
while time.monotonic() < end:
    libc.renameat2(-100, a, -100, b, 2)
"""


class Decoy:
    """A user's home beside a root-owned tree standing for /: etc/shadow
    (0600) and etc/sub/file."""

    def __init__(self, lab):
        self.lab = lab
        self.root = tempfile.mkdtemp(dir=lab.root)
        os.chmod(self.root, 0o755)
        self.etc = f"{self.root}/etc"
        self.home = f"{self.root}/home"
        os.mkdir(self.home, 0o755)
        shutil.chown(self.home, lab.pwuser, lab.pwuser)
        self.restore()
        # Hers: ~/real/etc, shaped like the decoy's, and ~/link -> the decoy.
        self.real = f"{self.home}/real"
        self.link = f"{self.home}/link"
        self.as_user("mkdir", "-p", f"{self.real}/etc/sub")
        self.as_user("sh", "-c", f"printf mine > '{self.real}/etc/shadow'; "
                                 f"printf mine > '{self.real}/etc/sub/file'")
        self.as_user("ln", "-s", "--", self.root, self.link)
        self.swapper = None

    def as_user(self, *argv):
        subprocess.run(["runuser", "-u", self.lab.pwuser, "--", *argv], check=True,
                       capture_output=True, timeout=30)

    def restore(self):
        """Put the decoy back as it was."""
        shutil.rmtree(self.etc, ignore_errors=True)
        os.mkdir(self.etc, 0o755)
        with open(f"{self.etc}/shadow", "w") as f:
            f.write(SECRET)
        os.chmod(f"{self.etc}/shadow", 0o600)
        os.mkdir(f"{self.etc}/sub", 0o755)
        with open(f"{self.etc}/sub/file", "w") as f:
            f.write(SECRET)

    def damage(self):
        """What has happened to the decoy, or None."""
        shadow = f"{self.etc}/shadow"
        try:
            st = os.lstat(shadow)
        except FileNotFoundError:
            return "etc/shadow deleted"
        if not stat.S_ISREG(st.st_mode) or stat.S_IMODE(st.st_mode) != 0o600:
            return f"etc/shadow mode now {oct(st.st_mode)}"
        if (st.st_uid, st.st_gid) != (0, 0):
            return f"etc/shadow owner now {st.st_uid}:{st.st_gid}"
        if open(shadow).read() != SECRET:
            return "etc/shadow content changed"
        if sorted(os.listdir(self.etc)) != ["shadow", "sub"]:
            return f"etc now holds {sorted(os.listdir(self.etc))}"
        if os.listdir(f"{self.etc}/sub") != ["file"]:
            return f"etc/sub now holds {os.listdir(self.etc + '/sub')}"
        return None

    def start_swapping(self):
        ready = f"{self.home}/.ready"
        self.swapper = subprocess.Popen(
            ["runuser", "-u", self.lab.pwuser, "--", SYSTEM_PYTHON, "-c", _SWAPPER,
             self.real, self.link, ready],
            cwd="/", start_new_session=True, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        wait_until(lambda: os.path.exists(ready), 30, "the swapper to start")

    def stop_swapping(self):
        if self.swapper and self.swapper.poll() is None:
            os.killpg(self.swapper.pid, signal.SIGKILL)
            self.swapper.wait(timeout=30)

    def remove(self):
        """Remove what this decoy made outside the lab's own tree (none:
        its tree goes with the lab)."""

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.stop_swapping()
        self.remove()


@pytest.fixture
def decoy(sshlab):
    with Decoy(sshlab) as d:
        yield d


def attack(lab, decoy, chain_id, propapps, leaked=lambda: None):
    """Apply PROPAPPS in one deployment while the swapper runs; return the
    outcome, the events and the attempts that touched the decoy or, by
    LEAKED, let out what it holds (each found after the propapp ended,
    then repaired)."""
    wins, events = [], []

    def sink(event):
        events.append(event)
        if event.get("event") == "end":
            what = decoy.damage() or leaked()
            if what:
                wins.append(what)
                decoy.restore()

    decoy.start_swapping()
    try:
        host = make_host("lab", None, None, seqprops())
        outcome = deploy(CHAINS[chain_id](lab), host, propspec=seqprops(*propapps), sink=sink)
    finally:
        decoy.stop_swapping()
    what = decoy.damage() or leaked()
    if what:
        wins.append(what)
    return outcome, events, wins


def failures(events):
    return [e.get("message") or "" for e in events
            if e["event"] == "end" and e["status"] == "failed"]


def _alternating(make, a, b):
    return [make(a if i % 2 == 0 else b) for i in range(ATTEMPTS)]


PROPERTIES = {
    "has-content": (lambda d: _alternating(lambda c: file.has_content(f"{d.real}/etc/shadow", c),
                                           "site a\n", "site b\n")),
    "has-mode": (lambda d: _alternating(lambda m: file.has_mode(f"{d.real}/etc/shadow", m),
                                        0o644, 0o640)),
    "does-not-exist": (lambda d: _alternating(
        lambda p: p, file.does_not_exist(f"{d.real}/etc/shadow"),
        file.has_content(f"{d.real}/etc/shadow", "mine\n"))),
    "directory-exists": (lambda d: _alternating(
        lambda p: p, file.directory_exists(f"{d.real}/etc/new"),
        file.directory_does_not_exist(f"{d.real}/etc/new"))),
    "directory-does-not-exist": (lambda d: _alternating(
        lambda p: p, file.directory_does_not_exist(f"{d.real}/etc/sub"),
        file.directory_exists(f"{d.real}/etc/sub"))),
}


def _hers(decoy):
    """Her directory, under whichever name the swapping left it."""
    return next(p for p in [decoy.real, decoy.link]
                if os.path.isdir(p) and not os.path.islink(p))


@pytest.mark.parametrize("name", PROPERTIES)
def test_a_racing_user_never_wins_over_python(sshlab, decoy, name):
    outcome, events, wins = attack(sshlab, decoy, "python", PROPERTIES[name](decoy))
    assert not wins, f"{name}: {len(wins)} of {ATTEMPTS} attempts touched the decoy: {wins[:3]}"


@pytest.mark.parametrize("name", PROPERTIES)
def test_a_users_directory_is_refused_up_front_over_posix(sshlab, decoy, name):
    outcome, events, wins = attack(sshlab, decoy, "posix", PROPERTIES[name](decoy))
    assert not wins, f"{name}: {len(wins)} of {ATTEMPTS} attempts touched the decoy: {wins[:3]}"
    # An attempt whose check found nothing to do is "ok"; every other one
    # was refused before it acted.
    changed = [e for e in events if e["event"] == "end" and e["status"] == "changed"]
    said = failures(events)
    assert not changed, f"{name}: {len(changed)} of {ATTEMPTS} attempts changed something"
    assert said, f"{name}: nothing was refused"
    assert all("add :python" in m and decoy.home in m for m in said), said[:2]
    left = [n for n in os.listdir(f"{_hers(decoy)}/etc") if n.startswith(".consfig-")]
    assert not left, f"temporaries left in her directory: {left}"


# A copy root makes of a file she names: her directory swapped for her link
# to the decoy must never put the decoy's content where the copy goes.


def _copy_leaked(decoy):
    def leaked():
        for name in sorted(os.listdir(f"{decoy.root}/copies")):
            with open(f"{decoy.root}/copies/{name}") as f:
                held = f.read() == SECRET
            if held:
                os.unlink(f"{decoy.root}/copies/{name}")
                return f"copy {name} held etc/shadow"
        return None
    return leaked


def _copies(decoy, n=ATTEMPTS, round=0):
    # A new copy each time, kept: events reach the controller a little after
    # the property ends, when a copy made over would already be gone.
    os.makedirs(f"{decoy.root}/copies", exist_ok=True)
    return [file.is_copy_of(f"{decoy.root}/copies/{round}-{i}", f"{decoy.real}/etc/shadow")
            for i in range(n)]


def test_a_racing_user_never_has_root_copy_the_decoy_over_python(sshlab, decoy):
    # Under load her loop may hold the link in place through all of a
    # round's attempts, each then refused: as for her ssh files, the attack
    # goes on for up to three rounds, until one attempt copied her file.
    events = []
    for round in range(3):
        outcome, more, wins = attack(sshlab, decoy, "python", _copies(decoy, round=round),
                                     _copy_leaked(decoy))
        assert not wins, f"{len(wins)} of {ATTEMPTS} attempts leaked or touched the decoy: {wins[:3]}"
        events += more
        if any(e["event"] == "end" and e["status"] == "changed" for e in more):
            break
    changed = [e for e in events if e["event"] == "end" and e["status"] == "changed"]
    assert changed, f"no attempt copied her file: {failures(events)[:3]}"


def test_a_copy_from_a_users_directory_is_refused_up_front_over_posix(sshlab, decoy):
    outcome, events, wins = attack(sshlab, decoy, "posix", _copies(decoy, 2), _copy_leaked(decoy))
    assert not wins, f"attempts leaked or touched the decoy: {wins[:3]}"
    said = failures(events)
    assert len(said) == 2, f"the two copies were not both refused: {said}"
    assert all("add :python" in m and decoy.home in m and "etc/shadow" in m for m in said), said


# Mounts below her directory, which she may rename: root unmounting hers
# must never unmount the decoy's, mounted at the same names under the decoy.


def _mounts():
    """{mount point: source} of what this process sees mounted."""
    found = {}
    with open("/proc/self/mountinfo", "rb") as f:
        for line in f:
            before, after = line.split(b" - ", 1)
            point = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]),
                           before.split()[4]).decode("utf-8", "surrogateescape")
            found[point] = after.split()[1].decode()
    return found


class MountDecoy(Decoy):
    """Her ~/real/mnt/m0… and the decoy's mnt/m0…, each a tmpfs of its own
    (sources consfig-hers and consfig-decoy)."""

    def __init__(self, lab):
        self.lab = lab
        self.root = tempfile.mkdtemp(dir=lab.root)
        os.chmod(self.root, 0o755)
        self.home = f"{self.root}/home"
        os.mkdir(self.home, 0o755)
        shutil.chown(self.home, lab.pwuser, lab.pwuser)
        self.real = f"{self.home}/real"
        self.link = f"{self.home}/link"
        self.names = [f"m{i}" for i in range(ATTEMPTS)]
        self.as_user("mkdir", "-p", *[f"{self.real}/mnt/{n}" for n in self.names])
        self.as_user("ln", "-s", "--", self.root, self.link)
        for n in self.names:
            os.makedirs(f"{self.root}/mnt/{n}")
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "consfig-hers",
                            f"{self.real}/mnt/{n}"], check=True, timeout=30)
        self.restore()
        self.swapper = None

    def restore(self):
        have = _mounts()
        for n in self.names:
            if have.get(f"{self.root}/mnt/{n}") != "consfig-decoy":
                subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "consfig-decoy",
                                f"{self.root}/mnt/{n}"], check=True, timeout=30)

    def damage(self):
        have = _mounts()
        gone = [n for n in self.names if have.get(f"{self.root}/mnt/{n}") != "consfig-decoy"]
        return f"the decoy's {gone} unmounted" if gone else None

    def remove(self):
        for p in sorted((p for p in _mounts() if p.startswith(self.root + "/")), reverse=True):
            subprocess.run(["umount", "--lazy", "--", p], capture_output=True, timeout=30)


@pytest.fixture
def mount_decoy(sshlab):
    with MountDecoy(sshlab) as d:
        yield d


def _unmounts(decoy):
    # mount's properties are Linux's: the host says it runs Debian.
    return [os_.debian_stable("bookworm", K("amd64")),
            *[mount.unmounted_below(f"{decoy.real}/mnt/{n}") for n in decoy.names]]


def test_a_racing_user_never_has_root_unmount_the_decoy_over_python(sshlab, mount_decoy):
    outcome, events, wins = attack(sshlab, mount_decoy, "python", _unmounts(mount_decoy))
    assert not wins, f"{len(wins)} of {ATTEMPTS} attempts unmounted the decoy's: {wins[:3]}"
    changed = [e for e in events if e["event"] == "end" and e["status"] == "changed"]
    assert changed, f"no attempt unmounted hers: {failures(events)[:3]}"


def test_an_unmount_below_a_users_directory_is_refused_up_front_over_posix(sshlab, mount_decoy):
    outcome, events, wins = attack(sshlab, mount_decoy, "posix", _unmounts(mount_decoy))
    assert not wins, f"{len(wins)} of {ATTEMPTS} attempts unmounted the decoy's: {wins[:3]}"
    changed = [e for e in events if e["event"] == "end" and e["status"] == "changed"]
    said = failures(events)
    assert not changed, f"{len(changed)} of {ATTEMPTS} attempts unmounted something"
    assert said, "nothing was refused"
    assert all("add :python" in m and mount_decoy.home in m for m in said), said[:2]


# Her ~/.ssh, which root writes to for her: she swaps it with her link to a
# root-owned directory holding files of the names ssh's properties write,
# after root has written a file and before it gives her the file.

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHm1+eUOHqPoJzz4Abc1 race@example"


class SshDecoy(Decoy):
    """Her ~/.ssh and ~/.ssh-decoy, a link to a root-owned directory (0755)
    holding authorized_keys and an id_ed25519 pair, each root's, 0600."""

    NAMES = ["authorized_keys", "id_ed25519", "id_ed25519.pub"]

    def __init__(self, lab):
        self.lab = lab
        self.root = tempfile.mkdtemp(dir=lab.root)
        os.chmod(self.root, 0o755)
        self.home = lab.home(lab.pwuser)
        self.real = f"{self.home}/.ssh"
        self.link = f"{self.home}/.ssh-decoy"
        self.restore()
        self.as_user("mkdir", "-m", "0700", "--", self.real)
        self.as_user("ln", "-s", "--", self.root, self.link)
        self.swapper = None

    def restore(self):
        for name in os.listdir(self.root):
            p = f"{self.root}/{name}"
            shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)
        for name in self.NAMES:
            with open(f"{self.root}/{name}", "w") as f:
                f.write(SECRET)
            os.chmod(f"{self.root}/{name}", 0o600)

    def damage(self):
        if sorted(os.listdir(self.root)) != self.NAMES:
            return f"the decoy now holds {sorted(os.listdir(self.root))}"
        for name in self.NAMES:
            st = os.lstat(f"{self.root}/{name}")
            if not stat.S_ISREG(st.st_mode) or stat.S_IMODE(st.st_mode) != 0o600:
                return f"{name} mode now {oct(st.st_mode)}"
            if (st.st_uid, st.st_gid) != (0, 0):
                return f"{name} owner now {st.st_uid}:{st.st_gid}"
            if open(f"{self.root}/{name}").read() != SECRET:
                return f"{name} content changed"
        return None

    def remove(self):
        for p in (self.real, self.link):
            if os.path.islink(p):
                os.unlink(p)
            elif os.path.isdir(p):
                shutil.rmtree(p)


@pytest.fixture
def ssh_decoy(sshlab):
    with SshDecoy(sshlab) as d:
        yield d


SSH_PROPERTIES = {
    "authorized-keys": (lambda d: _alternating(
        lambda p: p, ssh.authorized_keys(d.lab.pwuser, KEY),
        unapplied(ssh.authorized_keys(d.lab.pwuser, KEY)))),
    "has-user-key": (lambda d: _alternating(
        lambda p: p, ssh.has_user_key(d.lab.pwuser),
        file.does_not_exist(f"{d.real}/id_ed25519", f"{d.real}/id_ed25519.pub"))),
}


@pytest.mark.parametrize("name", SSH_PROPERTIES)
def test_a_racing_user_never_wins_her_ssh_files_over_python(sshlab, ssh_decoy, name):
    # Under load her loop may hold the link in place through all of a
    # round's attempts, each then refused: the attack goes on for up to
    # three rounds, until one attempt found her real directory.
    events = []
    for _ in range(3):
        outcome, more, wins = attack(sshlab, ssh_decoy, "python", SSH_PROPERTIES[name](ssh_decoy))
        assert not wins, f"{name}: {len(wins)} of {ATTEMPTS} attempts touched the decoy: {wins[:3]}"
        events += more
        if any(e["event"] == "end" and e["status"] == "changed" for e in more):
            break
    changed = [e for e in events if e["event"] == "end" and e["status"] == "changed"]
    assert changed, f"{name}: no attempt changed anything: {failures(events)[:3]}"


# Reads over a POSIX chain: never blocked by a FIFO, and run as every other
# command is (bounded, and carrying the deployment's token for the reaper).


def test_a_fifo_swapped_in_never_blocks_a_read_over_posix(sshlab, decoy):
    # In a sticky directory anyone may write to (a /tmp), her own file and
    # her own FIFO are hers to swap; root reads the file's name to diff it.
    shared = f"{decoy.root}/tmp"
    os.mkdir(shared)
    os.chmod(shared, 0o1777)
    name, fifo, ready = f"{shared}/f", f"{shared}/p", f"{shared}/.ready"
    decoy.as_user("sh", "-c", f"printf mine > '{name}'; mkfifo '{fifo}'")
    swapper = subprocess.Popen(["runuser", "-u", sshlab.pwuser, "--", SYSTEM_PYTHON, "-c",
                                _SWAPPER, name, fifo, ready],
                               cwd="/", start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    done, events = [], []

    def check():
        host = make_host("lab", None, None, seqprops())
        done.append(deploy(CHAINS["posix"](sshlab), host, check=True, diff=True,
                           propspec=seqprops(*[file.has_content(name, "site\n")] * ATTEMPTS),
                           sink=events.append))

    try:
        wait_until(lambda: os.path.exists(ready), 30, "the swapper to start")
        t = threading.Thread(target=check, daemon=True)
        t.start()
        t.join(120)
        blocked = t.is_alive()
    finally:
        os.killpg(swapper.pid, signal.SIGKILL)
        swapper.wait(timeout=30)
        # A read stuck on a FIFO ends once something opens it to write.
        for p in (name, fifo):
            if stat.S_ISFIFO(os.lstat(p).st_mode):
                fd = os.open(p, os.O_RDWR | os.O_NONBLOCK)
                os.close(fd)
    assert not blocked, "a read of the file was still blocked after 120 s"
    assert done, "the check-mode deployment did not end"


def test_a_read_over_posix_runs_as_every_command_does(sshlab):
    # /proc/self/environ, read by the command that reads it, is that
    # command's environment: the deployment's token is in it, so that the
    # lock's holder finds the read among what it must end.
    from consfig.apply.combinators import eseqprops
    from consfig.apply.lock import holding_target_lock
    from consfig.model.context import establishing_for
    from consfig.transport.chain import close_chain, establish_chain, parse_chain
    with establishing_for(make_host("lab", None, None, eseqprops())):
        conns = establish_chain(parse_chain(CHAINS["posix"](sshlab)))
    try:
        conn = conns[-1]
        with holding_target_lock(conn, "lab"):
            environ = conn.read_file("/proc/self/environ", follow=True).split(b"\0")
            token = conn.deployment_token
    finally:
        close_chain(conns)
    assert token and f"CONSFIG_DEPLOYMENT={token}".encode() in environ, environ
