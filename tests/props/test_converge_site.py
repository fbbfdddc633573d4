"""The converging agent through the real CLI (`consfig converge`) keeps a
small web+db server in a booted container (tests/props/repairkinds.py):
sshd_config, authorized_keys, a sudoers drop-in, a sysctl, the nftables
ruleset, an nginx site link, a postgres database and the timezone are each
broken in turn and each is repaired; the time each took is printed
(`pytest -s`) and bounded.  Also, in the same container: a stopped
PostgreSQL cluster is started by `postgres.cluster-present`."""

import shutil

import pytest

import hy  # noqa: F401
from consfig.apply.combinators import eseqprops
from consfig.props import postgres

from harness import unavailable
from proptest import deploy_propspec, failure_text, this_os
from repairkinds import KINDS, Converging, inside, site_container

pytestmark = [pytest.mark.chroot, pytest.mark.slow]

# Every kind within this, as issue 31 asks: the 1 s polls of sysctl and
# nftables and the 2 s poll of postgres included.  Generous for a loaded CI
# machine; the bench reports the real figures.
BOUND = 10


@pytest.fixture(scope="module")
def machine(debian_chroot_tarball, tmp_path_factory):
    if not shutil.which("systemd-nspawn"):
        unavailable("systemd-nspawn is not installed (apt-get install systemd-container)")
    with site_container(debian_chroot_tarball, tmp_path_factory.mktemp("kinds")) as name:
        yield name


def test_the_agent_repairs_each_kind_of_breakage_of_a_small_server(machine, tmp_path):
    with Converging(machine, str(tmp_path)) as agent:
        taken = {k.name: agent.break_and_wait(k, timeout=60) for k in KINDS}
        print("\nrepair times (s): " + ", ".join(f"{k} {t:.3f}" for k, t in taken.items()))
        assert not agent.failures(), agent.failures()
    slow = {k: t for k, t in taken.items() if t > BOUND}
    assert not slow, f"repaired, but slower than {BOUND} s: {slow}"


def test_a_stopped_cluster_is_started_by_cluster_present(machine):
    version = inside(machine, "pg_lsclusters -h | cut -d' ' -f1").stdout.split()[0]
    r = inside(machine, f"pg_ctlcluster {version} main stop")
    assert r.returncode == 0, r.stderr
    chain = [[hy.models.Keyword("nspawn"), hy.models.Keyword("machine"), machine]]
    p = postgres.cluster_present(version, "main")
    outcome, events = deploy_propspec(chain, eseqprops(this_os(), p), check_mode=True)
    assert outcome.exit_code(True) == 2, "check mode sees the stopped cluster"
    outcome, events = deploy_propspec(chain, eseqprops(this_os(), p), check=False)
    assert outcome.status == "changed", failure_text(events)
    status = inside(machine, "pg_lsclusters -h").stdout
    assert " online " in status, status
