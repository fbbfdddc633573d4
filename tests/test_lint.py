"""Lint: no unused import and no undefined name, in every Hy module (compiled
to Python, macros expanded) and every Python file of the project.

pyflakes does the checking, on the Python AST that Hy's compiler makes; an
unused import is dead weight, an undefined name a bug waiting for the one
call that reaches it.  Line numbers are the .hy file's where Hy kept them;
the name is what to look for."""

import ast
import importlib
import pathlib
import types

import hy
import hy.compiler
import pytest
from pyflakes import checker, messages

# Where each folder of Hy modules is installed (pyproject.toml's package-dir),
# so that a module compiles under its real name.
from hybytecode import PACKAGES as HY_PACKAGES

PROJECT = pathlib.Path(__file__).resolve().parent.parent

PY_FOLDERS = ["tests", "docs", "bench"]

# What the lint is about.  Other pyflakes findings are left out: unused
# local variables, because Hy binds its own (`_hy_anon_var_N` for the value
# of a `with`, `if` or `try`, `_hy_exc_…`), which no source line names.
FINDINGS = (messages.UnusedImport, messages.UndefinedName, messages.UndefinedExport,
            messages.UndefinedLocal, messages.ImportStarUsage)


def _relative(path):
    return str(path.relative_to(PROJECT))


def _hy_files():
    files = [f for folder in HY_PACKAGES for f in sorted((PROJECT / folder).rglob("*.hy"))]
    return files + sorted((PROJECT / "tests").rglob("*.hy"))


def _py_files():
    return [f for folder in PY_FOLDERS + list(HY_PACKAGES)
            for f in sorted((PROJECT / folder).rglob("*.py"))
            if "__pycache__" not in f.parts]


def _module_name(path):
    folder, *rest = path.relative_to(PROJECT).with_suffix("").parts
    if folder in HY_PACKAGES:
        return ".".join([HY_PACKAGES[folder], *rest])
    return path.stem


def test_the_lint_reads_every_module_of_the_layer_packages():
    hy_files, py_files = set(_hy_files()), set(_py_files())
    for folder in HY_PACKAGES:
        for f in (PROJECT / folder).rglob("*"):
            if f.suffix == ".hy":
                assert f in hy_files, f"the lint does not read {_relative(f)}"
            if f.suffix == ".py" and "__pycache__" not in f.parts:
                assert f in py_files, f"the lint does not read {_relative(f)}"


def _hy_tree(path):
    """The Python AST of the Hy module at PATH, its macros expanded.  Its
    `require`s run (they load the macros), nothing else of it does."""
    source = path.read_text()
    module = types.ModuleType(_module_name(path))
    module.__file__ = str(path)
    # Without import_stdlib: Hy's compiler would put `import hy` at the top of
    # every module, unused in most; `hy` is declared a builtin instead, as
    # every Hy module has it (macro expansions name `hy.I.…`, `hy.models.…`).
    return hy.compiler.hy_compile(hy.read_many(source, filename=str(path)), module,
                                  filename=str(path), source=source, import_stdlib=False)


def _star_provides(message):
    """Whether the star import(s) a name was looked for in do give it: a
    consfig file is meant to start with `(import consfig *)`, and pyflakes
    cannot see what a star brings."""
    name, modules = message.message_args
    for module_name in modules.split(", "):
        module = importlib.import_module(module_name)
        if name in getattr(module, "__all__", dir(module)):
            return True
    return False


def _noqa(message, lines, comment):
    """Whether the line of MESSAGE has a `noqa` COMMENT (`# noqa`, as flake8
    honours it; `; noqa` in Hy): an import kept for its side effect (`import
    hy` registering the .hy importer), a name left undefined on purpose in a
    test of what a bug does."""
    return (0 < message.lineno <= len(lines)
            and f"{comment} noqa" in lines[message.lineno - 1])


def _findings(path, tree, lines, show, comment):
    found = []
    for message in checker.Checker(tree, str(path), builtins={"hy"}).messages:
        if not isinstance(message, FINDINGS) or _noqa(message, lines, comment):
            continue
        if isinstance(message, messages.ImportStarUsage) and _star_provides(message):
            continue
        kind = {messages.UnusedImport: "unused import"}.get(type(message), "undefined name")
        name = message.message_args[0]
        found.append(f"{_relative(path)}:{message.lineno}: {kind} {show(name)}")
    return found


def _show_hy(name):
    """NAME as the .hy file spells it: `consfig.errors.ChainError` as is,
    `eseqprops_of` as `eseqprops-of`."""
    *module, last = name.split(".")
    return ".".join(module + [hy.unmangle(last)])


@pytest.mark.parametrize("path", _hy_files(), ids=_relative)
def test_hy_module_has_no_unused_import_nor_undefined_name(path):
    found = _findings(path, _hy_tree(path), path.read_text().splitlines(), _show_hy, ";")
    assert not found, "pyflakes, on the Python this Hy module compiles to:\n  " + \
        "\n  ".join(found)


@pytest.mark.parametrize("path", _py_files(), ids=_relative)
def test_python_file_has_no_unused_import_nor_undefined_name(path):
    source = path.read_text()
    found = _findings(path, ast.parse(source, str(path)), source.splitlines(), str, "#")
    assert not found, "pyflakes:\n  " + "\n  ".join(found)
