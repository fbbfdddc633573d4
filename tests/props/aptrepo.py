"""A real, signed apt repository for tests: an OpenPGP key made with gpg, a
small package built with dpkg-deb, indexed with dpkg-scanpackages, and a
Release file clear-signed into InRelease, laid out as a flat repository
(suite "./") that apt reads through a file: URI.

    key = SigningKey(tmp_path / "gnupg")        # gpg's agent ends with key.close()
    make_repo(root / "srv/repo", key, version="1.0")
    # (apt.trusts-key "test" key.armored) (apt.source "test" :uris ["file:///srv/repo"] :suites ["./"])
"""

import datetime
import hashlib
import os
import subprocess

PACKAGE = "consfig-test-pkg"


def _run(*argv, **kw):
    return subprocess.run(argv, check=True, capture_output=True, timeout=120, **kw)


class SigningKey:
    """An ed25519 signing key in a gpg home of its own."""

    def __init__(self, home, uid="consfig test repository <repo@example.invalid>"):
        self.home = str(home)
        os.makedirs(self.home, mode=0o700, exist_ok=True)
        _run("gpg", "--homedir", self.home, "--batch", "--passphrase", "",
             "--quick-gen-key", uid, "ed25519", "sign", "never")
        self.armored = _run("gpg", "--homedir", self.home, "--armor", "--export").stdout.decode()
        self.binary = _run("gpg", "--homedir", self.home, "--export").stdout

    def clearsign(self, src, dest):
        _run("gpg", "--homedir", self.home, "--batch", "--yes", "--pinentry-mode", "loopback",
             "--passphrase", "", "--clearsign", "-o", str(dest), str(src))

    def close(self):
        """End the gpg-agent this home started: nothing outlives a test."""
        subprocess.run(["gpgconf", "--homedir", self.home, "--kill", "all"],
                       capture_output=True, timeout=60, check=False)


def build_deb(directory, version, package=PACKAGE):
    """Build PACKAGE at VERSION (Architecture: all) into DIRECTORY."""
    tree = os.path.join(directory, f".build-{package}-{version}")
    os.makedirs(os.path.join(tree, "DEBIAN"), exist_ok=True)
    doc = os.path.join(tree, "usr/share/doc", package)
    os.makedirs(doc, exist_ok=True)
    with open(os.path.join(doc, "VERSION"), "w") as f:
        f.write(version + "\n")
    with open(os.path.join(tree, "DEBIAN/control"), "w") as f:
        f.write(f"Package: {package}\nVersion: {version}\nArchitecture: all\n"
                "Maintainer: consfig tests <tests@example.invalid>\n"
                "Description: a package of consfig's tests\n")
    _run("dpkg-deb", "--root-owner-group", "--build", tree,
         os.path.join(directory, f"{package}_{version}_all.deb"))
    _run("rm", "-rf", "--", tree)


def make_repo(directory, key, version="1.0", origin="consfig-test"):
    """A flat repository in DIRECTORY holding PACKAGE at VERSION, signed by
    KEY (a SigningKey, or None for an unsigned one)."""
    os.makedirs(directory, exist_ok=True)
    build_deb(directory, version)
    packages = _run("dpkg-scanpackages", "--multiversion", ".", "/dev/null",
                    cwd=directory).stdout
    with open(os.path.join(directory, "Packages"), "wb") as f:
        f.write(packages)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%a, %d %b %Y %H:%M:%S UTC")
    release = (f"Origin: {origin}\nLabel: {origin}\nDate: {date}\nSHA256:\n"
               f" {hashlib.sha256(packages).hexdigest()} {len(packages)} Packages\n")
    with open(os.path.join(directory, "Release"), "w") as f:
        f.write(release)
    if key:
        key.clearsign(os.path.join(directory, "Release"), os.path.join(directory, "InRelease"))
