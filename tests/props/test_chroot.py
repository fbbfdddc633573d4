"""chroot.os-bootstrapped: the chroot is a host of its own, applied through
a :chroot hop inside the enclosing deployment.

Most tests give it the fixture's chroot, which is bootstrapped already, so
that they exercise everything but debootstrap itself quickly; the slow test
bootstraps a real one."""

import os
import subprocess
import time

import pytest

import hy  # noqa: F401
from hy.models import Keyword
from consfig.apply.combinators import eseqprops
from consfig.errors import ConsfigError
from consfig.model.host import make_host, preprocess_host
from consfig.model.property import propapp_type
from consfig.props import apt, chroot, cmd, file, os as os_, timezone

from harness import unavailable
from proptest import (apply_twice, cache_dir, checks_clean, deploy_propspec, host_arch, host_mirror,
                      host_suite, in_chroot, mounts_below, statuses, this_os, unapply)

LOCAL = Keyword("local")
MINBASE = {Keyword("variant"): "minbase"}


def bootstrapped(root, *props, options=None):
    return chroot.os_bootstrapped(options or {}, str(root), eseqprops(this_os(), *props))


def test_the_chroots_hostattrs_stay_its_own():
    p = chroot.os_bootstrapped({}, "/srv/chroot/sid", eseqprops(
        os_.debian_unstable(Keyword("amd64")), timezone.configured("Europe/Paris")))
    host = preprocess_host(make_host("parent.example", None, None,
                                     eseqprops(os_.debian_stable("bookworm", Keyword("amd64")), p)))
    assert host.hostattrs["os"] == [{"type": "debian-stable", "suite": "bookworm", "arch": "amd64"}]
    assert "timezone" not in host.hostattrs
    assert propapp_type(p) == "posix"


def test_a_chroot_without_an_os_is_refused_before_connecting():
    p = chroot.os_bootstrapped({}, "/srv/chroot/x", eseqprops(file.has_content("/x", "y")))
    with pytest.raises(ConsfigError, match="parent.example: in the chroot /srv/chroot/x: .*declares no OS"):
        preprocess_host(make_host("parent.example", None, None, p))


def test_a_property_that_does_not_fit_the_chroot_names_it():
    p = chroot.os_bootstrapped({}, "/srv/chroot/x", eseqprops(
        os_.linux(Keyword("amd64")), apt.installed("less")))
    with pytest.raises(ConsfigError, match="in the chroot /srv/chroot/x: apt.installed needs an OS of type debian"):
        preprocess_host(make_host("parent.example", None, None, p))


def test_a_relative_or_root_directory_is_refused():
    for root in ("srv/chroot", "/", "/srv/.."):
        with pytest.raises(ConsfigError, match="root"):
            preprocess_host(make_host("parent.example", None, None,
                                      chroot.os_bootstrapped({}, root, eseqprops(this_os()))))


def test_bootstrap_command_from_the_chroots_os():
    argv = chroot.bootstrap_argv(
        "debootstrap", {"type": "debian-unstable", "suite": "unstable", "arch": "arm64"},
        "/srv/c", "http://mirror/debian",
        {"variant": "minbase", "include": ["less", "vim"], "merged-usr": True,
         "foreign": False, "mirror": "ignored"})
    assert argv == ["debootstrap", "--variant=minbase", "--include=less,vim", "--merged-usr",
                    "--arch=arm64", "unstable", "/srv/c", "http://mirror/debian"]


@pytest.mark.chroot
def test_the_propspec_is_applied_inside_and_nested_in_the_report(debian_chroot):
    p = bootstrapped(debian_chroot,
                     file.has_content("/etc/consfig-inside", "inside\n"),
                     cmd.single("test", "-x", "/usr/sbin/policy-rc.d", creates="/etc/consfig-policy"),
                     cmd.single("touch", "/etc/consfig-policy", creates="/etc/consfig-policy"))
    events = apply_twice(LOCAL, [this_os(), p])
    assert (debian_chroot / "etc/consfig-inside").read_text() == "inside\n"
    assert not (debian_chroot / "usr/sbin/policy-rc.d").exists()
    start = next(e for e in events if e["event"] == "start"
                 and e["desc"] == f"Chroot {debian_chroot} bootstrapped")
    inner = next(e for e in events if e["event"] == "end"
                 and e["desc"] == "/etc/consfig-inside has content")
    assert inner["depth"] == start["depth"] + 1
    assert statuses(events)[f"Chroot {debian_chroot} bootstrapped"] == "changed"
    assert not mounts_below(debian_chroot), mounts_below(debian_chroot)


