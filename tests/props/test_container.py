"""systemd-nspawn containers (props/container.hy) and the :nspawn hop
(connections/nspawn.hy), against a real container booted from the cached
test chroot, with its own systemd as PID 1.

One container is booted per module (the machine has two cores): the tests
run in order against it and the last ones stop and remove it.  Those that
need it are marked slow; the checks made at load are not."""

import os
import pathlib
import subprocess

import pytest

import hy  # noqa: F401
from hy.models import Keyword

from harness import unavailable, wait_until
from proptest import (deploy_propspec, apply_twice, checks_clean, assert_hop_passes_exit_codes_and_binary_data,
                      failure_text, keep_debs, statuses, this_os)

from consfig.transport.chain import close_chain, establish_chain, parse_chain
from consfig.apply.combinators import eseqprops
from consfig.connections.nspawn import RUN_DIR, enter_argv
from consfig.deployer.deployment import __dict__ as _deployment
from consfig.errors import (ChainError, CommandTimedOut, ConnectionFailed, InapplicableProperty,
                            PropspecError)
from consfig.model.host import make_host
from consfig.props import container, file

deploy = _deployment[hy.mangle("deploy*")]
from consfig.nested.deploys import deploys  # noqa: E402

pytestmark = pytest.mark.chroot

NAME = f"cftest{os.getpid()}"
NSPAWN = [Keyword("nspawn"), Keyword("machine"), NAME]
PYTHON = [Keyword("python"), Keyword("install"), True]


def _mounts_below(root):
    with open("/proc/self/mounts") as f:
        return [line.split()[1] for line in f if line.split()[1].startswith(f"{root}/")]


