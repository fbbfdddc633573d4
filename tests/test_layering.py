"""The project's modules import one way: no cycle, nothing from a higher layer.

Every `import` and `require` form of every Hy module (at any depth, so the
imports inside functions count), every `hy.I.consfig/…` reference, and every
import of the Python modules is read.  The graph of project modules they
make may have no cycle (strongly connected components), and no module may
import from a layer above its own (LAYERS); either fails, naming the
modules and edges.  An import inside a function must say what it saves
(docs/python-hop.md)."""

import ast
import functools
import os

import hy
from hy.models import Expression, Sequence, String, Symbol

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = {"consfig": "consfig", "props": "consfig.props",
            "connections": "consfig.connections"}

# The layers, lowest first: a module may import its own layer and the
# layers below it, never one above (each package's docstring says so).  The
# ground is consfig's top-level modules; `consfig` itself (the package's
# `__init__`, which gathers the names a consfig imports) and `__main__` are
# above everything.
LAYERS = ["ground", "consfig.transport", "consfig.model", "consfig.apply", "consfig.data",
          "consfig.nested", "consfig.python_hop", "consfig.connections", "consfig.site", "consfig.deployer",
          "consfig.converge", "consfig.image", "consfig.props", "consfig.ui"]


def layer(module):
    """The rank of MODULE's layer in LAYERS."""
    for i, name in enumerate(LAYERS):
        if module.startswith(name + "."):
            return i
    assert module.count(".") == 1 and module.startswith("consfig."), f"{module} is in no layer"
    return 0


def modules():
    """{module name: path} for every project module."""
    found = {}
    for folder, package in PACKAGES.items():
        top = os.path.join(ROOT, folder)
        for d, dirs, files in os.walk(top):
            dirs[:] = sorted(x for x in dirs if x != "__pycache__")
            rel = os.path.relpath(d, top)
            prefix = package if rel == "." else package + "." + rel.replace(os.sep, ".")
            if package == "consfig" and rel.split(os.sep)[0] in ("props", "connections"):
                continue
            for name in sorted(files):
                stem, ext = os.path.splitext(name)
                if ext in (".hy", ".py") and stem not in ("__init__", "__main__"):
                    found[f"{prefix}.{stem}"] = os.path.join(d, name)
    return found


# Each test reads every module: read once (and the planted ones are new paths).
@functools.lru_cache(maxsize=None)
def _forms(path):
    with open(path) as f:
        return tuple(hy.read_many(f.read(), filename=path))


@functools.lru_cache(maxsize=None)
def _python_tree(path):
    with open(path) as f:
        return ast.parse(f.read(), path)


def _walk(model):
    yield model
    if isinstance(model, Sequence):
        for m in model:
            yield from _walk(m)


_QUOTES = (Symbol("quote"), Symbol("quasiquote"))


def _hy_imports(path):
    """The modules the Hy module at PATH imports: its `import` and `require`
    forms, its `hy.I.a/b/c` references and its `importlib.import-module` of
    a string, at any depth (inside functions too).  Code a macro writes
    (quoted) runs in the module that uses the macro, and is not this one's."""
    names = set()

    def walk(m):
        if isinstance(m, Expression) and m and m[0] in _QUOTES:
            return
        if isinstance(m, Expression) and m and m[0] in (Symbol("import"), Symbol("require")):
            names.update(n for n in map(_dotted, m[1:]) if n)
        name = _hy_i(m) or _import_module_literal(m)
        if name:
            names.add(name)
        if isinstance(m, Sequence):
            for x in m:
                walk(x)

    for form in _forms(path):
        walk(form)
    return {n.replace("/", ".").replace("-", "_") for n in names}


def _hy_i(model):
    """The module of `hy.I.consfig/model/propspec.f` (Hy reads it as
    `(. hy I consfig/model/propspec f)`), or None."""
    if (isinstance(model, Expression) and len(model) >= 4 and model[0] == Symbol(".")
            and model[1] == Symbol("hy") and model[2] == Symbol("I")
            and isinstance(model[3], Symbol)):
        return str(model[3])
    return None


def _import_module_literal(model):
    """The module named by `(importlib.import-module "a.b")`, or None."""
    if (isinstance(model, Expression) and len(model) == 2
            and _dotted(model[0]) == "importlib.import-module"
            and isinstance(model[1], String)):
        return str(model[1])
    return None


def _dotted(model):
    """The module name a form of an import names: `os` is a symbol, and Hy
    reads `consfig.transport.hop` as `(. consfig hop)`; anything else names none."""
    if isinstance(model, Symbol):
        return str(model)
    if isinstance(model, Expression) and model and model[0] == Symbol("."):
        parts = [_dotted(p) for p in model[1:]]
        return ".".join(parts) if all(parts) else None
    return None


