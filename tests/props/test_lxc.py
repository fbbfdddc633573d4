"""LXC containers (props/lxc.hy) and the :lxc hop (connections/lxc.hy),
against real LXC: a privileged container booted from the cached test
chroot with its own systemd as PID 1.

One container per module (the machine has two cores), made by the
documented example of docs/machines.md run through the `consfig` command;
the tests run in order against it and the last ones stop and remove it."""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

import hy  # noqa: F401
from hy.models import Keyword

from harness import unavailable, wait_until
from proptest import (LOCAL, assert_hop_passes_exit_codes_and_binary_data, checks_clean, deploy_propspec, failure_text,
                      host_arch, host_suite, keep_debs, rooted_in, statuses, apply_twice, this_os)

from consfig.apply.combinators import eseqprops
from consfig.connections.lxc import attach_argv
from consfig.deployer.deployment import __dict__ as _deployment
from consfig.errors import ChainError, CommandTimedOut, ConnectionFailed, PropspecError
from consfig.model.host import make_host
from consfig.props import file, lxc
from consfig.transport.chain import close_chain, establish_chain, parse_chain

deploy = _deployment[hy.mangle("deploy*")]

pytestmark = pytest.mark.chroot

REPO = pathlib.Path(__file__).resolve().parents[2]
NAME = f"cflxc{os.getpid()}"
HOP = [Keyword("lxc"), Keyword("name"), NAME]
MOTD = "web1, an LXC container\n"


def _documented_site():
    """docs/machines.md's LXC example, as a site."""
    doc = (REPO / "docs/machines.md").read_text().split("## LXC containers\n", 1)[1]
    return re.search(r"```hy\n(.*?)```", doc, re.S).group(1)


def _inside(*argv, timeout=60):
    return subprocess.run(attach_argv(NAME, list(argv)), capture_output=True, text=True,
                          timeout=timeout)


def _force_down(name):
    subprocess.run(["lxc-stop", "-P", lxc.LXC_PATH, "-n", name, "-k"], capture_output=True,
                   timeout=60)
    shutil.rmtree(f"{lxc.LXC_PATH}/{name}", ignore_errors=True)


def _running(root, *props):
    return lxc.container_running(NAME, {Keyword("root"): str(root), Keyword("autostart"): True},
                                 eseqprops(this_os(), *props))


