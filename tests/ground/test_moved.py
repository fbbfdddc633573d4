"""consfig.moved: the names consfig's modules had before the layer packages
(issue 21) keep working, for consfigs written against them."""

import importlib
import subprocess
import sys

import pytest

from consfig.moved import FORWARDED, MOVED, public_name


def test_every_old_name_imports_the_module_that_moved_not_a_copy():
    for old, new in MOVED.items():
        assert importlib.import_module(old) is importlib.import_module(new), old


def test_a_module_imported_by_its_old_name_keeps_its_own_spec():
    fleet = importlib.import_module("consfig.fleet")
    assert fleet.__spec__.name == "consfig.deployer.fleet"
    assert fleet.__name__ == "consfig.deployer.fleet"


def test_a_package_that_took_a_modules_name_forwards_that_modules_names():
    from consfig.site import load_consfig
    from consfig.site.load import load_consfig as moved
    assert load_consfig is moved
    import consfig.data
    assert consfig.data.DataItem is importlib.import_module("consfig.data.items").DataItem


def test_a_name_a_forwarding_package_lacks_is_an_attribute_error_naming_it():
    import consfig.image
    with pytest.raises(AttributeError, match="'consfig.image' has no attribute 'no_such'"):
        consfig.image.no_such


def test_every_forwarding_package_names_a_module_inside_it():
    for package, module in FORWARDED.items():
        assert module.startswith(package + "."), package
        importlib.import_module(module)


def test_core_properties_keep_the_names_they_are_stored_under():
    from consfig.model.property import find_property
    assert public_name("consfig.apply.combinators") == "consfig.combinators"
    assert public_name("consfig.props.file") == "consfig.props.file"
    assert find_property("consfig.combinators.seqprops").name == "consfig.combinators.seqprops"
    assert find_property("consfig.meta.with-meta").name == "consfig.meta.with-meta"


def test_a_consfig_written_against_the_old_names_still_loads(tmp_path):
    # In a Python of its own: nothing imported yet, as for a user's consfig.
    site = tmp_path / "oldsite.hy"
    site.write_text("""
(require consfig.fact [deffact])
(require consfig.types [defparamtype])
(import consfig.fleet [select-hosts]
        consfig.keep [IDLE-LIMIT]
        consfig.combinators [seqprops])
(defparamtype small (hy.I.consfig/types.int-range 0 9) "a small number")
(deffact nothing-here [] "Nothing." (:desc "nothing") (:holds True))
(print (callable select-hosts) (> IDLE-LIMIT 0) seqprops.name (.accepts small 3))
""")
    r = subprocess.run([sys.executable, "-c",
                        "import hy, runpy, sys; runpy.run_path(sys.argv[1])", str(site)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True", "consfig.combinators.seqprops", "True"], r.stdout