def _rooted_in(root):
    """Live processes whose root directory is ROOT or below it."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            r = os.readlink(f"/proc/{entry}/root")
            with open(f"/proc/{entry}/status") as f:
                state = next(line for line in f if line.startswith("State:")).split()[1]
        except (OSError, StopIteration):
            continue
        if state != "Z" and (r == str(root) or r.startswith(f"{root}/")):
            found.append(entry)
    return found


def _ended(pid):
    # Whether PID has ended: gone, or a zombie.
    try:
        return "State:\tZ" in pathlib.Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True


def _nspawn_pids(name):
    out = subprocess.run(["pgrep", "-f", f"systemd-nspawn .*--machine={name} "],
                         capture_output=True, text=True).stdout
    return [p for p in out.split() if not _ended(p)]


def _inside(*argv, timeout=60):
    return subprocess.run(enter_argv(NAME, list(argv)), capture_output=True, text=True,
                          timeout=timeout)


def _container_propspec(*props):
    return eseqprops(this_os(), *props)


def _running(root, *props, options=None):
    return container.nspawn_running(NAME, {Keyword("root"): str(root), **(options or {})},
                                    _container_propspec(*props))


def _force_down(name):
    # Whatever a failed test left: the runner's container, its link and settings.
    # The container's PID 1 (nspawn's child) first: killed alone, nspawn left
    # the container's systemd running for ever, reparented to this machine's
    # init, where no wait on processes rooted in the tree sees it (its root
    # is in the container's own mount namespace).
    for pid in _nspawn_pids(name):
        leaders = subprocess.run(["pgrep", "-P", pid], capture_output=True,
                                 text=True).stdout.split()
        for p in leaders + [pid]:
            subprocess.run(["kill", "-KILL", p], capture_output=True)
        wait_until(lambda: all(_ended(p) for p in leaders + [pid]),
                   30, f"the container {name} to end")
    for p in [f"/var/lib/machines/{name}", f"/etc/systemd/nspawn/{name}.nspawn",
              f"{RUN_DIR}/{name}.pid", f"{RUN_DIR}/{name}.log"]:
        if os.path.islink(p) or os.path.isfile(p):
            os.unlink(p)


@pytest.fixture(scope="module")
def booted(debian_chroot):
    import shutil
    if not shutil.which("systemd-nspawn"):
        unavailable("systemd-nspawn is not installed (apt-get install systemd-container)")
    root = debian_chroot
    try:
        outcome, events = deploy_propspec(
            [Keyword("local")],
            _running(root, file.has_content("/etc/motd", "in the container\n")),
            check=False)
        assert outcome.status == "changed", failure_text(events) or statuses(events)
        yield root
    finally:
        _force_down(NAME)
        wait_until(lambda: not _rooted_in(root), 30, "the container's processes to end")


@pytest.mark.slow
def test_nspawn_running_boots_systemd_as_pid_1(booted):
    assert _inside("cat", "/proc/1/comm").stdout == "systemd\n", "PID 1 is not systemd"
    r = _inside("timeout", "60", "systemctl", "is-system-running", "--wait", timeout=90)
    assert r.stdout.strip() in ("running", "degraded"), f"systemd says {r.stdout!r} {r.stderr!r}"


@pytest.mark.slow
def test_nspawn_running_applies_the_containers_propspec_inside(booted):
    assert (booted / "etc/motd").read_text() == "in the container\n", "motd not written inside"


@pytest.mark.slow
def test_nspawn_running_registers_the_machine_and_its_settings(booted):
    link = pathlib.Path(f"/var/lib/machines/{NAME}")
    assert link.is_symlink() and os.readlink(link) == str(booted), "not linked in /var/lib/machines"
    settings = pathlib.Path(f"/etc/systemd/nspawn/{NAME}.nspawn").read_text()
    assert "[Exec]\nBoot=yes\n" in settings, f"settings do not boot: {settings!r}"


@pytest.mark.slow
def test_nspawn_running_again_changes_nothing(booted):
    spec = _running(booted, file.has_content("/etc/motd", "in the container\n"))
    outcome, events = deploy_propspec([Keyword("local")], spec)
    assert outcome.status == "no-change", f"second apply changed: {statuses(events)}"
    checks_clean([Keyword("local")], spec)


@pytest.mark.slow
def test_nspawn_running_in_check_mode_checks_inside_the_running_container(booted):
    outcome, events = deploy_propspec(
        [Keyword("local")], _running(booted, file.has_content("/etc/motd", "changed in check\n")),
        check_mode=True)
    assert outcome.exit_code(True) == 2, f"a drift inside was not found: {statuses(events)}"
    assert (booted / "etc/motd").read_text() == "in the container\n", "check mode wrote inside"
    outcome, events = deploy_propspec(
        [Keyword("local")], _running(booted, file.has_content("/etc/motd", "in the container\n")),
        check_mode=True)
    assert outcome.exit_code(True) == 0, f"an unchanged container would change: {statuses(events)}"


@pytest.mark.slow
def test_nspawn_hop_passes_exit_codes_and_binary_data(booted):
    assert_hop_passes_exit_codes_and_binary_data(NSPAWN, f"local > nspawn:{NAME}")


@pytest.mark.slow
def test_nspawn_hop_timeout_kills_the_command_inside(booted):
    conns = establish_chain(parse_chain([NSPAWN]))
    try:
        with pytest.raises(CommandTimedOut):
            conns[-1].run(["sleep", "4242"], timeout=1)
    finally:
        close_chain(conns)
    wait_until(lambda: not subprocess.run(["pgrep", "-f", "sleep 4242"]).returncode == 0,
               10, "the timed-out sleep in the container to be killed")


@pytest.mark.slow
def test_nspawn_hop_then_python_applies_inside(booted):
    apply_twice([NSPAWN, PYTHON], [this_os(), file.has_content("/etc/from-python", "py\n")])
    assert (booted / "etc/from-python").read_text() == "py\n", "not written by the python hop"


@pytest.mark.slow
def test_deploys_into_the_container_like_a_chroot(booted):
    host = make_host("web1.test.invalid", None, None,
                     _container_propspec(file.has_content("/etc/deployed", "web1\n")))
    apply_twice([Keyword("local")], deploys([NSPAWN], host))
    assert (booted / "etc/deployed").read_text() == "web1\n", "nested host not deployed"


@pytest.mark.slow
def test_a_defined_container_host_deploys_from_its_parent_and_on_its_own(booted):
    host = make_host("web2.test.invalid", {Keyword("deploy"): [NSPAWN]}, None,
                     _container_propspec(file.has_content("/etc/web2", "web2\n")))
    outcome, events = deploy_propspec(
        [Keyword("local")],
        container.nspawn_running(NAME, {Keyword("root"): str(booted)}, host))
    assert outcome.status == "changed", statuses(events)
    (booted / "etc/web2").unlink()
    alone = deploy(None, host)
    assert alone.status == "changed", "the container host did not deploy on its own"
    assert (booted / "etc/web2").read_text() == "web2\n", "not applied on its own"


@pytest.mark.slow
def test_nspawn_enabled_writes_the_boot_links_and_unapplying_removes_them(booted):
    wants = pathlib.Path(f"/etc/systemd/system/machines.target.wants/systemd-nspawn@{NAME}.service")
    try:
        apply_twice([Keyword("local")], container.nspawn_enabled(NAME))
        checks_clean([Keyword("local")], container.nspawn_enabled(NAME))
        assert wants.is_symlink(), "systemd-nspawn@ not enabled"
    finally:
        deploy_propspec([Keyword("local")], container.nspawn_enabled(NAME), unapply=True)
    assert not wants.exists(), "still enabled after unapplying"


@pytest.mark.slow
def test_nspawn_stopped_powers_off_and_leaves_nothing(booted):
    apply_twice([Keyword("local")], container.nspawn_stopped(NAME))
    checks_clean([Keyword("local")], container.nspawn_stopped(NAME))
    assert not _nspawn_pids(NAME), "systemd-nspawn still running"
    assert not _rooted_in(booted), "processes left in the container"
    assert not _mounts_below(booted), "mounts left in the container"
    with pytest.raises(ConnectionFailed, match="no such container is running"):
        establish_chain(parse_chain([NSPAWN]))


@pytest.mark.slow
def test_nspawn_removed_deletes_tree_link_and_settings(booted, debian_chroot_tarball):
    keep_debs(booted, debian_chroot_tarball)
    apply_twice([Keyword("local")], container.nspawn_removed(NAME))
    checks_clean([Keyword("local")], container.nspawn_removed(NAME))
    assert not booted.exists(), "the tree is still there"
    assert not os.path.lexists(f"/var/lib/machines/{NAME}"), "the link is still there"
    assert not os.path.exists(f"/etc/systemd/nspawn/{NAME}.nspawn"), "settings still there"
    booted.mkdir()  # for debian_chroot's own teardown


@pytest.mark.parametrize("name", ["../x", "-rf", "a\nb", "a/b", "", "x" * 65, "a..b"])
def test_a_hostile_machine_name_is_refused_at_load(name):
    with pytest.raises(PropspecError):
        container.nspawn_running(name, {}, eseqprops(this_os()))
    with pytest.raises(PropspecError):
        container.nspawn_stopped(name)
    with pytest.raises(ChainError, match="machine name"):
        parse_chain([[Keyword("nspawn"), Keyword("machine"), name]])


@pytest.mark.parametrize("options", [{Keyword("root"): "/"}, {Keyword("root"): "relative"},
                                     {Keyword("settings"): {"Exec": {"Boot": "yes\n[Files]"}}},
                                     {Keyword("settings"): {"Service": {"X": "y"}}},
                                     {Keyword("colour"): "red"}])
def test_bad_container_options_are_refused_at_load(options):
    with pytest.raises(PropspecError):
        container.nspawn_running("web1", options, eseqprops(this_os()))


def test_an_unknown_machine_is_a_clear_connection_error():
    with pytest.raises(ConnectionFailed, match="cannot enter the container no-such-machine: "
                                               "no such container is running"):
        establish_chain(parse_chain([[Keyword("nspawn"), Keyword("machine"), "no-such-machine"]]))


def test_a_container_without_an_os_is_refused_before_connecting():
    with pytest.raises(InapplicableProperty, match="in the container web9: its propspec declares no OS"):
        deploy_propspec([Keyword("local")],
                        container.nspawn_running("web9", {}, eseqprops(file.has_content("/x", "y"))))
    assert not os.path.exists("/var/lib/machines/web9"), "it made something"


def test_nspawn_removed_refuses_a_link_to_what_is_not_a_system_tree(tmp_path):
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep").write_text("mine\n")
    name = f"cflink{os.getpid()}"
    link = pathlib.Path(f"/var/lib/machines/{name}")
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(precious)
    try:
        outcome, events = deploy_propspec([Keyword("local")], container.nspawn_removed(name),
                                          check=False)
        assert outcome.status == "failed", statuses(events)
        assert "does not look like a container's tree" in failure_text(events), failure_text(events)
        assert (precious / "keep").read_text() == "mine\n", "it removed what the link leads to"
    finally:
        link.unlink()


@pytest.mark.chroot
def test_nspawn_running_in_check_mode_says_what_it_would_make_and_makes_nothing(tmp_path):
    root = tmp_path / "not-yet"
    name = f"cfcheck{os.getpid()}"
    seen = []
    outcome, events = deploy_propspec(
        [Keyword("local")],
        container.nspawn_running(name, {Keyword("root"): str(root)}, _container_propspec()),
        check_mode=True, sink=seen.append)
    assert outcome.exit_code(True) == 2, statuses(events)
    said = " ".join(str(e.get("text", "")) for e in seen if isinstance(e, dict))
    assert f"bootstrap {root}" in said and "boot it" in said, said
    assert not root.exists(), "check mode bootstrapped"
    assert not os.path.lexists(f"/var/lib/machines/{name}"), "check mode linked the machine"
    assert not os.path.exists(f"/etc/systemd/nspawn/{name}.nspawn"), "check mode wrote settings"


@pytest.mark.slow
def test_the_shared_booted_container_starts_units(booted_container):
    from consfig.props import systemd
    unit = "consfig-shared-test.service"
    outcome, events = deploy_propspec(
        booted_container.chain,
        eseqprops(this_os(),
                  file.has_content(f"/etc/systemd/system/{unit}",
                                   "[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/bin/true\n"),
                  systemd.daemon_reloaded(), systemd.started(unit)))
    assert outcome.status == "changed", statuses(events)
    state = subprocess.run(enter_argv(booted_container.name, ["systemctl", "is-active", unit]),
                           capture_output=True, text=True, timeout=60).stdout.strip()
    assert state == "active", f"the unit is {state!r} in the shared container"


@pytest.mark.parametrize("chain_id", ["local", "posix"])
def test_nspawn_removed_never_removes_what_a_users_link_leads_to(sshlab, chain_id):
    # A container whose root a site put under a user's directory: the user
    # replaces the tree with a link to a root-owned one that looks like a
    # system.  Removing the container removes her link, or (a shell cannot
    # do that safely) is refused; what the link leads to stays.
    import shutil
    import tempfile
    sys_path = os.path.join(os.path.dirname(__file__), "..", "connections")
    import sys
    sys.path.insert(0, sys_path)
    from labservers import ssh_hop
    scene = tempfile.mkdtemp(dir=sshlab.root)
    os.chmod(scene, 0o755)
    decoy = pathlib.Path(scene, "decoy")
    for d in ["etc", "usr"]:
        (decoy / d).mkdir(parents=True)
    (decoy / "etc" / "shadow").write_text("root's\n")
    home = pathlib.Path(scene, "home")
    home.mkdir()
    shutil.chown(home, sshlab.pwuser, sshlab.pwuser)
    subprocess.run(["runuser", "-u", sshlab.pwuser, "--", "ln", "-s", "--", str(decoy),
                    str(home / "ctr")], check=True, timeout=30)
    name = f"cfuser{os.getpid()}{chain_id[0]}"
    link = pathlib.Path(f"/var/lib/machines/{name}")
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(home / "ctr")
    chain = ([Keyword("local")] if chain_id == "local"
             else [ssh_hop(sshlab.config), Keyword("sudo")])
    try:
        outcome, events = deploy_propspec(chain, container.nspawn_removed(name), check=False)
        assert (decoy / "etc" / "shadow").read_text() == "root's\n", "it removed the user's link's target"
        if chain_id == "posix":
            assert outcome.status == "failed", statuses(events)
            assert "add :python" in failure_text(events), failure_text(events)
        else:
            assert outcome.status == "changed", statuses(events)
            assert not os.path.lexists(home / "ctr"), "her link is left"
            assert not os.path.lexists(link), "the machine's link is left"
    finally:
        if os.path.lexists(link):
            link.unlink()
