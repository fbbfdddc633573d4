"""Figures for the dataspace (docs/dataspace.md), on a 3-member etcd on loopback.

    python3 bench/dataspace.py [--agents 50] [--records 1000] [--ttl 3]

Each agent is a process running what the converging agent runs for the
dataspace: consfig.converge.watch's dataspace watch (a snapshot, then an
etcd watch from its revision) and consfig.apply.dataspace's lease keeper
(a keep-alive every TTL/3), reading the records on each change as a
`during` over `dataspace.observed` does (from the watch's live view).  (Not the whole `consfig
converge`: fifty of those, each compiling and applying a host, do not fit
the machines this runs on.)

Prints:
  - an assertion made -> every agent's view has it: median and p99
  - an asserting agent killed -> every agent's view lost it (lease TTL)
  - one idle agent observing RECORDS records: CPU share and extra memory
  - etcd requests per idle agent per TTL (etcd's own gRPC counters)
"""

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, os.path.join(HERE, ".."))

from etcdlab import EtcdCluster  # noqa: E402

PREFIX = "/consfig/bench"

AGENT = r"""
import json, os, sys, time, threading
import hy
from consfig.apply.dataspace import keep_leases, records
from consfig.converge.watch import Watcher
config = json.loads(sys.argv[1]); name = sys.argv[2]; out = sys.argv[3]; assert_too = sys.argv[4] == "1"
w = Watcher(dataspace=(config, name))
w.add("all", [["dataspace", "all"]])
ds = w.dataspace.ds
if assert_too:
    # What dataspace.asserted does, without a host to apply it on.
    import consfig.apply.dataspace as d
    lease = ds.grant(int(config["ttl"]))
    d._current[name] = lease
    ds.put(ds.host_prefix(name) + "bench/self", "{}", lease)
stop = keep_leases(ds, name, w.dataspace.state)
seen = set()
f = open(out, "a", buffering=1)
while True:
    keys = w.wait(None)
    if "all" in keys:
        # What dataspace.observed reads: the agent's live view, else etcd.
        _, kvs = records(w.dataspace.ds)
        now = set(kv["key"] for kv in kvs)
        t = time.time()
        for k in now - seen:
            f.write(json.dumps({"agent": name, "key": k, "seen": t, "event": "put"}) + "\n")
        for k in seen - now:
            f.write(json.dumps({"agent": name, "key": k, "seen": t, "event": "delete"}) + "\n")
        seen = now
"""


def seen_by_all(log, key, event, n, since):
    times = {}
    for line in open(log):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e["key"] == key and e["event"] == event and e["seen"] >= since:
            times.setdefault(e["agent"], e["seen"])
    return times if len(times) >= n else None


def wait_for(f, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = f()
        if v:
            return v
        time.sleep(0.02)
    return None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--agents", type=int, default=50)
    p.add_argument("--records", type=int, default=1000)
    p.add_argument("--assertions", type=int, default=20)
    p.add_argument("--ttl", type=int, default=3)
    a = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="consfig-bench-dataspace-")
    log = os.path.join(tmp, "seen.jsonl")
    with EtcdCluster(os.path.join(tmp, "etcd"), members=3) as etcd:
        import hy  # noqa: F401
        from consfig.apply.dataspace import Dataspace
        config = {"endpoints": etcd.endpoints, "prefix": PREFIX, "ttl": a.ttl}
        ds = Dataspace(config, "writer")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        agents = [subprocess.Popen([sys.executable, "-c", AGENT, json.dumps(config), f"agent{i}",
                                    log, "1" if i == 0 else "0"], env=env)
                  for i in range(a.agents)]
        try:
            print(f"{a.agents} agents starting…", flush=True)
            ok = wait_for(lambda: len({json.loads(l)["agent"] for l in open(log)
                                       if l.strip()}) >= a.agents
                          if os.path.exists(log) else None, 300)
            assert ok, "the agents did not all start"
            delays = []
            for i in range(a.assertions):
                key = f"{PREFIX}/hosts/writer/bench/{i}"
                t0 = time.time()
                ds.put(key, "{}", 0)
                times = wait_for(lambda: seen_by_all(log, key, "put", a.agents, t0), 60)
                assert times, f"assertion {i} not seen by every agent"
                delays += [t - t0 for t in times.values()]
            delays.sort()
            print(f"assertion -> every agent's view: median {statistics.median(delays)*1000:.0f} ms, "
                  f"p99 {delays[int(len(delays) * 0.99) - 1]*1000:.0f} ms "
                  f"({len(delays)} observations)", flush=True)

            key = f"{PREFIX}/hosts/agent0/bench/self"
            agents[0].send_signal(signal.SIGKILL)
            agents[0].wait()
            t0 = time.time()
            times = wait_for(lambda: seen_by_all(log, key, "delete", a.agents - 1, t0), a.ttl + 30)
            assert times, "the killed agent's record was never retracted"
            worst = max(times.values()) - t0
            print(f"agent killed -> its record gone from every view: {worst:.2f} s "
                  f"(lease TTL {a.ttl} s)", flush=True)

            for i in range(a.records):
                ds.put(f"{PREFIX}/hosts/writer/many/{i}", "{}", 0)
            wait_for(lambda: seen_by_all(log, f"{PREFIX}/hosts/writer/many/{a.records - 1}",
                                         "put", a.agents - 1, 0), 300)
            time.sleep(2 * a.ttl)
            pid = agents[1].pid
            def cpu():
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            def rss():
                with open(f"/proc/{pid}/status") as f:
                    return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024
            base = subprocess.run([sys.executable, "-c", "import hy, consfig.apply.dataspace, "
                                   "consfig.converge.watch, etcd3gw.client, time, re; "
                                   "print(re.search(r'VmRSS:\\s+(\\d+)', open('/proc/self/status').read()).group(1))"],
                                  capture_output=True, text=True, env=env).stdout
            c0, r0, q0, t0 = cpu(), rss(), etcd.grpc_handled(), time.monotonic()
            time.sleep(30)
            c1, q1, t1 = cpu(), etcd.grpc_handled(), time.monotonic()
            share = (c1 - c0) / (t1 - t0) * 100
            print(f"idle agent observing {a.records} records: CPU {share:.2f} %, "
                  f"memory {r0:.1f} MB ({r0 - int(base) / 1024:.1f} MB more than a process that "
                  f"imports the same and observes nothing)", flush=True)
            per = (q1 - q0) / (a.agents - 1) / ((t1 - t0) / a.ttl)
            print(f"etcd requests per idle agent: {per:.2f} per TTL "
                  f"(keep-alive every TTL/3 = 3 per TTL expected)", flush=True)
        finally:
            for p_ in agents:
                if p_.poll() is None:
                    p_.kill()
                    p_.wait()


if __name__ == "__main__":
    main()
