"""postgres: a cluster made with Debian's tooling in the test chroot, then
roles, passwords, databases and pg_hba.conf rules in its real, running
server.

The :chroot hop ends every process rooted in the chroot when it closes, as
it must.  So the test starts the server through a bind mount of the chroot
(another root, the same files): it outlives each deployment, and the
properties reach it through its socket in the chroot's /var/run/postgresql.
It listens on a free port of this machine's loopback, and is stopped, and
the mount removed, when the module is done."""

import pathlib
import subprocess
import tempfile

import pytest

import hy  # noqa: F401
from consfig.data.items import reset_data_sources
from consfig.errors import PropspecError
from consfig.props import postgres, service

from harness import wait_until
from sshlab import free_port
from proptest import (CHROOT_ENV, HOSTNAME, apply_twice, data_item, deploy_propspec, diffs, failure_text,
                      in_chroot, rooted_in, said, this_os, unapply, unmount_below)

pytestmark = pytest.mark.chroot

VERSION = "15"
CLUSTER = f"{VERSION}/consfig"


class Server:
    """The cluster's postmaster, run through VIEW, a bind mount of the chroot."""

    def __init__(self, root):
        self.root = root
        self.view = pathlib.Path(tempfile.mkdtemp(prefix="consfig-pgview-"))

    def _sh(self, *argv):
        subprocess.run(argv, check=True, timeout=120, capture_output=True, env=CHROOT_ENV)

    def start(self):
        self._sh("mount", "--bind", str(self.root), str(self.view))
        # Private, so that what is mounted below it stays there and no
        # unmount travels back to the chroot or this machine.
        self._sh("mount", "--make-private", str(self.view))
        self._sh("mount", "-t", "proc", "proc", str(self.view / "proc"))
        self._sh("mount", "--bind", "/dev", str(self.view / "dev"))
        self._sh("chroot", str(self.view), "pg_ctlcluster", VERSION, "consfig", "start")

    def stop(self):
        subprocess.run(["chroot", str(self.view), "pg_ctlcluster", VERSION, "consfig", "stop",
                        "-m", "fast"], timeout=120, capture_output=True, env=CHROOT_ENV)
        wait_until(lambda: not rooted_in(self.view), 30, "the server to stop")
        unmount_below(self.view)
        self.view.rmdir()


def sql(root, query, *, check=True):
    return in_chroot(root, "runuser -u postgres -- psql --cluster " + CLUSTER
                     + " -XAtq -d postgres", input=query, check=check)


@pytest.fixture(scope="module")
def root(debian_chroot, chroot_chain):
    # Debian's own cluster `main` is made but never started here.
    deploy_propspec(chroot_chain, [this_os(), service.without_starting_services(
        postgres.installed())])
    return debian_chroot


@pytest.fixture(scope="module")
def port():
    return free_port()


@pytest.fixture(scope="module")
def server(root, chroot_chain, port):
    deploy_propspec(chroot_chain, [this_os(), postgres.cluster_present(VERSION, "consfig",
                                                                       port=port)])
    # No POSIX shared memory: the view has this machine's /dev, not its /dev/shm.
    (root / "etc/postgresql" / CLUSTER / "conf.d/test.conf").write_text(
        "dynamic_shared_memory_type = mmap\n")
    s = Server(root)
    s.start()
    try:
        yield s
    finally:
        s.stop()
    assert not rooted_in(s.view), "no server process is left"


@pytest.fixture(autouse=True)
def no_sources():
    reset_data_sources()
    yield
    reset_data_sources()


def test_cluster_is_made_and_not_started_in_a_chroot(chroot_chain, root, port):
    events = apply_twice(chroot_chain, [this_os(), postgres.cluster_present(VERSION, "made",
                                                                            port=port + 1)])
    listed = in_chroot(root, "pg_lsclusters -h").stdout
    assert [VERSION, "made", str(port + 1), "down"] in [l.split()[:4] for l in listed.splitlines()], \
        listed
    assert f"not starting cluster {VERSION}/made: services are not started in a chroot" in said(events)


