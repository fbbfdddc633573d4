"""The real thing, end to end: docs/dataspace.md's fleet (an nginx load
balancer and three web servers) as four booted systemd-nspawn containers,
each kept by its own `consfig converge HOST` over [[:nspawn …] :python], on
a three-member etcd on the host's loopback.  The site is the documented
one, with ports and machine names of the test's own.

Cheap by construction: the containers' tree is unpacked from the cached
test chroot and given its packages once; each container is an overlay on
it; they boot, and their agents start, in parallel.  Every wait is on a
condition, with a bound."""

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

import hy  # noqa: F401

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "converge"))
sys.path.insert(0, os.path.join(HERE, "..", "props"))
sys.path.insert(0, os.path.join(HERE, "..", "ui"))

from agentcli import Converging  # noqa: E402
from clirun import REPO  # noqa: E402
from etcdlab import EtcdCluster, free_ports  # noqa: E402
from harness import unavailable, wait_until  # noqa: E402
from proptest import ensure_tarball, keep_debs, remove_tree, unpack  # noqa: E402

from consfig.connections.nspawn import RUN_DIR, enter_argv  # noqa: E402

pytestmark = pytest.mark.slow

TTL = 3
HOSTS = ["lb", "web1", "web2", "web3"]
BACKENDS = HOSTS[1:]
# What the machines' tree holds besides the test chroot (curl runs on the
# host, whose network the containers share).
PACKAGES = ["systemd", "dbus", "python3", "nginx-light"]


def documented_site():
    text = (REPO / "docs" / "dataspace.md").read_text()
    section = text.split("## A fleet, end to end\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```hy\n(.*?)```", section, re.S).group(1)


def run(*argv, timeout=120, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)


class Machine:
    """A container booted by the test, as a hypervisor would: systemd-nspawn
    --boot on an overlay of the shared tree, its PID where consfig's
    `:nspawn` hop looks for a container it did not boot through machined."""

    def __init__(self, name, root):
        self.name = name
        self.root = root
        self.proc = None

    def boot(self):
        os.makedirs(RUN_DIR, mode=0o700, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k != "CONSFIG_DEPLOYMENT"}
        with open(os.path.join(str(self.root) + ".console"), "ab") as console:
            self.proc = subprocess.Popen(
                ["systemd-nspawn", "--quiet", "--boot", "--register=no", "--keep-unit",
                 f"--machine={self.name}", f"--directory={self.root}"],
                stdin=subprocess.DEVNULL, stdout=console, stderr=console, env=env,
                start_new_session=True)
        pid_file = os.path.join(RUN_DIR, f"{self.name}.pid")
        with open(pid_file + ".new", "w") as f:
            f.write(f"{self.proc.pid}\n")
        os.replace(pid_file + ".new", pid_file)

    def booted(self):
        r = run(*enter_argv(self.name, ["sh", "-c", "test -S /run/systemd/private && "
                                        "timeout 60 systemctl is-system-running --wait"]),
                timeout=90)
        return r.stdout.strip() in ("running", "degraded")

    def stop(self):
        """Power it off (systemd-nspawn asks its systemd to), killed if it
        takes longer than 30 s."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        try:
            os.unlink(os.path.join(RUN_DIR, f"{self.name}.pid"))
        except FileNotFoundError:
            pass


def build_tree(parent):
    """The machines' shared tree: the cached test chroot with PACKAGES
    installed (from the cached .debs), and no default nginx site, which
    would take port 80 of the host's network in each of them."""
    try:
        tarball = ensure_tarball()
    except (RuntimeError, subprocess.SubprocessError, OSError) as e:
        unavailable(f"no Debian chroot for tests: {e}")
    base = unpack(tarball, parent)
    try:
        r = run("systemd-nspawn", "--quiet", "--register=no", "--keep-unit", "-D", str(base),
                "-E", "DEBIAN_FRONTEND=noninteractive", "sh", "-c",
                # No fsync for each file: a tree that lives for one module.
                'i() { apt-get -o DPkg::Lock::Timeout=300 -o DPkg::Options::=--force-unsafe-io '
                'install -y -q --no-install-recommends "$@"; }; i "$@" || { apt-get update -q && i "$@"; }',
                "sh", *PACKAGES, timeout=900)
        if r.returncode != 0:
            unavailable(f"could not install {PACKAGES} in the machines' tree: "
                        f"{(r.stdout + r.stderr)[-2000:]}")
        keep_debs(base, tarball)
        os.unlink(base / "etc/nginx/sites-enabled/default")
        return base
    except BaseException:
        remove_tree(base)
        raise


