"""Helpers for property tests: the Debian chroot they run in (built by
debootstrap, cached as a tarball), deploying a propspec, and looking at
what happened.

    from proptest import apply_twice, checks_clean, deploy_propspec, unapply, in_chroot, this_os

    def test_motd(chroot_chain, debian_chroot):
        apply_twice(chroot_chain, [this_os(), file.has_content("/etc/motd", "hi\\n")])
        assert (debian_chroot / "etc/motd").read_text() == "hi\\n"
        checks_clean(chroot_chain, [this_os(), file.has_content("/etc/motd", "hi\\n")])

A propspec may be given as one propapp or a list of them (applied with
`eseqprops`).  Every deployment here goes to a host named
`test.consfig.invalid`, whose hostattrs come from the propspec alone —
include `this_os()` when a property needs to know the OS.
"""

import os
import pathlib
import re
import subprocess

import hy  # noqa: F401
from consfig.apply.combinators import eseqprops
import consfig.deployer.deployment
from consfig.model.host import Host, make_host
from consfig.model.property import Propapp

_deploy_these = getattr(consfig.deployer.deployment, hy.mangle("deploy-these*"))
_deploy = getattr(consfig.deployer.deployment, hy.mangle("deploy*"))

# The chroot's cache, for the tests that import it from here.
from chrootcache import (BUILD_TIMEOUT, cache_dir, debs_dir, ensure_tarball, host_arch,  # noqa: E402,F401
                         host_mirror, host_suite, keep_debs, mounts_below, overlay_copy, pack,
                         remove_tree, unmount_below, unpack)


HOSTNAME = "test.consfig.invalid"

# The chain for tests that run on this machine, in a temporary directory.
# (In a Hy call `:local` would be read as a keyword-argument marker.)
LOCAL = [hy.models.Keyword("local")]


def this_os():
    """The OS declaration of this machine, which the test chroot shares."""
    from consfig.props import os as os_
    return os_.debian_stable(host_suite(), hy.models.Keyword(host_arch()))


def _propspec(p):
    if isinstance(p, Propapp):
        return p
    return eseqprops(*p)


def deploy_propspec(chain, propspec, *, unapply=False, hostname=HOSTNAME, check=True,
                    sink=None, check_mode=False, whole_host=False):
    """Deploy PROPSPEC over CHAIN; return `(outcome, events)`.  With CHECK,
    a failed deployment is an AssertionError carrying the failure messages.
    SINK also gets every event; CHECK_MODE deploys with --check.  WHOLE_HOST
    deploys a host whose propspec is PROPSPEC, as `consfig deploy HOST`
    does (the engine then also unapplies what left it, `removed-unapplied`),
    rather than PROPSPEC to a host of none, as `deploy-these` does.
    PROPSPEC may also be a host (a site's, say): it is deployed whole."""
    events = []

    def record(event):
        events.append(event)
        if sink:
            sink(event)
    if isinstance(propspec, Host):
        outcome = _deploy(chain, propspec, sink=record, unapply=unapply, check=check_mode)
    elif whole_host:
        outcome = _deploy(chain, make_host(hostname, None, None, _propspec(propspec)),
                          sink=record, unapply=unapply, check=check_mode)
    else:
        host = make_host(hostname, None, None, _propspec([]))
        outcome = _deploy_these(chain, host, _propspec(propspec), sink=record,
                                unapply=unapply, check=check_mode)
    if check:
        assert outcome.status != "failed", failure_text(events)
    return outcome, events


def failure_text(events):
    """The failure messages among EVENTS, for assertion messages."""
    return "deployment failed:\n" + "\n".join(
        f"  {e.get('desc')}: {e.get('message')}" + (f"\n{e['traceback']}" if e.get("traceback") else "")
        for e in events if e.get("status") == "failed" and e.get("message"))


def statuses(events):
    """`{desc: status}` of the announced properties in EVENTS."""
    return {e["desc"]: e["status"] for e in events if e.get("event") == "end"}


def apply_twice(chain, propspec, **kw):
    """Apply PROPSPEC; assert it changed something (unless `changes=False`)
    and that applying it again changes nothing.  Return the first run's
    events."""
    expect_change = kw.pop("changes", True)
    first, events = deploy_propspec(chain, propspec, **kw)
    if expect_change:
        assert first.status == "changed", f"first run made no change: {statuses(events)}"
    second, events2 = deploy_propspec(chain, propspec, **kw)
    assert second.status == "no-change", \
        f"second run was not a no-change: {statuses(events2)}"
    return events


