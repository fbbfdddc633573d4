"""The dpkg watch against a real dpkg: `dpkg -i` and `dpkg -r` change a real
status database and the Watcher reports the `["dpkg"]` key.

This machine's own package state is left alone: each scenario runs (this
file, as a script) under `unshare --mount`, with a writable overlay over a
tmpfs on /var/lib/dpkg, and the package it installs has no files, only
control data, so nothing outside /var/lib/dpkg changes (dpkg's log goes to
/dev/null)."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

PACKAGE = "consfig-watch-test"
STATUS = "/var/lib/dpkg/status"
# How long a scenario waits for the key after dpkg returned.
BOUND = 10


def _dpkg(*args):
    p = subprocess.run(["dpkg", "--log=/dev/null", *args], capture_output=True, text=True,
                       timeout=120, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, f"dpkg {args}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"


def _installed():
    p = subprocess.run(["dpkg-query", "-W", "-f", "${db:Status-Status}", PACKAGE],
                       capture_output=True, text=True, timeout=60)
    return p.stdout == "installed"


def _seen(w, key, bound=BOUND):
    """Whether W reports KEY within BOUND seconds."""
    deadline = time.monotonic() + bound
    while (left := deadline - time.monotonic()) > 0:
        if key in w.wait(left):
            return True
    return False


def _quiet(w):
    """Drain what W has already queued (events of a dpkg run before)."""
    while w.wait(0):
        pass


def _scenario(name, deb):
    import hy  # noqa: F401 -- lets Python import consfig.converge.watch (Hy)
    from consfig.converge.watch import Watcher
    result = {}
    if name == "remove":
        _dpkg("-i", deb)
    with Watcher() as w:
        w.add("pkgs", [["dpkg"]])
        if name == "install":
            _dpkg("-i", deb)
            result["installed"] = _installed()
            result["seen"] = _seen(w, "pkgs")
        elif name == "remove":
            _dpkg("-r", PACKAGE)
            result["installed"] = _installed()
            result["seen"] = _seen(w, "pkgs")
        elif name == "again":
            # dpkg writes status-new and renames it over status: the next
            # change, to the new file, must still be seen, and the one after.
            rounds = []
            for step in [["-i", deb], ["-r", PACKAGE], ["-i", deb]]:
                before = os.stat(STATUS).st_ino
                _dpkg(*step)
                rounds.append({"renamed": os.stat(STATUS).st_ino != before,
                               "installed": _installed(), "seen": _seen(w, "pkgs")})
                _quiet(w)
            result["rounds"] = rounds
        # A watcher that saw nothing happen must stay silent.
        result["then-quiet"] = "pkgs" not in w.wait(0.2)
    print(json.dumps(result), flush=True)


def _build_empty_deb(directory):
    """A package with no files, only control data."""
    tree = os.path.join(directory, "tree")
    os.makedirs(os.path.join(tree, "DEBIAN"))
    with open(os.path.join(tree, "DEBIAN/control"), "w") as f:
        f.write(f"Package: {PACKAGE}\nVersion: 1.0\nArchitecture: all\n"
                "Maintainer: consfig tests <tests@example.invalid>\n"
                "Description: a package of consfig's tests, with no files\n")
    deb = os.path.join(directory, f"{PACKAGE}_1.0_all.deb")
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", tree, deb], check=True,
                   capture_output=True, timeout=120)
    return deb


@pytest.fixture
def in_dpkg_namespace(tmp_path):
    missing = [t for t in ("unshare", "dpkg", "dpkg-deb", "dpkg-query") if not shutil.which(t)]
    if missing or os.geteuid() != 0:
        why = f"needs root and {', '.join(missing) or 'unshare, dpkg'}"
        if os.environ.get("CI") == "true":
            raise RuntimeError(why)
        pytest.skip(why)
    deb = _build_empty_deb(str(tmp_path))
    # Mounted on inside the namespace only: outside, it stays empty.
    scratch = tmp_path / "overlay"
    scratch.mkdir()
    before = open(STATUS, "rb").read()

    def run(name):
        script = (f'mount -t tmpfs tmpfs "{scratch}" && mkdir "{scratch}/u" "{scratch}/w" && '
                  f'mount -t overlay overlay -o "lowerdir=/var/lib/dpkg,upperdir={scratch}/u,'
                  f'workdir={scratch}/w" /var/lib/dpkg && exec "$@"')
        p = subprocess.run(["unshare", "--mount", "sh", "-c", script, "sh", sys.executable,
                            os.path.abspath(__file__), name, deb],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, f"scenario {name}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
        return json.loads(p.stdout.splitlines()[-1])

    yield run
    assert open(STATUS, "rb").read() == before, "this machine's dpkg status was changed"
    assert not os.listdir(scratch), f"the overlay leaked out of its namespace: {os.listdir(scratch)}"


def test_dpkg_watch_sees_a_package_installed(in_dpkg_namespace):
    r = in_dpkg_namespace("install")
    assert r["installed"], "dpkg -i did not install the package in the namespace"
    assert r["seen"], f"the Watcher did not report the dpkg key within {BOUND} s of dpkg -i"
    assert r["then-quiet"], "the Watcher kept reporting the dpkg key with nothing changing"


def test_dpkg_watch_sees_a_package_removed(in_dpkg_namespace):
    r = in_dpkg_namespace("remove")
    assert not r["installed"], "dpkg -r did not remove the package in the namespace"
    assert r["seen"], f"the Watcher did not report the dpkg key within {BOUND} s of dpkg -r"
    assert r["then-quiet"], "the Watcher kept reporting the dpkg key with nothing changing"


def test_dpkg_watch_keeps_watching_the_status_file_dpkg_renamed_into_place(in_dpkg_namespace):
    rounds = in_dpkg_namespace("again")["rounds"]
    assert [x["installed"] for x in rounds] == [True, False, True], f"dpkg did not act: {rounds}"
    assert all(x["renamed"] for x in rounds), f"dpkg did not rename its status file: {rounds}"
    assert [x["seen"] for x in rounds] == [True, True, True], \
        f"the Watcher lost the status file after dpkg renamed it: {rounds}"


if __name__ == "__main__":
    _scenario(sys.argv[1], sys.argv[2])
