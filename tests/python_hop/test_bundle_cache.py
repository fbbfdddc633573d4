"""The target's bundle cache: where the bootstrap puts it (the same place the
controller reasons about), that no other user can plant code in it, and that
a damaged cache heals itself.  Over [:local :python]: a real child
interpreter running the real bootstrap against a real cache directory."""

import gzip
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys

import pytest
from hy.models import Keyword

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from remote_helpers import deploy, mixed_host  # noqa: E402

import consfig.python_hop.bundle as bundle  # noqa: E402
import consfig.python_hop.controller as remote  # noqa: E402

LOCAL_PYTHON = [Keyword("local"), Keyword("python")]


def bootstrap_cache_directory(env):
    """The cache directory the bootstrap, as sent, finds in a Python whose
    environment is ENV."""
    probe = (remote.bootstrap().replace("if __name__ == '__main__':", "if False:")
             + "\nimport pwd\nprint(cache_directory(os.environ, os.geteuid(),"
             " pwd.getpwuid(os.geteuid()).pw_dir)[0])\n")
    result = subprocess.run([sys.executable, "-E", "-S", "-c", probe], env=env,
                            capture_output=True, text=True, check=True)
    return result.stdout.strip()


def controller_cache_directory(monkeypatch, env):
    for k in ["XDG_CACHE_HOME", "HOME"]:
        if k in env:
            monkeypatch.setenv(k, env[k])
        else:
            monkeypatch.delenv(k, raising=False)
    return os.path.dirname(bundle.cache_directory())


@pytest.mark.parametrize("case", ["xdg", "relative-xdg", "no-xdg", "world-writable-xdg"])
def test_bootstrap_and_controller_agree_on_the_cache_directory(case, tmp_path, monkeypatch):
    home = pwd.getpwuid(os.geteuid()).pw_dir
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "not-the-home")}
    if case == "xdg":
        env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    elif case == "relative-xdg":
        env["XDG_CACHE_HOME"] = "relative/cache"
    elif case == "world-writable-xdg":
        (tmp_path / "open").mkdir(mode=0o777)
        os.chmod(tmp_path / "open", 0o1777)
        env["XDG_CACHE_HOME"] = str(tmp_path / "open")
    on_target = bootstrap_cache_directory(env)
    on_controller = controller_cache_directory(monkeypatch, env)
    assert on_target == on_controller, (on_target, on_controller)
    expected = (str(tmp_path / "xdg" / "consfig") if case == "xdg"
                else os.path.join(home, ".cache", "consfig"))
    assert on_target == expected, on_target


def test_the_bootstrap_sent_is_the_readable_source_minified():
    import consfig.boot
    sent = remote.bootstrap()
    source = open(consfig.boot.__file__).read()
    assert "#" not in sent and '"""' not in sent, "comments or docstrings were sent"
    assert len(sent) < len(source) * 0.7, (len(sent), len(source))
    assert "def cache_directory(environ, uid, home):" in sent


@pytest.fixture
def other_user():
    """A throwaway local user, as another user of the target would be."""
    name = f"cfgother{os.getpid() % 100000}"
    subprocess.run(["userdel", name], capture_output=True)
    subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name], check=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], capture_output=True)


def bundle_hash(tmp_path, monkeypatch, host):
    """The name of the bundle HOST's deployment uses, from a deployment into
    a cache of its own."""
    cache = tmp_path / "probe-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    outcome = deploy(LOCAL_PYTHON, host, sink=lambda e: None)
    assert outcome.status != "failed"
    return library_layer(cache / "consfig" / "bundles").name


def library_layer(bundles):
    """The layer in BUNDLES that holds consfig and its libraries."""
    [layer] = [p for p in bundles.iterdir() if (p / "consfig").is_dir()]
    return layer


def plant(root, name, marker, uid):
    """Code that writes MARKER when imported, as bundle NAME's hy, in the
    cache ROOT, owned by UID from the cache's consfig directory down."""
    package = root / "consfig" / "bundles" / name / "hy"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('pwned')\n")
    for d, dirs, files in os.walk(root / "consfig"):
        for n in [d] + [os.path.join(d, f) for f in files]:
            os.chown(n, uid, -1)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to make a second user")


