"""Connection chains over a real sshd (the `sshlab` fixture): the same
deployment over every chain, hostile file names, and sudo passwords."""

import io
import os
import pwd
import shutil
import stat
import tempfile
import time

import pytest
from rich.console import Console

import hy  # noqa: F401
from hy.models import Keyword as K

import consfig.deployer.deployment
import consfig.errors
from consfig.apply.combinators import eseqprops, seqprops
from consfig.transport.chain import close_chain, establish_chain, parse_chain
from consfig.transport.hop import Script
from consfig.model.context import establishing_for
from consfig.apply.engine import apply_host
from consfig.model.host import make_host, preprocess_host
from consfig.props import cmd, file
from consfig.deployer.report import Reporter
from harness import running, wait_until
from sshlab import processes_seen, sudo_password_known

deploy = getattr(consfig.deployer.deployment, hy.mangle("deploy*"))
deploy_these = getattr(consfig.deployer.deployment, hy.mangle("deploy-these*"))


def ssh(lab, host="lab", **kw):
    hop = [K("ssh"), K("config"), lab.config]
    if host:
        hop += [K("host"), host]
    for k, v in kw.items():
        hop += [K(k.replace("_", "-")), v]
    return hop


def chains(lab):
    """id → (chain, the user commands run as at its end)."""
    return {
        "local": ([K("local")], "root"),
        # No :host: the hop connects to the deployed host's name, "lab".
        "ssh": ([ssh(lab, host=None)], lab.user),
        "ssh-sudo": ([ssh(lab), K("sudo")], "root"),
        "ssh-sudo-user": ([ssh(lab), [K("sudo"), K("user"), lab.pwuser]], lab.pwuser),
        "ssh-sudo-password": ([ssh(lab, "lab-pw"), [K("sudo"), K("from"), "pw@lab"]], "root"),
        "local-sudo": ([K("local"), [K("sudo"), K("user"), lab.user]], lab.user),
        "jump-sudo-su": ([ssh(lab, "lab-jump"), K("sudo"), [K("su"), K("to"), lab.pwuser]],
                         lab.pwuser),
    }


CHAIN_IDS = ["local", "ssh", "ssh-sudo", "ssh-sudo-user", "ssh-sudo-password",
             "local-sudo", "jump-sudo-su"]


@pytest.fixture
def lab(sshlab):
    """The lab, with its sudo password known to consfig for this test."""
    with sudo_password_known(sshlab.password):
        yield sshlab


def directory_for(lab, user):
    """A fresh directory USER owns, in the lab."""
    d = tempfile.mkdtemp(dir=lab.root)
    shutil.chown(d, user, user)
    os.chmod(d, 0o755)
    return d


def statuses(events):
    return [(e["desc"], e["status"], e.get("message")) for e in events if e["event"] == "end"]


@pytest.mark.parametrize("chain_id", CHAIN_IDS)
def test_same_deployment_over_every_chain(lab, chain_id):
    chain, user = chains(lab)[chain_id]
    d = directory_for(lab, user)
    propspec = eseqprops(
        file.directory_exists(f"{d}/etc/app"),
        file.has_content(f"{d}/etc/app/conf", "a = 1\n", mode=0o640),
        file.contains_lines(f"{d}/etc/app/list", "one", "two"),
        file.symlinked(from_=f"{d}/current", to=f"{d}/etc/app"))
    host = make_host("lab", None, None, eseqprops())

    events = []
    first = deploy(chain, host, propspec=propspec, sink=events.append)
    assert first.status == "changed", statuses(events)
    again = []
    second = deploy(chain, host, propspec=propspec, sink=again.append)
    assert second.status == "no-change", statuses(again)

    assert open(f"{d}/etc/app/conf").read() == "a = 1\n"
    assert os.stat(f"{d}/etc/app/conf").st_mode & 0o777 == 0o640
    assert open(f"{d}/etc/app/list").read() == "one\ntwo\n"
    assert os.readlink(f"{d}/current") == f"{d}/etc/app"
    owner = {os.stat(p).st_uid for p in [f"{d}/etc/app", f"{d}/etc/app/conf"]}
    assert owner == {pwd.getpwnam(user).pw_uid}


HOSTILE = {
    "space": "a file with spaces",
    "single-quote": "it's",
    "double-quote": 'say "hi"',
    "newline": "two\nlines",
    "command-substitution": "$(id -u)",
    "backticks": "`id -u`",
    "glob": "*.[ch]?",
    "leading-dash": "-rf",
    "semicolon-and-ampersand": "x; rm -rf . &",
    "backslash": "back\\slash",
    "non-ascii": "café ☕",
}


