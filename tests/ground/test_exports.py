"""What `(import consfig *)` brings: each module's explicit `(export …)`
list, no name exported by two modules as two things."""

import importlib
import subprocess
import sys

import hy  # noqa: F401

import consfig


def test_no_two_modules_export_one_name_as_different_objects():
    first = {}
    clashes = []
    for name in consfig._MODULES:
        module = importlib.import_module(f"consfig.{name}")
        assert hasattr(module, "__all__"), f"consfig.{name} says what it exports with (export …)"
        for exported in module.__all__:
            obj = getattr(module, exported)
            if exported in first and first[exported][1] is not obj:
                clashes.append(f"{exported}: consfig.{first[exported][0]} and consfig.{name}")
            first.setdefault(exported, (name, obj))
    assert not clashes, "exported by two modules as two things:\n" + "\n".join(clashes)


def test_the_star_import_gives_the_parameter_types_not_the_hops():
    # The hop's argument types once shadowed the types': a site's
    # `#^ (one-of user-name id-number)` then accepted 3.5 without a word.
    code = """
(import consfig *)
(import consfig.types)
(assert (is one-of consfig.types.one-of) "one-of is the types' one")
(try ((one-of user-name id-number) 3.5)
     (except [e ParameterTypeError] (print "refused"))
     (else (print "accepted")))
"""
    r = subprocess.run([sys.executable, "-m", "hy", "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.stdout.strip() == "refused", r.stdout + r.stderr
