"""What each import inside a function would cost at the top of its module.

consfig keeps an import inside a function only where the module is the
controller's or the deployer's, or costs a target 5 ms or more
(docs/python-hop.md), and marks it with that reason: `; lazy: REASON`
(tests/test_layering.py's LAZY_REASONS).  This measures each one:

1. it deploys a small host over `[:local :python]`, with a bundle cache of
   its own, for the bundle's layers: what a target imports from;
2. for every `(import …)` inside a function of consfig/, props/ and
   connections/, it starts a Python like a target's (`-E -S`, the layers as
   its path), imports the module holding the import, and times the import:
   the best of --runs.  A module the bundle does not carry (rich, jinja2,
   Fabric: the controller's) is timed in this Python instead.

That is what the import costs when it first runs, with its module loaded:
what moving it to the top would add to every import of that module.
--check fails when a reason does not hold where it can be told on any
machine: an import marked the controller's that a target-like Python can
import, one marked the deployer's that brings no consfig.deployer module,
one marked 5 ms or more that a target-like Python cannot import (it is the
controller's), or one with no reason.  The figures are printed, not
checked: they are the machine's.

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
print((time.perf_counter() - t) * 1000,
      any(m.startswith("consfig.deployer") for m in sys.modules))
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
    """(path, line, holder module, [modules], its reason or None) for each."""
    found = []
    for path, holder in sorted((p, m) for m, p in test_layering.modules().items()
                               if p.endswith(".hy")):
        lines = open(path).read().split("\n")
        for imp in test_layering.function_imports(path):
            found.append((os.path.relpath(path, ROOT), imp.start_line, holder,
                          _names(imp), test_layering.lazy_reason(lines[imp.end_line - 1])))
    return found


def cost(holder, modules, python, runs):
    """#(the best time, in ms, of importing MODULES in a fresh Python started
    as PYTHON (a list) that has imported HOLDER; whether that brought a
    consfig.deployer module), or None when they cannot be imported there."""
    best = deployer = None
    for _ in range(runs + 1):
        r = subprocess.run([*python, holder, ",".join(modules)],
                           capture_output=True, text=True, cwd="/")
        if r.returncode != 0:
            return None
        t, deployer = r.stdout.split()
        best = float(t) if best is None else min(best, float(t))
    return best, deployer == "True"


def wrong(reason, on_target):
    """What is wrong with REASON for an import whose cost on a target-like
    Python is ON_TARGET (`cost`), or None."""
    if reason is None:
        return "gives no reason (`; lazy: REASON`)"
    if reason == "the controller's" and on_target is not None:
        return "is marked the controller's, but a target can import it"
    if reason == "the deployer's" and not (on_target and on_target[1]):
        return "is marked the deployer's, but brings no consfig.deployer module"
    if reason == "5 ms or more" and on_target is None:
        return "is marked 5 ms or more on a target, but a target cannot import it"
    return None


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
        for path, line, holder, modules, reason in imports():
            target = cost(holder, modules, on_target, args.runs)
            measured, where = target, "target-like"
            if measured is None:
                measured, where = cost(holder, modules, here, args.runs), "controller"
            shown = "failed" if measured is None else f"{measured[0]:6.2f} ms"
            named = " ".join(m for m in modules if not m.startswith("?"))
            print(f"{path}:{line}\t{shown}\t{where}\t{reason or 'no reason'}\t{named}",
                  flush=True)
            problem = wrong(reason, target)
            if problem:
                off.append(f"{path}:{line}: {problem}")
    if args.check and off:
        print("\n".join(["reasons that do not hold:"] + off))
        sys.exit(1)


if __name__ == "__main__":
    main()
