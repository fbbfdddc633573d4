"""What pyinfra and Ansible users do ad hoc, through the consfig command
against the real SSH lab: `consfig run HOST… -- CMD…`, `consfig facts`,
`file.fetched` (a target's file to the controller) and the bounded waits of
`wait`."""

import json
import os
import pathlib
import shutil
import socket
import sys
import tempfile
import textwrap
import threading

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from clirun import consfig  # noqa: E402
from sshlab import free_port  # noqa: E402


@pytest.fixture
def site(sshlab, tmp_path):
    """A site of three hosts: two reached over the lab's SSH (one of them
    through a :python hop), one whose SSH server is not there."""
    path = tmp_path / "site.hy"
    path.write_text(textwrap.dedent(f"""\
        (require consfig *)
        (import consfig *)
        (use-props consfig.props [file wait fact])
        (defhost one.lab.test {{:deploy [[:ssh :config "{sshlab.config}" :host "lab"]]}})
        (defhost two.lab.test {{:deploy [[:ssh :config "{sshlab.config}" :host "lab"] :python]}})
        (defhost gone.lab.test {{:deploy [[:ssh :config "{sshlab.config}" :host "lab"
                                          :port {free_port()}]]}})
        """))
    return path


def test_run_runs_one_command_on_each_host_and_recaps_their_exit_status(site, sshlab):
    r = consfig("run", "--consfig", site, "one*", "two*", "--", "sh", "-c", "echo from $(id -un)")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count(f"from {sshlab.user}") == 2, r.stdout
    assert "one.lab.test  exit 0" in r.stdout, r.stdout
    assert "two.lab.test  exit 0" in r.stdout, r.stdout


def test_run_fails_where_the_command_fails_and_says_which_host_could_not_be_reached(site):
    r = consfig("run", "--consfig", site, "one*", "gone*", "--", "sh", "-c", "echo out; exit 3")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "one.lab.test   exit 3 (failed)" in r.stdout, r.stdout
    assert "gone.lab.test  not run: " in r.stdout, r.stdout


def test_run_passes_each_word_as_one_argument_never_to_a_shell(site, tmp_path):
    marker = tmp_path / "pwned"
    r = consfig("run", "--consfig", site, "one*", "--", "printf", "[%s]\\n", f"$(touch {marker})",
                "-l", "a b")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"[$(touch {marker})]" in r.stdout and "[-l]" in r.stdout and "[a b]" in r.stdout, r.stdout
    assert not marker.exists()


def test_run_without_a_command_is_a_usage_error(site):
    r = consfig("run", "--consfig", site, "one*")
    assert r.returncode == 64, r.stdout + r.stderr
    assert "give the command after --" in r.stderr


def test_run_json_writes_the_exit_status_as_data(site):
    r = consfig("run", "--consfig", site, "two*", "--json", "--", "true")
    assert r.returncode == 0, r.stdout + r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    assert [e["exit-code"] for e in events if "exit-code" in e] == [0], events


def test_facts_prints_the_hosts_facts_as_json(site):
    r = consfig("facts", "--consfig", site, "*:!gone*", "os", "packages",
                '(fact.file-exists "/etc/passwd")', '(fact.file-exists "/nonesuch")')
    assert r.returncode == 0, r.stdout + r.stderr
    facts = json.loads(r.stdout)
    assert sorted(facts) == ["one.lab.test", "two.lab.test"]
    for host in facts.values():
        assert host["os"]["id"] == "debian", host["os"]
        assert "openssh-server" in host["packages"], sorted(host["packages"])[:20]
        assert host['(consfig.props.fact.file-exists "/etc/passwd")'] is True
        assert host['(consfig.props.fact.file-exists "/nonesuch")'] is False
        assert "kernel" not in host, "only what was asked for"


def test_facts_with_none_named_gives_them_all(site):
    r = consfig("facts", "--consfig", site, "two*")
    assert r.returncode == 0, r.stdout + r.stderr
    host = json.loads(r.stdout)["two.lab.test"]
    assert set(host) == {"hostname", "os", "kernel", "architecture", "memory", "addresses",
                         "packages", "units"}, sorted(host)
    assert host["memory"]["total"] > 0
    assert "127.0.0.1/8" in host["addresses"]["lo"]


def test_facts_refuses_what_is_not_a_fact_before_connecting(site):
    r = consfig("facts", "--consfig", site, "one*", "disks")
    assert r.returncode == 1
    assert "'disks' is not a fact; the facts are hostname, os" in r.stderr, r.stderr
    r = consfig("facts", "--consfig", site, "one*", '(file.exists "/tmp/x")')
    assert r.returncode == 1
    assert "not a fact application" in r.stderr, r.stderr


