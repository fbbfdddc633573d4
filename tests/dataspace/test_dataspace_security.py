"""Nobody asserts as someone else: a real etcd with TLS (a site CA made by
consfig.ui.dataspace_tls; etcd asks every client for a certificate the CA
signed), and etcd's own users and roles, a password per host.  What refuses
a host writing under another's prefix is etcd, not consfig.  (etcd 3.4's
JSON gateway refuses requests whose certificate CN it would have to map to
a user, so --client-cert-auth is off and the user is the password's.)"""

import os
import subprocess
import sys

import hy  # noqa: F401
import pytest

from consfig.apply.dataspace import Dataspace, DataspaceUnavailable, EtcdRefused
from consfig.ui.dataspace_tls import grant_hosts, issue, make_ca
from etcdlab import EtcdCluster
from harness import wait_until

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ui"))
from clirun import REPO  # noqa: E402

PREFIX = "/consfig/secure"


@pytest.fixture
def secure(tmp_path):
    pki = tmp_path / "pki"
    make_ca(str(pki))
    issue(str(pki), "m0", server_ips=["127.0.0.1"])
    for name in ("root", "web1.example.org", "web2.example.org"):
        issue(str(pki), name)
    tls = {"ca": str(pki / "ca.pem"), "cert": [str(pki / "m0.pem")], "key": [str(pki / "m0.key")]}
    with EtcdCluster(tmp_path / "etcd", members=1, tls=tls) as etcd:
        tls_only = {"endpoints": etcd.endpoints, "prefix": PREFIX, "ca": str(pki / "ca.pem"),
                    "cert": str(pki / "{hostname}.pem"), "key": str(pki / "{hostname}.key")}
        admin = Dataspace(tls_only, "root")
        wait_until(lambda: _answers(admin), 60, "the TLS etcd to answer its root")
        grant_hosts(admin, ["web1.example.org", "web2.example.org"], str(pki))
        yield {**tls_only, "password-file": str(pki / "{hostname}.password")}, etcd


def _answers(ds):
    try:
        ds.status()
        return True
    except DataspaceUnavailable:
        return False


def test_a_host_writes_under_its_own_prefix(secure):
    config, _ = secure
    web1 = Dataspace(config, "web1.example.org")
    web1.put(web1.host_prefix("web1.example.org") + "t/x", "v", 0)
    _, kvs = web1.range(web1.hosts_prefix())
    assert [kv["key"] for kv in kvs] == [f"{PREFIX}/hosts/web1.example.org/t/x"], kvs


def test_etcd_refuses_a_host_writing_under_another_hosts_prefix(secure):
    config, _ = secure
    web1 = Dataspace(config, "web1.example.org")
    with pytest.raises(EtcdRefused) as e:
        web1.put(web1.host_prefix("web2.example.org") + "t/x", "forged", 0)
    assert "permission denied" in str(e.value), str(e.value)


def test_a_host_reads_every_hosts_records(secure):
    config, _ = secure
    web2 = Dataspace(config, "web2.example.org")
    web2.put(web2.host_prefix("web2.example.org") + "t/y", "v", 0)
    web1 = Dataspace(config, "web1.example.org")
    _, kvs = web1.range(web1.hosts_prefix())
    assert any(kv["key"].endswith("/web2.example.org/t/y") for kv in kvs), kvs


def test_a_host_with_another_hosts_certificate_but_its_own_password_is_still_itself(secure):
    config, _ = secure
    # web1's password (its etcd user) with web2's certificate: TLS lets it
    # in, and etcd holds it to web1's prefix.
    impostor = Dataspace({**config, "cert": config["cert"].replace("{hostname}", "web2.example.org"),
                          "key": config["key"].replace("{hostname}", "web2.example.org")},
                         "web1.example.org")
    with pytest.raises(EtcdRefused):
        impostor.put(impostor.host_prefix("web2.example.org") + "t/x", "forged", 0)