def _py_imports(path):
    names = set()
    for node in ast.walk(_python_tree(path)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "import_module" and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names.add(node.args[0].value)
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


# The imports by name, inside a function, that go against the layers on
# purpose; each says why.  Anything else of the kind fails.
BY_NAME = {
    ("consfig.python_hop.target", "consfig.converge.agent"):
        "a target's Python runs the converging agent when `consfig converge` asks it to",
    ("consfig.python_hop.target", "consfig.converge.watch"):
        "the agent's watches, imported with it while its bundle is certainly in the cache",
    ("consfig.data.items", "consfig.data.sources"):
        "the sources that call programs register their kinds when one is first asked for",
    ("consfig.model.host", "consfig.deployer.deployment"):
        "calling a host deploys it, `(athena)`: on the controller, where the deployer is",
}


def graph(by_name=BY_NAME):
    mods = modules()
    by_mangled = {m.replace("-", "_"): m for m in mods}
    edges = {}
    for mod, path in mods.items():
        found = _hy_imports(path) if path.endswith(".hy") else _py_imports(path)
        edges[mod] = {by_mangled[n] for n in found
                      if n in by_mangled and by_mangled[n] != mod
                      and (mod, by_mangled[n]) not in by_name}
    return edges


def test_every_import_by_name_against_the_layers_is_still_made():
    # An entry of BY_NAME that nothing needs any more is one to remove.
    edges = graph(by_name={})
    stale = [pair for pair in BY_NAME if pair[1] not in edges[pair[0]]]
    assert not stale, f"BY_NAME lists imports no module makes: {stale}"


def cycles(edges):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_the_reader_sees_hy_i_at_any_depth_and_import_module_of_a_string(tmp_path):
    module = tmp_path / "m.hy"
    module.write_text('(import importlib)\n'
                      '(defn f []\n  (when True\n    (hy.I.consfig/model/propspec.dotted-expansion 1)))\n'
                      '(defn g [] (importlib.import-module "consfig.converge.agent"))\n'
                      '(defmacro m [] `(hy.I.consfig/deployer/deployment.deploy* 1))\n')
    assert _hy_imports(str(module)) == {"importlib", "consfig.model.propspec",
                                        "consfig.converge.agent"}
    plain = tmp_path / "p.py"
    plain.write_text('import importlib\ndef f():\n    importlib.import_module("consfig.deployer.fleet")\n')
    assert "consfig.deployer.fleet" in _py_imports(str(plain))


def test_the_import_graph_finds_a_planted_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle():
    edges = graph()
    bad = cycles(edges)
    report = "\n".join(
        "cycle: " + ", ".join(sorted(c)) + "\n  edges: " +
        "; ".join(f"{a} -> {b}" for a in sorted(c) for b in sorted(edges[a] & c))
        for c in bad)
    assert not bad, "modules that import one another (see docs/python-hop.md):\n" + report


def function_imports(path):
    """The `import` forms inside functions (below the top level) of the Hy
    module at PATH; code a macro writes (quoted) is not the module's own
    import.  (bench/import_costs.py times the same ones.)"""
    def walk(model, depth):
        if isinstance(model, Expression) and model and model[0] in (Symbol("quote"),
                                                                    Symbol("quasiquote")):
            return
        if isinstance(model, Expression) and model and model[0] == Symbol("import") and depth:
            yield model
        if isinstance(model, Sequence):
            for m in model:
                yield from walk(m, depth + 1)

    for form in _forms(path):
        yield from walk(form, 0)


# Why an import stays inside a function (docs/python-hop.md): the module is
# the controller's (rich, Jinja, Fabric and paramiko, which no bundle
# carries), or the deployer's (which a target imports only for what needs
# it); or, where a target imports it, it costs 5 ms or more.  Everything
# else is imported at the top.  The reason, not a figure: figures depend on
# the machine (bench/import_costs.py measures them, and --check checks the
# reasons).
LAZY_REASONS = ("the controller's", "the deployer's", "5 ms or more")


def lazy_reason(line):
    """The reason LINE (the last line of an import inside a function) gives
    for it, or None."""
    if "; lazy: " not in line:
        return None
    reason = line.split("; lazy: ", 1)[1]
    return next((r for r in LAZY_REASONS if reason.startswith(r)), None)


def _unmarked_function_imports(path):
    """The lines of the imports inside functions of the Hy module at PATH
    that give no reason for it (`; lazy: REASON`, LAZY_REASONS)."""
    lines = open(path).read().split("\n")
    return [imp.start_line for imp in function_imports(path)
            if lazy_reason(lines[imp.end_line - 1]) is None]


def test_an_unmarked_import_inside_a_function_is_found(tmp_path):
    module = tmp_path / "m.hy"
    module.write_text("(import os)\n(defn f []\n  (import json)\n  (import rich)  ; lazy: the controller's\n"
                      "  (import tarfile)  ; start-up: 1 ms\n  (import zipfile)  ; lazy: it is big\n"
                      "  `(import ~x))\n")
    assert _unmarked_function_imports(str(module)) == [3, 5, 6]


def test_every_import_inside_a_function_says_why():
    bad = [f"{os.path.relpath(path, ROOT)}:{line}"
           for path in modules().values() if path.endswith(".hy")
           for line in _unmarked_function_imports(path)]
    assert not bad, ("imports inside functions without `; lazy: REASON`, the reason one of "
                     f"{LAZY_REASONS} (or move them to the top):\n  " + "\n  ".join(bad))


def test_the_layers_find_a_planted_upward_edge():
    assert upward({"consfig.model.host": {"consfig.apply.engine", "consfig.errors"}}) == [
        ("consfig.model.host", "consfig.apply.engine")]
    assert upward({"consfig.apply.engine": {"consfig.model.host"}}) == []


def upward(edges):
    """The edges from a module to one in a higher layer."""
    return sorted((a, b) for a in edges for b in edges[a] if layer(b) > layer(a))


def test_no_module_imports_from_a_layer_above_its_own():
    bad = upward(graph())
    assert not bad, ("imports from a higher layer (see the layers in tests/test_layering.py "
                     "and each package's docstring):\n" +
                     "\n".join(f"  {a} -> {b}" for a, b in bad))


# Behaviour lives on the property, never on its name: the engine, the agent
# and the combinators ask a propapp's property what it is (its children,
# whether it is a sequence, a trigger, a `during`: consfig.model.property's
# DECLARATIONS).  Only the registry itself (REGISTRY) reads names.  A
# stored name may still be looked up, to build a propapp of a core property
# (`(find-property "consfig.combinators.eseqprops")`), and compared nowhere.
REGISTRY = "consfig.model.property"
_COMPARISONS = {Symbol(s) for s in ("=", "!=", "in", "not-in", "is", "is-not")}


def _stored_property_name(text):
    from consfig.model.property import STORED_NAMES
    return any(text.startswith(stored + ".") and len(text) > len(stored) + 1
               for stored in STORED_NAMES.values())


def _a_name(model):
    # Hy reads `p.name` as `(. p name)`.
    return (isinstance(model, Expression) and len(model) >= 3 and model[0] == Symbol(".")
            and model[-1] == Symbol("name"))


def _names_a_string(model):
    if isinstance(model, String):
        return True
    return isinstance(model, Sequence) and any(isinstance(m, String) for m in model)


def name_checks(path):
    """The lines of the Hy module at PATH that compare a `.name` with a
    string literal, or write a core property's stored name anywhere but as
    the argument of `find-property`."""
    found = set()

    def walk(model, parent):
        if isinstance(model, String) and _stored_property_name(str(model)):
            if not (isinstance(parent, Expression) and len(parent) == 2
                    and parent[0] == Symbol("find-property")):
                found.add(getattr(model, "start_line", None) or parent.start_line)
        if isinstance(model, Expression) and model and model[0] in _COMPARISONS:
            operands = model[1:]
            if (any(_a_name(m) for m in operands)
                    and any(_names_a_string(m) for m in operands)):
                found.add(model.start_line)
        if isinstance(model, Sequence):
            for m in model:
                walk(m, model)

    for form in _forms(path):
        walk(form, form)
    return sorted(found)


def _py_name_checks(path):
    return sorted(node.lineno for node in ast.walk(_python_tree(path))
                  if isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and _stored_property_name(node.value))


def test_a_planted_name_check_is_found(tmp_path):
    module = tmp_path / "m.hy"
    module.write_text('(defn f [p]\n  (when (= p.name "consfig.combinators.during") 1))\n'
                      '(setv _GROUPS #{"consfig.combinators.seqprops"})\n'
                      '(defn g [p] (in p.name #("x.y.z")))\n'
                      '(defn h [] (find-property "consfig.combinators.desc"))\n')
    assert name_checks(str(module)) == [2, 3, 4]
    plain = tmp_path / "p.py"
    plain.write_text('x = 1\nSEQ = "consfig.meta.with-meta"\n')
    assert _py_name_checks(str(plain)) == [2]


def test_no_module_outside_the_registry_branches_on_a_property_name():
    bad = [f"{os.path.relpath(path, ROOT)}:{line}"
           for mod, path in modules().items() if mod != REGISTRY
           for line in (name_checks(path) if path.endswith(".hy") else _py_name_checks(path))]
    assert not bad, ("a propapp's name compared with a string (ask its property instead: "
                     "DECLARATIONS in consfig/model/property.hy):\n  " + "\n  ".join(bad))
