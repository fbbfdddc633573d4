"""A 3-member etcd on loopback: what `dataspace.etcd-member` writes makes one,
it goes on with a member stopped, and with two stopped (no quorum) an
observer keeps its last view, retracts nothing and says why."""

import os
import subprocess
import sys

import hy  # noqa: F401

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "ui"))

from clirun import REPO  # noqa: E402
from consfig.props.dataspace import member_environment  # noqa: E402
from etcdlab import ETCD, EtcdCluster, etcdctl, free_ports, healthy  # noqa: E402
from harness import wait_until  # noqa: E402


def test_the_member_environment_of_three_members_makes_one_cluster(tmp_path):
    ports = free_ports(6)
    peers = {f"m{i}": f"http://127.0.0.1:{ports[3 + i]}" for i in range(3)}
    procs = []
    try:
        for i in range(3):
            text = member_environment(f"m{i}", f"http://127.0.0.1:{ports[i]}", peers[f"m{i}"],
                                      peers, str(tmp_path / f"m{i}"))
            # What Debian's etcd.service does with /etc/default/etcd.
            env = dict(os.environ)
            for line in text.splitlines():
                k, _, v = line.partition("=")
                env[k] = v.strip('"')
            log = open(tmp_path / f"m{i}.log", "wb")
            procs.append(subprocess.Popen([ETCD], env=env, stdout=log, stderr=log))
        wait_until(lambda: all(healthy(f"http://127.0.0.1:{p}") for p in ports[:3]), 60,
                   "the three members to form a cluster")
        members = etcdctl(f"http://127.0.0.1:{ports[0]}", "member", "list").stdout
        assert len(members.splitlines()) == 3, members
    finally:
        for p in procs:
            p.terminate()
            p.wait(30)


def write_site(tmp_path, etcd, out):
    site = tmp_path / "site.hy"
    site.write_text(f"""(require consfig *)
(import consfig *)
(use-props consfig.props [dataspace file])
(defdataspace {{:endpoints [{" ".join(f'"{e}"' for e in etcd.endpoints)}] :prefix "/consfig/c"}})
(defassertion web-backend [#^ hostname host #^ ip-address addr])
(defproplist backend-file [#^ ip-address addr]
  (file.exists-with-content f"{out}/{{addr}}" "up\\n"))
(defhost web1.example.org {{:deploy :local}}
  (dataspace.asserted (web-backend "web1.example.org" "10.0.0.5")))
(defhost lb.example.org {{:deploy :local}}
  (during (dataspace.observed (web-backend :addr ?addr)) (backend-file ?addr)))
""")
    return site


def consfig(*args):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return subprocess.run([sys.executable, "-m", "consfig", *map(str, args)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def test_a_cluster_goes_on_without_one_member_and_keeps_the_last_view_without_quorum(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with EtcdCluster(tmp_path / "etcd", members=3) as etcd:
        site = write_site(tmp_path, etcd, out)
        r = consfig("deploy", "--consfig", site, "web1.example.org")
        assert r.returncode == 0, r.stdout + r.stderr
        etcd.stop(0)
        r = consfig("deploy", "--consfig", site, "lb.example.org")
        assert r.returncode == 0, r.stdout + r.stderr
        assert (out / "10.0.0.5").exists(), "one member down: everything goes on"
        etcd.stop(1)
        r = consfig("deploy", "--consfig", site, "lb.example.org")
        assert r.returncode == 1, r.stdout + r.stderr
        assert "dataspace unavailable" in r.stdout, r.stdout
        assert (out / "10.0.0.5").exists(), "no quorum: retracted nothing"
