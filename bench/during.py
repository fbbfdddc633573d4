"""What a `during` block costs a deployment: the same property deployed
bare, inside a `during` whose fact holds, and inside one whose fact does not
(retracted), over [:local] and over the loopback SSH lab's shell-only chain
[[:ssh …] :sudo] (tests/sshlab.py), as root.

    sudo python3 bench/during.py [--runs 15]

Each figure is the median wall time of one deploy-these* call in this
process, warm (the first run of each case is left out), with events going
to a sink that drops them.  The difference between the cases is what the
fact's :holds and the record on the target add: over a shell-only chain a
few more commands (asking the fact, finding the state directory, reading
the record).
"""

import argparse
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import hy  # noqa: E402,F401
import sshlab  # noqa: E402
from hy.models import Keyword as K  # noqa: E402

import consfig.deployer.deployment  # noqa: E402
from consfig.apply.combinators import during, eseqprops  # noqa: E402
from consfig.model.host import make_host  # noqa: E402
from consfig.image.build import state_directory  # noqa: E402
from consfig.props import fact, file  # noqa: E402

deploy_these = getattr(consfig.deployer.deployment, hy.mangle("deploy-these*"))


def median_seconds(chain, host, propspec, runs):
    times = []
    for i in range(runs + 1):
        start = time.perf_counter()
        outcome = deploy_these(chain, host, propspec, sink=lambda e: None)
        elapsed = time.perf_counter() - start
        assert outcome.status != "failed", outcome
        if i:
            times.append(elapsed)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("the benchmark needs root: it sets up the SSH lab (users, sudoers)")
    hostname = f"bench-during-{os.getpid()}.consfig.invalid"
    work = tempfile.mkdtemp(prefix="consfig-bench-during-")
    # sshd reads the lab user's authorized keys as that user.
    lab_root = tempfile.mkdtemp(prefix="consfig-bench-lab-")
    os.chmod(lab_root, 0o755)
    lab = sshlab.Lab(lab_root)
    lab.setup()
    try:
        chains = {"[:local]": [K("local")],
                  "[[:ssh] :sudo]": [[K("ssh"), K("config"), lab.config, K("host"), "lab"],
                                     K("sudo")]}
        flag, page = os.path.join(work, "flag"), os.path.join(work, "page")
        prop = file.exists_with_content(page, "x\n")
        cases = {"bare property": eseqprops(prop),
                 "during, fact holds": during(fact.file_exists(flag), prop),
                 "during, fact does not hold": during(fact.file_exists(work + "/none"), prop)}
        host = make_host(hostname, None, None, eseqprops())
        open(flag, "w").close()
        print(f"median of {args.runs} warm deployments, seconds")
        for chain_name, chain in chains.items():
            for case, propspec in cases.items():
                s = median_seconds(chain, host, propspec, args.runs)
                print(f"  {chain_name:16} {case:28} {s:.4f}")
    finally:
        lab.teardown()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(lab_root, ignore_errors=True)
        # The record of the block whose fact held.
        pathlib.Path(state_directory(), "during", f"{hostname}.json").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
