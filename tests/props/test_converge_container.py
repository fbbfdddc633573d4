"""The converging agent against a real service supervisor: systemd as PID 1
of a container booted (once, for the module) from the cached test chroot,
the agent inside it over [:local [:nspawn …] [:python …]].  A unit stopped
with `systemctl stop` is started again because the agent hears of it on the
container's system bus (its D-Bus unit watch), not by polling."""

import os
import subprocess
import sys
import threading

import pytest

import hy  # noqa: F401
from hy.models import Keyword as K

from harness import unavailable, wait_until
from proptest import deploy_propspec, failure_text, statuses, this_os

from test_container import _force_down, _rooted_in

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ui"))
from clirun import consfig  # noqa: E402

from consfig.apply.combinators import eseqprops
from consfig.connections.nspawn import enter_argv
from consfig.converge.controller import converge_host
from consfig.model.host import Host
from consfig.props import container, file, systemd

pytestmark = pytest.mark.chroot

NAME = f"cfconv{os.getpid()}"
NSPAWN = [K("nspawn"), K("machine"), NAME]
PYTHON = [K("python"), K("install"), True]
UNIT = "cfsleep.service"


def _inside(*argv, timeout=60):
    return subprocess.run(enter_argv(NAME, list(argv)), capture_output=True, text=True,
                          timeout=timeout)


def _state():
    return _inside("systemctl", "is-active", UNIT).stdout.strip()


@pytest.fixture(scope="module")
def booted(debian_chroot):
    import shutil
    if not shutil.which("systemd-nspawn"):
        unavailable("systemd-nspawn is not installed (apt-get install systemd-container)")
    root = debian_chroot
    unit = file.has_content(f"/etc/systemd/system/{UNIT}",
                            "[Service]\nExecStart=/bin/sleep infinity\n")
    try:
        outcome, events = deploy_propspec(
            [K("local")],
            container.nspawn_running(NAME, {K("root"): str(root)}, eseqprops(this_os(), unit)),
            check=False)
        assert outcome.status == "changed", failure_text(events) or statuses(events)
        r = _inside("timeout", "60", "systemctl", "is-system-running", "--wait", timeout=90)
        assert r.stdout.strip() in ("running", "degraded"), f"systemd says {r.stdout!r}"
        _inside("systemctl", "daemon-reload")
        yield root
    finally:
        _force_down(NAME)
        wait_until(lambda: not _rooted_in(root), 30, "the container's processes to end")


class Agent:
    """`converge_host` in a thread of its own, its events in EVENTS."""

    def __init__(self, host, **kw):
        self.events = []
        self.outcome = self.error = None
        self.thread = threading.Thread(target=self._run, args=(host,), kwargs=kw, daemon=True)
        self.thread.start()
        wait_until(lambda: self.error or self.of("watching"), 300, "the agent to watch")
        assert not self.error, self.error
        # Its PID in the container's PID namespace.
        self.pid = self.of("watching")[0]["pid"]

    def _run(self, host, **kw):
        try:
            self.outcome = converge_host(host, self.events.append,
                                         chain=[K("local"), NSPAWN, PYTHON], **kw)
        except BaseException as e:  # noqa: B902 -- reported by the test
            self.error = e

    def of(self, what):
        return [e for e in self.events if e["event"] == "converge" and e["what"] == what]

    def stop(self):
        # No procps in the container: the shell's kill.
        r = _inside("sh", "-c", 'kill -TERM "$1"', "sh", str(self.pid))
        self.thread.join(60)
        assert not self.thread.is_alive(), \
            f"the controller's side ended with the agent: {r.stderr!r} {self.events[-3:]}"
        assert not self.error, self.error


