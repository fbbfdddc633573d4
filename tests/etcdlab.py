"""A real etcd for the dataspace's tests: Debian's etcd-server, one member
or three, on loopback ports of their own, in a temporary directory.

    from etcdlab import EtcdCluster
    with EtcdCluster(tmp_path, members=3) as etcd:
        etcd.endpoints          # ["http://127.0.0.1:PORT", …]
        etcd.stop(0)            # that member is gone; etcd.start(0) again

A cluster that cannot start is `harness.unavailable` (an error in CI)."""

import json
import os
import shutil
import socket
import subprocess
import urllib.request

from harness import unavailable, wait_until

ETCD = shutil.which("etcd") or "/usr/bin/etcd"


def free_ports(n):
    """N loopback TCP ports nobody listens on now."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def etcdctl(endpoints, *args, check=False):
    """etcdctl ARGS (v3) against ENDPOINTS (a URL or a list of them), from
    outside consfig: the CompletedProcess."""
    endpoints = [endpoints] if isinstance(endpoints, str) else endpoints
    return subprocess.run(["etcdctl", "--endpoints", ",".join(endpoints), *args],
                          check=check, capture_output=True, text=True, timeout=30,
                          env={**os.environ, "ETCDCTL_API": "3"})


def healthy(url, timeout=1.0):
    try:
        with urllib.request.urlopen(url + "/health", timeout=timeout) as r:
            return b'"true"' in r.read()
    except OSError:
        return False


class EtcdCluster:
    def __init__(self, directory, members=1, tls=None):
        self.directory = str(directory)
        os.makedirs(self.directory, exist_ok=True)
        self.n = members
        ports = free_ports(2 * members)
        self.client_ports = ports[:members]
        self.peer_ports = ports[members:]
        self.names = [f"m{i}" for i in range(members)]
        self.procs = [None] * members
        self.tls = tls  # {"ca":…, "cert":[…], "key":[…]} per member, optional
        scheme = "https" if tls else "http"
        self.endpoints = [f"{scheme}://127.0.0.1:{p}" for p in self.client_ports]
        self.initial = ",".join(f"{n}=http://127.0.0.1:{p}"
                                for n, p in zip(self.names, self.peer_ports))

    def argv(self, i):
        a = [ETCD, "--name", self.names[i],
             "--data-dir", os.path.join(self.directory, self.names[i]),
             "--listen-client-urls", self.endpoints[i],
             "--advertise-client-urls", self.endpoints[i],
             "--listen-peer-urls", f"http://127.0.0.1:{self.peer_ports[i]}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer_ports[i]}",
             "--initial-cluster", self.initial,
             "--initial-cluster-token", f"consfig-test-{os.getpid()}-{self.peer_ports[0]}",
             "--initial-cluster-state", "new",
             "--heartbeat-interval", "50", "--election-timeout", "500",
             "--logger", "zap", "--log-level", "error"]
        if self.tls:
            a += ["--cert-file", self.tls["cert"][i], "--key-file", self.tls["key"][i],
                  "--trusted-ca-file", self.tls["ca"]]
            if self.tls.get("client-cert-auth"):
                a += ["--client-cert-auth"]
        return a

    def start(self, i):
        if not os.path.exists(ETCD):
            unavailable("no etcd here (Debian's etcd-server)")
        log = open(os.path.join(self.directory, f"{self.names[i]}.log"), "ab")
        self.procs[i] = subprocess.Popen(self.argv(i), stdout=log, stderr=log,
                                         env={**os.environ, "ETCD_UNSUPPORTED_ARCH": "arm64"})
        log.close()

    def stop(self, i):
        p = self.procs[i]
        if p and p.poll() is None:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs[i] = None

    def grpc_handled(self, method=None):
        """How many gRPC requests (of METHOD, such as "Range", or any) the
        members have answered, by etcd's own counters."""
        total = 0
        for e in self.endpoints:
            with urllib.request.urlopen(e + "/metrics", timeout=10) as r:
                for line in r.read().decode().splitlines():
                    if line.startswith("grpc_server_handled_total{") and (
                            method is None or f'grpc_method="{method}"' in line):
                        total += float(line.rsplit(" ", 1)[1])
        return total

    def _etcdctl(self, endpoints, *args):
        return etcdctl(endpoints, *args, check=True).stdout

    def leader(self):
        """The index of the member that leads now, by the members' own status."""
        up = [e for e, p in zip(self.endpoints, self.procs) if p]
        status = json.loads(self._etcdctl(up, "endpoint", "status", "-w", "json"))
        ids = {s["Endpoint"]: s["Status"]["header"]["member_id"] for s in status}
        leaders = {s["Status"]["leader"] for s in status}
        assert len(leaders) == 1, f"the members disagree on their leader: {status}"
        (lead,) = leaders
        return next(self.endpoints.index(e) for e, i in ids.items() if i == lead)

    def lead_elsewhere(self, i):
        """Make sure member I does not lead: hand the lead to another."""
        lead = self.leader()
        if lead != i:
            return
        target = next(j for j in range(self.n) if j != i and self.procs[j])
        status = json.loads(self._etcdctl([self.endpoints[target]], "endpoint", "status",
                                          "-w", "json"))
        member = format(status[0]["Status"]["header"]["member_id"], "x")
        self._etcdctl([self.endpoints[lead]], "move-leader", member)
        wait_until(lambda: self.leader() == target, 15, f"m{target} to lead")

    def wait_healthy(self, timeout=30):
        if self.tls:
            return  # /health needs a client certificate; callers wait with theirs
        try:
            wait_until(lambda: all(healthy(e) for e, p in zip(self.endpoints, self.procs) if p),
                       timeout, f"etcd at {self.endpoints} to be healthy")
        except AssertionError as e:
            logs = ""
            for n in self.names:
                try:
                    with open(os.path.join(self.directory, f"{n}.log")) as f:
                        logs += f.read()[-2000:]
                except OSError:
                    pass
            self.close()
            unavailable(f"etcd did not start: {e}\n{logs}")

    def __enter__(self):
        for i in range(self.n):
            self.start(i)
        self.wait_healthy()
        return self

    def close(self):
        for i in range(self.n):
            self.stop(i)

    def __exit__(self, *exc):
        self.close()
