"""The dataspace kept live by real `consfig converge HOST` processes over
[:local :python], on a real etcd: an observer's facets follow the records
as they come and go, an agent's records die with it (its lease runs out),
and an observer that loses etcd keeps its last view and says why."""

import base64
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "converge"))
sys.path.insert(0, os.path.join(HERE, "..", "ui"))

from agentcli import Converging  # noqa: E402
from clirun import REPO  # noqa: E402
from etcdlab import EtcdCluster, etcdctl  # noqa: E402
from harness import wait_until  # noqa: E402

TTL = 3


def site(tmp_path, etcd, out, ttl=TTL):
    path = tmp_path / "site.hy"
    path.write_text(f"""(require consfig *)
(import consfig *)
(use-props consfig.props [dataspace file])
(defdataspace {{:endpoints [{" ".join(f'"{e}"' for e in etcd.endpoints)}] :prefix "/consfig/live" :ttl {ttl}}})
(defassertion web-backend [#^ hostname host #^ ip-address addr #^ port port])
(defproplist upstream-file [#^ (list-of (dict-of string anything)) backends]
  (file.has-content "{out}/upstream.conf"
    (+ "upstream app {{\\n" (.join "" (gfor b backends f"  server {{(get b "addr")}}:{{(get b "port")}};\\n")) "}}\\n")))
(defproplist backend-file [#^ ip-address addr #^ port port]
  (file.exists-with-content f"{out}/{{addr}}" f"{{port}}\\n"))
(defhost web1.example.org {{:deploy [:local :python]}}
  (dataspace.asserted (web-backend "web1.example.org" "10.0.0.5" 8080)))
(defhost web2.example.org {{:deploy [:local :python]}}
  (dataspace.asserted (web-backend "web2.example.org" "10.0.0.6" 8080)))
(defhost lb.example.org {{:deploy [:local :python]}}
  (during (dataspace.collected (web-backend :addr ?addr :port ?port) ?backends)
    (upstream-file ?backends))
  (during (dataspace.observed (web-backend :addr ?addr :port ?port))
    (backend-file ?addr ?port)))
""")
    return path


