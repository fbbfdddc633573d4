"""Compile the Python and Hy modules of a tree into hash-checked bytecode.

    python3 -E -S precompile.py ROOT [--path DIR]... [--under DIR]
                                     [--only MODULE]... [--hy-only] [--jobs N]

Each module under ROOT (under ROOT/DIR with --under; only the MODULEs
named, with --only; only the Hy ones, with --hy-only; in N processes side
by side, with --jobs) gets its
`__pycache__/NAME.TAG.pyc`, checked against a hash of its source when it is
imported: valid whatever dates the files are given (a tar, a zip, a wheel),
never trusted once the source changed.  A module that does not compile is
left for Python to compile when it is imported, and named on standard
error.

It runs in a Python of its own whose path is ROOT (and the --path DIRs):
compiling a Hy module runs the modules it `require`s, which must be the
ones being compiled.  setup.py compiles consfig with it at build time, and
a controller the layers of code it ships (`consfig.python_hop.bundle`).  Only the
standard library and hy are used.
"""

import os
import sys

# Code this process compiled, by the absolute path of its source, with the
# hash of that source: a controller ships the site's modules compiled as it
# compiled them when it loaded the site (`consfig.site.load`), not twice.
_compiled = {}


def remember(path, source, code):
    """Keep CODE, compiled from SOURCE (bytes), the module at PATH."""
    import importlib.util
    _compiled[os.path.abspath(path)] = (importlib.util.source_hash(source), code)


def _remembered(path, source):
    # The code `remember`ed for the module at PATH, if it was compiled from
    # SOURCE (bytes); else None.
    import importlib.util
    known = _compiled.get(os.path.abspath(path))
    if known and known[0] == importlib.util.source_hash(source):
        return known[1]
    return None


def hash_pyc(code, source, name):
    """The hash-checked bytecode of CODE, compiled from SOURCE (bytes), whose
    file is called NAME inside it: a name relative to where it is shipped,
    not a path of the machine that compiled it (Python gives the code its
    real path when it loads it)."""
    import _imp
    import importlib.util
    import marshal
    from importlib._bootstrap_external import _code_to_hash_pyc
    # A copy: CODE may be a module's this process runs.
    code = marshal.loads(marshal.dumps(code))
    _imp._fix_co_filename(code, name)
    return _code_to_hash_pyc(code, importlib.util.source_hash(source), True)


def _cached_code(path, source):
    # The code in the bytecode Python (or an install: setup.py) cached for
    # the module at PATH, if it is valid for SOURCE, as Python would judge.
    import importlib.util
    import marshal
    try:
        with open(importlib.util.cache_from_source(path), "rb") as f:
            data = f.read()
        st = os.stat(path)
    except (OSError, NotImplementedError):
        return None
    if len(data) < 16 or data[:4] != importlib.util.MAGIC_NUMBER:
        return None
    if int.from_bytes(data[4:8], "little") & 1:
        valid = hash_checked_for(data, source)
    else:
        valid = (int.from_bytes(data[8:12], "little") == int(st.st_mtime) & 0xFFFFFFFF
                 and int.from_bytes(data[12:16], "little") == len(source) & 0xFFFFFFFF)
    if not valid:
        return None
    try:
        return marshal.loads(data[16:])
    except (EOFError, ValueError, TypeError):
        return None


def hash_checked_for(data, source):
    """Whether DATA (a .pyc file's bytes) is hash-checked bytecode of this
    Python for SOURCE (bytes), whatever file it was read from."""
    import importlib.util
    return (data[:4] == importlib.util.MAGIC_NUMBER and bool(int.from_bytes(data[4:8], "little") & 1)
            and data[8:16] == importlib.util.source_hash(source))


def write_pyc(path, data):
    """Write DATA as the bytecode of the module at PATH, in its __pycache__,
    through a temporary renamed into place."""
    import importlib.util
    pyc = importlib.util.cache_from_source(path)
    os.makedirs(os.path.dirname(pyc), exist_ok=True)
    temporary = "%s.%d.tmp" % (pyc, os.getpid())
    with open(temporary, "wb") as out:
        out.write(data)
    os.replace(temporary, pyc)


