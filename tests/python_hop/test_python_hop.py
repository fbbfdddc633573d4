"""The :python hop: a host applied by a Python on the target, events streamed back.

Over [:local :python] (a real child interpreter running from a real bundle
cache), [:sudo :python] and [:local :python :sudo] here; over the SSH lab in
test_python_hop_ssh.py.
"""

import os
import stat
import sys
import time

import pytest
from hy.models import Keyword

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import running, unavailable, wait_until  # noqa: E402
from remote_helpers import (deploy, has_content, mixed_host,  # noqa: E402
                            rp, seqprops, shape, single)

import consfig.python_hop.bundle as bundle  # noqa: E402
import consfig.python_hop.controller as remote  # noqa: E402
import consfig.python_hop.target as target  # noqa: E402
from consfig.errors import ConnectionFailed, ConsfigError  # noqa: E402
from consfig.model.host import Host  # noqa: E402
from consfig.model.property import find_property  # noqa: E402

LOCAL_PYTHON = [Keyword("local"), Keyword("python")]


def K(name):
    return Keyword(name)


@pytest.fixture(scope="module", autouse=True)
def bundle_cache(tmp_path_factory):
    """One bundle cache for the module's tests, so that only the test about
    first deployments pays for a first deployment."""
    old = os.environ.get("XDG_CACHE_HOME")
    path = str(tmp_path_factory.mktemp("cache"))
    os.environ["XDG_CACHE_HOME"] = path
    yield path
    if old is None:
        del os.environ["XDG_CACHE_HOME"]
    else:
        os.environ["XDG_CACHE_HOME"] = old


def test_local_python_gives_the_same_results_and_events_as_a_local_run(tmp_path, events):
    remote_dir, local_dir = tmp_path / "r", tmp_path / "l"
    remote_dir.mkdir()
    local_dir.mkdir()
    first = deploy(LOCAL_PYTHON, mixed_host(remote_dir), sink=events)
    remote_events = [dict(e) for e in events.events]
    events.events.clear()
    local = deploy(K("local"), mixed_host(local_dir), sink=events)

    assert first.status == local.status == "changed", (first, local)
    assert shape(remote_events, remote_dir) == shape(events.events, local_dir)
    assert (remote_dir / "etc" / "py").read_text() == "from Python\n"
    assert (remote_dir / "etc" / "ran").read_text() == "ran\n"
    events.events.clear()
    again = deploy(LOCAL_PYTHON, mixed_host(remote_dir), sink=events)
    assert again.status == "no-change", events.ends()


def test_python_property_over_a_posix_chain_is_refused_before_connecting(tmp_path):
    host = Host("target.example", seqprops(rp.python_wrote(f"{tmp_path}/x", "x")))
    chain = [[K("ssh"), K("host"), "unreachable.invalid"]]
    with pytest.raises(ConsfigError) as e:
        deploy(chain, host, sink=lambda e: None)
    assert "python-wrote" in str(e.value) and ":python hop" in str(e.value), str(e.value)


