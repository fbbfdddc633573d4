"""mariadb: the real MariaDB server installed in the test chroot, then
databases, users with passwords from data and grants in it, running.

As for postgres (see test_postgres.py), the server runs through a bind
mount of the chroot, so that it outlives each deployment's :chroot hop,
which ends every process rooted in the chroot; the properties reach it over
its socket in the chroot's /run/mysqld.  It listens on no network, and is
stopped, and the mount removed, when the module is done."""

import json
import pathlib
import subprocess
import tempfile

import pytest

import hy  # noqa: F401
from hy.models import Keyword as K
from consfig.data.items import reset_data_sources
from consfig.errors import PropspecError
from consfig.props import mariadb, service

from harness import wait_until
from proptest import (CHROOT_ENV, HOSTNAME, apply_twice, checks_clean, data_item, deploy_propspec, failure_text,
                      in_chroot, rooted_in, said, this_os, unapply, unmount_below)

pytestmark = pytest.mark.chroot

PASSWORD = "app-pw-'; DROP DATABASE app; --"


class Server:
    """mariadbd, run through VIEW, a bind mount of the chroot."""

    def __init__(self, root):
        self.root = root
        self.view = pathlib.Path(tempfile.mkdtemp(prefix="consfig-dbview-"))
        self.proc = None

    def _sh(self, *argv):
        subprocess.run(argv, check=True, timeout=120, capture_output=True, env=CHROOT_ENV)

    def start(self):
        self._sh("mount", "--bind", str(self.root), str(self.view))
        self._sh("mount", "--make-private", str(self.view))
        self._sh("mount", "-t", "proc", "proc", str(self.view / "proc"))
        self._sh("mount", "--bind", "/dev", str(self.view / "dev"))
        self._sh("chroot", str(self.view), "install", "-d", "-o", "mysql", "-g", "mysql",
                 "/run/mysqld")
        self.proc = subprocess.Popen(
            ["chroot", str(self.view), "/usr/sbin/mariadbd", "--user=mysql", "--skip-networking",
             "--socket=/run/mysqld/mysqld.sock", "--pid-file=/run/mysqld/mysqld.pid"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=CHROOT_ENV)
        wait_until(lambda: (self.root / "run/mysqld/mysqld.sock").exists()
                   or self.proc.poll() is not None, 60, "the server's socket")
        assert self.proc.poll() is None, "mariadbd did not start"

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=60)
        wait_until(lambda: not rooted_in(self.view), 30, "the server to stop")
        unmount_below(self.view)
        self.view.rmdir()


@pytest.fixture(scope="module")
def root(debian_chroot, chroot_chain):
    deploy_propspec(chroot_chain, [this_os(), service.without_starting_services(mariadb.installed())])
    return debian_chroot


@pytest.fixture(scope="module")
def server(root):
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


def query(root, q):
    return in_chroot(root, "mariadb --batch --skip-column-names", input=q).stdout


def test_without_a_server_it_says_the_properties_do_not_start_one(chroot_chain, root):
    # The first test of the module: its server is not started yet.
    assert not (root / "run/mysqld/mysqld.sock").exists()
    outcome, events = deploy_propspec(chroot_chain, mariadb.has_database("x"), check=False)
    assert outcome.status == "failed"
    assert "these properties do not start it" in failure_text(events)


def test_a_database_a_user_and_grants_then_nothing_to_do(chroot_chain, root, server, tmp_path):
    data_item(tmp_path, f"--mariadb-passwd--{HOSTNAME}", "app", PASSWORD + "\n")
    spec = [mariadb.has_database("app", charset="utf8mb4", collation="utf8mb4_unicode_ci"),
            mariadb.has_user("app"),
            mariadb.has_grant("app", "app", K("select"), K("insert"), K("update"))]
    events = apply_twice(chroot_chain, spec)
    # With the server the module's root installed.
    checks_clean(chroot_chain, [this_os(), service.without_starting_services(mariadb.installed()), *spec])
    assert query(root, "SHOW DATABASES LIKE 'app';") == "app\n"
    grants = query(root, "SHOW GRANTS FOR 'app'@'localhost';")
    assert "GRANT SELECT, INSERT, UPDATE ON `app`.* TO `app`@`localhost`" in grants, grants
    assert PASSWORD not in json.dumps(events), "the password is in no event"
    login = in_chroot(root, "mariadb -u app --password=\"$(cat)\" -e 'SELECT CURRENT_USER()' app",
                      input=PASSWORD, check=False)
    assert login.returncode == 0 and "app@localhost" in login.stdout, login.stderr