def bytecode_for(path, source, name):
    """The hash-checked bytecode (see `hash_pyc`) of the module at PATH
    whose source is SOURCE (bytes), from the code `remember`ed for it, the
    valid bytecode cached beside it or, for a Python module, compiled now;
    None when there is none to be had cheaply."""
    code = _remembered(path, source)
    if code is None:
        code = _cached_code(path, source)
    if code is None and path.endswith(".py"):
        try:
            code = compile(source, name, "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            return None
    return None if code is None else hash_pyc(code, source, name)


def module_name(root, path):
    """The dotted name of the module at PATH under ROOT."""
    name = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
    return name[:-len(".__init__")] if name.endswith(".__init__") else name


def sources(top, suffixes=(".py", ".hy")):
    """The files under TOP with one of SUFFIXES, in a stable order, skipping
    __pycache__ and hidden directories."""
    for d, dirs, files in os.walk(top):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__" and not x.startswith("."))
        for f in sorted(files):
            if f.endswith(suffixes):
                yield os.path.join(d, f)


def _remembering_imports():
    """Make every compile of this process `remember` its code, and take it
    from there: a module that another one `require`s is compiled once, not
    once for the import and again for its bytecode (a fifth of consfig's
    compiles were such)."""
    from importlib.machinery import SourceFileLoader
    compile_source = SourceFileLoader.source_to_code
    if getattr(compile_source, "remembers", False):
        return

    def source_to_code(self, data, path, *args, **kwargs):
        if not isinstance(path, str):
            return compile_source(self, data, path, *args, **kwargs)
        code = _remembered(path, bytes(data))
        if code is None:
            code = compile_source(self, data, path, *args, **kwargs)
            remember(path, bytes(data), code)
        return code
    source_to_code.remembers = True
    SourceFileLoader.source_to_code = source_to_code


def modules_under(root, under=None, only=None, suffixes=(".py", ".hy")):
    """(NAME, PATH) of the modules under ROOT (under ROOT/UNDER; only those
    named in ONLY, when given), named from ROOT."""
    top = os.path.join(root, under) if under else root
    return [(name, path) for path in sources(top, suffixes) for name in [module_name(root, path)]
            if only is None or name in only]


def compile_tree(root, under=None, only=None, suffixes=(".py", ".hy")):
    """Write the bytecode of the modules under ROOT; the list of those that
    failed, as "NAME: why"."""
    return compile_modules(modules_under(root, under, only, suffixes), root)


def compile_modules(modules, root):
    """Write the bytecode of each (NAME, PATH) of MODULES beside its source,
    the code named by its path under ROOT; the list of those that failed,
    as "NAME: why"."""
    from importlib.machinery import SourceFileLoader
    import hy  # noqa: F401 -- lets SourceFileLoader compile .hy files
    _remembering_imports()
    failed = []
    for name, path in modules:
        with open(path, "rb") as f:
            source = f.read()
        try:
            code = SourceFileLoader(name, path).source_to_code(source, path)
        except Exception as e:  # a module Python will compile on import, or report then
            failed.append("%s: %s" % (name, e))
            continue
        write_pyc(path, hash_pyc(code, source, os.path.relpath(path, root)))
    return failed


def _in_parallel(args, suffixes):
    # The modules shared out among ARGS.jobs processes of this script, each
    # given its share with --only (a module a share `require`s is compiled
    # in memory there too: more work, done side by side).
    import subprocess
    names = [name for name, _ in modules_under(args.root, args.under, args.only, suffixes)]
    base = [args.root, *[x for d in args.path for x in ("--path", d)],
            *(["--under", args.under] if args.under else []), *(["--hy-only"] if args.hy_only else [])]
    # Each in a Python like this one (an isolated build finds hy through its
    # environment and site).
    flags = (["-E"] if sys.flags.ignore_environment else []) + (["-S"] if sys.flags.no_site else [])
    procs = [subprocess.Popen([sys.executable, *flags, os.path.abspath(__file__), *base,
                               *[x for n in names[i::args.jobs] for x in ("--only", n)]])
             for i in range(min(args.jobs, len(names)))]
    return max([p.wait() for p in procs] + [0])


def main(argv):
    import argparse
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root")
    p.add_argument("--path", action="append", default=[])
    p.add_argument("--under")
    p.add_argument("--only", action="append")
    p.add_argument("--hy-only", action="store_true")
    p.add_argument("--jobs", type=int, default=1)
    args = p.parse_args(argv)
    suffixes = (".hy",) if args.hy_only else (".py", ".hy")
    if args.jobs > 1:
        return _in_parallel(args, suffixes)
    sys.dont_write_bytecode = True
    sys.path[:0] = [args.root] + args.path
    for line in compile_tree(args.root, args.under, args.only and set(args.only), suffixes):
        sys.stderr.write("not compiled: %s\n" % line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