def test_a_cluster_there_on_another_port_is_a_failure(chroot_chain, server, port):
    outcome, events = deploy_propspec(
        chroot_chain, [this_os(), postgres.cluster_present(VERSION, "consfig", port=port + 7)],
        check=False)
    assert outcome.status == "failed"
    assert f"cluster {CLUSTER} is there on port {port}, not {port + 7}" in failure_text(events)


def test_role_is_created_with_its_attributes_and_changed(chroot_chain, root, server):
    apply_twice(chroot_chain, postgres.has_role("app", login=True, createdb=True, cluster=CLUSTER))
    q = "SELECT rolcanlogin, rolcreatedb, rolsuper FROM pg_roles WHERE rolname = 'app'"
    assert sql(root, q).stdout == "t|t|f\n"
    apply_twice(chroot_chain, postgres.has_role("app", createdb=False, cluster=CLUSTER))
    assert sql(root, q).stdout == "t|f|f\n", "login left as it was"


def test_check_mode_says_a_role_would_be_made_and_makes_none(chroot_chain, root, server):
    outcome, events = deploy_propspec(chroot_chain, postgres.has_role("ghost", cluster=CLUSTER),
                                      check_mode=True)
    assert outcome.exit_code(True) == 2
    assert "role ghost would be created" in said(events)
    assert sql(root, "SELECT count(*) FROM pg_roles WHERE rolname = 'ghost'").stdout == "0\n"


def test_unapplied_role_is_dropped(chroot_chain, root, server):
    deploy_propspec(chroot_chain, postgres.has_role("temp", cluster=CLUSTER))
    unapply(chroot_chain, postgres.has_role("temp", cluster=CLUSTER))
    assert sql(root, "SELECT count(*) FROM pg_roles WHERE rolname = 'temp'").stdout == "0\n"


@pytest.mark.parametrize("name", ['evil"; DROP ROLE app; --', "x'); SELECT pg_sleep(60); --",
                                  ":'role'", "-v", "$(touch /tmp/pwned)"])
def test_a_hostile_role_name_is_only_ever_a_name(chroot_chain, root, server, name):
    deploy_propspec(chroot_chain, postgres.has_role("app", cluster=CLUSTER))
    apply_twice(chroot_chain, postgres.has_role(name, cluster=CLUSTER))
    names = sql(root, "SELECT rolname FROM pg_roles").stdout.splitlines()
    assert name in names and "app" in names, names
    assert not (root / "tmp/pwned").exists()
    unapply(chroot_chain, postgres.has_role(name, cluster=CLUSTER))
    assert name not in sql(root, "SELECT rolname FROM pg_roles").stdout.splitlines()


def login(root, port, role, password, *, check=True):
    return in_chroot(root, f"PGPASSWORD=\"$(cat)\" psql -XAt -h 127.0.0.1 -p {port} -U {role} "
                     "-d postgres -c 'SELECT current_user'", input=password, check=check)


@pytest.mark.parametrize("password", ["correct horse", "pässwörd ½ ＡＢＣ"])
def test_password_from_data_lets_the_role_log_in(tmp_path, chroot_chain, root, server, port,
                                                 password):
    data_item(tmp_path, "--postgres-passwd--" + HOSTNAME, "web", password + "\n")
    events = apply_twice(chroot_chain, [postgres.has_role("web", login=True, cluster=CLUSTER),
                                        postgres.has_password("web", cluster=CLUSTER)])
    assert password not in str(events), "the password is in no event"
    stored = sql(root, "SELECT rolpassword FROM pg_authid WHERE rolname = 'web'").stdout
    assert stored.startswith("SCRAM-SHA-256$4096:"), stored
    assert login(root, port, "web", password).stdout == "web\n"
    assert login(root, port, "web", "wrong", check=False).returncode != 0


def test_a_changed_password_is_set_again(tmp_path, chroot_chain, root, server, port):
    data_item(tmp_path, "_app", "db", "first\n")
    p = [postgres.has_role("shared", login=True, cluster=CLUSTER),
         postgres.has_password("shared", iden1="_app", iden2="db", cluster=CLUSTER)]
    deploy_propspec(chroot_chain, p)
    reset_data_sources()
    data_item(tmp_path, "_app", "db", "second\n")
    apply_twice(chroot_chain, p)
    assert login(root, port, "shared", "second").stdout == "shared\n"