def consfig(*args):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    r = subprocess.run([sys.executable, "-m", "consfig", *map(str, args)], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def upstream(out):
    try:
        return (out / "upstream.conf").read_text()
    except FileNotFoundError:
        return None


def test_an_observing_agent_follows_records_as_they_come_and_go(tmp_path, etcd):
    out = tmp_path / "out"
    out.mkdir()
    s = site(tmp_path, etcd, out)
    consfig("deploy", "--consfig", s, "web1.example.org")
    with Converging(tmp_path, "--consfig", s, "lb.example.org", name="lb"):
        assert upstream(out) == "upstream app {\n  server 10.0.0.5:8080;\n}\n", upstream(out)
        consfig("deploy", "--consfig", s, "web2.example.org")
        wait_until(lambda: upstream(out) == ("upstream app {\n  server 10.0.0.5:8080;\n"
                                             "  server 10.0.0.6:8080;\n}\n"),
                   10, "the set form to take the new record")
        wait_until(lambda: (out / "10.0.0.6").exists(), 10, "a facet for the new record")
        consfig("deploy-these", "--consfig", s, "web2.example.org",
                '(unapplied (dataspace.asserted (web-backend "web2.example.org" "10.0.0.6" 8080)))')
        wait_until(lambda: not (out / "10.0.0.6").exists(), 10, "the facet retracted")
        wait_until(lambda: upstream(out) == "upstream app {\n  server 10.0.0.5:8080;\n}\n",
                   10, "the set form without it")


def _observed_and_held_by_its_agent(out, etcd):
    """Wait until the observer's view has web2, and web2's record is held by
    its agent's lease: the agent moves its records to a lease of the
    site's :ttl."""
    wait_until(lambda: (out / "10.0.0.6").exists(), 15, "the observer to see web2")
    wait_until(lambda: _lease_ttl(etcd, "web2.example.org") <= TTL, 15,
               "web2's record to be held by its agent's short lease")


def test_an_agents_records_die_with_it_within_the_lease(tmp_path, etcd):
    out = tmp_path / "out"
    out.mkdir()
    s = site(tmp_path, etcd, out)
    with Converging(tmp_path, "--consfig", s, "lb.example.org", name="lb"):
        with Converging(tmp_path, "--consfig", s, "web2.example.org", name="web2") as web2:
            _observed_and_held_by_its_agent(out, etcd)
            web2.proc.send_signal(signal.SIGKILL)
            web2.proc.wait(10)
            killed = time.monotonic()
            wait_until(lambda: not (out / "10.0.0.6").exists(), TTL + 10,
                       "the observer to retract web2's facet")
            took = time.monotonic() - killed
            assert took <= TTL + 2, f"retracted {took:.1f} s after the kill (TTL {TTL} s)"


def _etcdctl(etcd, *args):
    """etcdctl ARGS against the cluster, from outside consfig: its output."""
    return etcdctl(etcd.endpoints, *args, check=True).stdout


def _lease_ttl(etcd, host):
    kv = _kv(etcd, host)
    if not kv:
        return 10 ** 9
    lease = format(kv["lease"], "x")
    return json.loads(_etcdctl(etcd, "lease", "timetolive", lease, "-w", "json")).get(
        "granted-ttl", 10 ** 9)


def test_an_observer_that_loses_etcd_keeps_its_view_and_resumes(tmp_path, etcd):
    out = tmp_path / "out"
    out.mkdir()
    s = site(tmp_path, etcd, out)
    consfig("deploy", "--consfig", s, "web1.example.org")
    with Converging(tmp_path, "--consfig", s, "lb.example.org", name="lb") as lb:
        assert (out / "10.0.0.5").exists()
        etcd.stop(0)
        wait_until(lambda: any("dataspace unavailable" in e.get("message", "")
                               for e in lb.of("dataspace")), 15, "the agent to say why")
        assert (out / "10.0.0.5").exists(), "retracted nothing"
        assert upstream(out) == "upstream app {\n  server 10.0.0.5:8080;\n}\n", upstream(out)
        etcd.start(0)
        etcd.wait_healthy()
        wait_until(lambda: any(e.get("message") == "dataspace available"
                               for e in lb.of("dataspace")), 15, "the agent to find it again")
        assert (out / "10.0.0.5").exists(), "the push's lease still holds web1's record"


def _kv(etcd, host):
    kvs = json.loads(_etcdctl(etcd, "get", "--prefix", f"/consfig/live/hosts/{host}/",
                              "-w", "json")).get("kvs", [])
    return kvs[0] if kvs else None


def test_an_observing_agent_reads_each_change_from_its_watch_not_from_etcd_again(tmp_path, etcd):
    # One range of every record a change, in every observer of a fleet, is
    # n² reads a round: the agent keeps its view from the watch's events.
    out = tmp_path / "out"
    out.mkdir()
    s = site(tmp_path, etcd, out)
    consfig("deploy", "--consfig", s, "web1.example.org")
    key = _kv(etcd, "web1.example.org")
    name, value = (base64.b64decode(key[k]).decode() for k in ("key", "value"))
    with Converging(tmp_path, "--consfig", s, "lb.example.org", name="lb"):
        assert (out / "10.0.0.5").exists()
        before = etcd.grpc_handled("Range")
        for i in range(5):
            _etcdctl(etcd, "del", name)
            wait_until(lambda: not (out / "10.0.0.5").exists(), 15, "the observer to retract web1")
            _etcdctl(etcd, "put", name, value)
            wait_until(lambda: (out / "10.0.0.5").exists(), 15, "the observer to see web1 again")
        ranges = etcd.grpc_handled("Range") - before
    assert ranges <= 2, f"the observer read etcd {ranges:.0f} times for 10 changes"


def test_an_observer_whose_etcd_restarts_between_two_keep_alives_follows_on(tmp_path, etcd):
    # With a TTL of 60 s the agent's keeper asks etcd every 20 s: the member
    # stops and starts again in between, and the watch's stream with it.
    # The observer must notice its watch ended, not wait for the keeper.
    out = tmp_path / "out"
    out.mkdir()
    s = site(tmp_path, etcd, out, ttl=60)
    with Converging(tmp_path, "--consfig", s, "lb.example.org", name="lb"):
        etcd.stop(0)
        etcd.start(0)
        etcd.wait_healthy()
        consfig("deploy", "--consfig", s, "web1.example.org")
        wait_until(lambda: (out / "10.0.0.5").exists(), 10,
                   "the observer to see web1 (its keeper asks etcd only every 20 s)")


def test_an_agent_that_restarts_within_its_lease_leaves_no_gap(tmp_path, etcd):
    out = tmp_path / "out"
    out.mkdir()
    # A TTL that outlasts an agent's start on a loaded machine.
    s = site(tmp_path, etcd, out, ttl=60)
    with Converging(tmp_path, "--consfig", s, "web2.example.org", name="web2a"):
        wait_until(lambda: _lease_ttl(etcd, "web2.example.org") == 60, 30,
                   "web2's record under its agent's lease")
        before = _kv(etcd, "web2.example.org")
    with Converging(tmp_path, "--consfig", s, "web2.example.org", name="web2b"):
        wait_until(lambda: _lease_ttl(etcd, "web2.example.org") == 60, 30,
                   "web2's record under the new agent's lease")
        after = _kv(etcd, "web2.example.org")
    # Deleted and put again, a key gets a new create_revision: it never was.
    assert after["create_revision"] == before["create_revision"], (before, after)


def test_an_observer_follows_on_when_the_member_it_watched_through_stops(tmp_path):
    # The agents talk to the first member that answers: the observer's
    # watch is on m0.  With m0 gone the cluster has quorum still, and a
    # record that goes must go from the observer's view too.
    out = tmp_path / "out"
    out.mkdir()
    with EtcdCluster(tmp_path / "etcd", members=3) as etcd:
        s = site(tmp_path, etcd, out)
        with Converging(tmp_path, "--consfig", s, "lb.example.org", name="lb"):
            with Converging(tmp_path, "--consfig", s, "web2.example.org", name="web2") as web2:
                _observed_and_held_by_its_agent(out, etcd)
                etcd.stop(0)
                web2.proc.send_signal(signal.SIGKILL)
                web2.proc.wait(10)
                wait_until(lambda: not (out / "10.0.0.6").exists(), TTL + 10,
                           "the observer to retract web2's facet with m0 down")


def test_a_member_that_hangs_never_lets_an_agents_lease_run_out(tmp_path):
    # The agent talks to m0 first.  Stopped (SIGSTOP, as a frozen VM or a
    # partition that drops packets), m0 takes connections and answers
    # nothing: the keep-alive must reach m1 or m2 within the lease's TTL,
    # or etcd deletes the record and every observer drops the host.
    # m0 must not lead: Debian's etcd (3.4.23) has a leader that hung
    # revoke, as it wakes, the leases that ran out in its eyes
    # (etcd-io/etcd#15247, fixed in 3.4.28).  What the agent does then is
    # test_an_agent_whose_lease_is_revoked_puts_its_record_again.
    out = tmp_path / "out"
    out.mkdir()
    with EtcdCluster(tmp_path / "etcd", members=3) as etcd:
        etcd.lead_elsewhere(0)
        s = site(tmp_path, etcd, out)
        with Converging(tmp_path, "--consfig", s, "web2.example.org", name="web2") as web2:
            wait_until(lambda: _lease_ttl(etcd, "web2.example.org") <= TTL, 15,
                       "web2's record to be held by its agent's short lease")
            before = _kv(etcd, "web2.example.org")
            etcd.procs[0].send_signal(signal.SIGSTOP)
            try:
                # Three TTLs: time enough for etcd to delete it thrice over.
                deadline = time.monotonic() + 3 * TTL
                wait_until(lambda: time.monotonic() > deadline or web2.ended(), 4 * TTL,
                           "three TTLs to pass")
            finally:
                etcd.procs[0].send_signal(signal.SIGCONT)
            assert not web2.ended(), web2.stderr()[-3000:]
            after = _kv(etcd, "web2.example.org")
    assert after and after["create_revision"] == before["create_revision"], \
        f"web2's record was deleted while m0 hung, and put again: {before} then {after}"


def test_an_agent_whose_lease_is_revoked_puts_its_record_again(tmp_path, etcd):
    # etcd revokes a lease it thinks has run out, even while its holder
    # renews it: etcd before 3.4.28 and 3.5.11 does so when a leader that
    # hung wakes up (etcd-io/etcd#15247).  The agent must hold its record
    # again, under a new lease, within about a TTL.
    out = tmp_path / "out"
    out.mkdir()
    s = site(tmp_path, etcd, out)
    with Converging(tmp_path, "--consfig", s, "web2.example.org", name="web2") as web2:
        wait_until(lambda: _lease_ttl(etcd, "web2.example.org") <= TTL, 15,
                   "web2's record to be held by its agent's short lease")
        before = _kv(etcd, "web2.example.org")
        _etcdctl(etcd, "lease", "revoke", format(before["lease"], "x"))
        again = wait_until(lambda: _kv(etcd, "web2.example.org"), 3 * TTL,
                           "the agent to put web2's record again")
        # Deleted with its lease and put again: a new key, a new lease.
        assert again["create_revision"] > before["create_revision"], (before, again)
        assert again["lease"] != before["lease"], (before, again)
        wait_until(lambda: _lease_ttl(etcd, "web2.example.org") <= TTL, 3 * TTL,
                   "the new record to be held by the agent's short lease")
        assert not web2.ended(), web2.stderr()[-3000:]


def test_an_observer_without_quorum_says_the_dataspace_is_unavailable(tmp_path):
    # An observer holds no lease: its agent asks etcd's status instead, which
    # a member answers on its own, quorum or not.  Two of three gone, the
    # one left answers and has no leader.
    out = tmp_path / "out"
    out.mkdir()
    with EtcdCluster(tmp_path / "etcd", members=3) as etcd:
        s = site(tmp_path, etcd, out)
        consfig("deploy", "--consfig", s, "web1.example.org")
        with Converging(tmp_path, "--consfig", s, "lb.example.org", name="lb") as lb:
            assert (out / "10.0.0.5").exists()
            etcd.stop(0)
            etcd.stop(1)
            said = wait_until(lambda: [e for e in lb.of("dataspace")
                                       if "dataspace unavailable" in e.get("message", "")],
                              3 * TTL, "the agent to say why")
            assert "no leader" in said[0]["message"], said[0]
            assert (out / "10.0.0.5").exists(), "retracted nothing"
