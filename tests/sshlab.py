"""A real OpenSSH server on a loopback port, for connection tests.

``sshlab`` (session scope) is a `Lab`: an sshd with a generated host key, two
test users who log in with a generated client key — ``lab.user`` has
passwordless sudo, ``lab.pwuser`` needs ``lab.password`` for sudo — and an
``ssh_config`` (``lab.config``) in which

    lab        logs in as lab.user
    lab-pw     logs in as lab.pwuser
    lab-jump   logs in as lab.user through lab (ProxyJump)

and whose known_hosts holds the server's key.  ``lab.start_sshd()`` starts
another server with the same keys (for tests that kill one).  Users, their
homes and sudoers.d files are removed at the end of the session, and what
a killed session left behind is removed when the next one starts: all of
it is named by the pid of the session that made it.  When sshd cannot run
here (not root, no sshd, no sudo) the fixture says why: a skip, but an
error in CI.  CONSFIG_TEST_SSHD names the sshd to run (default
/usr/sbin/sshd).
"""

import contextlib
import glob
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import pytest

from harness import unavailable, wait_until

SSHD = os.environ.get("CONSFIG_TEST_SSHD") or "/usr/sbin/sshd"
USER_PREFIX = "cfglab"
ROOT_PREFIX = "consfig-sshlab-"
SUDOERS_PREFIX = "/etc/sudoers.d/consfig-lab-"


# The test run's own cache and state directories (conftest.py), as the
# session started: what root, reached through the lab's sudo, uses.
ROOT_ENVIRONMENT = {var: os.environ[var] for var in ("XDG_CACHE_HOME", "STATE_DIRECTORY")
                    if os.path.isabs(os.environ.get(var, ""))}


def _hermetic_environment():
    """sshd's SetEnv words for the test run's own cache and state
    directories (see conftest.py), where the run set them."""
    return " ".join(f"{var}={value}" for var, value in ROOT_ENVIRONMENT.items())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(*argv, **kw):
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60, **kw)


def _wait_listening(port, proc, log, deadline=10):
    def listening():
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited with {proc.returncode}: {open(log).read()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                return s.recv(4).startswith(b"SSH-")
        except OSError:
            return False

    try:
        wait_until(listening, deadline, f"sshd to listen on {port}")
    except AssertionError as e:
        raise RuntimeError(f"{e}: {open(log).read()}") from None


class Sshd:
    """One running sshd; `kill` ends it and every session it serves."""

    def __init__(self, config, port, log):
        self.port = port
        self.log = log
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", config, "-p", str(port)],
                                     stdout=subprocess.DEVNULL, stderr=open(log, "ab"),
                                     start_new_session=True)
        _wait_listening(port, self.proc, log)

    def session_pids(self):
        """The sshd processes serving connections to this server (its
        children, and theirs)."""
        pids, frontier = [], [self.proc.pid]
        while frontier:
            parent = frontier.pop()
            try:
                children = open(f"/proc/{parent}/task/{parent}/children").read().split()
            except OSError:
                continue
            pids += [int(c) for c in children]
            frontier += [int(c) for c in children]
        return pids

    def kill(self, sig=signal.SIGKILL):
        for pid in [self.proc.pid] + self.session_pids():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if sig == signal.SIGKILL:
            self.proc.wait(timeout=10)

    def stop(self):
        if self.proc.poll() is None:
            self.kill(signal.SIGCONT)
            self.kill()