@pytest.fixture(scope="module")
def established(sshlab):
    """Every chain, established once for the module's tests."""
    made = {}
    try:
        host = make_host("lab", None, None, eseqprops())
        with sudo_password_known(sshlab.password):
            for chain_id in CHAIN_IDS:
                chain, user = chains(sshlab)[chain_id]
                with establishing_for(host):
                    made[chain_id] = (establish_chain(parse_chain(chain)), user)
        yield made
    finally:
        for conns, _ in made.values():
            close_chain(conns)


def apply_through(conn, *propapps):
    events = []
    host = preprocess_host(make_host("lab", None, None, eseqprops()), eseqprops(*propapps))
    outcome = apply_host(host, conn, events.append)
    return outcome, events


@pytest.mark.parametrize("name", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_file_names_through_every_chain(sshlab, established, name):
    if "\n" in name:
        # A property refuses such a path where it is written (it would break
        # the lines of fstab, units, sources); the connection still carries it.
        with pytest.raises(consfig.errors.PropspecError, match="newline"):
            file.has_content(f"/tmp/{name}", "content\n")
        for chain_id, (conns, user) in established.items():
            conn, path = conns[-1], f"{directory_for(sshlab, user)}/{name}"
            conn.write_file(path, b"content\n")
            assert conn.read_file(path) == b"content\n", chain_id
            conn.remove([path])
            assert not os.path.lexists(path), chain_id
        return
    for chain_id, (conns, user) in established.items():
        conn = conns[-1]
        d = directory_for(sshlab, user)
        path = f"{d}/{name}"
        outcome, events = apply_through(conn, file.has_content(path, "content\n"))
        assert outcome.status == "changed", (chain_id, statuses(events))
        assert sorted(os.listdir(d)) == [name], (chain_id, os.listdir(d))
        assert open(path).read() == "content\n", chain_id
        assert getattr(conn, hy.mangle("exists?"))(path), chain_id
        assert conn.read_file(path) == b"content\n", chain_id
        outcome, events = apply_through(conn, file.has_content(path, "content\n"))
        assert outcome.status == "no-change", (chain_id, statuses(events))
        outcome, events = apply_through(conn, file.does_not_exist(path))
        assert outcome.status == "changed", (chain_id, statuses(events))
        assert os.listdir(d) == [], (chain_id, os.listdir(d))


def test_binary_input_and_output_survive_every_chain(established):
    data = bytes(range(256)) * 4096 + b"\n\x00end"
    for chain_id, (conns, _) in established.items():
        code, out, err = conns[-1].run_script("cat", data, 30)
        assert (code, out == data, err) == (0, True, b""), chain_id


@pytest.mark.parametrize("chain_id", ["ssh-sudo", "ssh-sudo-password", "local-sudo"])
def test_command_past_its_timeout_is_stopped_where_it_runs(established, chain_id):
    conn = established[chain_id][0][-1]
    marker = f"{time.time_ns() % 10**6}.5"
    start = time.monotonic()
    with pytest.raises(consfig.errors.CommandTimedOut, match="timed out after 1 s on .*sudo"):
        conn.run(["sleep", marker], timeout=1)
    assert time.monotonic() - start < 5
    wait_until(lambda: not running(f"sleep {marker}"), 10, f"sleep {marker} to be stopped")


def test_sudo_env_and_home_are_the_target_users(established, sshlab):
    conn = established["ssh-sudo-user"][0][-1]
    out = conn.run(Script('echo "$HOME $USER $(id -un)"'), env={"FOO": "bar baz"}).stdout.split()
    assert out == [sshlab.home(sshlab.pwuser), sshlab.pwuser, sshlab.pwuser]
    assert conn.run(Script('printf %s "$FOO"'), env={"FOO": "bar $(baz)"}).stdout == "bar $(baz)"
    assert conn.run(["pwd"], cwd="/var/tmp").stdout == "/var/tmp\n"


def test_sudo_password_never_shows(lab, tmp_path):
    secret = lab.password.encode()
    started = time.time() - 1
    console_out = io.StringIO()
    reporter = Reporter(console=Console(file=console_out, width=200), verbosity=3)
    events = []

    def sink(e):
        events.append(e)
        reporter(e)

    with processes_seen() as seen:
        outcome = deploy(chains(lab)["ssh-sudo-password"][0], make_host("lab", None, None, eseqprops()),
                         propspec=eseqprops(
                             cmd.script("sleep 0.5; cat /etc/hostname >/dev/null"),
                             file.has_content(str(tmp_path / "f"), "x\n"),
                             cmd.script("echo to stderr >&2; exit 3")),
                         sink=sink, verbosity=3)
    assert outcome.status == "failed"
    assert seen.samples > 10, seen.samples
    assert not [s for s in seen if secret in s], "the password showed in ps or an environ"
    assert lab.password not in repr(events)
    assert lab.password not in console_out.getvalue()
    assert "exit code 3" in console_out.getvalue()
    assert _files_holding(secret, since=started) == []


def _files_holding(secret, since):
    """Files written since SINCE, where a leftover would be, that hold SECRET
    (outside other tests' root file systems)."""
    found = []
    for top in ["/tmp", "/var/tmp", "/home", "/root", "/run", "/dev/shm"]:
        device = os.stat(top).st_dev
        for directory, subdirs, names in os.walk(top):
            if "etc" in subdirs and "usr" in subdirs:
                # The root file system of a chroot, a container or an image that
                # another test is unpacking: tens of thousands of new files, none
                # written by sudo on this machine.
                subdirs[:] = []
                continue
            # Like find -xdev: not into chroots' /proc or /dev mounted below.
            subdirs[:] = [d for d in subdirs
                          if os.lstat(os.path.join(directory, d)).st_dev == device]
            for name in names:
                path = os.path.join(directory, name)
                try:
                    st = os.lstat(path)
                    if (stat.S_ISREG(st.st_mode) and st.st_mtime >= since
                            and st.st_size < 2**20 and secret in open(path, "rb").read()):
                        found.append(path)
                except OSError:
                    pass
    return found



@pytest.mark.parametrize("chain_id", CHAIN_IDS)
def test_a_killed_command_is_reported_by_its_signal(established, chain_id):
    conn = established[chain_id][0][-1]
    with pytest.raises(consfig.errors.CommandFailed) as e:
        conn.run(Script("kill -KILL $$"))
    assert "killed by signal KILL" in str(e.value), str(e.value)
    assert "exit code -1" not in str(e.value)
    assert conn.run(["echo", "still usable"]).stdout == "still usable\n"


@pytest.mark.parametrize("chain_id", ["local", "ssh", "ssh-sudo"])
def test_a_nul_in_a_command_or_path_is_refused_and_the_connection_survives(established, chain_id):
    conn = established[chain_id][0][-1]
    for attempt in [lambda: conn.run(["printf", "%s", "a\0b"]),
                    lambda: conn.write_file("/tmp/consfig-a\0b", b"x"),
                    lambda: conn.read_file("/tmp/consfig-a\0b"),
                    lambda: getattr(conn, hy.mangle("exists?"))("/tmp/consfig-a\0b")]:
        with pytest.raises(consfig.errors.AbortedChange, match="NUL"):
            attempt()
    assert conn.run(["echo", "still usable"]).stdout == "still usable\n"


@pytest.mark.parametrize("chain_id", ["local", "ssh", "ssh-sudo"])
def test_a_huge_command_line_is_refused_and_the_connection_survives(established, chain_id):
    conn = established[chain_id][0][-1]
    with pytest.raises(consfig.errors.AbortedChange, match="too long"):
        conn.run(["printf", "%s", "x" * 400_000])
    assert conn.run(["echo", "still usable"]).stdout == "still usable\n"


def test_a_nul_in_a_path_built_as_data_is_refused_before_anything_is_applied(established,
                                                                            tmp_path):
    conn = established["ssh-sudo"][0][-1]
    after = tmp_path / "after"
    # The abs-path type refuses a NUL when a propapp is built; built as data
    # here, it is refused with the host's other load-time checks (the path's
    # watch), before anything reaches the target.  What a connection does
    # with a NUL that reaches it is the test above.
    from consfig.model.property import Propapp
    nul = Propapp("consfig.props.file.has-content", ["/tmp/consfig-a\0b", "x"])
    with pytest.raises(consfig.errors.PropspecError, match="NUL"):
        apply_through(conn, seqprops(nul, file.has_content(str(after), "applied\n")))
    assert not after.exists(), "a property was applied before the refusal"
