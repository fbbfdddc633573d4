"""A tiny chroot for connection tests: a shell, coreutils and their libraries
copied from this machine (a few MB, made in well under a second), so that
:chroot hops can be tested without debootstrap."""

import os
import shutil
import subprocess

COMMANDS = ["sh", "cat", "mktemp", "chmod", "chown", "mv", "rm", "sync", "ls",
            "mkdir", "stat", "readlink", "ln", "id", "sleep", "timeout", "env",
            "printf", "test", "touch", "grep", "wc", "find", "dd"]


def _libraries(binary):
    out = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = line.split()
        for p in parts:
            if p.startswith("/"):
                yield p


def _copy(path, root):
    real = os.path.realpath(path)
    dest = os.path.join(root, real.lstrip("/"))
    if not os.path.exists(dest):
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copy2(real, dest)
    link = os.path.join(root, path.lstrip("/"))
    if not os.path.lexists(link):
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(real, link)


def make_minichroot(root):
    """Fill the directory ROOT with a minimal merged-/usr system."""
    os.makedirs(os.path.join(root, "usr/bin"), exist_ok=True)
    for d in ["usr/lib", "usr/lib64"]:
        os.makedirs(os.path.join(root, d), exist_ok=True)
    for link, to in [("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64"),
                     ("sbin", "usr/bin")]:
        os.symlink(to, os.path.join(root, link))
    for d in ["proc", "sys", "dev", "etc", "root"]:
        os.makedirs(os.path.join(root, d), exist_ok=True)
    os.makedirs(os.path.join(root, "tmp"), exist_ok=True)
    os.chmod(os.path.join(root, "tmp"), 0o1777)
    for name in ["passwd", "group"]:
        shutil.copy2(f"/etc/{name}", os.path.join(root, "etc", name))
    for cmd in COMMANDS:
        binary = shutil.which(cmd)
        if binary is None:
            continue
        real = os.path.realpath(binary)
        shutil.copy2(real, os.path.join(root, "usr/bin", cmd))
        for lib in _libraries(real):
            _copy(lib, root)
    return root