def test_a_changed_password_is_set_again(chroot_chain, root, server, tmp_path):
    data_item(tmp_path, f"--mariadb-passwd--{HOSTNAME}", "rot", "first\n")
    deploy_propspec(chroot_chain, mariadb.has_user("rot"))
    reset_data_sources()
    data_item(tmp_path, f"--mariadb-passwd--{HOSTNAME}", "rot", "second\n")
    outcome, events = deploy_propspec(chroot_chain, mariadb.has_user("rot"))
    assert outcome.status == "changed"
    assert query(root, "SELECT authentication_string FROM mysql.user WHERE User='rot';").strip() == \
        mariadb.native_password_hash("second")


def test_check_mode_says_what_would_be_made_and_makes_nothing(chroot_chain, root, server, tmp_path):
    data_item(tmp_path, f"--mariadb-passwd--{HOSTNAME}", "ghost", "pw\n")
    outcome, events = deploy_propspec(chroot_chain, [mariadb.has_database("ghostdb"),
                                                     mariadb.has_user("ghost")], check_mode=True)
    assert outcome.exit_code(True) == 2
    assert "database ghostdb would be created" in said(events)
    assert "user 'ghost'@'localhost' would be created" in said(events)
    assert query(root, "SHOW DATABASES LIKE 'ghostdb';") == ""


def test_a_grant_to_a_user_that_is_not_there_fails_saying_so(chroot_chain, root, server):
    outcome, events = deploy_propspec(chroot_chain, mariadb.has_grant("app", "nobody", K("all")),
                                      check=False)
    assert outcome.status == "failed"
    assert "there is no user 'nobody'@'localhost' to grant to" in failure_text(events)


def test_unapplying_revokes_drops_the_user_and_the_test_database(chroot_chain, root, server, tmp_path):
    data_item(tmp_path, f"--mariadb-passwd--{HOSTNAME}", "tmp", "pw\n")
    props = [mariadb.has_database("tmpdb"), mariadb.has_user("tmp", host="%"),
             mariadb.has_grant("tmpdb", "tmp", K("all"), host="%")]
    apply_twice(chroot_chain, props)
    assert "ALL PRIVILEGES ON `tmpdb`.*" in query(root, "SHOW GRANTS FOR 'tmp'@'%';")
    unapply(chroot_chain, list(reversed(props)))
    assert query(root, "SELECT count(*) FROM mysql.user WHERE User='tmp';") == "0\n"
    assert query(root, "SHOW DATABASES LIKE 'tmpdb';") == ""
    unapply(chroot_chain, mariadb.has_database("app"))
    assert query(root, "SHOW DATABASES LIKE 'app';") == "", "the test database is removed"


def test_server_settings_are_checked_by_the_server_before_they_are_written(chroot_chain, root):
    good = mariadb.has_server_settings({"max_connections": "200", "bind-address": "127.0.0.1"})
    events = apply_twice(chroot_chain, good)
    checks_clean(chroot_chain, good)
    cnf = root / "etc/mysql/mariadb.conf.d/90-consfig.cnf"
    assert cnf.read_text() == ("# Written by consfig.\n[mysqld]\nbind-address = 127.0.0.1\n"
                               "max_connections = 200\n")
    assert "--max_connections=200" in in_chroot(root, "my_print_defaults --mysqld").stdout
    assert "restart it" in said(events)
    outcome, events = deploy_propspec(chroot_chain, mariadb.has_server_settings({"no-such-option": "1"}),
                                      check=False)
    assert outcome.status == "failed"
    assert "mariadbd refuses these settings; nothing was written" in failure_text(events)
    assert "no-such-option" in failure_text(events)
    assert "max_connections = 200" in cnf.read_text()
    unapply(chroot_chain, good)
    assert not cnf.exists()


@pytest.mark.parametrize("bad", [
    lambda: mariadb.has_database("app`; DROP DATABASE x; --"),
    lambda: mariadb.has_database("a-b"),
    lambda: mariadb.has_database("app", charset="utf8'"),
    lambda: mariadb.has_user("app'@'%"),
    lambda: mariadb.has_user("-app"),
    lambda: mariadb.has_user("app", host="local host"),
    lambda: mariadb.has_user("app", host="x'; --"),
    lambda: mariadb.has_grant("app", "app"),
    lambda: mariadb.has_grant("app", "app", K("grant-option")),
    lambda: mariadb.has_grant("app", "app", "SELECT"),
    lambda: mariadb.has_server_settings({}),
    lambda: mariadb.has_server_settings({"port": "3306\n[client]"}),
    lambda: mariadb.has_server_settings({"Port": "3306"}),
])
def test_hostile_arguments_are_refused_where_written(bad):
    with pytest.raises(PropspecError):
        bad()
