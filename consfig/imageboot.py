"""The program an image runs first: its `__main__.py`.

`python3 IMAGE` runs this from inside the zip file IMAGE (see
`consfig.image` for the layout).  Like the `:python` hop's bootstrap it
uses only the standard library and parses in any Python 3, so that an old
one says it is too old.  It finds the user's consfig cache with that
bootstrap's own code (`consfig/boot.py`, read from the image), unpacks the
image's bundle there once, as `images/HASH` (mode 0700, checked against its
manifest on every run), and imports consfig from there, Python writing its
bytecode beside the sources: a later run neither unpacks nor compiles.  Then
`consfig.image.run_image` applies the host.
"""

import os
import sys

BOOT = "bundle/consfig/boot.py"
BUNDLE = "bundle/"


def load_boot(image):
    """The bootstrap of the `:python` hop, as a namespace, from the zip IMAGE."""
    namespace = {"__name__": "consfig_image_boot"}
    exec(compile(image.read(BOOT), BOOT, "exec"), namespace)
    return namespace


def extractor(image):
    """A function that writes the bundle's files from the zip IMAGE into a
    directory, each mode 0600."""
    def extract(directory):
        for name in sorted(image.namelist()):
            if not name.startswith(BUNDLE) or name.endswith("/"):
                continue
            parts = name[len(BUNDLE):].split("/")
            if [p for p in parts if p in ("", ".", "..")]:
                raise ValueError("%r is not a file's name inside an image" % name)
            path = os.path.join(directory, *parts)
            if not os.path.isdir(os.path.dirname(path)):
                os.makedirs(os.path.dirname(path), 0o700)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(image.read(name))
    return extract


def main():
    """Unpack (once) and import the image's bundle, then apply its host."""
    import json
    import pwd
    import zipfile
    archive = os.path.dirname(os.path.abspath(__file__))
    image = zipfile.ZipFile(archive)
    boot = load_boot(image)
    boot["check_version"]()
    meta = json.loads(image.read("consfig-image.json").decode("utf-8"))
    uid = os.geteuid()
    cache, why = boot["cache_directory"](os.environ, uid, pwd.getpwuid(uid).pw_dir)
    images = cache and os.path.join(cache, "images")
    why = why or boot["_private_directory"](images, uid)
    if why:
        sys.stderr.write("consfig: no safe cache directory for uid %d: %s\n" % (uid, why))
        sys.exit(boot["NO_SAFE_CACHE"])
    if not meta["bundle"].isalnum():
        sys.stderr.write("consfig: %s is not an image of consfig's\n" % archive)
        sys.exit(1)
    directory = os.path.join(images, meta["bundle"])
    damaged = boot["damage"](directory, uid) if os.path.lexists(directory) else None
    if damaged:
        sys.stderr.write("consfig: unpacking the image again: %s\n" % damaged)
        boot["discard"](directory)
    new = not os.path.isdir(directory)
    if new:
        boot["place"](extractor(image), directory)
    else:
        os.utime(directory)
    sys.dont_write_bytecode = False
    sys.path.insert(0, directory)
    try:
        import hy  # noqa: F401 -- registers the importer of Hy modules
        import consfig.image
    except Exception as e:
        if new:
            raise
        # Damage the manifest cannot see (a file overwritten at its own size):
        # once, unpack again.
        sys.stderr.write("consfig: unpacking the image again: importing from %s failed (%s: %s)\n"
                         % (directory, type(e).__name__, e))
        boot["_forget_bundle_modules"]()
        boot["discard"](directory)
        boot["place"](extractor(image), directory)
        new = True
        import hy  # noqa: F401,F811
        import consfig.image
    sys.exit(consfig.image.run_image(archive, image, meta, directory, new, sys.argv[1:]))


if __name__ == "__main__":
    main()
