"""The bootstrap: the program a `:python` hop runs on the target first.

The controller sends this file's source, minified (`consfig.python_hop.controller.bootstrap`),
as `python3 -E -S -c SOURCE`.  It runs before anything of consfig is on the
target, so it uses only the standard library, and it must parse in any
Python 3 so that an old one says it is too old rather than failing with a
syntax error: no f-strings, no walrus, nothing newer than Python 3.0's syntax.

It finds the user's bundle cache (refusing any directory someone else could
write to), checks each cached layer of the bundle the controller names
(`consfig.python_hop.bundle`) against its manifest, says which versions of
prerequisite data it keeps (so that the controller sends only the others),
asks for the layers it lacks (or found damaged), unpacks them, and hands
over to the `serve` of the module the controller names as its one argument
(`consfig.python_hop.target`).  The controller imports it too, for
`cache_directory`, so that both sides agree on where the cache is: it is
part of consfig's ground layer, and imports nothing of consfig.

Exit codes the controller interprets: 97, the Python is too old; 98, no
cache directory is safe to use; 3, the controller went away first.
"""

import os
import sys

PROTOCOL = 5
MANIFEST = ".consfig-manifest"
TOO_OLD, NO_SAFE_CACHE, CONTROLLER_GONE = 97, 98, 3


def check_version():
    """Exit with a message (code 97) if this Python is older than 3.9."""
    version = sys.version_info
    if version < (3, 9):
        sys.stderr.write("consfig: %s is Python %d.%d.%d; consfig needs Python 3.9 or later\n"
                         % (sys.executable, version[0], version[1], version[2]))
        sys.exit(TOO_OLD)


def read_frame(stream):
    """The next frame from STREAM: its JSON message with the payload under
    `_payload`.  End of input means the controller has gone: exit."""
    import json
    import struct
    header = stream.read(8)
    if len(header) < 8:
        os._exit(CONTROLLER_GONE)
    message_length, payload_length = struct.unpack(">II", header)
    message = json.loads(stream.read(message_length))
    message["_payload"] = stream.read(payload_length)
    return message


def write_frame(stream, message):
    """Send MESSAGE (JSON data, no payload) as one frame."""
    import json
    import struct
    body = json.dumps(message).encode()
    stream.write(struct.pack(">II", len(body), 0) + body)
    stream.flush()


def unsafe(path, uid, follow=False):
    """Why the directory PATH cannot hold code that UID will run, or None.
    It must be a directory owned by UID that no one else can write to; a
    symlink counts as what it is, not what it points to, unless FOLLOW."""
    import stat
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except OSError as e:
        return "%s: %s" % (path, e.strerror)
    if not stat.S_ISDIR(st.st_mode):
        return "%s is not a directory" % path
    if st.st_uid != uid:
        return "%s is owned by uid %d, not by uid %d" % (path, st.st_uid, uid)
    if st.st_mode & 0o022:
        return "%s can be written by others (mode %o)" % (path, stat.S_IMODE(st.st_mode))
    return None


