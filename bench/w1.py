"""Benchmark W1: one directory plus N files of fixed content, deployed to the
loopback SSH lab (tests/sshlab.py) as root.

    sudo python3 bench/w1.py [--runs 5] [--sizes 100,1000]
                             [--pyinfra /path/to/venv/bin/pyinfra]
                             [--against /path/to/other/venv/bin/consfig]

Measures, in one run against one sshd, the median over --runs of:

  floor       ssh -F CONFIG lab sudo python3 -c pass   (OpenSSH's client)
  first-ever  [[:ssh …] :sudo :python], the target's bundle cache empty
              (the controller's compiled-bundle cache warm: see --cold-controller)
  cold        the same, files absent, bundle cached on the target
  warm        the same, nothing to change
  posix       W1 N=100 over [[:ssh …] :sudo], cold and warm, and the SSH
              round trips (commands run) per property
  consfig     the whole `consfig deploy --consfig SITE lab` command (a site
              consfig written out with the W1 host), W1 N=100 warm, each run
              next to a run of the floor: with Python's bytecode cache (as
              usual; the target: within 0.25 s of the floor) and with
              PYTHONDONTWRITEBYTECODE=1 and no cache (everything compiled
              every time, as on a machine that sets it and never wrote one);
              with --against, another install's command in the same turns
              (the code before a change, beside the code after it)
  pyinfra     pyinfra 3.x, W1 N=100 warm, over the same server (if --pyinfra
              names its command: install it in a venv of its own, it is no
              dependency of consfig's)

consfig's figures are the wall time of one deploy* call made in this
process, with the rich reporter rendering to /dev/null, connecting afresh
each time; "process" figures are a whole `python3` process importing consfig
and deploying (bytecode cached outside the tree).  Needs root: the lab adds
two users and a sudoers rule, removed at the end.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import hy  # noqa: E402,F401
import sshlab  # noqa: E402
from hy.models import Keyword as K  # noqa: E402

import consfig.deployer.deployment  # noqa: E402
import consfig.python_hop.bundle as bundle  # noqa: E402
from consfig.connections.ssh import SSHConnection  # noqa: E402
from consfig.model.host import Host  # noqa: E402
from consfig.model.property import find_property  # noqa: E402

deploy = getattr(consfig.deployer.deployment, hy.mangle("deploy*"))
TARGET = "/var/tmp/consfig-bench-w1"
CONTENT = "fixed content\n"


def w1(n):
    fp = find_property
    return Host("lab.example", fp("consfig.combinators.seqprops")(
        fp("consfig.props.file.directory-exists")(TARGET),
        *[fp("consfig.props.file.has-content")(f"{TARGET}/f{i}", CONTENT) for i in range(n)]))


def chains(config):
    ssh = [K("ssh"), K("host"), "lab", K("config"), config]
    return [ssh, K("sudo"), K("python")], [ssh, K("sudo")]


def reporter():
    from rich.console import Console
    from consfig.deployer.report import Reporter
    return Reporter(console=Console(file=open(os.devnull, "w"), highlight=False))


def timed(chain, host, expect):
    failures = []
    render = reporter()

    def sink(event):
        if event.get("message"):
            failures.append(f"{event.get('desc')}: {event['message']}")
        render(event)

    started = time.perf_counter()
    outcome = deploy(chain, host, sink=sink)
    elapsed = time.perf_counter() - started
    if outcome.status != expect:
        raise SystemExit(f"expected {expect}, got {outcome.status} over {chain}:\n"
                         + "\n".join(failures[:5]))
    return elapsed


def clear_files():
    shutil.rmtree(TARGET, ignore_errors=True)


def clear_target_cache():
    # The target user is root (:sudo), whose cache sudo does not redirect.
    shutil.rmtree(os.path.expanduser("~root/.cache/consfig/bundles"), ignore_errors=True)


def clear_controller_cache():
    shutil.rmtree(os.path.join(os.path.dirname(bundle.cache_directory()), "compiled"),
                  ignore_errors=True)


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def floor(lab, runs):
    out = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(["ssh", "-F", lab.config, "lab", "sudo python3 -c pass"], check=True)
        out.append(time.perf_counter() - started)
    return median(out)


def measure_python(chain, n, runs):
    first, cold, warm = [], [], []
    for _ in range(runs):
        clear_files()
        clear_target_cache()
        first.append(timed(chain, w1(n), "changed"))
        clear_files()
        cold.append(timed(chain, w1(n), "changed"))
        warm.append(timed(chain, w1(n), "no-change"))
    return median(first), median(cold), median(warm)


def count_round_trips(chain, n):
    calls = [0]
    original = SSHConnection.run_script

    def counting(self, *args, **kwargs):
        calls[0] += 1
        return original(self, *args, **kwargs)

    SSHConnection.run_script = counting
    try:
        timed(chain, w1(n), "no-change")
    finally:
        SSHConnection.run_script = original
    return calls[0]


def measure_posix(chain, n, runs):
    cold, warm = [], []
    for _ in range(runs):
        clear_files()
        cold.append(timed(chain, w1(n), "changed"))
        warm.append(timed(chain, w1(n), "no-change"))
    return median(cold), median(warm), count_round_trips(chain, n)


CHILD = """
import os, sys, time
import hy
from hy.models import Keyword as K
sys.path.insert(0, {bench!r})
import w1
chain = w1.chains({config!r})[0]
status = w1.deploy(chain, w1.w1({n}), sink=w1.reporter()).status
assert status == "no-change", status
"""


SITE = """(require consfig *)
(import consfig *)
(use-props consfig.props [file])