def test_second_deployment_sends_no_bundle(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    host = mixed_host(tmp_path)
    before = dict(remote.stats)
    events = []
    first = deploy(LOCAL_PYTHON, host, sink=events.append)
    # A first deployment that failed half-way would explain a second bundle.
    assert first.status == "changed", events
    assert remote.stats["bundles-sent"] == before["bundles-sent"] + 1
    sent = remote.stats["bytes-sent"]
    second = deploy(LOCAL_PYTHON, host, sink=events.append)
    assert second.status == "no-change", events
    assert remote.stats["bundles-sent"] == before["bundles-sent"] + 1, (
        "bundle sent twice", os.listdir(cache / "consfig" / "bundles"))
    assert remote.stats["bytes-sent"] - sent < 20000, "more than the host was sent"
    for d in [cache / "consfig", cache / "consfig" / "bundles"]:
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700, oct(os.stat(d).st_mode)
    layers = list((cache / "consfig" / "bundles").iterdir())
    [library] = [d for d in layers if (d / "consfig").is_dir()]
    [site] = [d for d in layers if d != library]
    assert (site / "remote_testprops.hy").exists(), "the site module was not shipped"
    assert not (library / "remote_testprops.hy").exists(), "the site is in the library layer"
    assert any(n.startswith("engine.") for n in os.listdir(library / "consfig" / "apply" / "__pycache__")), \
        "Hy's bytecode is not cached with the bundle"


# What a target that finds every file in place has no use for: the
# archive an image is, Hy's printer, the controller's modules (the deployer
# layer: a nested deployment is `consfig.nested`'s), the image builder and
# the data sources.  (What costs a target less than 5 ms is imported at the
# top of the module that needs it: docs/python-hop.md.)
NOT_IMPORTED_BY_A_WARM_APPLY = [
    "zipfile", "hy.core.hy_repr", "fractions", "decimal", "datetime",
    "consfig.deployer", "consfig.deployer.deployment", "consfig.deployer.fleet",
    "consfig.image.build", "consfig.data.sources"]


def warm_target_modules(host, listed):
    """The modules the target's Python had imported when HOST's second
    deployment (warm) recorded them in the file LISTED."""
    events = []
    assert deploy(LOCAL_PYTHON, host, sink=events.append).status == "changed", events
    assert deploy(LOCAL_PYTHON, host, sink=events.append).status == "no-change", events
    return set(listed.read_text().split("\n"))


def test_a_target_that_finds_everything_in_place_imports_only_what_it_applies_with(tmp_path):
    # The second deployment's target runs from the cached bundle (the
    # bootstrap unpacks a new one with tarfile) and finds the files there.
    listed = tmp_path / "modules"
    host = Host("target.example", seqprops(
        find_property("consfig.props.file.directory-exists")(f"{tmp_path}/etc"),
        has_content(f"{tmp_path}/etc/motd", "hello\n"),
        rp.modules_recorded(str(listed))))
    modules = warm_target_modules(host, listed)
    assert "consfig.props.file" in modules, sorted(modules)
    imported = [m for m in NOT_IMPORTED_BY_A_WARM_APPLY if m in modules]
    assert not imported, f"a warm apply imported {imported}"


def test_a_site_module_importing_all_of_consfig_brings_no_archive_nor_printer(tmp_path):
    import star_testprops
    listed = tmp_path / "modules"
    host = Host("target.example", seqprops(
        has_content(f"{tmp_path}/motd", "hello\n"),
        star_testprops.modules_recorded_by_a_site(str(listed))))
    modules = warm_target_modules(host, listed)
    assert {"star_testprops", "consfig.deployer.fleet", "consfig.image.build"} <= modules, sorted(modules)
    imported = [m for m in ["zipfile", "hy.core.hy_repr"] if m in modules]
    assert not imported, f"a warm apply with a site module imported {imported}"


def test_old_bundles_are_pruned(tmp_path):
    for i, age in enumerate([10, 5 * 86400, 6 * 86400, 7 * 86400, 8 * 86400]):
        d = tmp_path / f"b{i}"
        d.mkdir()
        os.utime(d, (time.time() - age, time.time() - age))
    bundle.prune_bundles(str(tmp_path), str(tmp_path / "b4"))
    assert sorted(os.listdir(tmp_path)) == ["b0", "b1", "b4"]


def test_a_target_sends_the_events_of_quick_properties_in_a_few_frames(tmp_path):
    # 100 properties of a millisecond or less each: a frame (and packets on
    # every hop) per property would cost the controller more than the work.
    host = Host("target.example", seqprops(
        *[has_content(f"{tmp_path}/f{i}", "x\n") for i in range(100)]))
    # The target sends what it has every COALESCE seconds: on a quiet
    # machine the whole run fits in a few such windows, and on a loaded one
    # the run is longer, so the bound is the run's own windows, and always
    # far fewer frames than events.
    window = target.COALESCE
    for want in ["changed", "no-change"]:
        before = remote.stats["frames-received"]
        events = []
        started = time.monotonic()
        assert deploy(LOCAL_PYTHON, host, sink=events.append).status == want, events
        elapsed = time.monotonic() - started
        frames = remote.stats["frames-received"] - before
        assert len(events) > 200, len(events)
        assert frames <= elapsed / window + 4, \
            f"{want}: {len(events)} events came in {frames} frames in {elapsed:.2f} s"
        assert frames < len(events) / 4, f"{want}: {len(events)} events came in {frames} frames"


def test_events_arrive_while_the_target_is_still_applying(tmp_path):
    arrivals = []
    host = Host("target.example", seqprops(has_content(f"{tmp_path}/a", "a\n"), rp.slept(2)))
    deploy(LOCAL_PYTHON, host, sink=lambda e: arrivals.append((time.monotonic(), e)))
    done = time.monotonic()
    first_end = next(t for t, e in arrivals if e["event"] == "end")
    assert done - first_end > 1.5, f"the first event came only {done - first_end:.2f} s before the end"


def test_a_property_raising_on_the_target_is_reported_with_its_message(tmp_path, events):
    host = Host("target.example", seqprops(rp.raised("boom on the target"),
                                           has_content(f"{tmp_path}/after", "x")))
    outcome = deploy(LOCAL_PYTHON, host, sink=events)
    assert outcome.status == "failed"
    [failed] = [e for e in events.events if e["event"] == "end" and e["status"] == "failed"]
    assert failed["message"] == "ValueError: boom on the target", failed
    assert "Traceback" in failed["traceback"] and "remote_testprops" in failed["traceback"]
    assert events.status_of(f"{tmp_path}/after has content") == "changed"


def test_the_target_dying_ends_the_deployment_with_a_clear_failure(tmp_path, events):
    host = Host("target.example", seqprops(rp.died(), has_content(f"{tmp_path}/after", "x")))
    with pytest.raises(ConnectionFailed) as e:
        deploy(LOCAL_PYTHON, host, sink=events)
    msg = str(e.value)
    assert "target.example" in msg and "ended before the deployment finished" in msg, msg
    assert not (tmp_path / "after").exists()


def test_a_dropped_controller_leaves_no_process_on_the_target(tmp_path):
    # A sleep long and odd enough to be told from any other.
    marker = f"sleep 8{os.getpid()}"
    host = Host("target.example", seqprops(
        rp.pid_recorded(f"{tmp_path}/pid"),
        single(*marker.split())))

    def sink(event):
        # The controller goes away while the target runs a long command.
        if event["event"] == "start" and "sleep" in event["desc"]:
            wait_until(lambda: running(marker), 10, f"{marker} to run on the target")
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        deploy(LOCAL_PYTHON, host, sink=sink)
    pid = int((tmp_path / "pid").read_text().split()[0])
    wait_until(lambda: not running(marker), 10, "the target's command to end")
    assert not os.path.exists(f"/proc/{pid}"), "the target Python is still running"


def refusal(tmp_path, interpreter, *options):
    """The message of the ConnectionFailed a :python hop over INTERPRETER
    (with hop OPTIONS) ends in."""
    chain = [K("local"), [K("python"), K("interpreter"), str(interpreter), *options]]
    with pytest.raises(ConnectionFailed) as e:
        deploy(chain, mixed_host(tmp_path), sink=lambda e: None)
    return str(e.value)


def test_no_python_at_the_interpreter_named_is_a_clear_error(tmp_path):
    msg = refusal(tmp_path, "/nonexistent/python3")
    assert "target.example" in msg and "/nonexistent/python3" in msg and "3.9" in msg, msg


def test_a_too_old_python_is_a_clear_error_naming_its_version(tmp_path):
    fake = tmp_path / "python3.6"
    # A Python that says it is 3.6.9 as it runs the bootstrap.
    fake.write_text("#!/bin/sh\nexec %s -c \"import sys; sys.version_info = (3, 6, 9, 'final', 0); "
                    "exec(sys.argv[1])\" \"$4\"\n" % sys.executable)
    fake.chmod(0o755)
    msg = refusal(tmp_path, fake)
    assert "target.example" in msg and "Python 3.6.9" in msg and "3.9 or later" in msg, msg


def test_something_that_is_not_python_is_a_clear_error(tmp_path):
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\necho 'this is not a Python' >&2\nexit 2\n")
    fake.chmod(0o755)
    msg = refusal(tmp_path, fake)
    assert "exited with code 2" in msg and "this is not a Python" in msg, msg


def test_a_silent_target_is_given_up_after_the_timeout(tmp_path):
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\nexec sleep 30\n")
    fake.chmod(0o755)
    started = time.monotonic()
    msg = refusal(tmp_path, fake, K("timeout"), 1)
    assert time.monotonic() - started < 10
    assert "no word from the Python on the target" in msg, msg


@pytest.fixture
def needs_sudo():
    if os.geteuid() != 0:
        unavailable("needs root, to sudo without a password")


@pytest.mark.usefixtures("needs_sudo")
def test_sudo_python_gives_the_same_results_as_a_local_run(tmp_path, events):
    first = deploy([K("sudo"), K("python")], mixed_host(tmp_path), sink=events)
    assert first.status == "changed", events.ends()
    events.events.clear()
    again = deploy([K("sudo"), K("python")], mixed_host(tmp_path), sink=events)
    assert again.status == "no-change", events.ends()


@pytest.mark.usefixtures("needs_sudo")
def test_hops_after_python_start_a_further_python_on_the_target(tmp_path, events):
    host = Host("target.example", seqprops(rp.pid_recorded(f"{tmp_path}/pid")))
    outcome = deploy([K("local"), K("python"), K("sudo")], host, sink=events)
    assert outcome.status == "changed", events.ends()
    assert int((tmp_path / "pid").read_text().split()[0]) != os.getpid()


def test_a_host_deployed_by_a_target_gets_its_site_modules_too(tmp_path, events):
    deploys = find_property("consfig.deployment.deploys")
    inner = Host("inner.example", seqprops(rp.python_wrote(f"{tmp_path}/inner", "inner\n")))
    outer = Host("outer.example", seqprops(deploys([K("local"), K("python")], inner)))
    outcome = deploy(LOCAL_PYTHON, outer, sink=events)
    assert outcome.status == "changed", events.ends()
    assert (tmp_path / "inner").read_text() == "inner\n"
    assert [e["host"] for e in events.events if e["event"] == "end"] == \
        ["inner.example", "outer.example"]


def test_a_hop_after_python_is_established_by_the_target(tmp_path, events):
    host = Host("target.example", seqprops(rp.pid_recorded(f"{tmp_path}/pid")))
    deploy(LOCAL_PYTHON, host, sink=events)
    pid, ppid = map(int, (tmp_path / "pid").read_text().split())
    assert ppid == os.getpid(), "[:local :python] is not a child of the controller"
    deploy([K("local"), K("python"), K("local")], host, sink=events)
    pid, ppid = map(int, (tmp_path / "pid").read_text().split())
    assert ppid != os.getpid(), "no further Python was started on the target"
    assert events.summary()["status"] == "changed"


def test_install_puts_a_missing_python_there_with_the_package_manager(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    apt_get = bin_dir / "apt-get"
    # An apt-get that "installs" python3 by linking this Python into PATH.
    apt_get.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/apt.log\n"
                       f"ln -sf {sys.executable} {bin_dir}/consfig-test-python3\n")
    apt_get.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    hop = [K("python"), K("interpreter"), "consfig-test-python3", K("install"), True]
    outcome = deploy([K("local"), hop], mixed_host(tmp_path / "d"), sink=lambda e: None)
    assert outcome.status == "changed"
    assert "install -y -q python3" in (tmp_path / "apt.log").read_text()
    deploy([K("local"), hop], mixed_host(tmp_path / "d"), sink=lambda e: None)
    assert len((tmp_path / "apt.log").read_text().splitlines()) == 1, "installed twice"


def test_the_conversation_with_the_target_is_reported_at_vvv(tmp_path):
    def wire(verbosity):
        events = []
        deploy(LOCAL_PYTHON, mixed_host(tmp_path / str(verbosity)), sink=events.append,
               verbosity=verbosity)
        return [e["text"] for e in events if e.get("stream") == "wire"]
    assert wire(2) == [], "nothing below -vvv"
    frames = wire(3)
    assert frames[0].startswith("→ hello (layers "), frames
    assert any(f.startswith("← events ×") for f in frames), frames
    assert frames[-1].startswith("← done changes "), frames


def test_a_site_module_that_cannot_import_on_the_target_says_which_import_failed(tmp_path):
    # The site's file imports a module that the controller has (on its
    # PYTHONPATH) and the target has not: the target cannot import the
    # site, so it knows no property of it.  Which import failed, and what to
    # do about it, is what the user needs; not "unknown property".
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "ui"))
    from clirun import REPO
    import subprocess
    (tmp_path / "onlyhere").mkdir()
    (tmp_path / "onlyhere" / "controller_only_helper.py").write_text("GREETING = 'hi'\n")
    site = tmp_path / "site.hy"
    site.write_text(f"""(require consfig *)
(import consfig * controller_only_helper)
(defprop greeted :posix []
  "A property whose module imports what only the controller has."
  (:apply (run "true")))
(defhost h.example {{:deploy [:local :python]}}
  (greeted))
""")
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
           "PYTHONPATH": str(tmp_path / "onlyhere")}
    r = subprocess.run([sys.executable, "-m", "consfig", "deploy", "--consfig", str(site), "h.example"],
                       capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    said = r.stdout + r.stderr
    assert r.returncode != 0, said
    assert "controller_only_helper" in said, f"does not name the import that failed: {said}"
    assert "unknown property" not in said, said
    assert "install" in said.lower() and "ship-modules" in said, f"does not say what to do: {said}"
    assert "Traceback" not in said, said
