"""Podman (props/podman.hy) and the :podman hop (connections/podman.hy),
against the real podman of this machine, offline: the image is imported
from the cached chroot tarball, never pulled.

This machine runs no systemd, so podman.container-running starts its
container with `podman run` itself (the unit is written all the same).

The module's podman reads a containers.conf of its own (CONTAINERS_CONF):
in CI's sandbox the default runtime, crun, refuses hybrid cgroups, and the
limits podman gives a container by default are above the hard limits here,
which a process without CAP_SYS_RESOURCE cannot raise (podman itself
lowers its own nproc limit to 32768 first); and containers get no network.
Those are this sandbox's; a site needs none of it."""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

import hy  # noqa: F401
from hy.models import Keyword

from harness import unavailable, wait_until
from proptest import (apply_twice, assert_hop_passes_exit_codes_and_binary_data, checks_clean, deploy_propspec,
                      failure_text, diffs, host_arch, host_suite, statuses, this_os,
                      unapply)

from consfig.errors import ChainError, CommandTimedOut, ConnectionFailed, PropspecError
from consfig.props import file, podman
from consfig.transport.chain import close_chain, establish_chain, parse_chain

pytestmark = pytest.mark.chroot

LOCAL = [Keyword("local")]
IMAGE = f"localhost/consfig-test-{os.getpid()}:1"
NAME = f"cftest-{os.getpid()}"
SHELL = f"cftest-sh-{os.getpid()}"
UNIT = pathlib.Path(f"/etc/systemd/system/podman-{NAME}.service")


def _podman(*argv, check=True):
    return subprocess.run(["podman", *argv], capture_output=True, text=True, timeout=120,
                          check=check)


@pytest.fixture(scope="module")
def conf(debian_chroot_tarball):
    if not shutil.which("podman"):
        unavailable("podman is not installed (apt-get install podman)")
    # Readable by the rootless tests' user too (pytest's own are root's only,
    # and so may be the run's TMPDIR).
    box = pathlib.Path(tempfile.mkdtemp(prefix="consfig-podman-", dir="/tmp"))
    box.chmod(0o755)
    path = box / "containers.conf"
    # No network: nothing here needs one, and then no bridge (CNI, iptables) is set up.
    lines = ["[containers]", 'default_ulimits = ["nofile=1024:1024", "nproc=32768:32768"]',
             'netns = "none"']
    if shutil.which("runc"):
        lines += ["[engine]", 'runtime = "runc"']
    path.write_text("\n".join(lines) + "\n")
    old = os.environ.get("CONTAINERS_CONF")
    os.environ["CONTAINERS_CONF"] = str(path)
    try:
        yield debian_chroot_tarball
    finally:
        for c in [NAME, SHELL]:
            _podman("rm", "--force", "--ignore", "--time", "0", c, check=False)
        _podman("rmi", "--ignore", IMAGE, check=False)
        UNIT.unlink(missing_ok=True)
        shutil.rmtree(box)
        if old is None:
            del os.environ["CONTAINERS_CONF"]
        else:
            os.environ["CONTAINERS_CONF"] = old


@pytest.fixture(scope="module")
def image(conf):
    apply_twice(LOCAL, podman.image_present(IMAGE, archive=str(conf)))
    return IMAGE


def _state(name):
    # (status, consfig.spec label) of the container NAME, None when there is none.
    r = _podman("container", "inspect", "--format",
                '{{.State.Status}} {{index .Config.Labels "consfig.spec"}}', name, check=False)
    return tuple(r.stdout.split()) if r.returncode == 0 else None


# A PID 1 that ends on TERM, as a service does, so that stopping it is quick.
SLEEP = ["sh", "-c", "trap 'exit 0' TERM; sleep infinity & wait"]


def _running(**kw):
    return podman.container_running(NAME, IMAGE, command=SLEEP, **kw)


def test_image_present_imports_the_archive_once(image, conf):
    assert _podman("image", "exists", image, check=False).returncode == 0, "not imported"
    checks_clean(LOCAL, podman.image_present(IMAGE, archive=str(conf)))


