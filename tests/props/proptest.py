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

import fcntl
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
import time

import hy  # noqa: F401
from consfig.apply.combinators import eseqprops
import consfig.deployer.deployment
from consfig.model.host import Host, make_host
from consfig.model.property import Propapp

_deploy_these = getattr(consfig.deployer.deployment, hy.mangle("deploy-these*"))
_deploy = getattr(consfig.deployer.deployment, hy.mangle("deploy*"))

BUILD_TIMEOUT = 1800


def cache_dir():
    d = pathlib.Path(os.environ.get("CONSFIG_TEST_CACHE")
                     or pathlib.Path.home() / ".cache" / "consfig-tests")
    d.mkdir(parents=True, exist_ok=True)
    return d


def host_suite():
    """This machine's Debian codename, or None when it is not Debian."""
    try:
        text = pathlib.Path("/etc/os-release").read_text()
    except OSError:
        return None
    fields = dict(re.findall(r'^(\w+)="?([^"\n]*)"?$', text, re.M))
    if fields.get("ID") != "debian":
        return None
    return fields.get("VERSION_CODENAME") or None


def host_arch():
    return subprocess.run(["dpkg", "--print-architecture"], capture_output=True,
                          text=True, check=True, timeout=30).stdout.strip()


def host_mirror(suite):
    """The Debian mirror this machine's apt uses for SUITE: the first
    one-line or deb822 source whose suites include it and whose URI is not a
    security archive."""
    if os.environ.get("CONSFIG_TEST_MIRROR"):
        return os.environ["CONSFIG_TEST_MIRROR"]
    files = [pathlib.Path("/etc/apt/sources.list")]
    files += sorted(pathlib.Path("/etc/apt/sources.list.d").glob("*.list"))
    files += sorted(pathlib.Path("/etc/apt/sources.list.d").glob("*.sources"))
    for f in files:
        try:
            text = f.read_text()
        except OSError:
            continue
        if f.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^([\w-]+):\s*(.*)$", stanza, re.M))
                if (suite in fields.get("Suites", "").split()
                        and "deb" in fields.get("Types", "").split()
                        and fields.get("Enabled", "yes") != "no"):
                    for uri in fields.get("URIs", "").split():
                        if "security" not in uri:
                            return uri
        else:
            for line in text.splitlines():
                m = re.match(r"\s*deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)", line)
                if m and m.group(2) == suite and "security" not in m.group(1):
                    return m.group(1)
    return "http://deb.debian.org/debian"


def _sh(*argv, timeout=600, **kw):
    return subprocess.run(argv, check=True, timeout=timeout, **kw)


def _mount_points():
    with open("/proc/self/mountinfo") as f:
        return {line.split()[4].encode().decode("unicode_escape") for line in f}


def mounts_below(root):
    """The mount points strictly below ROOT (a chroot made by `overlay_copy`
    is itself a mount)."""
    root = os.path.realpath(root)
    return [p for p in _mount_points() if p.startswith(root + "/")]


def unmount_below(root):
    """Lazily unmount everything mounted at or below ROOT.  Only the topmost
    mounts are unmounted, each with its subtree: unmounting a submount of a
    bind of /dev one by one could, under shared propagation, take the
    host's own /dev/pts with it."""
    root = os.path.realpath(root)
    below = [p for p in _mount_points() if p == root or p.startswith(root + "/")]
    top = [p for p in below
           if not any(q != p and p.startswith(q.rstrip("/") + "/") for q in below)]
    for p in top:
        subprocess.run(["umount", "-l", p], timeout=60, check=False,
                       capture_output=True)


def remove_tree(root):
    """Remove ROOT, never crossing into anything still mounted below it."""
    unmount_below(root)
    subprocess.run(["rm", "-rf", "--one-file-system", "--", str(root)],
                   timeout=300, check=False)


def _compress_flag():
    return ["--zstd"] if shutil.which("zstd") else ["--gzip"]