def checks_clean(chain, propspec, **kw):
    """Deploy PROPSPEC over CHAIN in check mode (`--check --detailed-exitcode`)
    and assert that it would change nothing: exit code 0, and no property
    that would change or cannot say.  For a propspec just applied: a
    converged host checks clean (issue 31, item 3).  Return the events."""
    outcome, events = deploy_propspec(chain, propspec, check_mode=True, **kw)
    drift = [f"  {e['status']}: {e.get('desc')}" for e in events
             if e.get("event") == "end" and e.get("status") in ("would-change", "cannot-check")]
    notes = [f"    {e.get('text')}" for e in events
             if e.get("event") == "output" and e.get("stream") == "note"]
    assert outcome.exit_code(True) == 0 and not drift, (
        f"after it was applied, a check would change something "
        f"(detailed exit code {outcome.exit_code(True)}):\n" + "\n".join(drift + notes))
    return events


def unapply(chain, propspec, *, twice=True, **kw):
    """Unapply PROPSPEC; with TWICE, assert unapplying again changes nothing."""
    first, events = deploy_propspec(chain, propspec, unapply=True, **kw)
    if twice:
        second, events2 = deploy_propspec(chain, propspec, unapply=True, **kw)
        assert second.status == "no-change", \
            f"second unapply was not a no-change: {statuses(events2)}"
    return events


def diffs(events):
    """The diff events among EVENTS."""
    return [e for e in events if e.get("event") == "diff"]


def said(events):
    """What the properties said to the operator in EVENTS, as one string."""
    return " ".join(e["text"] for e in events if e.get("event") == "output")


def data_item(directory, iden1, iden2, content):
    """Register CONTENT (bytes or text) as the prerequisite data item (IDEN1,
    IDEN2), from a file made for it in DIRECTORY."""
    from consfig.data.items import register_data_source
    p = pathlib.Path(directory) / ("item" + re.sub(r"[^A-Za-z0-9._-]", "_", iden1 + "_" + iden2))
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    register_data_source("local-file", location=str(p), iden1=iden1, iden2=iden2)


def rooted_in(root):
    """The ids of the processes whose root directory is ROOT or below it."""
    root = os.path.realpath(root)
    pids = []
    for p in pathlib.Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            r = os.readlink(p / "root")
        except OSError:
            continue
        if r == root or r.startswith(root + "/"):
            pids.append(int(p.name))
    return pids


# What a command run into a chroot by hand gets for an environment: none of
# this process's TMPDIR (which names a directory outside it: mariadbd,
# among others, then fails to start) or XDG directories, as consfig's own
# :chroot hop does.
CHROOT_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}


def in_chroot(root, script, *, check=True, input=None):
    """Run SCRIPT with /bin/sh inside the chroot ROOT (from outside any
    deployment) and return the CompletedProcess, text mode."""
    proc = subprocess.run(["chroot", str(root), "/bin/sh", "-c", script],
                          capture_output=True, text=True, timeout=300, input=input,
                          env=CHROOT_ENV)
    if check:
        assert proc.returncode == 0, \
            f"in chroot: {script!r} exited {proc.returncode}: {proc.stdout}{proc.stderr}"
    return proc


def assert_hop_passes_exit_codes_and_binary_data(hop, where):
    """Over the chain [HOP] (a container's hop), whose connection is WHERE:
    a command's exit code comes back, and stdin/stdout is a clean binary pipe."""
    from consfig.transport.chain import close_chain, establish_chain, parse_chain
    conns = establish_chain(parse_chain([hop]))
    try:
        c = conns[-1]
        assert c.where == where, c.where
        assert c.run(["sh", "-c", "exit 7"], check=False).exit_code == 7, "exit code lost"
        data = bytes(range(256)) * 64
        p = c.start_process(["cat"])
        p.stdin.write(data)
        p.stdin.close()
        assert p.stdout.read(len(data)) == data, "stdin/stdout is not a clean binary pipe"
        assert p.wait(30) == 0, "cat in the container failed"
    finally:
        close_chain(conns)