class Fleet:
    def __init__(self, tmp, etcd, machines, site, ports):
        self.tmp = tmp
        self.etcd = etcd
        self.machines = machines
        self.site = site
        self.ports = ports
        self.agents = {}
        self.every_agent = []

    def host(self, short):
        return f"{short}.example.org"

    def start_agent(self, short):
        self.agents[short] = Converging(self.tmp, "--consfig", self.site, self.host(short),
                                        wait_watching=False, name=f"{short}-{time.monotonic_ns()}")
        self.every_agent.append(self.agents[short])
        return self.agents[short]

    def watching(self, short):
        a = self.agents[short]
        assert not a.ended(), f"{short}'s agent ended: {a.stderr()[-3000:]}"
        return a.of("watching")

    def upstream(self):
        """The balancer's nginx site, as its agent last wrote it."""
        try:
            return (self.machines["lb"].root / "etc/nginx/sites-available/balancer").read_text()
        except FileNotFoundError:
            return ""

    def curl(self):
        """One request through the balancer: (status, X-Upstream, body)."""
        r = run("curl", "-sS", "--max-time", "5", "-D", "-",
                f"http://127.0.0.1:{self.ports['lb']}/", timeout=30)
        if r.returncode != 0:
            return (None, None, r.stderr)
        # Text mode reads curl's CRLFs as newlines.
        head, _, body = r.stdout.partition("\n\n")
        status = int(head.split()[1])
        tried = re.search(r"^X-Upstream: (.*)$", head, re.M | re.I)
        return (status, tried.group(1).strip() if tried else "", body)

    def reloading(self):
        """Whether the balancer's nginx still runs workers of its previous
        configuration: a reload (`nginx -s reload`) returns before they
        have finished, and until then one may take a request."""
        root = str(self.machines["lb"].root)
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    title = f.read()
                if (title.startswith(b"nginx: worker process is shutting down")
                        and os.readlink(f"/proc/{pid}/root") == root):
                    return True
            except OSError:
                continue
        return False

    def round(self):
        """As many requests through the balancer as there are backends."""
        return [self.curl() for _ in BACKENDS]

    def port_of(self, short):
        return f"127.0.0.1:{self.ports[short]}"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    if os.geteuid() != 0:
        unavailable("booting containers needs root")
    if not shutil.which("systemd-nspawn"):
        unavailable("systemd-nspawn is not installed (apt-get install systemd-container)")
    tmp = tmp_path_factory.mktemp("fleet")
    started = time.monotonic()
    mounted, machines, marks = [], {}, []
    base = None
    fleet = None
    etcd = EtcdCluster(tmp / "etcd", members=3)
    try:
        for i in range(3):
            etcd.start(i)
        base = build_tree(tmp)
        marks.append(f"tree {time.monotonic() - started:.1f} s")
        for short in HOSTS:
            name = f"cf8{short}{os.getpid()}"
            layer = tmp / name
            for d in ("upper", "work", "root"):
                (layer / d).mkdir(parents=True)
            r = run("mount", "-t", "overlay", "overlay", "-o",
                    f"lowerdir={base},upperdir={layer / 'upper'},workdir={layer / 'work'}",
                    str(layer / "root"))
            if r.returncode != 0:
                unavailable(f"no overlay file system here: {r.stderr}")
            mounted.append(layer / "root")
            machines[short] = Machine(name, layer / "root")
        for m in machines.values():
            m.boot()
        etcd.wait_healthy()
        ports = dict(zip(HOSTS, free_ports(len(HOSTS))))
        site = documented_site()
        site = site.replace('"http://127.0.0.1:2379" "http://127.0.0.1:22379" "http://127.0.0.1:32379"',
                            " ".join(f'"{e}"' for e in etcd.endpoints))
        site = site.replace("(balancer 8080 ", f"(balancer {ports['lb']} ")
        for short, default in zip(HOSTS, (8080, 8081, 8082, 8083)):
            site = site.replace(f':machine "{short}"]', f':machine "{machines[short].name}"]')
            site = site.replace(f'"127.0.0.1" {default})', f'"127.0.0.1" {ports[short]})')
        assert f"(balancer {ports['lb']} ?backends)" in site, site
        (tmp / "site.hy").write_text(site)
        fleet = Fleet(tmp, etcd, machines, tmp / "site.hy", ports)
        for m in machines.values():
            wait_until(m.booted, 120, f"the container {m.name} to boot")
        marks.append(f"booted {time.monotonic() - started:.1f} s")
        for short in HOSTS:
            fleet.start_agent(short)
        for short in HOSTS:
            wait_until(lambda: fleet.watching(short), 300, f"{short}'s agent to watch")
        marks.append(f"agents watching {time.monotonic() - started:.1f} s")
        yield fleet
    finally:
        for a in fleet.every_agent if fleet else []:
            if not a.ended():
                a.proc.send_signal(signal.SIGINT)
        for a in fleet.every_agent if fleet else []:
            a.__exit__(None, None, None)
        stoppers = [threading.Thread(target=m.stop) for m in machines.values()]
        for s in stoppers:
            s.start()
        for s in stoppers:
            s.join(120)
        for root in mounted:
            if subprocess.run(["umount", str(root)]).returncode == 0:
                # The logs (root.console) stay with pytest's other files.
                for d in ("upper", "work", "root"):
                    shutil.rmtree(root.parent / d, ignore_errors=True)
        etcd.close()
        shutil.rmtree(tmp / "etcd", ignore_errors=True)
        if base is not None:
            remove_tree(base)
        # Measured with -s: where the module's time goes.
        print(f"\nthe fleet: {', '.join(marks)}; the module took {time.monotonic() - started:.1f} s",
              file=sys.stderr)