@pytest.mark.slow
def test_agent_in_a_booted_container_starts_a_stopped_unit_again_from_its_bus_watch(booted):
    host = Host("conv.test.invalid", eseqprops(this_os(), systemd.started(UNIT)))
    # Unit polling (the fallback without a bus) far slower than the bound
    # below: only the D-Bus watch can bring the unit back in time.
    agent = Agent(host, unit_poll=600, interval=600)
    try:
        assert _state() == "active", "started by the first pass"
        for n in (1, 2):
            assert _inside("systemctl", "stop", UNIT).returncode == 0, "systemctl stop failed"
            wait_until(lambda: len(agent.of("repaired")) >= n, 30,
                       f"the agent to start {UNIT} again ({n})")
            assert _state() == "active", f"{UNIT} active again"
        assert len(agent.of("drift")) == 2 and all(UNIT in e["desc"] for e in agent.of("drift")), \
            agent.events
        assert not agent.of("failed"), agent.events
    finally:
        agent.stop()
    assert agent.of("stopped"), "the agent said it stopped"
    wait_until(lambda: _inside("sh", "-c", 'kill -0 "$1"', "sh", str(agent.pid)).returncode != 0, 10,
               "the agent's process in the container to end")


SERVICE_SITE = """(require consfig *)
(import consfig *)
(use-props consfig.props [converge file os])
(defhost {host} {{:deploy [[:nspawn :machine {name}] [:python :install True]]}}
  (os.debian-stable {suite} :{arch})
  (file.has-content "/etc/consfig-motd" "kept by the service\\n")
  (converge.running :interval 600))
"""


def _service_events(hostname):
    import json
    r = _inside("cat", f"/var/lib/consfig/converge/{hostname}.jsonl")
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


@pytest.mark.slow
def test_the_agent_as_a_service_deployed_from_a_site_keeps_it_and_unapplies_cleanly(booted, tmp_path):
    # docs/converge.md's "The agent as a service", as a user runs it:
    # `consfig deploy` of a site with (converge.running); systemd then runs
    # the host's own image as the agent, which repairs what drifts.
    import json
    from proptest import checks_clean, host_arch, host_suite
    from consfig.model.host import find_host
    from consfig.props import converge
    from consfig.site.load import load_consfig
    hostname = f"{NAME}.test.invalid"
    site = tmp_path / "site.hy"
    site.write_text(SERVICE_SITE.format(host=hostname, name=json.dumps(NAME),
                                        suite=json.dumps(host_suite()), arch=host_arch()))
    r = consfig("deploy", "--consfig", site, hostname, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    chain = [K("local"), NSPAWN, PYTHON]
    try:
        assert _inside("systemctl", "is-active", converge.SERVICE).stdout.strip() == "active", \
            _inside("systemctl", "status", converge.SERVICE).stdout
        wait_until(lambda: any(e.get("what") == "watching" for e in _service_events(hostname)), 120,
                   "the service's agent to watch")
        assert _inside("rm", "/etc/consfig-motd").returncode == 0
        wait_until(lambda: _inside("cat", "/etc/consfig-motd").stdout == "kept by the service\n", 30,
                   "the service's agent to put the file back")
        assert [e for e in _service_events(hostname) if e.get("what") == "repaired"], \
            _service_events(hostname)[-5:]
        load_consfig(str(site))
        checks_clean(chain, find_host(hostname))
    finally:
        outcome, events = deploy_propspec(chain, converge.running(interval=600), unapply=True,
                                          hostname=hostname, check=False)
    assert outcome.status == "changed", failure_text(events) or statuses(events)
    assert _inside("systemctl", "is-active", converge.SERVICE).stdout.strip() != "active", \
        "the service still runs"
    unit = _inside("test", "-e", f"/etc/systemd/system/{converge.SERVICE}")
    assert unit.returncode != 0, "the unit file is left"
    agents = _inside("sh", "-c", "grep -l -- --conv[e]rge /proc/[0-9]*/cmdline 2>/dev/null")
    assert not agents.stdout.strip(), f"an agent still runs: {agents.stdout}"
