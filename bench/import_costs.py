"""What each import inside a function would cost at the top of its module.

consfig keeps an import inside a function only where it was measured to
cost start-up (docs/python-hop.md), and marks it `; start-up: N ms`.  This
measures those figures:

1. it deploys a small host over `[:local :python]`, with a bundle cache of
   its own, for the bundle's layers: what a target imports from;
2. for every `(import …)` inside a function of consfig/, props/ and
   connections/, it starts a Python like a target's (`-E -S`, the layers as
   its path), imports the module holding the import, and times the import:
   the best of --runs.  A module the bundle does not carry (rich, jinja2,
   Fabric: the controller's) is timed in this Python instead.

That is what the import costs when it first runs, with its module loaded:
what moving it to the top would add to every import of that module.
--check fails when a marked figure is off by more than a millisecond and
half of itself.

    python3 bench/import_costs.py [--runs 5] [--check]
"""

import argparse
import os
import subprocess
import sys
import tempfile

import hy
from hy.models import Expression, Keyword, List, Symbol

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The project's modules, and the imports inside their functions, as the
# layering test finds them.
sys.path.insert(0, os.path.join(ROOT, "tests"))
import test_layering  # noqa: E402

SITE = """
(require consfig *)
(defprop nothing :python [] (:apply :no-change))
(defhost importcost.example {} (nothing))
"""

TIMER = """
import sys, time, importlib, importlib.util
importlib.import_module(sys.argv[1])
t = time.perf_counter()
for m in sys.argv[2].split(","):
    if m.startswith("?"):
        # `(import a [x])`: x may be a submodule, imported by the from-import.
        try:
            importlib.util.find_spec(m[1:]) and importlib.import_module(m[1:])
        except (ImportError, ValueError):
            pass
    else:
        importlib.import_module(m)
print((time.perf_counter() - t) * 1000)
"""


def bundle_layers(work):
    """The layers of the bundle a deployment over `[:local :python]` sent."""
    site = os.path.join(work, "importcost_site.hy")
    with open(site, "w") as f:
        f.write(SITE)
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(work, "cache"))
    subprocess.run([sys.executable, "-m", "consfig", "deploy", "--consfig", site,
                    "importcost.example", "--via", "[:local :python]"],
                   env=env, check=True, capture_output=True)
    bundles = os.path.join(work, "cache", "consfig", "bundles")
    return [os.path.join(bundles, n) for n in sorted(os.listdir(bundles))]


def _names(form):
    """The modules an import form imports: `a.b` for `a.b [x]`, and `a.b.x`
    too when x turns out to be a submodule (written `?a.b.x`)."""
    names, args, i = [], list(form[1:]), 0
    while i < len(args):
        a = args[i]
        if isinstance(a, Keyword):
            i += 2
            continue
        if isinstance(a, Symbol):
            name = ".".join(hy.mangle(p) for p in str(a).split("."))
        elif isinstance(a, Expression) and a and a[0] == Symbol("."):
            name = ".".join(hy.mangle(str(p)) for p in a[1:])
        else:
            i += 1
            continue
        names.append(name)
        if i + 1 < len(args) and isinstance(args[i + 1], List):
            names += [f"?{name}.{hy.mangle(str(x))}" for x in args[i + 1]
                      if isinstance(x, Symbol)]
            i += 1
        i += 1
    return names


def imports():
    """(path, line, holder module, [modules], marked figure or None) for each."""
    found = []
    for path, holder in sorted((p, m) for m, p in test_layering.modules().items()
                               if p.endswith(".hy")):
        lines = open(path).read().split("\n")
        for imp in test_layering.function_imports(path):
            line = lines[imp.end_line - 1]
            marked = None
            if "start-up:" in line:
                marked = float(line.split("start-up:")[1].split("ms")[0].strip())
            found.append((os.path.relpath(path, ROOT), imp.start_line, holder,
                          _names(imp), marked))
    return found


def cost(holder, modules, python, runs):
    """The best time, in ms, of importing MODULES in a fresh Python started
    as PYTHON (a list) that has imported HOLDER; None when they cannot be
    imported there."""
    best = None
    for _ in range(runs + 1):
        r = subprocess.run([*python, holder, ",".join(modules)],
                           capture_output=True, text=True, cwd="/")
        if r.returncode != 0:
            return None
        t = float(r.stdout)
        best = t if best is None else min(best, t)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        layers = bundle_layers(work)
        on_target = [sys.executable, "-E", "-S", "-c",
                     "import sys; sys.path[:0] = %r; exec(%r)" % (layers, TIMER)]
        here = [sys.executable, "-c", TIMER]
        off = []
        for path, line, holder, modules, marked in imports():
            ms, where = cost(holder, modules, on_target, args.runs), "target-like"
            if ms is None:
                ms, where = cost(holder, modules, here, args.runs), "controller"
            shown = "failed" if ms is None else f"{ms:6.2f} ms"
            mark = "unmarked" if marked is None else f"marked {marked:g} ms"
            named = " ".join(m for m in modules if not m.startswith("?"))
            print(f"{path}:{line}\t{shown}\t{where}\t{mark}\t{named}", flush=True)
            if ms is not None and marked is not None and abs(ms - marked) > 1 + marked / 2:
                off.append(f"{path}:{line}: marked {marked:g} ms, measured {ms:.2f} ms")
    if args.check and off:
        print("\n".join(["figures off:"] + off))
        sys.exit(1)


if __name__ == "__main__":
    main()