def test_a_client_without_a_password_may_not_write(secure):
    config, _ = secure
    anonymous = Dataspace({k: v for k, v in config.items() if k != "password-file"},
                          "web1.example.org")
    with pytest.raises(EtcdRefused):
        anonymous.put(PREFIX + "/hosts/web1.example.org/t/x", "v", 0)


def test_a_client_without_a_certificate_is_turned_away(secure):
    config, _ = secure
    anonymous = Dataspace({k: v for k, v in config.items() if k not in ("cert", "key")},
                          "web1.example.org")
    with pytest.raises(DataspaceUnavailable) as e:
        anonymous.range(PREFIX + "/")
    assert "SSL" in str(e.value), str(e.value)


def test_grant_through_the_cli_gives_hosts_their_roles_and_a_later_grant_adds_one(tmp_path):
    # As docs/dataspace.md says: the CA and certificates with `consfig
    # dataspace tls`, then `consfig dataspace grant`, once and again for a
    # host added later, which must keep root's and the first host's passwords.
    pki = tmp_path / "pki"

    def consfig(*args):
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        r = subprocess.run([sys.executable, "-m", "consfig", *map(str, args)], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    consfig("dataspace", "tls", pki, "--member", "m0=127.0.0.1", "--host", "root",
            "--host", "web1.example.org", "--host", "web2.example.org")
    tls = {"ca": str(pki / "ca.pem"), "cert": [str(pki / "m0.pem")], "key": [str(pki / "m0.key")]}
    with EtcdCluster(tmp_path / "etcd", members=1, tls=tls) as etcd:
        site = tmp_path / "site.hy"
        site.write_text(f"""(require consfig *)
(import consfig *)
(defdataspace {{:endpoints ["{etcd.endpoints[0]}"] :prefix "{PREFIX}"
               :ca "/etc/consfig/dataspace/ca.pem"
               :cert "/etc/consfig/dataspace/{{hostname}}.pem"
               :key "/etc/consfig/dataspace/{{hostname}}.key"
               :password-file "/etc/consfig/dataspace/{{hostname}}.password"}})
""")
        wait_until(lambda: _answers(Dataspace({"endpoints": etcd.endpoints, "prefix": PREFIX,
                                               "ca": str(pki / "ca.pem"), "cert": str(pki / "root.pem"),
                                               "key": str(pki / "root.key")}, "root")),
                   60, "the TLS etcd to answer")
        out = consfig("dataspace", "--consfig", site, "grant", pki, "web1.example.org")
        assert str(pki / "web1.example.org.password") in out, out
        # The host's view: its own certificate and password, from DIR here.
        here = {"endpoints": etcd.endpoints, "prefix": PREFIX, "ca": str(pki / "ca.pem"),
                "cert": str(pki / "{hostname}.pem"), "key": str(pki / "{hostname}.key"),
                "password-file": str(pki / "{hostname}.password")}
        web1 = Dataspace(here, "web1.example.org")
        web1.put(web1.host_prefix("web1.example.org") + "t/x", "v", 0)
        with pytest.raises(EtcdRefused):
            web1.put(web1.host_prefix("web2.example.org") + "t/x", "forged", 0)
        web1_password = (pki / "web1.example.org.password").read_text()
        consfig("dataspace", "--consfig", site, "grant", pki, "web2.example.org", "web1.example.org")
        assert (pki / "web1.example.org.password").read_text() == web1_password, \
            "a grant again keeps a host's password"
        web2 = Dataspace(here, "web2.example.org")
        web2.put(web2.host_prefix("web2.example.org") + "t/y", "v", 0)
        Dataspace(here, "web1.example.org").put(web1.host_prefix("web1.example.org") + "t/z", "v", 0)
        assert [p.name for p in pki.iterdir() if ".new" in p.name or p.name.startswith(".")] == [], \
            "no temporary file"
