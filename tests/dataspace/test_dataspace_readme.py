"""The README's dataspace example works as written, on a real etcd that
`consfig dataspace serve` runs."""

import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "ui"))

from clirun import REPO  # noqa: E402
from etcdlab import free_ports, healthy  # noqa: E402
from harness import wait_until  # noqa: E402


def section(title):
    text = (REPO / "README.md").read_text()
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_readme_dataspace_example_deploys_and_lists(tmp_path):
    code = re.search(r"```hy\n(.*?)```", section("The fleet as one dataspace"), re.S).group(1)
    [port] = free_ports(1)
    site = tmp_path / "site.hy"
    # Another port than etcd's default, and a directory of the test's own.
    site.write_text(code.replace("127.0.0.1:2379", f"127.0.0.1:{port}")
                        .replace("/srv/lb", str(tmp_path / "lb")))
    (tmp_path / "lb").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

    def consfig(*args):
        r = subprocess.run([sys.executable, "-m", "consfig", *args, "--consfig", str(site)]
                           if args[0] != "dataspace" else
                           [sys.executable, "-m", "consfig", "dataspace", "--consfig", str(site),
                            *args[1:]],
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    server = subprocess.Popen([sys.executable, "-m", "consfig", "dataspace", "--consfig",
                               str(site), "serve", "--data-dir", str(tmp_path / "etcd")],
                              cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                              stderr=open(tmp_path / "serve.log", "wb"))
    try:
        wait_until(lambda: healthy(f"http://127.0.0.1:{port}") or server.poll() is not None, 120,
                   "the served etcd")
        assert server.poll() is None, (tmp_path / "serve.log").read_text()[-2000:]
        consfig("deploy", "web1.example.org", "lb.example.org", "-j", "1")
        assert (tmp_path / "lb" / "upstream.conf").read_text() == "server 10.0.0.5:8080;\n"
        listed = consfig("dataspace", "ls")
        assert re.search(r'^web1\.example\.org  \d+s  \(web-backend "web1\.example\.org" '
                         r'"10\.0\.0\.5" 8080\)$', listed, re.M), listed
    finally:
        server.terminate()
        server.wait(30)