def test_container_running_starts_it_labelled_and_writes_its_unit(image):
    apply_twice(LOCAL, _running())
    state = _state(NAME)
    assert state and state[0] == "running", f"not running: {state}"
    assert UNIT.read_text() == podman.unit_text(NAME, IMAGE, SLEEP, [], [], {}), \
        "the unit is not the one described"
    assert "ExecStart=/usr/bin/podman run " in UNIT.read_text(), "no podman run in the unit"
    checks_clean(LOCAL, _running())


def test_container_running_replaces_a_stopped_container(image):
    _podman("stop", "--time", "0", NAME)
    apply_twice(LOCAL, _running())
    assert _state(NAME)[0] == "running", "not started again"


def test_container_running_check_mode_shows_the_new_unit_and_changes_nothing(image):
    before = UNIT.read_text()
    digest = _state(NAME)[1]
    outcome, events = deploy_propspec(LOCAL, _running(env={"GREETING": "$(reboot) 50%"}),
                                      check_mode=True)
    assert outcome.exit_code(True) == 2, f"no change foreseen: {statuses(events)}"
    assert any("GREETING" in str(d) for d in diffs(events)), f"no diff of the unit: {diffs(events)}"
    assert UNIT.read_text() == before, "check mode wrote the unit"
    assert _state(NAME)[1] == digest, "check mode replaced the container"


def test_container_running_with_another_specification_replaces_it(image):
    apply_twice(LOCAL, _running(env={"GREETING": "$(reboot) 50%"}))
    out = _podman("exec", NAME, "sh", "-c", 'printf %s "$GREETING"').stdout
    assert out == "$(reboot) 50%", f"the environment did not reach the container as given: {out!r}"
    assert 'GREETING=$$(reboot) 50%%' in UNIT.read_text(), "the unit does not escape $ and %"


def test_container_unit_with_hostile_values_is_one_systemd_loads_cleanly(tmp_path):
    # This machine runs no systemd to start the unit: systemd-analyze says
    # whether one would load it, with no complaint (`%`, `$`, quotes and
    # backslashes in values escaped).
    if not shutil.which("systemd-analyze"):
        unavailable("systemd-analyze is not installed (apt-get install systemd)")
    unit = tmp_path / "podman-web.service"
    unit.write_text(podman.unit_text("web", IMAGE, ["sh", "-c", 'echo "$HOME" 100% \\'],
                                     ["8080:80"], ["/srv/a:/a:ro"], {"A": '$(x) \\ " %t'}))
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, SYSTEMD_UNIT_PATH=f"{tmp_path}:"))
    complaints = [line for line in (r.stdout + r.stderr).splitlines() if str(unit) in line]
    assert r.returncode == 0 and not complaints, r.stdout + r.stderr


@pytest.mark.parametrize("bad", [
    dict(name="-rm"), dict(name="a/b"), dict(name="x\ny"), dict(image="--privileged"),
    dict(image="debian bookworm"), dict(command=["sleep", "1\n"]), dict(publish=["80"]),
    dict(volumes=["/a:/b,relabel=shared"]), dict(env={"A=B": "1"}), dict(env={"A": "x\0"})])
def test_container_running_refuses_hostile_values_at_load(bad):
    args = dict(name=NAME, image=IMAGE)
    args.update(bad)
    name, image_ = args.pop("name"), args.pop("image")
    with pytest.raises(PropspecError):
        podman.container_running(name, image_, **args)


def test_image_present_refuses_a_leading_dash_and_a_relative_archive():
    with pytest.raises(PropspecError):
        podman.image_present("-q")
    with pytest.raises(PropspecError):
        podman.image_present(IMAGE, archive="x.tar")


def test_without_podman_check_mode_foresees_the_image_and_applying_says_to_install(chroot_chain):
    # The test chroot has no podman.
    p = [this_os(), podman.image_present(IMAGE)]
    outcome, events = deploy_propspec(chroot_chain, p, check_mode=True)
    assert outcome.exit_code(True) == 2, f"not foreseen as a change: {statuses(events)}"
    outcome, events = deploy_propspec(chroot_chain, p, check=False)
    assert outcome.status == "failed" and 'apt.installed "podman"' in failure_text(events), \
        failure_text(events)