class Lab:
    def __init__(self, root):
        self.root = root
        self.user = f"{USER_PREFIX}{os.getpid()}a"
        self.pwuser = f"{USER_PREFIX}{os.getpid()}b"
        self.password = f"pw-{os.urandom(6).hex()}-secret"
        self.users = []
        self.sudoers = []
        self.servers = []
        self.host_key = os.path.join(root, "ssh_host_ed25519_key")
        self.client_key = os.path.join(root, "id_ed25519")
        self.other_key = os.path.join(root, "id_other")
        self.known_hosts = os.path.join(root, "known_hosts")
        self.sshd_config = os.path.join(root, "sshd_config")
        self.config = os.path.join(root, "ssh_config")
        self.log = os.path.join(root, "sshd.log")

    def setup(self):
        for key in [self.host_key, self.client_key, self.other_key]:
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "consfig-lab", "-f", key)
        keys_dir = os.path.join(self.root, "authorized_keys")
        os.mkdir(keys_dir)
        for user, password in [(self.user, None), (self.pwuser, self.password)]:
            _run("useradd", "--create-home", "--shell", "/bin/bash", user)
            self.users.append(user)
            # A locked account ("!" in shadow) may not log in even with a key.
            if password:
                _run("chpasswd", input=f"{user}:{password}\n")
            else:
                _run("usermod", "-p", "*", user)
            shutil.copy(self.client_key + ".pub", os.path.join(keys_dir, user))
        # Root reached through the lab's sudo keeps the test run's own
        # cache (and so deployment lock) and state: sshd gives every session
        # the run's directories and sudo keeps them.  They belong to root,
        # so the lab users themselves pass them over for their own.
        keep = ('Defaults:{} env_keep += "XDG_CACHE_HOME STATE_DIRECTORY"\n')
        self._sudoers(self.user, keep.format(self.user)
                      + f"{self.user} ALL=(ALL:ALL) NOPASSWD: ALL\n")
        self._sudoers(self.pwuser, keep.format(self.pwuser)
                      + f"{self.pwuser} ALL=(ALL:ALL) ALL\n")
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        with open(self.sshd_config, "w") as f:
            f.write(f"""ListenAddress 127.0.0.1
HostKey {self.host_key}
PidFile none
AuthorizedKeysFile {keys_dir}/%u
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
AllowUsers {self.user} {self.pwuser}
AllowTcpForwarding yes
MaxSessions 50
MaxStartups 50
LogLevel VERBOSE
SetEnv {_hermetic_environment()}
""")
        _run(SSHD, "-t", "-f", self.sshd_config)
        self.server = self.start_sshd()
        self.port = self.server.port
        host_pub = open(self.host_key + ".pub").read().split()
        with open(self.known_hosts, "w") as f:
            f.write(f"[127.0.0.1]:{self.port} {host_pub[0]} {host_pub[1]}\n")
        self.write_config(self.config, self.port)

    def write_config(self, path, port, known_hosts=None, identity=None):
        """An ssh_config for a server of this lab on PORT."""
        with open(path, "w") as f:
            f.write(f"""Host lab-pw
    User {self.pwuser}
Host lab-jump
    ProxyJump lab
Host lab lab-*
    HostName 127.0.0.1
    Port {port}
    User {self.user}
    IdentityFile {identity or self.client_key}
    IdentitiesOnly yes
    UserKnownHostsFile {known_hosts or self.known_hosts}
    ConnectTimeout 5
    ServerAliveInterval 1
    ServerAliveCountMax 2
""")
        return path

    def start_sshd(self):
        server = Sshd(self.sshd_config, free_port(), self.log)
        self.servers.append(server)
        return server

    def _sudoers(self, name, text):
        path = f"{SUDOERS_PREFIX}{name}"
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o440)
        self.sudoers.append(path)

    def home(self, user):
        return pwd.getpwnam(user).pw_dir

    def teardown(self):
        for server in self.servers:
            server.stop()
        for path in self.sudoers:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        for user in self.users:
            _kill_processes_of(pwd.getpwnam(user).pw_uid)
            subprocess.run(["userdel", "--remove", user], capture_output=True, timeout=60)
        shutil.rmtree(self.root, ignore_errors=True)


def _kill_processes_of(uid):
    """Kill, by pid, what the tests left running as a lab user: processes
    with UID as their real, effective or saved user id.  (A sudo started by
    the user runs with the user's real id and root's effective one, and
    while it lives userdel refuses to remove the user.)"""
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/status") as f:
                    ids = next(line for line in f if line.startswith("Uid:")).split()[1:]
                if str(uid) in ids:
                    os.kill(int(pid), signal.SIGKILL)
            except (FileNotFoundError, ProcessLookupError, StopIteration):
                pass


class _Seen(list):
    samples = 0


