"""The Debian chroot the property tests run in, built by debootstrap and
cached as a tarball, unpacked once into a tree that overlays share
(tests/props/conftest.py says how tests get one).  Only the standard
library: .ci/run builds the cache with it, in the background, while it
installs consfig, so that the test run starts with a chroot:

    python3 tests/props/chrootcache.py

The tree's apt index is trimmed to the packages the sources name and what
they depend on (`trim_index`): every apt command in a chroot made from it
then takes a tenth of a second, where over the whole suite's index (63,000
packages) it took a second of a core in apt's dependency cache.
"""

import fcntl
import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
import time

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


# The sources whose words name the packages the tests may install: any word
# that is a package's name, or a name a package provides, is kept in the
# tree's index, with what it depends on.  A package installed by a name the
# sources spell only in pieces is not there: apt then says "Unable to
# locate package", and tests/conftest.py says why.
REPO = pathlib.Path(__file__).resolve().parents[2]
SOURCES = ("README.md", "consfig", "props", "connections", "hosts", "tests", "docs", "bench")
_TEXT = {".hy", ".py", ".md", ".json", ".sh", ".txt", ".toml", ".cfg", ".j2", ""}
_WORD = re.compile(r"[a-z0-9][a-z0-9+.-]+")
# apt follows these when it installs (Recommends: unless told not to).
DEPENDENCY_FIELDS = ("Pre-Depends", "Depends", "Recommends")


def source_words(repo=REPO):
    """The words of the checkout's sources that could be package names."""
    words = set()
    for top in SOURCES:
        path = repo / top
        if path.is_file():
            files = [path]
        elif path.is_dir():
            files = [f for f in path.rglob("*")
                     if f.suffix in _TEXT and "__pycache__" not in f.parts and f.is_file()]
        else:
            continue
        for f in files:
            words.update(_WORD.findall(f.read_text(errors="replace")))
    return words


def _stanzas(index_text):
    for stanza in index_text.split("\n\n"):
        if stanza.strip():
            yield stanza, dict(re.findall(r"^([\w-]+): ?(.*(?:\n[ \t].*)*)", stanza, re.M))


def _names(field):
    """The package names a relation field (Depends, Provides, ...) names,
    alternatives included, without versions or architectures."""
    for alternative in re.split(r"[,|]", field or ""):
        name = alternative.strip().split(" ")[0].split(":")[0]
        if name:
            yield name


def index_names(index_text):
    """Every name INDEX_TEXT (an apt Packages file) can install by: its
    packages' and what they provide."""
    names = set()
    for _, f in _stanzas(index_text):
        names.add(f.get("Package", ""))
        names.update(_names(f.get("Provides")))
    names.discard("")
    return names


def trim_index(index_text, wanted):
    """INDEX_TEXT (an apt Packages file) with only the stanzas of the WANTED
    names (packages, or virtual names: all their providers), and of what
    they need, transitively (DEPENDENCY_FIELDS, every alternative)."""
    stanzas, providers = {}, {}
    for stanza, f in _stanzas(index_text):
        stanzas.setdefault(f.get("Package", ""), []).append((stanza, f))
        for virtual in _names(f.get("Provides")):
            providers.setdefault(virtual, set()).add(f.get("Package", ""))
    kept, todo = set(), list(wanted)
    while todo:
        name = todo.pop()
        for package in [name, *sorted(providers.get(name, ()))]:
            if package in kept or package not in stanzas:
                continue
            kept.add(package)
            for _, f in stanzas[package]:
                for field in DEPENDENCY_FIELDS:
                    todo.extend(_names(f.get(field)))
    return "".join(stanza.strip("\n") + "\n\n"
                   for package in sorted(kept) for stanza, _ in stanzas[package])


def _installed(root):
    status = (root / "var/lib/dpkg/status").read_text(errors="replace")
    return {f["Package"] for _, f in _stanzas(status)
            if "Package" in f and f.get("Status", "").endswith(" installed")}


def _indexes(root):
    return sorted((root / "var/lib/apt/lists").glob("*_Packages"))


def _trim_tree(root, wanted):
    """Trim ROOT's apt indexes to WANTED and the packages installed there,
    keeping the files' times (apt's freshness checks read them)."""
    wanted = set(wanted) | _installed(root)
    for index in _indexes(root):
        st = index.stat()
        index.write_text(trim_index(index.read_text(errors="replace"), wanted))
        os.utime(index, ns=(st.st_atime_ns, st.st_mtime_ns))


def _tarball_names(tarball):
    """The names TARBALL's apt index installs by, kept beside it (read from
    the tarball once, under `_tree`'s lock)."""
    st = tarball.stat()
    cached = tarball.parent / f"{tarball.name.split('.')[0]}-names-{st.st_size}-{st.st_mtime_ns}"
    if cached.exists():
        return set(cached.read_text().split())
    proc = subprocess.run(["tar", "-xOf", str(tarball), "--wildcards",
                           "./var/lib/apt/lists/*_Packages"],
                          capture_output=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"reading the apt index of {tarball} failed (tar exit "
                           f"{proc.returncode}):\n{proc.stderr.decode(errors='replace')[-2000:]}")
    names = index_names(proc.stdout.decode(errors="replace"))
    tmp = cached.with_name(cached.name + ".part")
    tmp.write_text("\n".join(sorted(names)) + "\n")
    os.replace(tmp, cached)
    for old in tarball.parent.glob(tarball.name.split(".")[0] + "-names-*"):
        if old != cached:
            old.unlink(missing_ok=True)
    return names


def _tree(tarball):
    """TARBALL unpacked once for every chroot made from it, the lower layer
    of their overlays (`overlay_copy`), which nothing writes to.  Named by
    the tarball's size and time, and by the package names the sources use
    (its index is trimmed to them: `trim_index`), so that a rebuilt tarball
    or a newly named package gets a tree of its own; made under a lock, and
    renamed into place whole."""
    st = tarball.stat()
    stem = tarball.name.split(".")[0] + "-tree-"
    made = (tarball, st.st_size, st.st_mtime_ns)
    if made in _trees_used:
        return _trees_used[made][0]
    with open(tarball.parent / "tree.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        wanted = sorted(source_words() & _tarball_names(tarball))
        key = hashlib.sha256("\n".join(wanted).encode()).hexdigest()[:12]
        tree = tarball.parent / f"{stem}{st.st_size}-{st.st_mtime_ns}-{key}"
        for killed in tarball.parent.glob(stem + "part-*"):
            remove_tree(killed)  # what an unpack that was killed left
        if not tree.is_dir():
            part = pathlib.Path(tempfile.mkdtemp(prefix=stem + "part-", dir=tarball.parent))
            try:
                _sh("tar", "-C", str(part), "--numeric-owner", "--xattrs", "-xpf", str(tarball),
                    timeout=600)
                _trim_tree(part, wanted)
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
        _trees_used[made] = (tree, used)
        # Older trees (of an older tarball or word list), unless a
        # process still reads one.
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


# (tarball, size, time) -> (its tree, the tree's lock file, held shared
# while this process lives) (`_tree`).
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


if __name__ == "__main__":
    started = time.monotonic()
    tree = _tree(ensure_tarball())
    print(f"chrootcache: {tree} ready in {time.monotonic() - started:.0f} s")