def test_a_password_item_of_two_lines_is_refused_unshown(tmp_path, chroot_chain, server):
    data_item(tmp_path, "--postgres-passwd--" + HOSTNAME, "web", "one\ntwo-secret\n")
    outcome, events = deploy_propspec(chroot_chain, postgres.has_password("web", cluster=CLUSTER),
                                      check=False)
    assert outcome.status == "failed"
    assert "is not a password: it must be one line" in failure_text(events)
    assert "two-secret" not in str(events)


def test_database_is_created_with_owner_encoding_and_locale(chroot_chain, root, server):
    p = [postgres.has_role("owner1", cluster=CLUSTER),
         postgres.has_database("legacy", owner="owner1", encoding="LATIN1", locale="C",
                               cluster=CLUSTER)]
    apply_twice(chroot_chain, p)
    q = ("SELECT pg_get_userbyid(datdba), pg_encoding_to_char(encoding), datcollate "
         "FROM pg_database WHERE datname = 'legacy'")
    assert sql(root, q).stdout == "owner1|LATIN1|C\n"
    apply_twice(chroot_chain, postgres.has_database("legacy", owner="postgres", cluster=CLUSTER))
    assert sql(root, q).stdout == "postgres|LATIN1|C\n"


def test_the_agent_on_the_target_watches_the_directory_a_dropped_database_leaves(chroot_chain,
                                                                                 server):
    # Watched, a dropped database is repaired at once; polled, up to
    # postgres.POLL seconds later (issue 31's 2 s target for a repair).
    from consfig.model.context import applying
    from consfig.model.host import Host
    from consfig.model.property import propapp_watches
    from consfig.model.watchspec import arming
    from consfig.transport.chain import parse_chain, with_chain
    p = postgres.has_database("app", cluster=CLUSTER)
    base = ["path", f"/var/lib/postgresql/{CLUSTER}/base"]
    assert propapp_watches(p) == [["poll", postgres.POLL]], "on the controller, only the poll"
    with with_chain(parse_chain(chroot_chain)) as conns:
        with applying(Host(HOSTNAME, None), conns[-1]), arming():
            assert base in propapp_watches(p), propapp_watches(p)
            assert propapp_watches(postgres.has_database("app", cluster="15/none")) == [
                ["poll", postgres.POLL]], "a cluster not there yet is polled"


def test_a_database_of_another_encoding_is_a_failure_and_kept(chroot_chain, root, server):
    deploy_propspec(chroot_chain, postgres.has_database("utf", cluster=CLUSTER))
    outcome, events = deploy_propspec(
        chroot_chain, postgres.has_database("utf", encoding="LATIN1", locale="C", cluster=CLUSTER),
        check=False)
    assert outcome.status == "failed"
    assert "has encoding UTF8, not LATIN1; PostgreSQL cannot change that" in failure_text(events)
    assert sql(root, "SELECT count(*) FROM pg_database WHERE datname = 'utf'").stdout == "1\n"


def test_a_hostile_database_name_is_only_ever_a_name(chroot_chain, root, server):
    name = 'db"; DROP DATABASE utf; --'
    deploy_propspec(chroot_chain, postgres.has_database("utf", cluster=CLUSTER))
    apply_twice(chroot_chain, postgres.has_database(name, cluster=CLUSTER))
    names = sql(root, "SELECT datname FROM pg_database").stdout.splitlines()
    assert name in names and "utf" in names, names


HBA = f"/etc/postgresql/{CLUSTER}/pg_hba.conf"