def test_curl_through_the_balancer_reaches_all_three_backends(fleet):
    wait_until(lambda: all(fleet.port_of(b) in fleet.upstream() for b in BACKENDS), 30,
               f"the balancer's upstream block to list the three backends: {fleet.upstream()!r}")
    seen = []

    def all_three():
        seen[:] = fleet.round() + fleet.round()
        return {body for _, _, body in seen} == {f"{b}.example.org\n" for b in BACKENDS}
    try:
        wait_until(all_three, 10, "curl through the balancer to reach the three backends")
    except AssertionError as e:
        raise AssertionError(f"{e}: {seen}") from None


def _dropped_within_the_lease(fleet, short):
    """Power SHORT's container off: within the lease's TTL and a second of
    its agent's end, the balancer has stopped sending to it, and no request
    fails, then or after."""
    gone = fleet.port_of(short)
    lb = fleet.agents["lb"]
    wait_until(lambda: gone in fleet.upstream(), 30, f"the upstream block to list {short}")
    applied = len(lb.of("applied"))
    answers = []

    def dropped():
        got = fleet.round()
        answers.extend(got)
        # Written, tested with nginx -t and reloaded (the set form's apply
        # is over), nginx's workers of before are gone, and a whole round
        # (which round-robin sends once to each backend listed) went
        # elsewhere.  A reload returns once nginx's master has its SIGHUP,
        # before it has read the new file: until then the old workers serve.
        return (gone not in fleet.upstream() and len(lb.of("applied")) > applied
                and not fleet.reloading() and not any(gone in tried for _, tried, _ in got)
                and time.time())
    # Powered off, not killed: its systemd stops its services, then sends
    # what remains (the agent) SIGTERM.  The agent's lease is renewed until
    # it ends; then the record lasts TTL seconds at most.
    stopper = threading.Thread(target=fleet.machines[short].stop)
    stopping, stopping_wall = time.monotonic(), time.time()
    stopper.start()
    try:
        dropped_wall = wait_until(dropped, 60, f"the balancer to drop {short}")
    finally:
        stopper.join(90)
    agent = fleet.agents[short]
    wait_until(agent.ended, 30, f"{short}'s agent to end with its container")
    [ended] = agent.of("stopped") or [None]
    assert ended, f"{short}'s agent was killed, not ended by the shutdown's SIGTERM: {agent.stderr()[-2000:]}"
    took = dropped_wall - ended["time"]
    assert took <= TTL + 1, \
        f"the balancer sent to {short} {took:.1f} s after its agent ended (TTL {TTL} s)"
    print(f"\n{short}: its agent ended {ended['time'] - stopping_wall:.2f} s into its container's "
          f"poweroff (which took {time.monotonic() - stopping:.2f} s); the balancer dropped it "
          f"{took:.2f} s after that, {dropped_wall - stopping_wall:.2f} s after the poweroff began",
          file=sys.stderr)
    # nginx passed each request meant for it on to the next backend.
    after = fleet.round() + fleet.round() + fleet.round()
    assert all(status == 200 for status, _, _ in answers + after), \
        f"a request failed: {[a for a in answers + after if a[0] != 200]}"
    assert not any(gone in tried for _, tried, _ in after), f"sent to {short} again: {after}"
    assert {body for _, _, body in after} == {f"{b}.example.org\n" for b in BACKENDS if b != short}, after