def test_podman_hop_passes_exit_codes_and_binary_data(image):
    assert_hop_passes_exit_codes_and_binary_data([Keyword("podman"), Keyword("container"), NAME],
                                                 f"local > podman:{NAME}")


def test_podman_hop_timeout_kills_the_command_inside(image):
    conns = establish_chain(parse_chain([[Keyword("podman"), Keyword("container"), NAME]]))
    try:
        with pytest.raises(CommandTimedOut):
            conns[-1].run(["sleep", "4244"], timeout=1)
    finally:
        close_chain(conns)
    wait_until(lambda: "sleep 4244" not in _podman("top", NAME, "args").stdout,
               15, "the timed-out sleep in the container to be killed")


@pytest.mark.parametrize("hop", [
    [Keyword("podman"), Keyword("container"), "-rm"],
    [Keyword("podman"), Keyword("container"), "a/../b"],
    [Keyword("podman"), Keyword("container"), "web\nx"],
    [Keyword("podman"), Keyword("container"), "web", Keyword("user"), "-root"],
    [Keyword("podman")]])
def test_podman_hop_refuses_a_name_that_is_not_one_when_the_chain_is_read(hop):
    with pytest.raises(ChainError):
        parse_chain([hop])


def test_podman_hop_to_a_missing_container_says_so():
    with pytest.raises(ConnectionFailed, match="cannot enter the container cf-none"):
        establish_chain(parse_chain([[Keyword("podman"), Keyword("container"), "cf-none"]]))


def test_podman_hop_then_python_applies_inside(image):
    # The minbase image has no Python: this machine's /usr (Debian's too)
    # lends it one, read-only, so that nothing is installed.
    _podman("run", "--detach", "--name", SHELL, "--volume", "/usr:/usr:ro",
            image, *SLEEP)
    try:
        chain = [[Keyword("podman"), Keyword("container"), SHELL], Keyword("python")]
        apply_twice(chain, [this_os(), file.has_content("/etc/from-python", "py\n")])
        out = _podman("exec", SHELL, "cat", "/etc/from-python").stdout
        assert out == "py\n", f"not written inside: {out!r}"
    finally:
        _podman("rm", "--force", "--time", "0", SHELL)


def test_documented_offline_example_deploys_through_the_cli_then_checks_clean(conf, tmp_path):
    # The module's second example, with this machine's tarball and names.
    name, image_ = f"cfdoc-{os.getpid()}", f"localhost/consfig-doc-{os.getpid()}:1"
    site = tmp_path / "site.hy"
    site.write_text(f"""(require consfig *)
(import consfig *)
(use-props consfig.props [os podman])
(defhost podman.test {{:deploy :local}}
  (os.debian-stable "{host_suite()}" :{host_arch()})
  (podman.image-present "{image_}" :archive "{conf}")
  (podman.container-running "{name}" "{image_}" :command ["sleep" "infinity"]))
""")

    def cli(*flags):
        return subprocess.run([sys.executable, "-m", "consfig", "deploy", "--consfig", str(site),
                               "podman.test", "--detailed-exitcode", *flags],
                              capture_output=True, text=True, timeout=180)
    try:
        first = cli()
        assert first.returncode == 2, f"not deployed:\n{first.stdout}{first.stderr}"
        assert _state(name)[0] == "running", "the documented container does not run"
        checked = cli("--check", "--json")
        assert checked.returncode == 0, f"drifted right after deploying:\n{checked.stdout}{checked.stderr}"
        assert json.loads(checked.stdout.splitlines()[-1]), "no JSON summary"
    finally:
        _podman("rm", "--force", "--ignore", "--time", "0", name, check=False)
        _podman("rmi", "--ignore", image_, check=False)
        pathlib.Path(f"/etc/systemd/system/podman-{name}.service").unlink(missing_ok=True)


def test_container_removed_removes_container_and_unit(image):
    apply_twice(LOCAL, podman.container_removed(NAME))
    checks_clean(LOCAL, podman.container_removed(NAME))
    assert _state(NAME) is None, "the container is still there"
    assert not UNIT.exists(), "the unit is still there"