def test_hba_rule_goes_first_but_after_postgres_and_takes_effect(chroot_chain, root, server,
                                                                port, tmp_path):
    data_item(tmp_path, "--postgres-passwd--" + HOSTNAME, "blocked", "pw\n")
    deploy_propspec(chroot_chain, [postgres.has_role("blocked", login=True, cluster=CLUSTER),
                                   postgres.has_password("blocked", cluster=CLUSTER)])
    assert login(root, port, "blocked", "pw").returncode == 0
    rule = "host   all blocked 127.0.0.1/32   reject"
    events = apply_twice(chroot_chain, postgres.hba_contains_lines(rule, cluster=CLUSTER))
    assert f"not reloading cluster {CLUSTER}: services are not started in a chroot" in said(events)
    assert [d["path"] for d in diffs(events)] == [HBA]
    rules = [l.split() for l in (root / HBA.lstrip("/")).read_text().splitlines()
             if l.strip() and not l.lstrip().startswith("#")]
    assert rules[0][:3] == ["local", "all", "postgres"], rules
    assert rules[1] == rule.split(), rules
    sql(root, "SELECT pg_reload_conf()")
    assert login(root, port, "blocked", "pw", check=False).returncode != 0, "rejected"
    unapply(chroot_chain, postgres.hba_contains_lines(rule, cluster=CLUSTER))
    assert "blocked" not in (root / HBA.lstrip("/")).read_text()
    sql(root, "SELECT pg_reload_conf()")
    assert login(root, port, "blocked", "pw").returncode == 0


def test_an_hba_rule_the_server_cannot_read_puts_the_old_file_back(chroot_chain, root, server):
    before = (root / HBA.lstrip("/")).read_bytes()
    outcome, events = deploy_propspec(
        chroot_chain, postgres.hba_contains_lines("host all all 10.0.0.0/8 frobnicate",
                                                  cluster=CLUSTER),
        check=False)
    assert outcome.status == "failed"
    assert f"{HBA} would be invalid; left unchanged" in failure_text(events), failure_text(events)
    assert "frobnicate" in failure_text(events), "the server says what it cannot read"
    assert (root / HBA.lstrip("/")).read_bytes() == before


def test_a_server_that_is_not_running_is_a_clear_failure(chroot_chain, server):
    outcome, events = deploy_propspec(chroot_chain, postgres.has_role("x", cluster="15/main"),
                                      check=False)
    assert outcome.status == "failed"
    assert "the server of 15/main is not running: start it (pg_ctlcluster 15 main start)" \
        in failure_text(events), failure_text(events)


def test_several_clusters_and_none_named_is_a_clear_failure(chroot_chain, server):
    outcome, events = deploy_propspec(chroot_chain, postgres.has_role("x"), check=False)
    assert outcome.status == "failed"
    assert "there are several PostgreSQL clusters" in failure_text(events)
    assert "say which with :cluster" in failure_text(events)


def test_a_cluster_that_is_not_there_is_a_clear_failure(chroot_chain, server):
    outcome, events = deploy_propspec(chroot_chain, postgres.has_role("x", cluster="15/nope"),
                                      check=False)
    assert outcome.status == "failed"
    assert "there is no PostgreSQL cluster 15/nope" in failure_text(events)


@pytest.mark.parametrize("call", [
    lambda: postgres.has_role("a\nb"),
    lambda: postgres.has_role("x" * 64),
    lambda: postgres.has_role("ok", cluster="15/main; rm -rf /"),
    lambda: postgres.has_role("ok", cluster="../../etc"),
    lambda: postgres.has_database("d", encoding="UTF8'; DROP"),
    lambda: postgres.has_database("d", locale="C\nx"),
    lambda: postgres.cluster_present("15", "-rf"),
    lambda: postgres.cluster_present("15; x", "main"),
    lambda: postgres.hba_contains_lines("host all all 0.0.0.0/0 trust\nlocal all all trust"),
    lambda: postgres.hba_contains_lines("host all all 0.0.0.0/0 trust # open"),
    lambda: postgres.hba_contains_lines("include /etc/passwd"),
])
def test_hostile_values_are_refused_when_written(call):
    with pytest.raises(PropspecError):
        call()


matches = getattr(postgres, hy.mangle("password-matches?"))


def test_scram_verifier_matches_its_password_only():
    v = postgres.scram_verifier("secret", salt=b"0123456789abcdef")
    assert matches(v, "secret", "r")
    assert not matches(v, "Secret", "r")
    assert not matches("", "secret", "r")
