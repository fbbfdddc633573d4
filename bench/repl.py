"""Benchmark: a warm redeploy from the REPL, over a kept chain (`consfig.python_hop.keep`).

    sudo python3 bench/repl.py [--runs 10] [--n 100]

W1 (bench/w1.py: a directory and N files of fixed content) over
[[:ssh …] :sudo :python] to the loopback SSH lab, nothing to change, with
the chain kept between deployments as the REPL keeps it (`deploy*`
`:persist`), against the floor `ssh lab sudo python3 -c pass`, each run of
one next to a run of the other so that both see the same load: their
medians, and the ratio (the target: the redeploy at least 3x faster than
the floor).  For comparison, the same deployment connecting afresh each
time, and both over the POSIX chain [[:ssh …] :sudo] (kept, it saves the
SSH handshake; each deployment still starts the lock's holder and runs a
command or two per property).  Needs root, as w1.py does.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import w1  # noqa: E402
import consfig.python_hop.keep as keep  # noqa: E402
import consfig.python_hop.controller as remote  # noqa: E402


def timed(chain, host, persist):
    started = time.perf_counter()
    outcome = w1.deploy(chain, host, sink=w1.reporter(), persist=persist)
    elapsed = time.perf_counter() - started
    if outcome.status != "no-change":
        raise SystemExit(f"expected no-change, got {outcome.status}")
    return elapsed


def floor_once(lab):
    started = time.perf_counter()
    subprocess.run(["ssh", "-F", lab.config, "lab", "sudo python3 -c pass"], check=True)
    return time.perf_counter() - started


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--n", type=int, default=100)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("the benchmark needs root: it sets up the SSH lab (users, sudoers)")
    workdir = tempfile.mkdtemp(prefix="consfig-bench-repl-")
    os.chmod(workdir, 0o755)
    lab = w1.sshlab.Lab(workdir)
    lab.setup()
    try:
        chain = w1.chains(lab.config)[0]
        w1.clear_files()
        w1.deploy(chain, w1.w1(args.n), sink=w1.reporter())      # converge, bundle cached
        timed(chain, w1.w1(args.n), 300)                          # the chain is kept from here
        sessions = remote.stats["sessions"]
        floors, kept, fresh = [], [], []
        for _ in range(args.runs):
            floors.append(floor_once(lab))
            kept.append(timed(chain, w1.w1(args.n), 300))
        if remote.stats["sessions"] != sessions:
            raise SystemExit("a kept redeploy started a Python: the chain was not reused")
        keep.disconnect()
        for _ in range(args.runs):
            fresh.append(timed(chain, w1.w1(args.n), False))
        posix = w1.chains(lab.config)[1]
        posix_kept, posix_fresh = [], []
        timed(posix, w1.w1(args.n), 300)
        for _ in range(args.runs):
            posix_kept.append(timed(posix, w1.w1(args.n), 300))
        keep.disconnect()
        for _ in range(args.runs):
            posix_fresh.append(timed(posix, w1.w1(args.n), False))
        base, warm, cold = w1.median(floors), w1.median(kept), w1.median(fresh)
        print(f"W1 N={args.n} warm (nothing to change), [[:ssh …] :sudo :python], loopback sshd, "
              f"median of {args.runs}")
        print(f"  {'floor: ssh lab sudo python3 -c pass':<44} {base:7.3f} s")
        print(f"  {'REPL redeploy over the kept chain':<44} {warm:7.3f} s   "
              f"{base / warm:5.1f}x faster than the floor (target >= 3x: "
              f"{'met' if base / warm >= 3 else 'MISSED'})")
        print(f"  {'the same, connecting afresh (deploy*)':<44} {cold:7.3f} s")
        print(f"[[:ssh …] :sudo] (POSIX), W1 N={args.n} warm")
        print(f"  {'REPL redeploy over the kept chain':<44} {w1.median(posix_kept):7.3f} s")
        print(f"  {'the same, connecting afresh (deploy*)':<44} {w1.median(posix_fresh):7.3f} s")
    finally:
        keep.disconnect()
        w1.clear_files()
        lab.teardown()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
