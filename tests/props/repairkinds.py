"""A small web+db server in a booted container, kept by the converging agent
run through the real CLI (`consfig converge`), and broken one kind at a time:
what tests/props/test_converge_site.py and bench/converge.py --kinds share.

    with site_container(tarball, workdir) as machine:     # booted, packages in
        with Converging(machine, workdir) as agent:        # consfig converge …
            seconds = agent.break_and_wait(KINDS[0])       # break → repaired

The container has a network of its own (nspawn's Private=yes: loopback
only), so that nftables may load a ruleset and net.* parameters are its
own; its packages are installed through the :chroot hop before it boots,
over this machine's network.  Each kind's break is a shell command run in
the container; `break_and_wait` returns the seconds from just before it
(stamped in the container, which shares this kernel's clock) to the agent's
`repaired` event for that property as the CLI writes it, once the check says
the kind holds again.
"""

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import hy  # noqa: F401
from hy.models import Keyword as K

from proptest import (deploy_propspec, failure_text, host_arch, host_suite, keep_debs,
                      overlay_copy, remove_tree, this_os)

PACKAGES = ["openssh-server", "sudo", "nginx-light", "postgresql", "nftables", "procps", "tzdata"]
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBvJ0FTE7GkVxvOiLh4C8PvbxhvYbpG8xAr5Hq1d2ruo e2e@test"
HOSTNAME = "cfkinds.test.invalid"
SITE_CONF = "server {\n    listen 8081;\n    root /var/www/html;\n}\n"
RULESET = ("table inet cfkinds {\n  chain input {\n    type filter hook input priority 0; policy accept;\n"
           "    tcp dport 8081 accept\n  }\n}\n")


class Kind:
    def __init__(self, name, desc, breaking, holds):
        self.name = name          # what the report calls it
        self.desc = desc          # part of the property's description
        self.breaking = breaking  # shell code that breaks it, in the container
        self.holds = holds        # shell code that succeeds when it holds again


KINDS = [
    Kind("sshd_config", "sshd configured",
         "echo 'PasswordAuthentication yes' >> /etc/ssh/sshd_config",
         "! grep -q '^PasswordAuthentication yes' /etc/ssh/sshd_config"),
    Kind("authorized_keys", "authorized SSH key",
         "rm -f /root/.ssh/authorized_keys",
         f"grep -qF '{KEY}' /root/.ssh/authorized_keys"),
    Kind("sudoers drop-in", "sudoers",
         "rm -f /etc/sudoers.d/cfkinds",
         "test -f /etc/sudoers.d/cfkinds"),
    Kind("sysctl", "sysctl",
         "echo 0 > /proc/sys/net/ipv4/ip_forward",
         "test \"$(cat /proc/sys/net/ipv4/ip_forward)\" = 1"),
    Kind("nftables ruleset", "nftables",
         "nft flush ruleset",
         "nft list table inet cfkinds >/dev/null"),
    Kind("nginx site link", "nginx site",
         "rm -f /etc/nginx/sites-enabled/cfkinds",
         "test -L /etc/nginx/sites-enabled/cfkinds"),
    Kind("postgres database", "PostgreSQL database",
         "runuser -u postgres -- psql -XAtq -c 'DROP DATABASE cfkinds'",
         "runuser -u postgres -- psql -XAtq -c \"SELECT 1 FROM pg_database WHERE datname = 'cfkinds'\" "
         "| grep -q 1"),
    Kind("timezone", "Timezone",
         "ln -sfn /usr/share/zoneinfo/Etc/UTC /etc/localtime",
         "test \"$(readlink /etc/localtime)\" = /usr/share/zoneinfo/Europe/Paris"),
]


def site_text(machine):
    """The site: one host, the container MACHINE, over [:local [:nspawn …] :python]."""
    def q(s):
        return json.dumps(s)
    return f"""(require consfig *)
(import consfig *)
(use-props consfig.props [os ssh sshd sudoers sysctl nftables nginx postgres timezone])

(defhost {HOSTNAME} {{:deploy [:local [:nspawn :machine {q(machine)}] [:python :install True]]}}
  "A small web+db server."
  (os.debian-stable {q(host_suite())} :{host_arch()})
  (sshd.configured "PasswordAuthentication" "no")
  (ssh.authorized-keys "root" {q(KEY)})
  (sudoers.drop-in "cfkinds" "root ALL=(ALL:ALL) ALL\\n")
  (sysctl.has-value "net.ipv4.ip_forward" 1)
  (nftables.has-ruleset {q(RULESET)})
  (nginx.site-enabled "cfkinds" {q(SITE_CONF)})
  (postgres.has-role "cfkinds" :login True)
  (postgres.has-database "cfkinds" :owner "cfkinds")
  (timezone.configured "Europe/Paris"))
"""