def deploy_over_planted(tmp_path, monkeypatch, root, uid, warmed):
    """Deploy with the cache ROOT where UID planted code as the bundle the
    deployment uses (named as in WARMED); whether that code ran."""
    name = library_layer(warmed / "consfig" / "bundles").name
    marker = tmp_path / "marker"
    plant(root, name, marker, uid)
    monkeypatch.setenv("XDG_CACHE_HOME", str(root))
    outcome = deploy(LOCAL_PYTHON, mixed_host(tmp_path / "e"), sink=lambda e: None)
    assert outcome.status == "changed"
    return marker.exists()


@needs_root
def test_code_planted_under_a_world_writable_cache_root_is_never_run(tmp_path, monkeypatch,
                                                                    other_user, warmed):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    assert not deploy_over_planted(tmp_path, monkeypatch, shared, other_user.pw_uid, warmed), \
        "another user's code ran as root"


@needs_root
def test_code_planted_below_a_private_cache_root_is_never_run(tmp_path, monkeypatch, other_user,
                                                             warmed):
    # Left there by the other user while the directory was open, say.
    root = tmp_path / "root-cache"
    root.mkdir(mode=0o700)
    assert not deploy_over_planted(tmp_path, monkeypatch, root, other_user.pw_uid, warmed), \
        "another user's code ran as root"


def test_a_bundle_directory_writable_by_others_is_replaced(tmp_path, monkeypatch, warmed):
    directory = warm_cache(tmp_path, monkeypatch, warmed)
    os.chmod(directory, 0o777)
    (directory / "planted").write_text("x")
    outcome = deploy(LOCAL_PYTHON, mixed_host(tmp_path / "e"), sink=lambda e: None)
    assert outcome.status == "changed"
    assert not (directory / "planted").exists(), "a bundle others could write to was used"


def test_cache_directories_are_private(tmp_path, monkeypatch):
    name = bundle_hash(tmp_path, monkeypatch, mixed_host(tmp_path / "d"))
    consfig_dir = tmp_path / "probe-cache" / "consfig"
    for d in [consfig_dir, consfig_dir / "bundles", consfig_dir / "bundles" / name]:
        mode = stat.S_IMODE(os.stat(d).st_mode)
        assert mode == 0o700, f"{d} is {mode:o}"


def test_no_safe_cache_directory_is_a_clear_error(tmp_path, monkeypatch):
    fake_home = tmp_path / "home"
    fake_home.mkdir()
    os.chmod(fake_home, 0o777)
    (fake_home / ".cache").mkdir()
    os.chmod(fake_home / ".cache", 0o777)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    # A Python that believes this is its user's home.
    wrapper = tmp_path / "python3"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} -c \"import pwd, sys; "
                       f"pwd.getpwuid = lambda u: type('P', (), {{'pw_dir': {str(fake_home)!r}}}); "
                       f"exec(sys.argv[1])\" \"$4\"\n")
    wrapper.chmod(0o755)
    chain = [Keyword("local"), [Keyword("python"), Keyword("interpreter"), str(wrapper)]]
    from consfig.errors import ConnectionFailed
    with pytest.raises(ConnectionFailed) as e:
        deploy(chain, mixed_host(tmp_path / "d"), sink=lambda e: None)
    msg = str(e.value)
    assert "no safe place to cache" in msg and "can be written by others" in msg, msg


# Damage, and healing

@pytest.fixture(scope="module")
def warmed(tmp_path_factory):
    """A cache a deployment filled (on the controller, its compiled code;
    on the target, the bundle it sent and the bytecode made there), made
    once for the module: each test damages a copy of it.  A cold cache
    costs a deployment seconds of a core, compiling every Hy module."""
    top = tmp_path_factory.mktemp("warmed")
    with pytest.MonkeyPatch.context() as m:
        m.setenv("XDG_CACHE_HOME", str(top / "cache"))
        outcome = deploy(LOCAL_PYTHON, mixed_host(top / "first"), sink=lambda e: None)
    assert outcome.status == "changed"
    return top / "cache"