(defhost lab.example {{:deploy [[:ssh :host "lab" :config {config}] :sudo :python]}}
  "W1: a directory and {n} files of fixed content."
  (file.directory-exists {target})
{files})
"""


def write_site(path, config, n):
    """A site consfig whose host lab.example is W1 of N files, written out
    property by property as a site would be."""
    q = json.dumps  # a JSON string is a Hy string
    files = "\n".join(f"  (file.has-content {q(f'{TARGET}/f{i}')} {q(CONTENT)})" for i in range(n))
    with open(path, "w") as f:
        f.write(SITE.format(config=q(config), n=n, target=q(TARGET), files=files))
    return path


def consfig_command():
    """`consfig` as installed next to this Python (python -m consfig if not)."""
    script = os.path.join(os.path.dirname(sys.executable), "consfig")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "consfig"]


def clear_bytecode(site):
    """The site consfig's compiled code, and consfig's own where it is
    compiled at run time (an editable install, a checkout): never what an
    install carries (its wheel's bytecode, part of its install record), so
    that "PYTHONDONTWRITEBYTECODE=1" measures an install as its users run it."""
    import consfig.connections
    import consfig.props
    roots = [os.path.dirname(site)]
    for path in [*consfig.__path__, *consfig.props.__path__, *consfig.connections.__path__]:
        if "site-packages" not in path.split(os.sep):
            roots.append(path)
    for root in roots:
        for d, dirs, _ in os.walk(root):
            if "__pycache__" in dirs:
                shutil.rmtree(os.path.join(d, "__pycache__"), ignore_errors=True)


def measure_cli(lab, site, runs, write_bytecode, against=()):
    """Whole-process `consfig deploy --consfig SITE lab` (W1 warm) and the
    floor, run in turns so that both see the same load: their medians.
    WRITE_BYTECODE: with PYTHONDONTWRITEBYTECODE unset (Python caches the
    compiled modules, the site consfig too, as usual) or set (nothing is
    cached: every module compiled every time, as on a machine that sets it
    and never wrote a cache).  AGAINST: other `consfig` commands (another
    install: the code before a change), each run in the same turns; their
    medians follow.  Each command's figure is a pair: the median wall time,
    and the median CPU time the command's process used on the controller."""
    env = dict(os.environ)
    env.pop("PYTHONPYCACHEPREFIX", None)
    if write_bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    clear_bytecode(site)
    commands = [consfig_command(), *([c] for c in against)]
    # Each install its own copy of the site: a site's cached bytecode is
    # valid only for the consfig that compiled it, and one shared file
    # would be compiled again at every turn.
    sites = [site]
    for i in range(len(against)):
        os.makedirs(os.path.join(os.path.dirname(site), f"against{i}"), exist_ok=True)
        sites.append(shutil.copy(site, os.path.join(os.path.dirname(site), f"against{i}")))
    for command, s in zip(commands, sites):  # converges, caches
        subprocess.run(command + ["deploy", "--consfig", s, "lab"], env=env, check=True,
                       capture_output=True)
    floors, times, cpus = [], [[] for _ in commands], [[] for _ in commands]
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(["ssh", "-F", lab.config, "lab", "sudo python3 -c pass"], check=True)
        floors.append(time.perf_counter() - started)
        for command, s, whole, cpu in zip(commands, sites, times, cpus):
            started, used = time.perf_counter(), _children_cpu()
            r = subprocess.run(command + ["deploy", "--consfig", s, "lab"], env=env,
                               capture_output=True, text=True)
            whole.append(time.perf_counter() - started)
            cpu.append(_children_cpu() - used)
            if r.returncode != 0 or "No changes" not in r.stdout:
                raise SystemExit(f"{command[0]} deploy: exit {r.returncode}\n"
                                 f"{r.stdout[-2000:]}{r.stderr[-2000:]}")
    if not write_bytecode:
        for s in sites:
            clear_bytecode(s)
    return median(floors), *[(median(t), median(c)) for t, c in zip(times, cpus)]


def _children_cpu():
    """CPU seconds (user and system) of the child processes waited for so
    far: what a command cost the controller, whatever else loads the machine."""
    import resource
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def measure_process(lab, n, runs):
    env = dict(os.environ, PYTHONPYCACHEPREFIX=os.path.join(tempfile.gettempdir(), "consfig-bench-pyc"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    code = CHILD.format(bench=HERE, config=lab.config, n=n)
    # From /, not from a checkout: `-c` puts the current directory first on
    # the path, and a checkout's consfig would be measured instead of the
    # install's (and, without its connections/ mapped, not found whole).
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd="/")  # caches bytecode
    out = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd="/")
        out.append(time.perf_counter() - started)
    return median(out)


PYINFRA_DEPLOY = """
from io import StringIO
from pyinfra.operations import files
files.directory(name="w1 directory", path={target!r}, present=True)
for i in range({n}):
    files.put(name=f"w1 file {{i}}", src=StringIO({content!r}), dest=f"{target}/f{{i}}")
"""

PYINFRA_INVENTORY = """
lab = [("127.0.0.1", {{"ssh_port": {port}, "ssh_user": {user!r}, "ssh_key": {key!r},
                      "ssh_known_hosts_file": {known!r}}})]
"""


def measure_pyinfra(command, lab, n, runs, workdir):
    deploy_py = os.path.join(workdir, "w1_deploy.py")
    inventory = os.path.join(workdir, "w1_inventory.py")
    with open(deploy_py, "w") as f:
        f.write(PYINFRA_DEPLOY.format(target=TARGET, n=n, content=CONTENT))
    with open(inventory, "w") as f:
        f.write(PYINFRA_INVENTORY.format(port=lab.port, user=lab.user, key=lab.client_key,
                                         known=lab.known_hosts))
    argv = [command, "-y", "--sudo", inventory, deploy_py]
    clear_files()
    r = subprocess.run(argv, capture_output=True, cwd=workdir)  # converge
    if r.returncode != 0:
        raise SystemExit(f"pyinfra failed:\n{r.stdout.decode()[-3000:]}\n{r.stderr.decode()[-3000:]}")
    out = []
    for _ in range(runs):
        started = time.perf_counter()
        r = subprocess.run(argv, capture_output=True, cwd=workdir)
        out.append(time.perf_counter() - started)
        if r.returncode != 0:
            raise SystemExit(f"pyinfra failed:\n{r.stdout.decode()[-3000:]}\n{r.stderr.decode()[-3000:]}")
    return median(out)


def with_sftp(lab):
    """Serve the lab from an sshd that also offers SFTP, which pyinfra uploads
    files with, and point the lab's ssh_config at it: every figure comes from
    that one server."""
    with open(lab.sshd_config, "a") as f:
        f.write("Subsystem sftp internal-sftp\n")
    server = lab.start_sshd()
    key = open(lab.host_key + ".pub").read().split()
    lab.known_hosts = os.path.join(lab.root, "known_hosts_bench")
    with open(lab.known_hosts, "w") as f:
        f.write(f"[127.0.0.1]:{server.port} {key[0]} {key[1]}\n")
    lab.port = server.port
    lab.write_config(lab.config, server.port, known_hosts=lab.known_hosts)


def row(label, value, floor_s, limit=None):
    over = value - floor_s
    verdict = ""
    if limit is not None:
        verdict = f"  target floor+{limit:g} s: {'met' if over <= limit else 'MISSED'}"
    return f"  {label:<44} {value:7.3f} s   floor+{over:6.3f} s{verdict}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--sizes", default="100,1000")
    ap.add_argument("--pyinfra", help="the pyinfra command (3.x) to compare with")
    ap.add_argument("--no-posix", action="store_true")
    ap.add_argument("--against", action="append", default=[], metavar="CONSFIG",
                    help="another install's consfig command, measured in turn with this one "
                         "(whole process, bytecode cached): before and after a change")
    ap.add_argument("--cold-controller", action="store_true",
                    help="also measure one first-ever deploy with the controller's cache empty")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if os.geteuid() != 0:
        raise SystemExit("the benchmark needs root: it sets up the SSH lab (users, sudoers)")

    workdir = tempfile.mkdtemp(prefix="consfig-bench-")
    os.chmod(workdir, 0o755)
    lab = sshlab.Lab(workdir)
    lab.setup()
    with_sftp(lab)
    lines = Lines()
    try:
        py_chain, posix_chain = chains(lab.config)
        if args.cold_controller:
            clear_files()
            clear_target_cache()
            clear_controller_cache()
            both_cold = timed(py_chain, w1(sizes[0]), "changed")
        else:
            clear_files()  # left by an earlier run that did not finish
        timed(py_chain, w1(sizes[0]), "no-change" if args.cold_controller else "changed")
        base = floor(lab, args.runs)
        lines.append(f"W1 = file.directory-exists + N x file.has-content, to {TARGET} "
                     f"over loopback sshd, median of {args.runs}")
        lines.append(f"  {'floor: ssh lab sudo python3 -c pass':<44} {base:7.3f} s")
        limits = {100: {"first-ever": 1.5, "cold": 0.4, "warm": 0.3}, 1000: {"warm": 1.0}}
        for n in sizes:
            first, cold, warm = measure_python(py_chain, n, args.runs)
            lim = limits.get(n, {})
            lines.append(f"[[:ssh …] :sudo :python], N={n}")
            lines.append(row("first-ever (target cache empty)", first, base, lim.get("first-ever")))
            lines.append(row("cold (files absent)", cold, base, lim.get("cold")))
            lines.append(row("warm (nothing to change)", warm, base, lim.get("warm")))
            if n == sizes[0]:
                warm_100 = warm
        if args.cold_controller:
            lines.append(row(f"first-ever N={sizes[0]}, controller cache empty too", both_cold, base))
        process = measure_process(lab, sizes[0], args.runs)
        lines.append(row(f"warm N={sizes[0]}, as a whole python3 process", process, base))
        site = write_site(os.path.join(workdir, "w1site.hy"), lab.config, sizes[0])
        for write_bytecode in [True, False]:
            against = args.against if write_bytecode else []
            cli_floor, cli, *others = measure_cli(lab, site, args.runs, write_bytecode, against)
            lines.append(f"`consfig deploy` W1 N={sizes[0]} warm, whole process, floor measured in turn"
                         + ("" if write_bytecode else ", PYTHONDONTWRITEBYTECODE=1 (no bytecode cache)"))
            lines.append(f"  {'floor: ssh lab sudo python3 -c pass':<44} {cli_floor:7.3f} s")
            lines.append(row("consfig deploy --consfig SITE lab", cli[0],
                             cli_floor, 0.25 if write_bytecode else None))
            for command, other in zip(against, others):
                lines.append(row(f"{command} deploy …", other[0], cli_floor, 0.25))
            if against:
                lines.append(f"  {'controller CPU of consfig deploy (this one)':<44} {cli[1]:7.3f} s")
                for command, other in zip(against, others):
                    lines.append(f"  {'controller CPU of ' + command:<44} {other[1]:7.3f} s")
        if not args.no_posix:
            cold, warm, trips = measure_posix(posix_chain, 100, args.runs)
            lines.append("[[:ssh …] :sudo] (POSIX: every check and write a command), N=100")
            lines.append(row("cold", cold, base))
            lines.append(row("warm", warm, base))
            lines.append(f"  {'round trips per property (warm)':<44} {trips / 101:7.2f}"
                         f"   ({trips} commands for 101 properties; target <= 2: "
                         f"{'met' if trips / 101 <= 2 else 'MISSED'})")
        if args.pyinfra:
            pi = measure_pyinfra(args.pyinfra, lab, 100, args.runs, workdir)
            version = subprocess.run([args.pyinfra, "--version"], capture_output=True,
                                     text=True).stdout.strip()
            lines.append(f"{version}, W1 N=100 warm, --sudo, same server")
            lines.append(f"  {'pyinfra':<44} {pi:7.3f} s   "
                         f"consfig is {pi / warm_100:.0f}x faster in-process, "
                         f"{pi / process:.0f}x as a whole process (target >= 20x)")
    finally:
        clear_files()
        lab.teardown()
        shutil.rmtree(workdir, ignore_errors=True)



class Lines(list):
    """The table, printed a line at a time as it is measured."""

    def append(self, line):
        super().append(line)
        print(line, flush=True)


if __name__ == "__main__":
    main()