def test_container_running_unapplied_leaves_nothing(image):
    apply_twice(LOCAL, _running())
    unapply(LOCAL, _running())
    assert _state(NAME) is None and not UNIT.exists(), "something is left"


def test_image_present_unapplied_removes_the_image(image):
    unapply(LOCAL, podman.image_present(IMAGE, archive="/nonexistent.tar"))
    assert _podman("image", "exists", IMAGE, check=False).returncode != 0, "the image is left"


USER = f"cfpod{os.getpid() % 100000}"


def _as_user(*argv, check=True):
    return subprocess.run(["runuser", "-u", USER, "--", "env", "-u", "XDG_RUNTIME_DIR", "-u", "TMPDIR",
                           *argv],
                          capture_output=True, text=True, timeout=120, check=check, cwd="/")


@pytest.fixture(scope="module")
def rootless(conf):
    if not shutil.which("newuidmap"):
        unavailable("rootless podman needs newuidmap (apt-get install uidmap)")
    subprocess.run(["useradd", "-m", USER], check=True, timeout=60)
    archive = pathlib.Path(os.environ["CONTAINERS_CONF"]).parent / "image.tar.zst"
    shutil.copyfile(conf, archive)
    archive.chmod(0o644)
    try:
        yield str(archive)
    finally:
        _as_user("podman", "rm", "--all", "--force", "--time", "0", check=False)
        # Rootless podman leaves a pause process holding its user namespace.
        uid = subprocess.run(["id", "-u", USER], capture_output=True, text=True).stdout.strip()
        for pid in subprocess.run(["pgrep", "-u", uid], capture_output=True, text=True).stdout.split():
            subprocess.run(["kill", "-KILL", pid], capture_output=True)
        wait_until(lambda: subprocess.run(["pgrep", "-u", uid]).returncode == 1, 15,
                   f"the processes of {USER} to end")
        subprocess.run(["userdel", "-r", USER], capture_output=True, timeout=60)
        for d in [f"/tmp/podman-run-{uid}", f"/tmp/containers-user-{uid}"]:
            shutil.rmtree(d, ignore_errors=True)


def test_rootless_image_present_imports_into_the_users_own_storage(rootless):
    apply_twice(LOCAL, podman.image_present(IMAGE, archive=rootless, user=USER))
    assert _as_user("podman", "image", "exists", IMAGE, check=False).returncode == 0, \
        "not in the user's storage"


def test_rootless_container_running_runs_as_the_user_from_the_users_unit(rootless):
    apply_twice(LOCAL, podman.container_running(NAME, IMAGE, command=SLEEP, user=USER))
    out = _as_user("podman", "container", "inspect", "--format", "{{.State.Status}}", NAME).stdout
    assert out.strip() == "running", f"not running in the user's podman: {out!r}"
    unit = pathlib.Path(f"/home/{USER}/.config/systemd/user/podman-{NAME}.service")
    assert unit.owner() == USER and "ExecStart=/usr/bin/podman run" in unit.read_text(), \
        "the user's unit is not there, the user's"


def test_rootless_podman_hop_runs_in_the_users_container_as_its_root(rootless):
    hop = [Keyword("podman"), Keyword("container"), NAME, Keyword("user"), USER]
    conns = establish_chain(parse_chain([hop]))
    try:
        c = conns[-1]
        assert c.where == f"local > podman:{NAME}@{USER}", c.where
        assert c.run(["id", "-u"]).stdout == "0\n", "not root inside the user's container"
        assert c.run(["sh", "-c", "exit 5"], check=False).exit_code == 5, "exit code lost"
    finally:
        close_chain(conns)


def test_rootless_container_removed_leaves_no_container_nor_unit(rootless):
    apply_twice(LOCAL, podman.container_removed(NAME, user=USER))
    assert _as_user("podman", "container", "exists", NAME, check=False).returncode == 1, "left"
    assert not pathlib.Path(f"/home/{USER}/.config/systemd/user/podman-{NAME}.service").exists(), \
        "the unit is left"