@pytest.fixture(scope="module")
def booted(debian_chroot, tmp_path_factory):
    if not shutil.which("lxc-start"):
        unavailable("LXC is not installed (apt-get install lxc)")
    root = debian_chroot
    site = tmp_path_factory.mktemp("lxcsite") / "consfig.hy"
    site.write_text(_documented_site()
                    .replace('"web1"', f'"{NAME}"')
                    .replace("{:autostart True}", f'{{:autostart True :root "{root}"}}')
                    .replace('"bookworm" :amd64', f'"{host_suite()}" :{host_arch()}'))
    try:
        r = subprocess.run([sys.executable, "-m", "consfig", "deploy", "--consfig", str(site),
                            "athena.example.org", "--via", ":local"],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        yield root
    finally:
        _force_down(NAME)
        wait_until(lambda: not rooted_in(root), 30, "the container's processes to end")


@pytest.mark.slow
def test_the_documented_lxc_container_boots_systemd_and_is_configured_inside(booted):
    assert _inside("cat", "/proc/1/comm").stdout == "systemd\n", "PID 1 is not systemd"
    r = _inside("systemctl", "is-system-running")
    assert r.stdout.strip() in ("running", "degraded"), f"systemd says {r.stdout!r} {r.stderr!r}"
    assert (booted / "etc/motd").read_text() == MOTD, "the propspec was not applied inside"
    assert _inside("hostname").stdout == f"{NAME}\n", "not named after its host"
    config = pathlib.Path(f"{lxc.LXC_PATH}/{NAME}/config").read_text()
    assert f"lxc.rootfs.path = dir:{booted}\n" in config and "lxc.start.auto = 1\n" in config, config
    # The site applied lxc.installed to this machine, which has LXC.
    checks_clean(LOCAL, [this_os(), lxc.installed()])


@pytest.mark.slow
def test_lxc_container_running_again_changes_nothing_and_checks_clean(booted):
    outcome, events = deploy_propspec([Keyword("local")],
                                      _running(booted, file.has_content("/etc/motd", MOTD)))
    assert outcome.status == "no-change", f"second apply changed: {statuses(events)}"
    checks_clean([Keyword("local")], _running(booted, file.has_content("/etc/motd", MOTD)))


@pytest.mark.slow
def test_lxc_container_running_in_check_mode_finds_a_drift_inside_and_writes_nothing(booted):
    outcome, events = deploy_propspec(
        [Keyword("local")], _running(booted, file.has_content("/etc/motd", "changed in check\n")),
        check_mode=True)
    assert outcome.exit_code(True) == 2, f"a drift inside was not found: {statuses(events)}"
    assert (booted / "etc/motd").read_text() == MOTD, "check mode wrote inside"


@pytest.mark.slow
def test_a_defined_lxc_host_deploys_from_its_parent_and_on_its_own(booted):
    host = make_host("web2.test.invalid", {Keyword("deploy"): [HOP]}, None,
                     eseqprops(this_os(), file.has_content("/etc/web2", "web2\n")))
    outcome, events = deploy_propspec(
        [Keyword("local")],
        lxc.container_running(NAME, {Keyword("root"): str(booted), Keyword("autostart"): True},
                              host))
    assert outcome.status == "changed", statuses(events)
    assert _inside("hostname").stdout == "web2\n", "not named after its defined host"
    (booted / "etc/web2").unlink()
    alone = deploy(None, host)
    assert alone.status == "changed", "the container host did not deploy on its own"
    assert (booted / "etc/web2").read_text() == "web2\n", "not applied on its own"


@pytest.mark.slow
def test_lxc_hop_passes_exit_codes_and_binary_data(booted):
    assert_hop_passes_exit_codes_and_binary_data(HOP, f"local > lxc:{NAME}")


@pytest.mark.slow
def test_lxc_hop_gives_commands_a_clean_environment(booted):
    conns = establish_chain(parse_chain([HOP]))
    try:
        env = dict(line.split("=", 1) for line in conns[-1].run(["env"]).stdout.splitlines())
    finally:
        close_chain(conns)
    assert env.get("HOME") == "/root" and env.get("container") == "lxc", env
    assert not [k for k in env if k.startswith(("CONSFIG", "XDG", "PYTEST"))], env


@pytest.mark.slow
def test_lxc_hop_timeout_kills_the_command_inside(booted):
    conns = establish_chain(parse_chain([HOP]))
    try:
        with pytest.raises(CommandTimedOut):
            conns[-1].run(["sleep", "4343"], timeout=1)
    finally:
        close_chain(conns)
    wait_until(lambda: subprocess.run(["pgrep", "-f", "sleep 4343"]).returncode != 0,
               10, "the timed-out sleep in the container to be killed")


@pytest.mark.slow
def test_lxc_hop_then_python_applies_inside(booted):
    apply_twice([HOP, [Keyword("python"), Keyword("install"), True]],
                [this_os(), file.has_content("/etc/from-python", "py\n")])
    assert (booted / "etc/from-python").read_text() == "py\n", "not written by the python hop"


@pytest.mark.slow
def test_lxc_container_stopped_powers_off_and_leaves_nothing(booted):
    apply_twice([Keyword("local")], lxc.container_stopped(NAME))
    checks_clean([Keyword("local")], lxc.container_stopped(NAME))
    assert not rooted_in(booted), "processes left in the container"
    with pytest.raises(ConnectionFailed, match=f"cannot enter the LXC container {NAME}: it is stopped"):
        establish_chain(parse_chain([HOP]))


@pytest.mark.slow
def test_an_lxc_container_that_cannot_start_is_a_clear_failure_leaving_nothing_running(booted):
    outcome, events = deploy_propspec(
        [Keyword("local")],
        lxc.container_running(NAME, {Keyword("root"): str(booted),
                                     Keyword("config"): {"lxc.init.cmd": "/no/such/init"}},
                              eseqprops(this_os())),
        check=False)
    assert outcome.status == "failed", statuses(events)
    assert f"the LXC container {NAME} did not start" in failure_text(events), failure_text(events)
    assert not rooted_in(booted), "processes left in the container"
    assert "lxc.init.cmd = /no/such/init\n" in pathlib.Path(lxc.config_file(NAME)).read_text(), \
        "the configuration asked for was not written whole"


@pytest.mark.slow
def test_lxc_container_removed_deletes_its_tree_and_configuration(booted, debian_chroot_tarball):
    keep_debs(booted, debian_chroot_tarball)
    apply_twice([Keyword("local")], lxc.container_removed(NAME))
    checks_clean([Keyword("local")], lxc.container_removed(NAME))
    assert not booted.exists(), "the tree is still there"
    assert not os.path.lexists(f"{lxc.LXC_PATH}/{NAME}"), "its configuration is still there"
    booted.mkdir()  # for debian_chroot's own teardown


@pytest.mark.parametrize("name", ["../x", "-rf", "a\nb", "a/b", "", "x" * 65, "a..b", "$(id)"])
def test_a_hostile_lxc_container_name_is_refused_at_load(name):
    with pytest.raises(PropspecError):
        lxc.container_running(name, {}, eseqprops(this_os()))
    with pytest.raises(PropspecError):
        lxc.container_stopped(name)
    with pytest.raises(PropspecError):
        lxc.container_removed(name)
    with pytest.raises(ChainError, match="LXC container name"):
        parse_chain([[Keyword("lxc"), Keyword("name"), name]])


@pytest.mark.parametrize("options", [{Keyword("root"): "/"}, {Keyword("root"): "relative"},
                                     {Keyword("config"): {"lxc.init.cmd": "/bin/sh\nlxc.x = y"}},
                                     {Keyword("config"): {"lxc.rootfs.path": "dir:/"}},
                                     {Keyword("config"): {"lxc.include": "/etc/passwd"}},
                                     {Keyword("config"): {"net.0.type": "veth"}},
                                     {Keyword("autostart"): "yes"},
                                     {Keyword("colour"): "red"}])
def test_bad_lxc_options_are_refused_at_load(options):
    with pytest.raises(PropspecError):
        lxc.container_running("web1", options, eseqprops(this_os()))


def test_an_unknown_lxc_container_is_a_clear_connection_error():
    with pytest.raises(ConnectionFailed, match="cannot enter the LXC container no-such-ct: "
                                               "no such container in /var/lib/lxc"):
        establish_chain(parse_chain([[Keyword("lxc"), Keyword("name"), "no-such-ct"]]))


def test_lxc_container_running_in_check_mode_says_what_it_would_make_and_makes_nothing(tmp_path):
    root = tmp_path / "not-yet"
    name = f"cflxcheck{os.getpid()}"
    seen = []
    outcome, events = deploy_propspec(
        [Keyword("local")],
        lxc.container_running(name, {Keyword("root"): str(root)}, eseqprops(this_os())),
        check_mode=True, sink=seen.append)
    assert outcome.exit_code(True) == 2, statuses(events)
    said = " ".join(str(e.get("text", "")) for e in seen if isinstance(e, dict))
    assert f"bootstrap {root}" in said and "boot it" in said, said
    assert not root.exists(), "check mode bootstrapped"
    assert not os.path.lexists(f"{lxc.LXC_PATH}/{name}"), "check mode made its directory"


def test_lxc_container_removed_refuses_a_configured_tree_that_is_no_system(tmp_path):
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep").write_text("mine\n")
    name = f"cflxcrm{os.getpid()}"
    d = pathlib.Path(f"{lxc.LXC_PATH}/{name}")
    d.mkdir(parents=True)
    (d / "config").write_text(lxc.config_text(name, str(precious)))
    try:
        outcome, events = deploy_propspec([Keyword("local")], lxc.container_removed(name),
                                          check=False)
        assert outcome.status == "failed", statuses(events)
        assert "does not look like a container's" in failure_text(events), failure_text(events)
        assert (precious / "keep").read_text() == "mine\n", "it removed what the config names"
    finally:
        shutil.rmtree(d, ignore_errors=True)
