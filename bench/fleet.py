"""Fleet benchmark: W1 (N=100 files) on many hosts at once, each host its own
sshd on a loopback port (tests/sshlab.py's lab: one lab user, one sshd
process per host) with a target directory of its own, deployed over
[[:ssh …] [:sudo :user U] :python].

The hosts are all this machine, where a deployment's lock (consfig.apply.lock) is
per target user: so each host sudoes to a user of its own (made here, like
the lab's), as many distinct machines would each have their own root —
each with its own bundle cache too.

    sudo python3 bench/fleet.py [--hosts 20] [--rss-hosts 100] [--latency-ms 25]
                                [--runs 3] [--pyinfra /path/to/venv/bin/pyinfra]

Measures, each deployment in a fresh python3 process that imports consfig
and calls deploy-hosts* (the time is that call's; the reporter renders with
rich, set up as on a terminal, to /dev/null), the median over --runs of:

  plain loopback   1 host; --hosts hosts with -j 1 and -j --hosts (the
                   speed-up; the 2 cores are shared by every target and the
                   controller, so hosts side by side compete for them)
  latency          the same through a loopback TCP proxy per sshd that
                   delays each direction by --latency-ms (a WAN, as netem
                   would; asyncio, in a process of its own): 1 host and
                   --hosts hosts side by side (the issue's target: at most
                   2x one host)
  bare starts      through the same proxies, 1 host and --hosts hosts each
                   doing only what every deployment's target must: an SSH
                   session, sudo, and starting /usr/bin/python3, which runs
                   `pass`, imports Hy, or imports what a warm W1 apply
                   imports; no consfig on either side.  What the ratio of
                   the hosts' times would be if consfig cost nothing more.
  machine CPU      the CPU the whole machine spent (/proc/stat) during the
                   deployment, and the proxy's share: on 2 cores, --hosts
                   targets' CPU / 2 is a bound on their time
  pyinfra          with --pyinfra (3.x): pyinfra deploying the same W1 warm
                   through the same proxies, 1 host and --hosts hosts with
                   --parallel --hosts (whole processes; sudo to root: its
                   handover to another user wants setfacl)
  peak RSS         the controller's peak resident memory deploying
                   --rss-hosts hosts (plain loopback, default -j, and
                   -j --rss-hosts)

"cold" is a deployment that writes every file; "warm" one that finds them
all in place.  Every process it starts is ended, and the lab removed, at
the end (also on ^C or SIGTERM); every wait is bounded.
"""

import argparse
import asyncio
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

TARGET = "/var/tmp/consfig-bench-fleet"
CONTENT = "fixed content\n"
FILES = 100
CHILD_TIMEOUT = 900
# What a target's Python imports before it applies anything (the bare
# starts): Hy alone, and what a warm W1 apply imports.
BARE_HY = "import sys; sys.path.insert(0, '{bundle}'); import hy"
BARE_APPLY = ("import sys; sys.path.insert(0, '{bundle}'); "
              "import hy, consfig.python_hop.target, consfig.props.file, consfig.apply.combinators")
READY_TIMEOUT = 30


# The delaying proxies (run as `fleet.py --proxy PORT,… --latency-ms N`: one
# proxy for each sshd port, on a port it prints)

async def _pipe(reader, writer, delay):
    # Each chunk leaves DELAY after it arrived, in order: latency without a
    # cap on throughput.
    queue = asyncio.Queue()

    async def send():
        while True:
            due, data = await queue.get()
            if data is None:
                break
            wait = due - asyncio.get_running_loop().time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        writer.close()

    sender = asyncio.create_task(send())
    try:
        while True:
            data = await reader.read(65536)
            await queue.put((asyncio.get_running_loop().time() + delay, data or None))
            if not data:
                break
    except (ConnectionError, OSError):
        await queue.put((0, None))
    try:
        await sender
    except (ConnectionError, OSError):
        pass