def private_directory(path, uid, follow=False):
    """Make PATH a directory of UID's, mode 0700, if it is missing; why it
    cannot be used, or None.  An existing one must already be safe, since
    someone else may have put something in it while it was not."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        return "%s: %s" % (path, e.strerror)
    why = unsafe(path, uid, follow)
    if why is None:
        os.chmod(path, 0o700)
    return why


def cache_directory(environ, uid, home):
    """The directory consfig caches in for the user UID whose home is HOME,
    made if need be: `consfig` under $XDG_CACHE_HOME (when ENVIRON gives an
    absolute one) or else under HOME/.cache.  Every directory from the cache
    root down must belong to UID and be writable by no one else; the first
    root where that holds is used.  Return (path, None), or (None, why) when
    no root is safe."""
    roots = []
    given = environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(given):
        roots.append(given)
    roots.append(os.path.join(home, ".cache"))
    reasons = []
    for root in roots:
        # The root may be a symlink the user made; nothing below it may be.
        if not os.path.exists(root):
            try:
                os.makedirs(root, 0o700)
            except OSError:
                pass
        why = unsafe(root, uid, follow=True) or private_directory(os.path.join(root, "consfig"), uid)
        if why is None:
            return os.path.join(root, "consfig"), None
        reasons.append(why)
    return None, "; ".join(reasons)


def data_entry(iden1, iden2, version):
    """The names, in a data cache, of the directory of the item (IDEN1,
    IDEN2) and of the file holding its VERSION: digests, so that no
    identifier needs quoting and none is too long for a file name."""
    import hashlib
    import json
    item = hashlib.sha256(json.dumps([iden1, iden2]).encode("utf-8")).hexdigest()[:32]
    # surrogatepass: a version made from a file name may hold lone surrogates.
    return item, hashlib.sha256(version.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def data_inventory(cache, uid):
    """The prerequisite data the user UID keeps in CACHE/data, as {item
    directory: [version file, ...]} (see `data_entry`); None when that
    directory is not safe to keep data in, and so is not used."""
    directory = os.path.join(cache, "data")
    if private_directory(directory, uid):
        return None
    inventory = {}
    for item in os.listdir(directory):
        path = os.path.join(directory, item)
        if unsafe(path, uid) is None:
            inventory[item] = [v for v in os.listdir(path) if not v.startswith(".")]
    return inventory


def file_sizes(directory):
    """Every file under DIRECTORY that Python may import or load, by its
    path relative to DIRECTORY, with its size."""
    sizes = {}
    for parent, dirs, names in os.walk(directory):
        for name in names:
            if name.endswith((".py", ".hy", ".pyc")):
                path = os.path.join(parent, name)
                sizes[os.path.relpath(path, directory)] = os.lstat(path).st_size
    return sizes


def write_manifest(directory):
    """Record the files now under DIRECTORY (a bundle), atomically."""
    import json
    temporary = os.path.join(directory, "%s.%d" % (MANIFEST, os.getpid()))
    with open(temporary, "w") as f:
        json.dump(file_sizes(directory), f, sort_keys=True)
    os.rename(temporary, os.path.join(directory, MANIFEST))


def damage(directory, uid):
    """Why the unpacked bundle DIRECTORY cannot be used, or None.  Its manifest
    is written last, so a missing one means an unpacking that never finished;
    a file of another size than recorded was truncated or replaced.
    Bytecode the manifest does not know is removed: Python makes it again."""
    import json
    why = unsafe(directory, uid)
    if why is None and os.lstat(directory).st_mode & 0o077:
        why = "%s is not private (mode 0700)" % directory
    if why:
        return why
    try:
        with open(os.path.join(directory, MANIFEST)) as f:
            expected = json.load(f)
    except (OSError, ValueError):
        return "%s has no manifest: it was never completely unpacked" % directory
    found = file_sizes(directory)
    for path, size in sorted(expected.items()):
        if found.get(path) != size:
            return "%s is %s bytes, not %d" % (os.path.join(directory, path),
                                               found.get(path, "missing, 0"), size)
    for path in found:
        if path not in expected and path.endswith(".pyc"):
            os.unlink(os.path.join(directory, path))
    return None


def discard(directory):
    """Remove the bundle DIRECTORY, first moving it out of the way so that a
    deployment racing this one never sees it half-removed."""
    import shutil
    doomed = "%s.tmp-discarded-%d" % (directory, os.getpid())
    try:
        os.rename(directory, doomed)
    except OSError:
        return
    shutil.rmtree(doomed, True)


def unpack(archive, directory):
    """Unpack ARCHIVE (a gzipped tar) as the bundle DIRECTORY (see `place`)."""
    def extract(temporary):
        import io
        import tarfile
        options = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(temporary, **options)
    place(extract, directory)


def place(extract, directory):
    """Make the bundle DIRECTORY, mode 0700: EXTRACT fills the private
    temporary directory it is given, beside DIRECTORY; the manifest is written
    last and the whole renamed into place.  A bundle racing us there first is
    kept.  (An image unpacks itself with this too, see `consfig.image.build`.)"""
    import shutil
    import tempfile
    temporary = tempfile.mkdtemp(prefix=os.path.basename(directory) + ".tmp", dir=os.path.dirname(directory))
    extract(temporary)
    write_manifest(temporary)
    try:
        os.rename(temporary, directory)
    except OSError:
        shutil.rmtree(temporary, True)


def valid_layers(names):
    """Whether NAMES, from the controller, is a list of layers' names."""
    return (isinstance(names, list) and bool(names)
            and all(isinstance(n, str) and n.isalnum() for n in names))