def inside(machine, script, timeout=120):
    from consfig.connections.nspawn import enter_argv
    return subprocess.run(enter_argv(machine, ["/bin/sh", "-c", script]), capture_output=True,
                          text=True, timeout=timeout)


@contextlib.contextmanager
def site_container(tarball, workdir):
    """A container booted from TARBALL (an overlay in WORKDIR) with PACKAGES
    installed and a network of its own; its name.  Removed at the end."""
    from consfig.apply.combinators import eseqprops
    from consfig.props import apt, container, service
    name = f"cfkinds{os.getpid()}"
    box, root = overlay_copy(tarball, workdir)
    try:
        deploy_propspec([[K("chroot"), K("into"), str(root)]],
                        eseqprops(this_os(), service.without_starting_services(
                            apt.installed(*PACKAGES))))
        outcome, events = deploy_propspec(
            [K("local")],
            container.nspawn_running(name, {K("root"): str(root),
                                            K("settings"): {"Network": {"Private": True}}},
                                     this_os()),
            check=False)
        assert outcome.status != "failed", failure_text(events)
        yield name
    finally:
        deploy_propspec([K("local")], container.nspawn_stopped(name), check=False)
        for p in [f"/var/lib/machines/{name}", f"/etc/systemd/nspawn/{name}.nspawn"]:
            if os.path.islink(p) or os.path.isfile(p):
                os.unlink(p)
        keep_debs(root, tarball)
        remove_tree(box)


class Converging:
    """`consfig converge --json` of the site in MACHINE, its events read as
    they come."""

    def __init__(self, machine, workdir, *, interval=600):
        self.machine = machine
        self.site = os.path.join(workdir, "cfkinds-site.hy")
        with open(self.site, "w") as f:
            f.write(site_text(machine))
        self.events = []
        self.lock = threading.Condition()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "consfig", "converge", "--consfig", self.site, HOSTNAME,
             "--json", "--interval", str(interval)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self.lock:
                self.events.append(event)
                self.lock.notify_all()

    def of(self, what):
        with self.lock:
            return [e for e in self.events if e.get("event") == "converge" and e.get("what") == what]

    def wait_for(self, test, timeout, what):
        deadline = time.monotonic() + timeout
        with self.lock:
            while True:
                found = test()
                if found:
                    return found
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    tail = self.events[-5:]
                    raise AssertionError(f"{what}: not within {timeout} s (agent exit "
                                         f"{self.proc.poll()}); last events {tail}; stderr "
                                         f"{self.proc.stderr.read() if self.proc.poll() is not None else ''}")
                self.lock.wait(min(left, 0.5))

    def __enter__(self):
        self.wait_for(lambda: [e for e in self.events if e.get("event") == "converge"
                               and e.get("what") == "watching"], 900, "the agent to watch")
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)

    def failures(self):
        return self.of("failed")

    def break_and_wait(self, kind, timeout=30):
        """Break KIND, wait for its repair; the seconds it took."""
        seen = len(self.of("repaired"))
        # Stamped in the container just before the break (the same clock):
        # entering it is no part of the repair.
        r = inside(self.machine, f"date +%s.%N && {kind.breaking}")
        assert r.returncode == 0, f"breaking {kind.name}: {r.stderr}"
        start = float(r.stdout.split()[0])

        def repaired():
            return [e for e in self.of("repaired")[seen:] if kind.desc in (e.get("desc") or "")]
        event = self.wait_for(repaired, timeout, f"the agent to repair {kind.name}")[0]
        taken = event["time"] - start
        r = inside(self.machine, kind.holds)
        assert r.returncode == 0, f"{kind.name} repaired, yet it does not hold: {r.stdout}{r.stderr}"
        return taken


def tempdir():
    return tempfile.mkdtemp(prefix="cfkinds-")