@pytest.mark.chroot
def test_check_mode_checks_inside_the_chroot_and_bootstraps_nothing(debian_chroot, tmp_path):
    # Issue 31: it had neither :check nor a simulation, so a converged host
    # with a chroot said "cannot check" of it.
    p = bootstrapped(debian_chroot, file.has_content("/etc/consfig-checked", "x\n"))
    outcome, events = deploy_propspec(LOCAL, [this_os(), p], check_mode=True)
    assert statuses(events)["/etc/consfig-checked has content"] == "would-change", statuses(events)
    assert not (debian_chroot / "etc/consfig-checked").exists(), "check mode wrote nothing inside"
    deploy_propspec(LOCAL, [this_os(), p])
    outcome, events = deploy_propspec(LOCAL, [this_os(), p], check_mode=True)
    assert outcome.status == "no-change", statuses(events)
    outcome, events = deploy_propspec(LOCAL, [this_os(), bootstrapped(tmp_path / "new")], check_mode=True)
    assert statuses(events)[f"Chroot {tmp_path / 'new'} bootstrapped"] == "would-change", statuses(events)
    assert not (tmp_path / "new").exists(), "nothing bootstrapped"


@pytest.mark.chroot
def test_a_failure_inside_fails_the_chroot_and_unmounts(debian_chroot):
    p = bootstrapped(debian_chroot, cmd.script("exit 7"))
    outcome, events = deploy_propspec(LOCAL, [this_os(), p], check=False)
    assert outcome.status == "failed"
    assert statuses(events) == {"Debian stable (%s, %s)" % (host_suite(), host_arch()): "ok",
                                "Ran exit 7": "failed",
                                f"Chroot {debian_chroot} bootstrapped": "failed"}
    assert not mounts_below(debian_chroot), mounts_below(debian_chroot)


@pytest.mark.chroot
def test_a_directory_that_is_not_a_system_is_left_alone(tmp_path):
    (tmp_path / "precious").write_text("keep me")
    outcome, events = deploy_propspec(LOCAL, [this_os(), bootstrapped(tmp_path)], check=False)
    assert outcome.status == "failed"
    assert any("holds no bootstrapped system" in (e.get("message") or "") for e in events)
    assert (tmp_path / "precious").read_text() == "keep me"


@pytest.mark.slow
@pytest.mark.chroot
def test_os_bootstrapped_debootstraps_applies_and_unapply_removes(tmp_path_factory):
    if os.geteuid() != 0 or not host_suite():
        unavailable("bootstrapping needs root on a Debian machine")
    if not (os.path.exists("/usr/sbin/debootstrap") or os.path.exists("/usr/bin/mmdebstrap")):
        unavailable("debootstrap is not installed (apt-get install debootstrap)")
    # debootstrap keeps the .debs it fetched in --cache-dir, so only the
    # first run on a machine downloads them; the bootstrap itself is real.
    debs = cache_dir() / f"debootstrap-{host_suite()}-{host_arch()}-debs"
    debs.mkdir(exist_ok=True)
    root = tmp_path_factory.mktemp("bootstrap") / "sys"
    mirror = host_mirror(host_suite())
    p = bootstrapped(root, file.has_content("/etc/motd", "built by consfig\n"),
                     options={Keyword("variant"): "minbase", Keyword("cache-dir"): str(debs)})
    try:
        started = time.monotonic()
        apply_twice(LOCAL, [this_os(), apt.mirrors(mirror), p])
        checks_clean(LOCAL, [this_os(), apt.mirrors(mirror), p])
        print(f"bootstrap and two applications: {time.monotonic() - started:.1f} s")
        assert (root / "etc/motd").read_text() == "built by consfig\n"
        assert in_chroot(root, "cat /etc/debian_version").returncode == 0
        assert mirror in (root / "etc/apt/sources.list").read_text()
        unapply(LOCAL, chroot.os_bootstrapped({}, str(root), eseqprops(this_os())))
        assert not root.exists()
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(root)], timeout=600)
