"""The names the core's properties are stored under, and nothing else of
the flat module layout that came before the layer packages (NEWS.md)."""

import importlib
import subprocess
import sys

from consfig.model.property import STORED_NAMES, find_property, properties, stored_name


def _fresh_python(code):
    # Nothing imported yet, as in a target's Python reading a stored propspec.
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)


def test_core_properties_keep_the_names_they_are_stored_under():
    assert stored_name("consfig.apply.combinators") == "consfig.combinators"
    assert stored_name("consfig.props.file") == "consfig.props.file"
    assert find_property("consfig.combinators.seqprops").name == "consfig.combinators.seqprops"
    assert find_property("consfig.meta.with-meta").name == "consfig.meta.with-meta"


def test_every_module_of_the_table_defines_its_properties_under_the_stored_name():
    for module, stored in STORED_NAMES.items():
        importlib.import_module(module)
        mine = [n for n in properties if n.rpartition(".")[0] == stored]
        assert mine, f"{module} defines no property under {stored}"
        assert not [n for n in properties if n.rpartition(".")[0] == module], module


def test_a_stored_name_finds_its_property_in_a_python_that_imported_nothing():
    r = _fresh_python("import hy\nfrom consfig.model.property import find_property\n"
                      "print(find_property('consfig.handlers.handler').name)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["consfig.handlers.handler"], r.stdout


def test_the_flat_module_names_of_before_the_layers_are_gone():
    # One Python for all of them: each start compiles consfig's Hy anew.
    olds = ["consfig.fleet", "consfig.keep", "consfig.combinators", "consfig.fact",
            "consfig.moved"]
    r = _fresh_python(
        "import consfig, consfig.site, importlib\n"
        f"for old in {olds!r}:\n"
        "    try: importlib.import_module(old)\n"
        "    except ModuleNotFoundError: print('gone', old)\n"
        "print(hasattr(consfig.site, 'load_consfig'))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:-1] == [f"gone {o}" for o in olds] + ["False"], r.stdout
