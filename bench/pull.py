"""Benchmark: what checking a signature costs a pulling host.

    python3 bench/pull.py [--runs 21] [--python /usr/bin/python3]

Measures, with a stand-in image (a zip application that writes one line)
published by `consfig.image.publish` and served from a loopback HTTP server:

  verify              the puller's `check_statement` on one signature file
                      (an `ssh-keygen -Y verify`), the median of --runs x 10
                      calls inside one process run by --python, as it is and
                      with -S (no site-packages, as on most hosts)
  pull unchanged      a whole puller process, as a host's timer starts it:
                      both GETs answered 304, the signature checked, the
                      image applied (median of --runs)
  pull new            the same with an empty state directory: both files
                      downloaded, checked, kept and applied

The pulls run under --python as it is and with -S.  Each figure is given
as wall-clock time and as CPU time (user + system, of the processes
measured and their children), which a busy machine disturbs less.
The figures before OpenSSH signatures came from this script as first
committed (git log bench/pull.py), which signed with consfig's own Ed25519
keys and checked with `cryptography`, or without it in pure Python.
"""

import argparse
import json
import os
import pathlib
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import hy  # noqa: F401,E402
from consfig.image import publish, puller  # noqa: E402
from imageserver import ImageServer, stand_in_image  # noqa: E402

HOST = "bench.pull.test"


def signing_key(scratch):
    """The key `publish` signs with, and what pull.json says to trust it."""
    publish.keygen(os.path.join(scratch, "key"))
    signer = publish.signing_key(os.path.join(scratch, "key"))
    signers = os.path.join(scratch, "allowed_signers")
    with open(signers, "w") as f:
        f.write(puller.allowed_signers([signer.line]))
    return signer, {"allowed-signers": signers}


def install_puller(lib):
    os.makedirs(lib)
    shutil.copyfile(pathlib.Path(puller.__file__).with_name("puller.py"),
                    os.path.join(lib, "puller.py"))


# Run by the host's Python from the puller's directory, so that it checks
# signatures with what the puller would use there.
VERIFY = """
import json, os, statistics, sys, time
import puller
sig = open(sys.argv[1], "rb").read()
config = json.load(open(sys.argv[2]))
ssh_keygen = puller.find_ssh_keygen()
times, n = [], int(sys.argv[3])
before = os.times()
for _ in range(n):
    started = time.perf_counter()
    puller.check_statement(sig, config["allowed-signers"], config["host"], ssh_keygen=ssh_keygen)
    times.append(time.perf_counter() - started)
after = os.times()
cpu = sum(after[:4]) - sum(before[:4])
print(statistics.median(times), cpu / n, ssh_keygen)
"""


def _children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def wall(argv, env):
    """`(wall, cpu)` seconds of running ARGV (with its children)."""
    cpu = _children_cpu()
    started = time.perf_counter()
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - started
    if r.returncode != 0:
        raise SystemExit(f"{argv} exited {r.returncode}:\n{r.stdout}{r.stderr}")
    return elapsed, _children_cpu() - cpu


def medians(pairs):
    pairs = list(pairs)
    return tuple(statistics.median(p[i] for p in pairs) for i in (0, 1))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=21)
    p.add_argument("--python", default="/usr/bin/python3" if os.path.exists("/usr/bin/python3")
                   else sys.executable)
    args = p.parse_args()
    scratch = tempfile.mkdtemp(prefix="consfig-bench-pull-")
    try:
        run(args, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run(args, scratch):
    key, trust = signing_key(scratch)
    out = os.path.join(scratch, "pub")
    image = stand_in_image(os.path.join(scratch, "image.pyz"), os.path.join(scratch, "applied"),
                           "applied")
    publish.publish_images({HOST: image}, out, key)

    lib = os.path.join(scratch, "lib")
    install_puller(lib)
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
    figures = {}
    with ImageServer(out) as server:
        for label, python in [("", [args.python]), (" -S", [args.python, "-S"])]:
            state = os.path.join(scratch, "state" + label.strip())
            config = os.path.join(scratch, f"pull{label.strip()}.json")
            with open(config, "w") as f:
                json.dump({"url": server.url, "host": HOST, "state-directory": state,
                           "python": args.python, **trust}, f)
            r = subprocess.run([*python, "-c", VERIFY, os.path.join(out, HOST + puller.SUFFIX),
                                config, str(args.runs * 10)], cwd=lib, env=env,
                               capture_output=True, text=True, timeout=600, check=True)
            seconds, cpu, verifier = r.stdout.split(maxsplit=2)
            figures[f"verify{label} ({verifier.strip()})"] = (float(seconds), float(cpu))
            argv = [*python, os.path.join(lib, "puller.py"), config]

            def fresh():
                shutil.rmtree(state, ignore_errors=True)
                return wall(argv, env)
            figures[f"pull new{label}"] = medians(fresh() for _ in range(args.runs))
            figures[f"pull unchanged{label}"] = medians(wall(argv, env) for _ in range(args.runs))
    print(f"{args.runs} runs, puller run by {args.python}")
    print(f"  {'':<40} {'wall':>8}    {'cpu':>8}")
    for name, (seconds, cpu) in figures.items():
        print(f"  {name:<40} {seconds * 1000:8.2f} ms {cpu * 1000:8.2f} ms")


if __name__ == "__main__":
    main()
