"""The program an image runs first: its `__main__.py`.

`python3 IMAGE` runs this from inside the zip file IMAGE (see
`consfig.image.build` for the layout).  Like the `:python` hop's bootstrap it
uses only the standard library and parses in any Python 3, so that an old
one says it is too old.  It finds the user's consfig cache with that
bootstrap's own code (`consfig/boot.py`, read from the image), unpacks
there each of the image's layers the cache lacks, as `bundles/HASH` (mode
0700, checked against its manifest on every run; where a `:python` hop
puts them, so that both share them), and imports consfig from there: the
image carries the bytecode of the Python that built it, and Python writes
any other beside the sources, so a later run neither unpacks nor compiles.
Then `consfig.ui.image_cli.run_image` applies the host.
"""

import os
import sys

LAYERS = "layers/"


def load_boot(image, layers):
    """The bootstrap of the `:python` hop, as a namespace, from the zip IMAGE
    whose LAYERS are named."""
    for layer in layers:
        path = LAYERS + layer + "/consfig/boot.py"
        if path in image.namelist():
            namespace = {"__name__": "consfig_image_boot"}
            exec(compile(image.read(path), path, "exec"), namespace)
            return namespace
    sys.stderr.write("consfig: this image holds no consfig/boot.py\n")
    sys.exit(1)


def extractor(image, layer):
    """A function that writes the files of the image's LAYER from the zip
    IMAGE into a directory, each mode 0600."""
    prefix = LAYERS + layer + "/"

    def extract(directory):
        for name in sorted(image.namelist()):
            if not name.startswith(prefix) or name.endswith("/"):
                continue
            parts = name[len(prefix):].split("/")
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
    """Unpack (once) and import the image's layers, then apply its host."""
    import json
    import pwd
    import zipfile
    archive = os.path.dirname(os.path.abspath(__file__))
    image = zipfile.ZipFile(archive)
    meta = json.loads(image.read("consfig-image.json").decode("utf-8"))
    layers = meta.get("layers")
    if not (isinstance(layers, list) and layers
            and all(isinstance(n, str) and n.isalnum() for n in layers)):
        sys.stderr.write("consfig: %s is not an image of consfig's\n" % archive)
        sys.exit(1)
    boot = load_boot(image, layers)
    boot["check_version"]()
    uid = os.geteuid()
    cache, why = boot["cache_directory"](os.environ, uid, pwd.getpwuid(uid).pw_dir)
    bundles = cache and os.path.join(cache, "bundles")
    why = why or boot["private_directory"](bundles, uid)
    if why:
        sys.stderr.write("consfig: no safe cache directory for uid %d: %s\n" % (uid, why))
        sys.exit(boot["NO_SAFE_CACHE"])
    missing, damaged = boot["check_layers"](bundles, layers, uid)
    if damaged:
        sys.stderr.write("consfig: unpacking the image again: %s\n" % damaged)
    directories = [os.path.join(bundles, n) for n in layers]
    for name, directory in zip(layers, directories):
        if name in missing:
            boot["place"](extractor(image, name), directory)
        else:
            os.utime(directory)
    sys.dont_write_bytecode = False
    sys.path[0:0] = directories
    try:
        import hy  # noqa: F401 -- registers the importer of Hy modules
        import consfig.ui.image_cli
    except Exception as e:
        if len(missing) == len(layers):
            raise
        # Damage the manifest cannot see (a file overwritten at its own size):
        # once, unpack again.
        sys.stderr.write("consfig: unpacking the image again: importing from %s failed (%s: %s)\n"
                         % (bundles, type(e).__name__, e))
        boot["forget_bundle_modules"]()
        for name, directory in zip(layers, directories):
            if name not in missing:
                boot["discard"](directory)
                boot["place"](extractor(image, name), directory)
        missing = layers
        import hy  # noqa: F401,F811
        import consfig.ui.image_cli
    sys.exit(consfig.ui.image_cli.run_image(archive, image, meta, directories,
                                           [d for n, d in zip(layers, directories) if n in missing],
                                           sys.argv[1:]))


if __name__ == "__main__":
    main()
