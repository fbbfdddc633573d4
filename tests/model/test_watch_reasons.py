"""Every property of the library either says what the converging agent
watches for it (`:watch`) or why nothing is (`:unwatched REASON`, or what it
is: a propspec of other properties, a deployment of another host)."""

import importlib
import pkgutil

import pytest

import hy  # noqa: F401
import consfig.props
from consfig.model.property import properties


def _library():
    for m in pkgutil.iter_modules(consfig.props.__path__):
        importlib.import_module(f"consfig.props.{m.name}")
    # The properties of consfig's own layers (combinators, meta-parameters,
    # handlers, deployments, the payload's stand-in for a withheld secret).
    for m in ["consfig.apply.combinators", "consfig.apply.meta", "consfig.apply.handlers",
              "consfig.nested.deploys", "consfig.python_hop.payload"]:
        importlib.import_module(m)
    # Facts are conditions of `during`, not properties the agent keeps.
    return [p for p in list(properties.values())
            if p.name.startswith("consfig.") and p.kind == "property"]


def test_every_property_of_the_library_has_a_watch_or_says_why_not():
    library = _library()
    assert len(library) > 200, f"only {len(library)} properties found: is the library loaded?"
    gaps = sorted(p.short_name for p in library if not p.watch and not p.watch_reason())
    assert not gaps, (f"{len(gaps)} properties neither watch anything nor say why not "
                      f"(give each a :watch or an (:unwatched REASON)): {', '.join(gaps)}")


def test_a_property_with_a_watch_has_no_reason_to_give():
    from consfig.props import file
    assert file.has_content.watch_reason() is None


def test_unwatched_takes_a_string_saying_why():
    with pytest.raises(Exception, match=r"\(:unwatched REASON\) takes a string"):
        hy.eval(hy.read_many('''
(require consfig.model.property [defprop])
(defprop cf-bad-unwatched :posix [] (:unwatched 3) (:apply None))'''))
