"""Deployments in a network namespace of their own: a site of one host,
deployed with `consfig deploy --json` under `ip netns exec`, with the
SSH_CONNECTION an SSH session would give it.  For properties that change
the running network (firewall, interfaces), so that this machine's never
does.

    from netnssite import NetnsSite, netns   # netns: a pytest fixture

    def test_x(tmp_path, netns):
        site = NetnsSite(tmp_path, netns, ["nftables"])
        events = site.deploy('(nftables.has-ruleset "…")', ssh_connection=CONTROLLER)
"""

import json
import os
import subprocess
import sys
import textwrap
import uuid

import pytest

# The address a deployment comes from, and the one it comes to (the
# namespace's eth0), as SSH_CONNECTION gives them.
CONTROLLER = "10.77.0.1 40022 10.77.0.2 22"


def run(*argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, **kw)


@pytest.fixture
def netns():
    """A network namespace for a test, with an eth0 (one end of a veth pair:
    there are no dummy interfaces here) holding 10.77.0.2/24, the address
    deployments come to, as on a host."""
    name = f"consfig-test-{uuid.uuid4().hex[:8]}"
    assert run("ip", "netns", "add", name).returncode == 0
    try:
        for cmd in (["ip", "link", "set", "lo", "up"],
                    ["ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0-peer"],
                    ["ip", "addr", "add", "10.77.0.2/24", "dev", "eth0"],
                    ["ip", "link", "set", "eth0-peer", "up"],
                    ["ip", "link", "set", "eth0", "up"]):
            r = run("ip", "netns", "exec", name, *cmd)
            assert r.returncode == 0, r.stderr
        yield name
    finally:
        run("ip", "netns", "del", name)


def in_netns(netns, *argv):
    """ARGV's output, run in NETNS."""
    return run("ip", "netns", "exec", netns, *argv).stdout


class NetnsSite:
    """A consfig in DIRECTORY with one host, using the property MODULES,
    deployed over :local in NETNS."""

    def __init__(self, directory, netns, modules):
        self.dir = directory
        self.netns = netns
        self.modules = modules

    def deploy(self, body, *, ssh_connection=None, check=False):
        """Deploy BODY (Hy source: the host's properties); its events."""
        return self._deploy(body, ssh_connection, ["--check"] if check else [])[0]

    def checks_clean(self, body, *, ssh_connection=None):
        """BODY, applied already, checks clean: `consfig deploy --check
        --detailed-exitcode` exits 0 and nothing would change (issue 31)."""
        events, code = self._deploy(body, ssh_connection, ["--check", "--detailed-exitcode"])
        drift = [f"  {e['status']}: {e.get('desc')}: {e.get('message') or ''}" for e in events
                 if e.get("event") == "end" and e.get("status") in ("would-change", "cannot-check", "failed")]
        assert code == 0 and not drift, \
            f"after it was applied, a check exits {code}:\n" + "\n".join(drift) + "\n" + notes(events)
        return events

    def _deploy(self, body, ssh_connection, options):
        site = self.dir / "site.hy"
        site.write_text(textwrap.dedent(f"""\
            (require consfig *)
            (import consfig *)
            (use-props consfig.props [{" ".join(self.modules)}])
            (defhost site.consfig.invalid {{:deploy :local}}
              {body})
            """))
        env = {k: v for k, v in os.environ.items() if k != "SSH_CONNECTION"}
        if ssh_connection:
            env["SSH_CONNECTION"] = ssh_connection
        r = run("ip", "netns", "exec", self.netns, sys.executable, "-m", "consfig", "deploy",
                "--consfig", str(site), "site", "--json", *options,
                cwd=self.dir, env=env)
        events = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
        assert events, r.stderr
        return events, r.returncode


def status(events):
    # The summary's status; with --check, a drift-summary line follows it.
    return [e for e in events if e.get("event") == "summary"][-1]["status"]


def messages(events):
    return "\n".join(e.get("message", "") for e in events)


def notes(events):
    return "\n".join(e["text"] for e in events if e["event"] == "output")