def fetch(stream, output, pending, bundles, names, reason):
    """Ask the controller for the layers NAMES (saying REASON, if any) and
    unpack each in BUNDLES; messages that come first are kept in PENDING."""
    write_frame(output, {"op": "need-bundle", "layers": names, "discarded": reason})
    wanted = set(names)
    while wanted:
        message = read_frame(stream)
        if message["op"] == "bundle" and message.get("hash") in wanted:
            wanted.discard(message["hash"])
            unpack(message["_payload"], os.path.join(bundles, message["hash"]))
        else:
            pending.append(message)


def check_layers(bundles, names, uid):
    """Of the layers NAMES in BUNDLES, those missing (damaged ones are
    discarded first), and why those were damaged ("" if none was)."""
    reasons = []
    for name in names:
        directory = os.path.join(bundles, name)
        why = damage(directory, uid) if os.path.lexists(directory) else None
        if why:
            reasons.append(why)
            discard(directory)
    return [n for n in names if not os.path.isdir(os.path.join(bundles, n))], "; ".join(reasons)


def forget_bundle_modules():
    """Forget the modules of consfig and its libraries imported so far:
    what a damaged bundle half-imported must not be found again."""
    for name in list(sys.modules):
        if name.split(".")[0] in ("hy", "hyrule", "funcparserlib", "consfig"):
            del sys.modules[name]
    import importlib
    importlib.invalidate_caches()


def main(server):
    """Run on the target: find or fetch the bundle's layers, then hand over
    to the module SERVER's `serve`."""
    check_version()
    import importlib
    import importlib.util
    import pwd
    sys.dont_write_bytecode = False
    # `-c` put the current directory first; nothing there may shadow the bundle.
    sys.path[:] = [p for p in sys.path if p]
    stream, output = sys.stdin.buffer, sys.stdout.buffer
    hello = read_frame(stream)
    names = hello.get("layers")
    if not valid_layers(names):
        sys.stderr.write("consfig: %r does not name a bundle's layers\n" % (names,))
        sys.exit(1)
    uid = os.geteuid()
    cache, why = cache_directory(os.environ, uid, pwd.getpwuid(uid).pw_dir)
    if cache is None:
        sys.stderr.write("consfig: no safe cache directory for uid %d: %s\n" % (uid, why))
        sys.exit(NO_SAFE_CACHE)
    bundles = os.path.join(cache, "bundles")
    why = private_directory(bundles, uid)
    if why:
        sys.stderr.write("consfig: cannot use the cache directory: %s\n" % why)
        sys.exit(NO_SAFE_CACHE)
    missing, damaged = check_layers(bundles, names, uid)
    write_frame(output, {"op": "hello", "protocol": PROTOCOL, "python": list(sys.version_info[:3]),
                         "executable": sys.executable, "missing": missing,
                         "tag": sys.implementation.cache_tag, "magic": importlib.util.MAGIC_NUMBER.hex(),
                         "data": data_inventory(cache, uid)})
    pending = []
    if missing:
        fetch(stream, output, pending, bundles, missing, damaged or None)
    for name in names:
        if name not in missing:
            os.utime(os.path.join(bundles, name))
    directories = [os.path.join(bundles, n) for n in names]
    sys.path[0:0] = directories
    try:
        import hy  # noqa: F401 -- registers the importer of Hy modules
        serving = importlib.import_module(server)
    except Exception as e:
        if len(missing) == len(names):
            raise
        # Damage the manifest cannot see (a file overwritten at its own size):
        # once, fetch the layers that were kept again.
        forget_bundle_modules()
        kept = [n for n in names if n not in missing]
        for name in kept:
            discard(os.path.join(bundles, name))
        fetch(stream, output, pending, bundles, kept,
              "importing from %s failed (%s: %s)" % (bundles, type(e).__name__, e))
        missing = names
        import hy  # noqa: F401,F811
        serving = importlib.import_module(server)
    serving.serve(stream, output, pending, directories,
                  [os.path.join(bundles, n) for n in missing])


if __name__ == "__main__":
    main(sys.argv[1])