@contextlib.contextmanager
def processes_seen():
    """A list that fills, while the block runs, with what `ps -eo args` and
    every /proc/PID/environ show, sampled every 20 ms: where a secret must
    never be.  Each line of ps and each environ once: kept whole, a sample
    of a busy machine's hundreds of processes every 20 ms filled 23 GB in a
    deployment that hung.  Its `samples` counts the samples taken."""
    stop, seen, known = threading.Event(), _Seen(), set()

    def keep(blob):
        if blob not in known:
            known.add(blob)
            seen.append(blob)

    def sample():
        while not stop.is_set():
            ps = subprocess.run(["ps", "-eo", "args"], capture_output=True).stdout
            for line in ps.splitlines():
                keep(line)
            for pid in os.listdir("/proc"):
                if pid.isdigit():
                    try:
                        keep(open(f"/proc/{pid}/environ", "rb").read())
                    except OSError:
                        pass
            seen.samples += 1
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield seen
    finally:
        stop.set()
        sampler.join()


@contextlib.contextmanager
def sudo_password_known(password, designator="pw@lab", asked=None):
    """While the block runs, a data source (in memory: the password is in no
    file) has the sudo password of DESIGNATOR (`[:sudo :from DESIGNATOR]`).
    ASKED, a list, gets (designator, on the main thread?) each time it is
    asked for the password."""
    import hy  # noqa: F401
    import consfig.data.items as data
    from consfig.connections.sudo import password_item
    item = tuple(password_item(designator))

    class Known(data.DataSource):
        secret_only = True

        def version(self, iden1, iden2):
            return "1" if (iden1, iden2) == item else None

        def fetch(self, iden1, iden2):
            if asked is not None:
                asked.append((designator, threading.current_thread() is threading.main_thread()))
            return data.Secret(password)

    source = Known()
    data.register_data_source(source)
    try:
        yield source
    finally:
        data.forget_data_source(source)


def _alive(pid):
    return os.path.exists(f"/proc/{pid}")


def _stale(name, pattern):
    """Whether NAME, matching PATTERN whose first group is a pid, belongs to
    a lab whose session no longer runs."""
    m = re.fullmatch(pattern, name)
    return bool(m) and not _alive(int(m.group(1)))


def remove_stale_labs():
    """Remove what the labs of sessions that no longer run (killed, so their
    teardown never ran) left behind: their sshd, working directory, sudoers
    files, users and homes.  Left there, a stale sudoers rule would keep
    granting root to a user nobody watches."""
    for root in glob.glob(os.path.join(tempfile.gettempdir(), ROOT_PREFIX + "*")):
        if _stale(os.path.basename(root), re.escape(ROOT_PREFIX) + r"(\d+)-\w+"):
            _kill_processes_naming(os.path.join(root, "sshd_config"))
            shutil.rmtree(root, ignore_errors=True)
    for path in glob.glob(SUDOERS_PREFIX + USER_PREFIX + "*"):
        if _stale(path, re.escape(SUDOERS_PREFIX + USER_PREFIX) + r"(\d+)[ab]"):
            # Another worker's lab, starting at the same time, may have
            # removed it first.
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
    for entry in pwd.getpwall():
        if _stale(entry.pw_name, re.escape(USER_PREFIX) + r"(\d+)[ab]"):
            _kill_processes_of(entry.pw_uid)
            subprocess.run(["userdel", "--remove", entry.pw_name], capture_output=True,
                           timeout=60)


def _kill_processes_naming(word):
    """Kill, by pid, the processes whose command line has WORD."""
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if word.encode() in f.read():
                        os.kill(int(pid), signal.SIGKILL)
            except (FileNotFoundError, ProcessLookupError):
                pass


def _why_no_lab():
    if os.geteuid() != 0:
        return "the SSH lab needs root (to add users and sudoers rules)"
    for tool in [SSHD, "ssh-keygen", "sudo", "useradd"]:
        if not shutil.which(tool):
            return f"the SSH lab needs {tool}, which is not installed"
    return None


@pytest.fixture(scope="session")
def sshlab():
    why = _why_no_lab()
    if why:
        unavailable(why)
    remove_stale_labs()
    # Not under pytest's private temporary directory: sshd reads a user's
    # authorized keys as that user, who must be able to reach them.
    root = tempfile.mkdtemp(prefix=f"{ROOT_PREFIX}{os.getpid()}-")
    os.chmod(root, 0o755)
    lab = Lab(root)
    try:
        lab.setup()
    except (RuntimeError, subprocess.SubprocessError, OSError) as e:
        lab.teardown()
        unavailable(f"sshd cannot run here: {e}")
    yield lab
    lab.teardown()
