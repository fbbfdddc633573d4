"""The firewall and the interfaces over real SSH: an sshd of the lab's runs
in a network namespace of its own, reached through a veth pair, so that the
deployments' network is that namespace's, never this machine's.  A ruleset
that would cut the deploying connection is refused, through a :python hop
and through a shell alone; one that keeps it is loaded, and the next
deployment still gets in.  A change to the interface the connection comes
by is refused; one to another is made."""

import os
import random
import signal
import subprocess

import pytest

import hy  # noqa: F401
from hy.models import Keyword as K

import consfig.deployer.deployment
from consfig.model.host import make_host
from consfig.props import network, nftables
from harness import wait_until
from sshlab import SSHD, free_port

deploy_these = getattr(consfig.deployer.deployment, hy.mangle("deploy-these*"))


def run(*argv):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"{argv}: {r.stderr}"
    return r.stdout


class NetnsLab:
    """An sshd of SSHLAB's in the network namespace NAME, at ADDRESS."""

    def __init__(self, sshlab, tmp_path):
        n = random.randrange(1, 250)
        self.name = f"consfig-fwlab-{os.getpid()}-{n}"
        self.outside, self.address = f"198.18.{n}.1", f"198.18.{n}.2"
        self.veth = f"cffw{os.getpid() % 100000}"
        run("ip", "netns", "add", self.name)
        run("ip", "link", "add", self.veth, "type", "veth", "peer", "name", "eth0",
            "netns", self.name)
        run("ip", "addr", "add", f"{self.outside}/30", "dev", self.veth)
        run("ip", "link", "set", self.veth, "up")
        for cmd in (["ip", "link", "set", "lo", "up"],
                    ["ip", "addr", "add", f"{self.address}/30", "dev", "eth0"],
                    ["ip", "link", "set", "eth0", "up"]):
            run("ip", "netns", "exec", self.name, *cmd)
        self.port = free_port()
        config = tmp_path / "sshd_config"
        config.write_text(open(sshlab.sshd_config).read().replace(
            "ListenAddress 127.0.0.1", f"ListenAddress {self.address}"))
        self.sshd = subprocess.Popen(
            ["ip", "netns", "exec", self.name, SSHD, "-D", "-e", "-f", str(config),
             "-p", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "sshd.log", "ab"),
            start_new_session=True)
        key = open(sshlab.host_key + ".pub").read().split()
        known = tmp_path / "known_hosts"
        known.write_text(f"[{self.address}]:{self.port} {key[0]} {key[1]}\n")
        self.config = tmp_path / "ssh_config"
        self.config.write_text(f"""Host fwlab
    HostName {self.address}
    Port {self.port}
    User {sshlab.user}
    IdentityFile {sshlab.client_key}
    IdentitiesOnly yes
    UserKnownHostsFile {known}
    ConnectTimeout 5
""")
        wait_until(lambda: "LISTEN" in subprocess.run(
            ["ip", "netns", "exec", self.name, "ss", "-ltn", f"sport = :{self.port}"],
            capture_output=True, text=True).stdout, 10, "the sshd in the namespace to listen")

    def ruleset(self):
        return subprocess.run(["ip", "netns", "exec", self.name, "nft", "list", "ruleset"],
                              capture_output=True, text=True, timeout=60).stdout

    def close(self):
        try:
            os.killpg(self.sshd.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.sshd.wait(10)
        # The sessions it served run in the namespace: end them with it.
        pids = subprocess.run(["ip", "netns", "pids", self.name],
                              capture_output=True, text=True).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["ip", "link", "del", self.veth], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)


@pytest.fixture
def fwlab(sshlab, tmp_path):
    lab = NetnsLab(sshlab, tmp_path)
    yield lab
    lab.close()


CHAINS = {
    "ssh-sudo-python": lambda lab: [[K("ssh"), K("config"), str(lab.config), K("host"), "fwlab"],
                                    K("sudo"), K("python")],
    "ssh-sudo": lambda lab: [[K("ssh"), K("config"), str(lab.config), K("host"), "fwlab"],
                             K("sudo")],
}


def ruleset(port):
    return f"""table inet filter {{
  chain input {{
    type filter hook input priority 0; policy drop;
    iif lo accept
    ct state established,related accept
    tcp dport {port} accept
  }}
}}
"""


@pytest.fixture(params=list(CHAINS))
def chain(request, fwlab):
    return CHAINS[request.param](fwlab)


def failures(events):
    return "\n".join(e.get("message", "") for e in events.events)


HOST = make_host("net.consfig.invalid", None, None, nftables.has_ruleset(""))


def test_over_ssh_a_ruleset_that_would_cut_it_is_refused_and_one_that_keeps_it_is_loaded(
        fwlab, chain, tmp_path, events):
    host = HOST
    conf = str(tmp_path / "nftables.conf")
    before = fwlab.ruleset()

    cutting = nftables.has_ruleset(ruleset(80), conf=conf)
    outcome = deploy_these(chain, host, cutting, sink=events)
    assert outcome.status == "failed", events.ends()
    assert f"a new connection from {fwlab.outside} to port {fwlab.port}" in failures(events)
    assert fwlab.ruleset() == before, "nothing was loaded"
    assert not os.path.exists(conf)

    keeping = nftables.has_ruleset(ruleset(fwlab.port), conf=conf)
    events.events.clear()
    assert deploy_these(chain, host, keeping, sink=events).status == "changed", events.ends()
    assert f"tcp dport {fwlab.port} accept" in fwlab.ruleset()
    events.events.clear()
    assert deploy_these(chain, host, keeping, sink=events).status == "no-change", \
        "the next deployment still gets in, and finds nothing to do"


def test_over_ssh_the_interface_it_comes_by_is_not_reconfigured_but_another_is(
        chain, tmp_path, events):
    host = HOST
    directory = str(tmp_path / "networkd")

    def networkd(name):
        return network.networkd_configured(
            f"10-{name}", ["Match", {"Name": name}], ["Network", {"DHCP": "yes"}],
            directory=directory)

    outcome = deploy_these(chain, host, networkd("eth0"), sink=events)
    assert outcome.status == "failed", events.ends()
    assert "configures eth0, the interface the deploying SSH connection comes in by" \
        in failures(events)
    assert not os.path.exists(f"{directory}/10-eth0.network")
    events.events.clear()
    assert deploy_these(chain, host, networkd("eth1"), sink=events).status == "changed", \
        events.ends()
    assert os.path.exists(f"{directory}/10-eth1.network")
