"""Every member of the connection protocol is declared on its base class:
an override takes no parameter the base's lacks, so a caller that holds a
`Connection` knows every argument any connection takes."""

import importlib
import inspect
import pkgutil

import hy  # noqa: F401
import consfig.connections
from consfig.transport.hop import Connection


def _parameters(f):
    return {n for n, p in inspect.signature(f).parameters.items()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def undeclared(base, classes):
    """(class, method, parameters) for each method of CLASSES that takes
    parameters its declaration on BASE lacks."""
    out = []
    for cls in classes:
        for name, f in vars(cls).items():
            declared = getattr(base, name, None)
            if not (callable(f) and callable(declared)) or name.startswith("__"):
                continue
            extra = _parameters(f) - _parameters(declared)
            if extra:
                out.append((cls.__name__, name, sorted(extra)))
    return out


def _subclasses(cls):
    for c in cls.__subclasses__():
        yield c
        yield from _subclasses(c)


def test_a_planted_override_with_a_parameter_of_its_own_is_found():
    class Base:
        def apply(self, host, *, check=False):
            pass

    class Hop(Base):
        def apply(self, host, *, check=False, converge=None):
            pass

    assert undeclared(Base, [Hop]) == [("Hop", "apply", ["converge"])]


def test_every_connection_takes_only_what_its_base_declares():
    for m in pkgutil.iter_modules(consfig.connections.__path__):
        importlib.import_module(f"consfig.connections.{m.name}")
    importlib.import_module("consfig.python_hop.target")
    bad = undeclared(Connection, list(_subclasses(Connection)))
    assert not bad, f"overrides that take what Connection does not declare: {bad}"