def _build(tarball, suite, arch, mirror):
    work = pathlib.Path(tempfile.mkdtemp(prefix="build-", dir=tarball.parent))
    root = work / "root"
    try:
        log = work / "debootstrap.log"
        with open(log, "wb") as out:
            proc = subprocess.run(
                ["debootstrap", "--variant=minbase", f"--arch={arch}", suite,
                 str(root), mirror],
                stdout=out, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT)
        if proc.returncode != 0:
            tail = log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"debootstrap {suite} from {mirror} failed:\n{tail}")
        shutil.copyfile("/etc/resolv.conf", root / "etc/resolv.conf")
        proc = subprocess.run(["chroot", str(root), "apt-get", "update"],
                              capture_output=True, text=True, timeout=600,
                              env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                                   "DEBIAN_FRONTEND": "noninteractive"})
        if proc.returncode != 0:
            raise RuntimeError(f"apt-get update in the new chroot failed:\n{proc.stderr}")
        _sh("chroot", str(root), "apt-get", "clean", timeout=60)
        pack(root, tarball, work)
    finally:
        remove_tree(work)


def pack(root, tarball, work):
    """Pack the tree ROOT into TARBALL, through a temporary in WORK (which
    the caller removes): a failed pack says what tar said and leaves no
    part of an archive behind."""
    tmp = work / (tarball.name + ".part")
    proc = subprocess.run(["tar", "-C", str(root), "--numeric-owner", "--xattrs",
                           *_compress_flag(), "-cf", str(tmp), "."],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"packing the test chroot into {tarball} failed "
                           f"(tar exit {proc.returncode}):\n{proc.stderr.strip()[-2000:]}")
    os.replace(tmp, tarball)


