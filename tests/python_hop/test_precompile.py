"""Hash-checked bytecode (consfig.python_hop.precompile): what it writes is
taken by a real Python whatever the files' dates and refused once the source
changed; what does not compile is named, not fatal.  Real trees under
tmp_path, imported by real child interpreters."""

import importlib.util
import marshal
import os
import subprocess
import sys
from importlib._bootstrap_external import _code_to_timestamp_pyc

import hy

import consfig.python_hop.precompile as precompile

PRECOMPILE = precompile.__file__
HY_PATH = os.path.dirname(os.path.dirname(hy.__file__))


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return str(path)


def pyc_of(path):
    return importlib.util.cache_from_source(str(path))


def read_pyc(path):
    with open(pyc_of(path), "rb") as f:
        return f.read()


def code_in(pyc):
    return marshal.loads(pyc[16:])


def value_of(code, name="X"):
    scope = {}
    exec(code, scope)
    return scope[name]


def child(root, code, verbose=False):
    """Run CODE in a fresh Python whose path starts with ROOT (and has hy),
    writing no bytecode of its own."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": os.pathsep.join([str(root), HY_PATH]),
           "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-S"] + (["-v"] if verbose else []) + ["-c", code],
                          env=env, capture_output=True, text=True, timeout=120)


def loaded_from_bytecode(root, module, path):
    r = child(root, "import hy, %s" % module, verbose=True)
    assert r.returncode == 0, r.stderr
    return "%s matches %s" % (pyc_of(path), path) in r.stderr


def temporaries(root):
    return [os.path.join(d, n) for d, _, names in os.walk(root) for n in names if n.endswith(".tmp")]


# What compile_tree writes

def test_bytecode_is_checked_against_a_hash_of_its_source(tmp_path):
    source = b"X = 1\n"
    path = write(tmp_path / "m.py", source)
    precompile.compile_tree(str(tmp_path))
    pyc = read_pyc(path)
    assert pyc[:4] == importlib.util.MAGIC_NUMBER, "this Python's bytecode"
    assert int.from_bytes(pyc[4:8], "little") == 0b11, "hash-based, and checked when imported"
    assert pyc[8:16] == importlib.util.source_hash(source), "the hash of the source"


def test_bytecode_is_taken_whatever_the_sources_date(tmp_path):
    path = write(tmp_path / "m.py", b"X = 1\n")
    precompile.compile_tree(str(tmp_path))
    for when in [0, 2**32 + 5, 4102444800]:
        os.utime(path, (when, when))
        assert loaded_from_bytecode(tmp_path, "m", path), f"taken with the source dated {when}"


def test_bytecode_is_refused_once_the_source_changed_even_with_its_date_and_size(tmp_path):
    path = write(tmp_path / "m.py", b"X = 1\n")
    st = os.stat(path)
    precompile.compile_tree(str(tmp_path))
    write(path, b"X = 2\n")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    r = child(tmp_path, "import m; print(m.X)")
    assert r.stdout.strip() == "2", f"the changed source runs: {r.stdout} {r.stderr}"


def test_hy_modules_are_compiled_and_taken(tmp_path):
    path = write(tmp_path / "pkg" / "h.hy", b"(setv X (+ 40 2))\n")
    write(tmp_path / "pkg" / "__init__.py", b"")
    assert precompile.compile_tree(str(tmp_path)) == [], "nothing failed"
    assert value_of(code_in(read_pyc(path))) == 42, "the Hy module's code"
    assert loaded_from_bytecode(tmp_path, "pkg.h", path), "taken by a Python with hy"


def test_the_code_is_named_by_its_path_under_the_root(tmp_path):
    path = write(tmp_path / "pkg" / "m.py", b"def f():\n    return 1\n")
    precompile.compile_tree(str(tmp_path))
    code = code_in(read_pyc(path))
    inner = [c for c in code.co_consts if hasattr(c, "co_filename")][0]
    assert code.co_filename == os.path.join("pkg", "m.py"), code.co_filename
    assert inner.co_filename == os.path.join("pkg", "m.py"), "functions inside it too"


def test_a_module_that_does_not_compile_is_named_and_the_others_are_compiled(tmp_path):
    good = write(tmp_path / "good.py", b"X = 1\n")
    bad = {"syntax": b"def (:\n", "latin1": b"X = '\xe9t\xe9'\n", "nul": b"X = 1\x00\n",
           "badhy": b"(setv X\n"}
    for name, source in bad.items():
        write(tmp_path / (name + (".hy" if name.endswith("hy") else ".py")), source)
    failed = precompile.compile_tree(str(tmp_path))
    assert sorted(f.split(":")[0] for f in failed) == sorted(bad), failed
    assert os.path.exists(pyc_of(good)), "the good module is compiled"
    for name in bad:
        assert not os.path.exists(pyc_of(tmp_path / (name + ".py"))), f"no bytecode for {name}"
    assert temporaries(tmp_path) == [], "no temporary left"


def test_recompiling_replaces_the_bytecode_leaving_no_temporary(tmp_path):
    path = write(tmp_path / "m.py", b"X = 1\n")
    precompile.compile_tree(str(tmp_path))
    write(path, b"X = 22\n")
    precompile.compile_tree(str(tmp_path))
    assert value_of(code_in(read_pyc(path))) == 22, "the new code"
    assert os.listdir(os.path.dirname(pyc_of(path))) == [os.path.basename(pyc_of(path))], "alone"


def test_only_the_modules_named_are_compiled(tmp_path):
    a = write(tmp_path / "pkg" / "a.py", b"X = 1\n")
    b = write(tmp_path / "pkg" / "b.py", b"X = 1\n")
    precompile.compile_tree(str(tmp_path), only={"pkg.a"})
    assert os.path.exists(pyc_of(a)) and not os.path.exists(pyc_of(b)), "only pkg.a"


def test_under_limits_the_tree_but_names_stay_relative_to_the_root(tmp_path):
    inside = write(tmp_path / "pkg" / "a.py", b"X = 1\n")
    outside = write(tmp_path / "other.py", b"X = 1\n")
    precompile.compile_tree(str(tmp_path), under="pkg")
    assert os.path.exists(pyc_of(inside)), "pkg.a, found under pkg"
    assert not os.path.exists(pyc_of(outside)), "nothing outside pkg"
    assert code_in(read_pyc(inside)).co_filename == os.path.join("pkg", "a.py"), "named from the root"


def test_hy_only_leaves_python_modules_alone(tmp_path):
    py = write(tmp_path / "a.py", b"X = 1\n")
    h = write(tmp_path / "b.hy", b"(setv X 1)\n")
    precompile.compile_tree(str(tmp_path), suffixes=(".hy",))
    assert os.path.exists(pyc_of(h)) and not os.path.exists(pyc_of(py)), "only the Hy one"


def test_jobs_share_the_modules_out_and_every_one_is_compiled_as_alone(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    for root in (one, two):
        write(root / "pkg" / "macros.hy", b"(defmacro twice [x] `(* 2 ~x))\n")
        for i in range(5):
            write(root / "pkg" / f"m{i}.hy", b"(require pkg.macros [twice])\n(setv X (twice %d))\n" % i)
    argv = [sys.executable, "-E", "-S", PRECOMPILE, "--path", HY_PATH, "--hy-only"]
    assert subprocess.run(argv + [str(one)], timeout=300).returncode == 0
    assert subprocess.run(argv + [str(two), "--jobs", "3"], timeout=300).returncode == 0
    for name in ["macros", *[f"m{i}" for i in range(5)]]:
        alone, shared = read_pyc(one / "pkg" / f"{name}.hy"), read_pyc(two / "pkg" / f"{name}.hy")
        assert shared == alone, f"pkg.{name} compiled otherwise when shared out"
    assert loaded_from_bytecode(two, "pkg.m4", two / "pkg" / "m4.hy"), "Python takes it"
    r = child(two, "import hy, pkg.m4; print(pkg.m4.X)")
    assert r.stdout == "8\n", r.stderr
    assert not temporaries(two), temporaries(two)


# Finding the modules

def test_sources_skip_bytecode_and_hidden_directories_in_a_stable_order(tmp_path):
    for rel in ["b.py", "a.hy", "z/c.py", ".git/hooks.py", "__pycache__/x.py", "notes.txt", "y/.d.py"]:
        write(tmp_path / rel, b"")
    found = [os.path.relpath(p, tmp_path) for p in precompile.sources(str(tmp_path))]
    assert found == ["a.hy", "b.py", os.path.join("y", ".d.py"), os.path.join("z", "c.py")], found


def test_module_names_are_dotted_paths_under_the_root():
    assert precompile.module_name("/r", "/r/pkg/sub/m.hy") == "pkg.sub.m"
    assert precompile.module_name("/r", "/r/pkg/__init__.py") == "pkg", "a package is its directory"
    assert precompile.module_name("/r", "/r/m.py") == "m"


# Bytecode for shipping (bytecode_for, hash_pyc, remember)

def test_hash_pyc_leaves_the_code_it_is_given_alone():
    source = b"X = 1\n"
    code = compile(source, "/where/it/was/compiled.py", "exec")
    pyc = precompile.hash_pyc(code, source, "shipped.py")
    assert code_in(pyc).co_filename == "shipped.py", "the copy is renamed"
    assert code.co_filename == "/where/it/was/compiled.py", "the code running here is not"


def test_remembered_code_is_shipped_for_the_same_source(tmp_path):
    source = b"X = 1\n"
    path = write(tmp_path / "site.hy", source)
    precompile.remember(path, source, compile("X = 'as loaded'\n", path, "exec"))
    pyc = precompile.bytecode_for(path, source, "site.hy")
    assert value_of(code_in(pyc)) == "as loaded", "the code compiled when it was loaded"
    assert pyc[8:16] == importlib.util.source_hash(source), "checked against that source"


def test_remembered_code_is_not_shipped_once_the_source_changed(tmp_path):
    path = write(tmp_path / "m.py", b"X = 1\n")
    precompile.remember(path, b"X = 1\n", compile("X = 'stale'\n", path, "exec"))
    pyc = precompile.bytecode_for(path, b"X = 2\n", "m.py")
    assert value_of(code_in(pyc)) == 2, "compiled from the source as it is now"


def test_a_hy_module_with_nothing_compiled_has_no_bytecode_to_ship(tmp_path):
    path = write(tmp_path / "lonely.hy", b"(setv X 1)\n")
    assert precompile.bytecode_for(path, b"(setv X 1)\n", "lonely.hy") is None


def timestamp_pyc_beside(path, source, code):
    st = os.stat(path)
    write(pyc_of(path), _code_to_timestamp_pyc(code, st.st_mtime, len(source)))


def test_valid_bytecode_cached_beside_the_source_is_shipped_hash_checked(tmp_path):
    source = b"(setv X 1)\n"
    path = write(tmp_path / "m.hy", source)
    timestamp_pyc_beside(path, source, compile("X = 'cached'\n", path, "exec"))
    pyc = precompile.bytecode_for(path, source, "m.hy")
    assert value_of(code_in(pyc)) == "cached", "the cached code"
    assert int.from_bytes(pyc[4:8], "little") == 0b11, "made hash-checked"


def test_cached_bytecode_older_than_the_source_is_not_shipped(tmp_path):
    source = b"(setv X 1)\n"
    path = write(tmp_path / "m.hy", source)
    timestamp_pyc_beside(path, source, compile("X = 'stale'\n", path, "exec"))
    os.utime(path, (os.stat(path).st_mtime + 10,) * 2)
    assert precompile.bytecode_for(path, source, "m.hy") is None


def test_cached_bytecode_of_a_source_of_another_size_is_not_shipped(tmp_path):
    path = write(tmp_path / "m.hy", b"(setv X 1)\n")
    st = os.stat(path)
    timestamp_pyc_beside(path, b"(setv X 1)\n", compile("X = 'stale'\n", path, "exec"))
    write(path, b"(setv X 100)\n")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert precompile.bytecode_for(path, b"(setv X 100)\n", "m.hy") is None, "same date, other size"


def test_cached_bytecode_of_another_source_is_not_shipped(tmp_path):
    path = write(tmp_path / "m.hy", b"(setv X 2)\n")
    write(pyc_of(path), precompile.hash_pyc(compile("X = 1\n", path, "exec"), b"(setv X 1)\n", "m.hy"))
    assert precompile.bytecode_for(path, b"(setv X 2)\n", "m.hy") is None


def test_damaged_cached_bytecode_is_not_shipped(tmp_path):
    source = b"(setv X 1)\n"
    path = write(tmp_path / "m.hy", source)
    good = precompile.hash_pyc(compile("X = 1\n", path, "exec"), source, "m.hy")
    for damaged in [b"", good[:15], b"\x00\x00\x00\x00" + good[4:], good[:16] + b"\xff" * 40,
                    good[:-8]]:
        write(pyc_of(path), damaged)
        assert precompile.bytecode_for(path, source, "m.hy") is None, damaged[:20]


def test_a_python_module_that_does_not_compile_has_no_bytecode_to_ship(tmp_path):
    for source in [b"def (:\n", b"X = 1\x00\n", b"X = '\xff'\n"]:
        path = write(tmp_path / "m.py", source)
        assert precompile.bytecode_for(path, source, "m.py") is None, source


# As a command

def test_the_command_compiles_a_tree_and_names_what_did_not_compile(tmp_path):
    good = write(tmp_path / "pkg" / "good.hy", b"(setv X 1)\n")
    write(tmp_path / "pkg" / "bad.hy", b"(setv X\n")
    plain = write(tmp_path / "pkg" / "plain.py", b"X = 1\n")
    outside = write(tmp_path / "outside.hy", b"(setv X 1)\n")
    r = subprocess.run([sys.executable, "-E", "-S", PRECOMPILE, str(tmp_path), "--path", HY_PATH,
                        "--under", "pkg", "--hy-only"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"not fatal: {r.stderr}"
    assert r.stderr.startswith("not compiled: pkg.bad: "), r.stderr
    assert len(r.stderr.splitlines()) == 1, f"one line, for the one module: {r.stderr}"
    assert os.path.exists(pyc_of(good)), "the good module is compiled"
    assert not os.path.exists(pyc_of(plain)), "--hy-only: not the Python one"
    assert not os.path.exists(pyc_of(outside)), "--under pkg: nothing outside it"


def test_the_command_compiles_a_module_that_another_requires_once(tmp_path):
    # pkg.a requires pkg.z's macro: z is compiled when a's compile imports
    # it, and that code is z's bytecode; pkg.y, required after its own
    # compile, is not compiled again for the import.
    write(tmp_path / "pkg" / "__init__.py", b"")
    write(tmp_path / "pkg" / "a.hy", b"(require pkg.z [m]) (setv X (m))\n")
    write(tmp_path / "pkg" / "b.hy", b"(require pkg.y [n]) (setv X (n))\n")
    y = write(tmp_path / "pkg" / "y.hy", b"(defmacro n [] 2)\n")
    z = write(tmp_path / "pkg" / "z.hy", b"(defmacro m [] 1)\n")
    r = subprocess.run([sys.executable, "-E", "-S", PRECOMPILE, str(tmp_path), "--path", HY_PATH,
                        "--under", "pkg", "--hy-only"],
                       capture_output=True, text=True, timeout=120,
                       env={"PATH": os.environ["PATH"], "HY_MESSAGE_WHEN_COMPILING": "1"})
    assert r.returncode == 0, r.stderr
    compiled = sorted(os.path.basename(line.split()[-1]) for line in r.stderr.splitlines()
                      if line.startswith("Compiling "))
    assert compiled == ["a.hy", "b.hy", "y.hy", "z.hy"], f"each once: {compiled}"
    assert loaded_from_bytecode(tmp_path, "pkg.a", tmp_path / "pkg" / "a.hy"), "a's bytecode is taken"
    assert os.path.exists(pyc_of(y)) and os.path.exists(pyc_of(z)), "the required ones are written too"
