"""The controller's side of the :python hop (consfig.python_hop.controller) against the
bootstrap it sends, run for real in a child Python over real pipes: what the
target says first, and how it ends when the controller goes."""

import ast
import os
import subprocess
import sys

import hy  # noqa: F401
import pytest

import consfig.boot as boot
from consfig.transport.frames import frame, read_frame
from consfig.python_hop.controller import bootstrap, bootstrap_command


@pytest.fixture
def target(tmp_path):
    """A started bootstrap, as `:python` starts it, caching under TMP_PATH."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    procs = []

    def start():
        p = subprocess.Popen(bootstrap_command(sys.executable),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env={**os.environ, "XDG_CACHE_HOME": str(cache)}, cwd=tmp_path)
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait(10)
        p.stdout.close()
        p.stderr.close()


def test_the_bootstrap_sent_is_boot_py_minified_without_docstrings():
    text = bootstrap()
    assert len(text) < len(open(boot.__file__).read()) * 0.8, "smaller than the source"
    tree = ast.parse(text)
    assert ast.get_docstring(tree) is None, "no module docstring"
    assert all(ast.get_docstring(f) is None for f in tree.body if isinstance(f, ast.FunctionDef)), \
        "no function docstrings"


def test_a_target_whose_controller_is_gone_at_once_exits_controller_gone(target):
    p = target()
    p.stdin.close()
    assert p.wait(60) == boot.CONTROLLER_GONE


def test_a_hello_that_names_no_layers_is_refused_with_a_message(target):
    p = target()
    p.stdin.write(frame({"op": "hello", "layers": ["../etc"]}))
    p.stdin.close()
    assert p.wait(60) == 1
    assert b"does not name a bundle's layers" in p.stderr.read()


def test_a_target_answers_hello_with_what_it_lacks_then_asks_for_it(target, tmp_path):
    p = target()
    p.stdin.write(frame({"op": "hello", "layers": ["aaaa", "bbbb"]}))
    p.stdin.flush()
    hello = read_frame(p.stdout)
    assert hello["op"] == "hello" and hello["protocol"] == boot.PROTOCOL, hello
    assert hello["missing"] == ["aaaa", "bbbb"], "an empty cache lacks every layer"
    assert hello["data"] == {}, "and keeps no data"
    need = read_frame(p.stdout)
    assert need["op"] == "need-bundle" and need["layers"] == ["aaaa", "bbbb"], need
    assert oct(os.stat(tmp_path / "cache" / "consfig" / "bundles").st_mode & 0o777) == "0o700", \
        "the bundle cache is private"
    p.stdin.close()
    assert p.wait(60) == boot.CONTROLLER_GONE, "the controller going ends it while it waits"