def _back(fleet, short):
    """Boot SHORT's container and start its agent again: the balancer sends
    to it again."""
    old = fleet.agents[short]
    wait_until(old.ended, 30, f"{short}'s first agent to end with its container")
    machine = fleet.machines[short]
    machine.boot()
    wait_until(machine.booted, 120, f"the container {machine.name} to boot again")
    fleet.start_agent(short)
    wait_until(lambda: fleet.watching(short), 300, f"{short}'s new agent to watch")
    wait_until(lambda: f"{short}.example.org\n" in {body for _, _, body in fleet.round()}, 30,
               f"curl through the balancer to reach {short} again")


# Each test leaves the fleet as it found it: pytest-xdist may run a file's
# tests on several workers, each with a fleet of its own.
def test_a_powered_off_backend_is_dropped_within_the_lease_and_booted_again_is_back(fleet):
    _dropped_within_the_lease(fleet, "web2")
    _back(fleet, "web2")


def test_with_one_etcd_member_down_the_fleet_goes_on(fleet):
    fleet.etcd.stop(0)
    try:
        _dropped_within_the_lease(fleet, "web3")
        _back(fleet, "web3")
    finally:
        fleet.etcd.start(0)
        fleet.etcd.wait_healthy()


def _said(agent, message):
    return [e for e in agent.of("dataspace") if e.get("message", "").startswith(message)]


def test_without_quorum_the_balancer_keeps_its_upstream_retracts_nothing_and_says_why(fleet):
    lb = fleet.agents["lb"]
    wait_until(lambda: all(fleet.port_of(b) in fleet.upstream() for b in BACKENDS), 30,
               "the upstream block to list the three backends")
    before = fleet.upstream()
    unavailable_before = len(_said(lb, "dataspace unavailable"))
    fleet.etcd.stop(0)
    fleet.etcd.stop(1)
    try:
        said = wait_until(lambda: _said(lb, "dataspace unavailable")[unavailable_before:], 3 * TTL,
                          "the balancer's agent to say the dataspace is unavailable")
        assert "127.0.0.1" in said[0]["message"], f"says which members and why: {said[0]}"
        assert fleet.upstream() == before, "the upstream block changed without quorum"
        answered = {body for _, _, body in fleet.round() + fleet.round()}
        assert answered == {f"{b}.example.org\n" for b in BACKENDS}, answered
        assert not lb.of("retracted"), lb.of("retracted")
        assert not lb.ended(), lb.stderr()[-3000:]
    finally:
        fleet.etcd.start(0)
        fleet.etcd.start(1)
        fleet.etcd.wait_healthy()
    wait_until(lambda: lb.of("dataspace")[-1].get("message") == "dataspace available", 30,
               "the balancer's agent to find the dataspace again")
    assert fleet.upstream() == before, \
        (f"the upstream block changed when quorum came back: {fleet.upstream()!r}; the balancer's "
         f"agent said {[(e.get('what'), e.get('message') or e.get('desc') or e.get('event')) for e in lb.events()[-14:]]}")