def warm_cache(tmp_path, monkeypatch, warmed):
    """A cache holding the bundle of a deployment (a copy of WARMED), and
    that bundle's directory."""
    cache = tmp_path / "cache"
    shutil.copytree(warmed, cache, symlinks=True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    return library_layer(cache / "consfig" / "bundles")


def truncate(path):
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size // 2)


def deploy_again(tmp_path, events):
    """Deploy again; what the deployment said, and how many bundles it sent."""
    before = remote.stats["bundles-sent"]
    outcome = deploy(LOCAL_PYTHON, mixed_host(tmp_path / "again"), sink=events)
    assert outcome.status == "changed", events.events
    return [e["text"] for e in events.events if e["event"] == "output"], \
        remote.stats["bundles-sent"] - before


def test_a_truncated_source_in_the_cache_is_fetched_again(tmp_path, monkeypatch, warmed,
                                                          events):
    directory = warm_cache(tmp_path, monkeypatch, warmed)
    truncate(directory / "consfig" / "apply" / "engine.hy")
    notes, sent = deploy_again(tmp_path, events)
    assert sent == 1, "the bundle was not sent again"
    assert any("damaged" in n and "engine.hy" in n for n in notes), notes


def test_a_truncated_bytecode_file_in_the_cache_is_fetched_again(tmp_path, monkeypatch, warmed,
                                                                 events):
    directory = warm_cache(tmp_path, monkeypatch, warmed)
    [pyc] = [p for p in (directory / "consfig" / "apply" / "__pycache__").iterdir()
             if p.name.startswith("engine.")]
    truncate(pyc)
    notes, sent = deploy_again(tmp_path, events)
    assert sent == 1, "the bundle was not sent again"
    assert any("damaged" in n for n in notes), notes


def test_an_empty_bundle_directory_is_fetched_again(tmp_path, monkeypatch, warmed, events):
    directory = warm_cache(tmp_path, monkeypatch, warmed)
    shutil.rmtree(directory)
    directory.mkdir(mode=0o700)
    notes, sent = deploy_again(tmp_path, events)
    assert sent == 1, "the bundle was not sent again"
    assert any("never completely unpacked" in n for n in notes), notes


def test_a_file_damaged_at_its_own_size_is_caught_when_imported(tmp_path, monkeypatch, warmed,
                                                               events):
    directory = warm_cache(tmp_path, monkeypatch, warmed)
    init = directory / "hy" / "__init__.py"
    init.write_bytes(b"(" * os.path.getsize(init))
    notes, sent = deploy_again(tmp_path, events)
    assert sent == 1, "the bundle was not sent again"
    assert any("importing" in n and "SyntaxError" in n for n in notes), notes


def test_a_truncated_compiled_archive_on_the_controller_is_made_again(tmp_path, monkeypatch, warmed,
                                                                    events):
    directory = warm_cache(tmp_path, monkeypatch, warmed)
    shutil.rmtree(directory)
    compiled = tmp_path / "cache" / "consfig" / "compiled"
    [archive] = [p for p in compiled.iterdir() if p.name.startswith(directory.name)]
    truncate(archive)
    notes, sent = deploy_again(tmp_path, events)
    assert sent == 1
    assert any("compiled code" in n and "damaged" in n for n in notes), notes
    gzip.decompress(archive.read_bytes())


def test_the_manifest_lists_the_bytecode_made_on_the_target(tmp_path, monkeypatch, warmed):
    directory = warm_cache(tmp_path, monkeypatch, warmed)
    manifest = json.loads((directory / ".consfig-manifest").read_text())
    made = [os.path.relpath(os.path.join(d, f), directory)
            for d, _, fs in os.walk(directory) for f in fs if f.endswith(".pyc")]
    assert made and all(m in manifest for m in made), set(made) - set(manifest)