def ensure_tarball():
    """The cached chroot tarball, building it first if there is none (or it
    is too old).  Raise RuntimeError, with the reason, when it cannot be had."""
    suite = host_suite()
    if not suite:
        raise RuntimeError("this machine is not Debian (no VERSION_CODENAME in /etc/os-release)")
    arch = host_arch()
    directory = cache_dir()
    ext = "tar.zst" if shutil.which("zstd") else "tar.gz"
    tarball = directory / f"debian-{suite}-{arch}-minbase.{ext}"
    max_age = float(os.environ.get("CONSFIG_TEST_MAX_AGE_DAYS", "14")) * 86400

    def fresh():
        return tarball.exists() and time.time() - tarball.stat().st_mtime < max_age

    if fresh():
        return tarball
    if os.geteuid() != 0:
        raise RuntimeError("building the test chroot needs root")
    if not shutil.which("debootstrap"):
        raise RuntimeError("debootstrap is not installed (apt-get install debootstrap)")
    with open(directory / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not fresh():
            _build(tarball, suite, arch, host_mirror(suite))
    return tarball


def debs_dir(tarball):
    d = tarball.parent / (tarball.name.split(".")[0] + "-debs")
    d.mkdir(exist_ok=True)
    return d


def unpack(tarball, parent):
    """Unpack TARBALL into a new directory below PARENT and return it."""
    root = pathlib.Path(tempfile.mkdtemp(prefix="chroot-", dir=parent))
    os.chmod(root, 0o755)
    _sh("tar", "-C", str(root), "--numeric-owner", "--xattrs", "-xpf", str(tarball),
        timeout=600)
    archives = root / "var/cache/apt/archives"
    for deb in debs_dir(tarball).glob("*.deb"):
        target = archives / deb.name
        try:
            os.link(deb, target)
        except OSError:
            shutil.copyfile(deb, target)
    return root


def _tree(tarball):
    """TARBALL unpacked once for every chroot made from it, the lower layer
    of their overlays (`overlay_copy`), which nothing writes to.  Named by
    the tarball's size and time, so that a rebuilt tarball gets a tree of its
    own; made under a lock, and renamed into place whole."""
    st = tarball.stat()
    stem = tarball.name.split(".")[0] + "-tree-"
    # "-apt": a tree with apt's caches (below); an older tree without them
    # is removed like any other.
    tree = tarball.parent / f"{stem}{st.st_size}-{st.st_mtime_ns}-apt"
    if tree in _trees_used:
        return tree
    with open(tarball.parent / "tree.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for killed in tarball.parent.glob(stem + "part-*"):
            remove_tree(killed)  # what an unpack that was killed left
        if not tree.is_dir():
            part = pathlib.Path(tempfile.mkdtemp(prefix=stem + "part-", dir=tarball.parent))
            try:
                _sh("tar", "-C", str(part), "--numeric-owner", "--xattrs", "-xpf", str(tarball),
                    timeout=600)
                # apt's binary caches, made here once: otherwise the first apt
                # command of every chroot built them from the lists (1.5 s of
                # a core) and wrote them to its upper layer (2 x 39 MB).
                _sh("chroot", str(part), "apt-cache", "gencaches", capture_output=True, timeout=300)
                os.chmod(part, 0o755)
                os.rename(part, tree)
            finally:
                remove_tree(part)
        # Held shared by every process whose overlays read the tree (in any
        # test run, whatever its mount namespace) until it ends.
        used = open(tree.with_name(tree.name + ".lock"), "w")
        fcntl.flock(used, fcntl.LOCK_SH)
        _trees_used[tree] = used
        # Trees of older tarballs, unless a process still reads one.
        for old in tarball.parent.glob(stem + "*"):
            if old.is_dir() and old != tree and not old.name.startswith(stem + "part-"):
                with open(old.with_name(old.name + ".lock"), "w") as f:
                    try:
                        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        continue
                    remove_tree(old)
                    os.unlink(f.name)
    return tree


# tree -> its lock file, held shared while this process lives (`_tree`).
_trees_used = {}


def overlay_copy(tarball, parent):
    """A chroot made from TARBALL, in a new directory below PARENT: an
    overlay whose lower layer is the tarball's tree, unpacked once
    (`_tree`), and whose upper layer holds what the chroot changes.  Costs
    a mount, where an unpack costs seconds of a core.  Returns #(box, root):
    the chroot is ROOT; `remove_tree(box)` removes it all.  The cached .debs
    are in its apt archives, linked from the upper layer."""
    lower = _tree(tarball)
    box = pathlib.Path(tempfile.mkdtemp(prefix="chroot-", dir=parent))
    upper, work, root = box / "upper", box / "work", box / "root"
    for d in (upper, work, root):
        d.mkdir()
    # The upper layer's directories have the lower layer's modes and owners:
    # the merged directory takes them from the upper one.
    for rel in ["", "var", "var/cache", "var/cache/apt", "var/cache/apt/archives"]:
        (upper / rel).mkdir(exist_ok=True)
        st = (lower / rel).stat()
        os.chown(upper / rel, st.st_uid, st.st_gid)
        os.chmod(upper / rel, st.st_mode & 0o7777)
    archives = upper / "var/cache/apt/archives"
    for deb in debs_dir(tarball).glob("*.deb"):
        try:
            os.link(deb, archives / deb.name)
        except OSError:
            shutil.copyfile(deb, archives / deb.name)
    try:
        _sh("mount", "-t", "overlay", "overlay", "-o",
            f"lowerdir={lower},upperdir={upper},workdir={work}", str(root),
            capture_output=True, timeout=60)
    except subprocess.CalledProcessError as e:
        remove_tree(box)
        raise RuntimeError(f"no overlay for a chroot: {e.stderr.decode(errors='replace')}") from e
    return box, root


def keep_debs(root, tarball):
    """Keep the .debs apt downloaded into ROOT for the next chroots."""
    store = debs_dir(tarball)
    for deb in (root / "var/cache/apt/archives").glob("*.deb"):
        if not (store / deb.name).exists():
            try:
                shutil.copyfile(deb, store / deb.name)
            except OSError:
                pass



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