@pytest.fixture
def readable():
    """A directory the lab's user can read (pytest's own is root's alone)."""
    d = pathlib.Path(tempfile.mkdtemp(prefix="consfig-fetch-"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d)


@pytest.mark.parametrize("host", ["one", "two"], ids=["posix", "python"])
def test_fetched_copies_a_target_file_here_once_and_never_shows_it(site, readable, tmp_path, host):
    source = readable / "key"
    source.write_bytes(b"secret \x00\xff bytes\n")
    os.chmod(source, 0o644)
    dest = tmp_path / "fetched" / host / "key"
    prop = f'(file.fetched "{source}" "{dest}")'

    check = consfig("deploy-these", "--consfig", site, host, prop, "--check")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "would be fetched" in check.stdout
    assert not dest.exists(), "a check writes nothing"

    first = consfig("deploy-these", "--consfig", site, host, prop, "--json", "--detailed-exitcode")
    assert first.returncode == 2, first.stdout + first.stderr
    assert dest.read_bytes() == source.read_bytes()
    assert oct(dest.stat().st_mode & 0o777) == "0o600"
    assert "secret" not in first.stdout and "c2VjcmV0" not in first.stdout, \
        "the content is in no event"
    assert f"fetched {source} to {dest}" in first.stdout

    again = consfig("deploy-these", "--consfig", site, host, prop, "--detailed-exitcode")
    assert again.returncode == 0, again.stdout + again.stderr

    source.write_bytes(b"rotated\n")
    third = consfig("deploy-these", "--consfig", site, host, prop, "--detailed-exitcode")
    assert third.returncode == 2, third.stdout + third.stderr
    assert dest.read_bytes() == b"rotated\n"


def test_fetching_a_file_that_is_not_there_fails_and_writes_nothing(site, tmp_path):
    dest = tmp_path / "out"
    r = consfig("deploy-these", "--consfig", site, "two", f'(file.fetched "/nonesuch" "{dest}")')
    assert r.returncode == 1
    assert "there is no /nonesuch to fetch" in r.stdout, r.stdout
    assert not dest.exists()


def test_a_destination_that_cannot_be_written_here_fails_the_host(site, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = consfig("deploy-these", "--consfig", site, "two",
                f'(file.fetched "/etc/hostname" "{blocker}/below")')
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"cannot write {blocker}/below here" in r.stdout, r.stdout


def test_a_relative_destination_is_refused_where_written(site):
    r = consfig("deploy-these", "--consfig", site, "two", '(file.fetched "/etc/hostname" "out")')
    assert r.returncode == 1
    assert "absolute path" in r.stdout + r.stderr


@pytest.fixture
def listener():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield s.getsockname()[1]


def test_port_open_and_closed_hold_at_once_when_they_do(site, listener):
    closed = free_port()
    r = consfig("deploy-these", "--consfig", site, "one",
                f'(wait.port-open "127.0.0.1" {listener} :timeout 5)'
                f'(wait.port-closed "127.0.0.1" {closed} :timeout 5)', "--detailed-exitcode")
    assert r.returncode == 0, r.stdout + r.stderr


def test_port_open_waits_for_a_server_that_comes(site):
    port = free_port()
    server = socket.socket()
    # The server comes while the wait is under way (it tries every second).
    timer = threading.Timer(2.0, lambda: (server.bind(("127.0.0.1", port)), server.listen(1)))
    timer.start()
    try:
        r = consfig("deploy-these", "--consfig", site, "one",
                    f'(wait.port-open "127.0.0.1" {port} :timeout 60)', "-v")
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"127.0.0.1 port {port} is open" in r.stdout
    finally:
        timer.cancel()
        server.close()


def test_port_open_fails_after_its_timeout_saying_what_it_waited_for(site):
    port = free_port()
    r = consfig("deploy-these", "--consfig", site, "two",
                f'(wait.port-open "127.0.0.1" {port} :timeout 2)')
    assert r.returncode == 1
    assert f"127.0.0.1 port {port} was not open after 2 s" in r.stdout, r.stdout


def test_until_waits_for_a_fact_then_holds(site, readable):
    flag = readable / "ready"
    timer = threading.Timer(2.0, flag.write_text, ["up\n"])
    timer.start()
    try:
        r = consfig("deploy-these", "--consfig", site, "two",
                    f'(wait.until (fact.file-exists "{flag}") :timeout 30)', "-v")
    finally:
        timer.cancel()
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"now: {flag} exists" in r.stdout, r.stdout


def test_until_fails_after_its_timeout(site):
    r = consfig("deploy-these", "--consfig", site, "one",
                '(wait.until (fact.file-exists "/nonesuch") :timeout 1)')
    assert r.returncode == 1
    assert "/nonesuch exists: still not so after 1 s" in r.stdout, r.stdout


@pytest.mark.parametrize("form", [
    '(wait.port-open "-oProxyCommand=x" 22)',
    '(wait.port-open "127.0.0.1" 0)',
    '(wait.port-open "127.0.0.1" 22 :timeout -1)',
    '(wait.port-open "a b" 22)',
    '(wait.until (file.exists "/x"))',
    '(wait.until (fact.file-exists "/x") :timeout 1 :interval 5)',
])
def test_hostile_or_wrong_arguments_are_refused_before_connecting(site, form):
    r = consfig("deploy-these", "--consfig", site, "gone", form)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "connecting" not in r.stdout, "refused before any connection"