async def _serve_proxies(targets, delay):
    async def handler(target_port, client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", target_port), 10)
        except (OSError, asyncio.TimeoutError):
            client_writer.close()
            return
        await asyncio.gather(_pipe(client_reader, server_writer, delay),
                             _pipe(server_reader, client_writer, delay))

    # Each on a port the kernel picks, told to the parent: ports chosen
    # beforehand could be taken meanwhile.
    servers = [await asyncio.start_server(lambda r, w, t=target: handler(t, r, w),
                                          "127.0.0.1", 0)
               for target in targets]
    ports = [server.sockets[0].getsockname()[1] for server in servers]
    print("ready " + ",".join(map(str, ports)), flush=True)
    # Ends with its parent: stdin is a pipe from it.
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


def run_proxies(spec, latency_ms):
    asyncio.run(_serve_proxies([int(p) for p in spec.split(",")], latency_ms / 1000))


def machine_cpu():
    """Seconds of CPU the whole machine has spent busy (all cores, /proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal: all but idle and iowait.
    busy = sum(fields[:8]) - fields[3] - fields[4]
    return busy / os.sysconf("SC_CLK_TCK")


def process_cpu(pid):
    """Seconds of CPU process PID has spent (0 without one)."""
    if not pid:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# What bench/w1.py gives pyinfra, each host writing to its own directory.
PYINFRA_DEPLOY = """
from io import StringIO
from pyinfra import host
from pyinfra.operations import files
files.directory(name="w1 directory", path=host.data.target, present=True)
for i in range({n}):
    files.put(name=f"w1 file {{i}}", src=StringIO({content!r}), dest=f"{{host.data.target}}/f{{i}}")
"""


# The child: one deployment of several hosts, timed, with its peak RSS

def run_child(spec):
    import hy  # noqa: F401
    from hy.models import Keyword as K
    from rich.console import Console

    import consfig.deployer.fleet
    from consfig.model.host import Host
    from consfig.model.property import find_property
    from consfig.deployer.report import Reporter

    deploy_hosts = getattr(consfig.deployer.fleet, hy.mangle("deploy-hosts*"))
    fp = find_property
    hosts = []
    for i, (port, user) in enumerate(zip(spec["ports"], spec["users"])):
        d = f"{TARGET}/h{i}"
        hosts.append(Host(f"h{i}.fleet.example", fp("consfig.combinators.seqprops")(
            fp("consfig.props.file.directory-exists")(d),
            *[fp("consfig.props.file.has-content")(f"{d}/f{j}", CONTENT)
              for j in range(FILES)]),
            deploy=[[K("ssh"), K("host"), "lab", K("config"), spec["config"], K("port"), port],
                    [K("sudo"), K("user"), user], K("python")]))
    times = {}
    for label in ["cold", "warm"]:
        if label == "cold":
            for i in range(len(hosts)):
                shutil.rmtree(f"{TARGET}/h{i}", ignore_errors=True)
        cpu = resource.getrusage(resource.RUSAGE_SELF)
        machine, proxy = machine_cpu(), process_cpu(spec.get("proxy"))
        # rich, as `consfig deploy` on a terminal sets it up (report.hy).
        reporter = Reporter(console=Console(file=open(os.devnull, "w"), highlight=False,
                                            soft_wrap=True))
        started = time.perf_counter()
        outcomes = deploy_hosts(None, hosts, sink=reporter, jobs=spec["jobs"])
        times[label] = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_SELF)
        times[f"{label}_cpu"] = (after.ru_utime - cpu.ru_utime) + (after.ru_stime - cpu.ru_stime)
        times[f"{label}_machine"] = machine_cpu() - machine
        times[f"{label}_proxy"] = process_cpu(spec.get("proxy")) - proxy
        reporter.finish()
        want = "changed" if label == "cold" else "no-change"
        bad = [o for o in outcomes if o is None or o.status != want]
        if bad:
            raise SystemExit(f"{label}: expected {want}, got {bad}")
    print(json.dumps({**times, "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))


# The parent: the lab, the proxies, the measurements

class Fleet:
    def __init__(self, count, latency_ms):
        import sshlab
        self.sshlab = sshlab
        self.count = count
        self.latency_ms = latency_ms
        self.root = tempfile.mkdtemp(prefix="consfig-bench-fleet-")
        os.chmod(self.root, 0o755)
        self.lab = sshlab.Lab(self.root)
        self.proxy = None
        self.ports = []
        self.proxy_ports = []
        self.users = []

    def __enter__(self):
        return self

    def start(self):
        self.lab.setup()
        os.makedirs(TARGET, exist_ok=True)
        os.chmod(TARGET, 0o1777)
        for i in range(self.count):
            user = f"cfgfl{os.getpid()}u{i}"
            subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", user],
                           check=True, capture_output=True, timeout=60)
            self.users.append(user)
        # Every host's server offers SFTP too, which pyinfra uploads with
        # (--pyinfra): the lab's first server, started without it, is not one.
        with open(self.lab.sshd_config, "a") as f:
            f.write("Subsystem sftp internal-sftp\n")
        self.ports = [self.lab.start_sshd().port for _ in range(self.count)]
        if self.latency_ms:
            self.proxy = subprocess.Popen(
                [sys.executable, __file__, "--proxy", ",".join(map(str, self.ports)),
                 "--latency-ms", str(self.latency_ms)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            self.proxy_ports = self._wait_ready()
        key = open(self.lab.host_key + ".pub").read().split()
        known = os.path.join(self.root, "known_hosts_fleet")
        with open(known, "w") as f:
            for port in self.ports + self.proxy_ports:
                f.write(f"[127.0.0.1]:{port} {key[0]} {key[1]}\n")
        self.config = self.lab.write_config(os.path.join(self.root, "ssh_config_fleet"),
                                            self.lab.port, known_hosts=known)

    def _wait_ready(self):
        import select
        ready, _, _ = select.select([self.proxy.stdout], [], [], READY_TIMEOUT)
        line = self.proxy.stdout.readline().split() if ready else []
        if not line or line[0] != "ready":
            raise SystemExit("the latency proxy did not start")
        return [int(p) for p in line[1].split(",")]

    def deploy(self, count, jobs, proxied=False):
        ports = (self.proxy_ports if proxied else self.ports)[:count]
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        r = subprocess.run([sys.executable, __file__, "--child",
                            json.dumps({"ports": ports, "users": self.users[:count],
                                        "jobs": jobs, "config": self.config,
                                        "proxy": self.proxy.pid if proxied else None})],
                           capture_output=True, text=True, timeout=CHILD_TIMEOUT, env=env)
        if r.returncode != 0:
            raise SystemExit(f"deploying {count} hosts failed:\n{r.stdout}\n{r.stderr[-4000:]}")
        return json.loads(r.stdout.strip().splitlines()[-1])

    def floor(self, proxied=False):
        port = (self.proxy_ports if proxied else self.ports)[0]
        started = time.perf_counter()
        subprocess.run(["ssh", "-F", self.config, "-p", str(port), "lab", "sudo python3 -c pass"],
                       check=True, timeout=60)
        return time.perf_counter() - started

    def bare_starts(self, count, code):
        """COUNT hosts at once, through the proxies, each only starting its
        Python over SSH and sudo as a deployment does, to run CODE (which
        may name {bundle}, the host's cached consfig bundle): no consfig on
        either side.  Paramiko in threads, as consfig's controller.  The
        wall-clock time and the machine's CPU."""
        import paramiko
        known = os.path.join(self.root, "known_hosts_fleet")

        def start(port, user):
            client = paramiko.SSHClient()
            client.load_host_keys(known)
            client.connect("127.0.0.1", port=port, username=self.lab.user,
                           key_filename=self.lab.client_key, look_for_keys=False,
                           allow_agent=False, timeout=READY_TIMEOUT)
            try:
                script = code.format(bundle=self._bundle(user))
                _, out, _ = client.exec_command(
                    f"sudo -n -H -u {user} /usr/bin/python3 -E -S -c \"{script}\"")
                if out.channel.recv_exit_status() != 0:
                    raise SystemExit(f"{script} failed on port {port}")
            finally:
                client.close()

        threads = [threading.Thread(target=start, args=(self.proxy_ports[i], self.users[i]))
                   for i in range(count)]
        cpu, started = machine_cpu(), time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join(CHILD_TIMEOUT)
        return {"time": time.perf_counter() - started, "machine": machine_cpu() - cpu}

    def pyinfra(self, command, count, workdir):
        """pyinfra deploying W1 to COUNT hosts at once, through the proxies,
        with sudo to root (its handover to another user wants setfacl, which
        a target may lack): the seconds of its second run (warm), the whole
        process."""
        known = os.path.join(self.root, "known_hosts_fleet")
        deploy_py = os.path.join(workdir, "fleet_deploy.py")
        inventory = os.path.join(workdir, f"fleet_inventory_{count}.py")
        with open(deploy_py, "w") as f:
            f.write(PYINFRA_DEPLOY.format(n=FILES, content=CONTENT))
        with open(inventory, "w") as f:
            f.write("hosts = [\n")
            for i in range(count):
                f.write(f"    ({f'h{i}.fleet.example'!r}, "
                        f"{{'ssh_hostname': '127.0.0.1', 'ssh_port': {self.proxy_ports[i]}, "
                        f"'ssh_user': {self.lab.user!r}, 'ssh_key': {self.lab.client_key!r}, "
                        f"'ssh_known_hosts_file': {known!r}, '_sudo': True, "
                        f"'target': '{TARGET}/p{i}'}}),\n")
            f.write("]\n")
        argv = [command, "-y", "--parallel", str(count), inventory, deploy_py]
        times = []
        for _ in range(2):
            started = time.perf_counter()
            r = subprocess.run(argv, capture_output=True, cwd=workdir, timeout=CHILD_TIMEOUT)
            times.append(time.perf_counter() - started)
            if r.returncode != 0:
                raise SystemExit(f"pyinfra failed:\n{r.stdout.decode()[-3000:]}\n"
                                 f"{r.stderr.decode()[-3000:]}")
        return times[1]

    def _bundle(self, user):
        import pwd
        bundles = os.path.join(pwd.getpwnam(user).pw_dir, ".cache", "consfig", "bundles")
        return os.path.join(bundles, max(os.listdir(bundles),
                                         key=lambda b: os.stat(os.path.join(bundles, b)).st_mtime))

    def __exit__(self, *exc):
        if self.proxy:
            try:
                self.proxy.stdin.close()
                self.proxy.wait(timeout=10)
            except (subprocess.TimeoutExpired, OSError):
                self.proxy.kill()
                self.proxy.wait(timeout=10)
        self.lab.teardown()
        import pwd
        for user in self.users:
            self.sshlab._kill_processes_of(pwd.getpwnam(user).pw_uid)
            subprocess.run(["userdel", "--remove", user], capture_output=True, timeout=60)
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(TARGET, ignore_errors=True)


def median_of(runs, measure):
    results = [measure() for _ in range(runs)]
    return {k: statistics.median(r[k] for r in results) for k in results[0]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=20)
    ap.add_argument("--rss-hosts", type=int, default=100)
    ap.add_argument("--latency-ms", type=int, default=25)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--pyinfra", help="the pyinfra command (3.x) to compare with")
    ap.add_argument("--child")
    ap.add_argument("--proxy")
    args = ap.parse_args()
    if args.proxy:
        return run_proxies(args.proxy, args.latency_ms)
    if args.child:
        return run_child(json.loads(args.child))
    if os.geteuid() != 0:
        raise SystemExit("the benchmark needs root: it sets up the SSH lab (users, sudoers)")
    # ^C or a kill: end what we started on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    n = args.hosts
    with Fleet(max(n, args.rss_hosts), args.latency_ms) as fleet:
        fleet.start()
        # The controller's compiled bundle, and every target's bundle cache.
        fleet.deploy(max(n, args.rss_hosts), 10)
        out = print
        out(f"W1 N={FILES} per host over [[:ssh …] [:sudo :user U] :python], one sshd per host on "
            f"loopback, {os.cpu_count()} cores; median of {args.runs}; seconds")
        plain_floor = statistics.median(fleet.floor() for _ in range(args.runs))
        out(f"  floor (ssh lab sudo python3 -c pass), plain: {plain_floor:.3f}")
        one = median_of(args.runs, lambda: fleet.deploy(1, 1))
        seq = median_of(args.runs, lambda: fleet.deploy(n, 1))
        par = median_of(args.runs, lambda: fleet.deploy(n, n))
        out("plain loopback           cold     warm")
        out(f"  1 host               {one['cold']:7.3f}  {one['warm']:7.3f}")
        out(f"  {n} hosts, -j 1       {seq['cold']:7.3f}  {seq['warm']:7.3f}")
        out(f"  {n} hosts, -j {n}      {par['cold']:7.3f}  {par['warm']:7.3f}")
        out(f"  speed-up over -j 1    {seq['cold'] / par['cold']:6.2f}x  "
            f"{seq['warm'] / par['warm']:6.2f}x")
        out(f"  controller CPU, {n} hosts -j {n}: {par['cold_cpu']:.3f}  {par['warm_cpu']:.3f}"
            " (the rest of the cores' time is the targets')")
        out(f"  machine CPU, 1 host: {one['cold_machine']:.3f}  {one['warm_machine']:.3f}; "
            f"{n} hosts -j {n}: {par['cold_machine']:.3f}  {par['warm_machine']:.3f}")
        if args.latency_ms:
            lat_floor = statistics.median(fleet.floor(True) for _ in range(args.runs))
            out(f"through a proxy adding {args.latency_ms} ms each way "
                f"(floor {lat_floor:.3f})")
            lone = median_of(args.runs, lambda: fleet.deploy(1, 1, True))
            lpar = median_of(args.runs, lambda: fleet.deploy(n, n, True))
            out(f"  1 host               {lone['cold']:7.3f}  {lone['warm']:7.3f}")
            out(f"  {n} hosts, -j {n}      {lpar['cold']:7.3f}  {lpar['warm']:7.3f}")
            out(f"  {n} hosts / 1 host      {lpar['cold'] / lone['cold']:6.2f}x  "
                f"{lpar['warm'] / lone['warm']:6.2f}x   (target <= 2x)")
            out(f"  machine CPU, {n} hosts: {lpar['cold_machine']:.3f}  {lpar['warm_machine']:.3f}"
                f", of which the proxy {lpar['cold_proxy']:.3f}  {lpar['warm_proxy']:.3f}")
            out("the same hosts through the proxies, each only starting its Python over SSH and "
                "sudo (no consfig):")
            for label, code in [("python3 -c pass", "pass"),
                                ("python3 importing hy", BARE_HY),
                                ("python3 importing what a warm apply does", BARE_APPLY)]:
                lone = median_of(args.runs, lambda: fleet.bare_starts(1, code))
                lall = median_of(args.runs, lambda: fleet.bare_starts(n, code))
                out(f"  {label:42s} 1 host {lone['time']:.3f}, {n} hosts {lall['time']:.3f} "
                    f"({lall['time'] / lone['time']:.2f}x; machine CPU {lall['machine']:.2f})")
        if args.pyinfra and args.latency_ms:
            one_pi = fleet.pyinfra(args.pyinfra, 1, fleet.root)
            all_pi = fleet.pyinfra(args.pyinfra, n, fleet.root)
            out(f"pyinfra ({args.pyinfra}), the same W1 warm through the proxies, whole process:")
            out(f"  1 host {one_pi:.3f}, {n} hosts --parallel {n} {all_pi:.3f} "
                f"({all_pi / one_pi:.2f}x); consfig {n} hosts is {all_pi / lpar['warm']:.0f}x "
                "faster")
        m = args.rss_hosts
        from consfig.deployer.fleet import DEFAULT_JOBS
        for jobs in sorted({min(DEFAULT_JOBS, m), m}):
            r = fleet.deploy(m, jobs)
            out(f"{m} hosts, -j {jobs}: cold {r['cold']:.3f}, warm {r['warm']:.3f}; "
                f"controller peak RSS {r['maxrss_kib'] / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
