"""`consfig dataspace ls|watch|serve`, run as a user runs them, on a real etcd."""

import json
import os
import signal
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "ui"))

from clirun import REPO  # noqa: E402
from etcdlab import free_ports, healthy  # noqa: E402
from harness import wait_until  # noqa: E402


def write_site(tmp_path, endpoint):
    path = tmp_path / "site.hy"
    path.write_text(f"""(require consfig *)
(import consfig *)
(use-props consfig.props [dataspace])
(defdataspace {{:endpoints ["{endpoint}"] :prefix "/consfig/cli"}})
(defassertion web-backend [#^ hostname host #^ ip-address addr #^ port port])
(defassertion db [#^ hostname host])
(defhost web1.example.org {{:deploy :local}}
  (dataspace.asserted (web-backend "web1.example.org" "10.0.0.5" 8080))
  (dataspace.asserted (db "web1.example.org")))
""")
    return path


def consfig(*args, check=True):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    r = subprocess.run([sys.executable, "-m", "consfig", *map(str, args)], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=300)
    if check:
        assert r.returncode == 0, r.stdout + r.stderr
    return r


def test_ls_prints_each_record_as_hy_with_its_host_and_age(tmp_path, etcd):
    site = write_site(tmp_path, etcd.endpoints[0])
    consfig("deploy", "--consfig", site, "web1.example.org")
    lines = consfig("dataspace", "--consfig", site, "ls").stdout.splitlines()
    assert len(lines) == 2, lines
    assert any(l.startswith("web1.example.org  ") and
               l.endswith('(web-backend "web1.example.org" "10.0.0.5" 8080)') for l in lines), lines


def test_ls_of_a_type_prints_only_its_records_and_json_on_request(tmp_path, etcd):
    site = write_site(tmp_path, etcd.endpoints[0])
    consfig("deploy", "--consfig", site, "web1.example.org")
    [line] = consfig("dataspace", "--consfig", site, "ls", "db", "--json").stdout.splitlines()
    got = json.loads(line)
    assert got["host"] == "web1.example.org" and got["type"] == "db", got
    assert got["record"].endswith('.db "web1.example.org")'), got
    assert isinstance(got["since"], float), got


def test_watch_prints_the_records_then_each_change(tmp_path, etcd):
    site = write_site(tmp_path, etcd.endpoints[0])
    consfig("deploy", "--consfig", site, "web1.example.org")
    out = tmp_path / "watch.out"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with open(out, "w") as o:
        p = subprocess.Popen([sys.executable, "-m", "consfig", "dataspace", "--consfig", str(site),
                              "watch", "web-backend"], cwd=REPO, env=env, stdout=o,
                             stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: "10.0.0.5" in out.read_text(), 120, "the snapshot printed")
        consfig("deploy-these", "--consfig", site, "web1.example.org",
                '(unapplied (dataspace.asserted (web-backend "web1.example.org" "10.0.0.5" 8080)))')
        wait_until(lambda: "- web1.example.org" in out.read_text(), 30, "the retraction printed")
        consfig("deploy", "--consfig", site, "web1.example.org")
        wait_until(lambda: "+ web1.example.org" in out.read_text(), 30, "the assertion printed")
        assert "(db " not in out.read_text(), "only the type asked for"
    finally:
        p.send_signal(signal.SIGINT)
        p.wait(30)


def test_serve_runs_a_one_member_etcd_for_the_site(tmp_path):
    [port] = free_ports(1)
    site = write_site(tmp_path, f"http://127.0.0.1:{port}")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    p = subprocess.Popen([sys.executable, "-m", "consfig", "dataspace", "--consfig", str(site),
                          "serve", "--data-dir", str(tmp_path / "etcd")], cwd=REPO, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: healthy(f"http://127.0.0.1:{port}"), 120, "the served etcd to answer")
        consfig("deploy", "--consfig", site, "web1.example.org")
        assert "10.0.0.5" in consfig("dataspace", "--consfig", site, "ls").stdout
    finally:
        p.terminate()
        p.wait(30)


def test_a_site_without_a_dataspace_is_told_what_to_add(tmp_path):
    site = tmp_path / "site.hy"
    site.write_text("(require consfig *)\n(import consfig *)\n")
    r = consfig("dataspace", "--consfig", site, "ls", check=False)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "names no dataspace: add (defdataspace" in r.stderr, r.stderr


def test_tls_makes_the_sites_ca_and_certificates_with_private_keys(tmp_path):
    pki = tmp_path / "pki"
    out = consfig("dataspace", "tls", pki, "--member", "m0=127.0.0.1",
                  "--host", "web1.example.org").stdout.split()
    assert out == [str(pki / "ca.pem"), str(pki / "m0.pem"), str(pki / "web1.example.org.pem")], out
    for key in ("ca.key", "m0.key", "web1.example.org.key"):
        assert (pki / key).stat().st_mode & 0o777 == 0o600, key
    again = consfig("dataspace", "tls", pki).stdout.split()
    assert again == [str(pki / "ca.pem")] and (pki / "ca.key").read_bytes(), "the CA is kept"
