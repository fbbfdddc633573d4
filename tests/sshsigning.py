"""Keys for signing images in tests: OpenSSH key pairs made by ssh-keygen,
keys of consfig's old format, allowed-signers files, and a real ssh-agent.

    signer = new_key(tmp_path, "fleet")          # a consfig.image.publish.Signer
    allowed(tmp_path / "allowed_signers", signer.line)
    with SshAgent(tmp_path) as agent:            # SSH_AUTH_SOCK in agent.env
        agent.add(signer.path)
"""

import base64
import os
import signal
import socket
import subprocess

import hy  # noqa: F401
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from consfig.image import publish, puller
from harness import wait_until

__all__ = ["new_key", "old_key", "allowed", "SshAgent"]


def new_key(directory, name="signing"):
    """A fresh OpenSSH Ed25519 pair DIRECTORY/NAME(.pub), as its Signer."""
    publish.keygen(str(directory / name))
    return publish.signing_key(str(directory / name))


def old_key(directory, name="old"):
    """A key as consfig's old keygen wrote it: DIRECTORY/NAME (PKCS#8 PEM)
    and DIRECTORY/NAME.pub (`consfig-ed25519 BASE64 NAME`).  Returns the
    path and the public line."""
    key = Ed25519PrivateKey.generate()
    path = directory / name
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    line = f"{puller.LEGACY_KEY_PREFIX} {base64.b64encode(raw).decode()} {name}\n"
    (directory / f"{name}.pub").write_text(line)
    return str(path), line


def allowed(path, *lines, identity=puller.IDENTITY):
    """Write the allowed-signers file PATH trusting the public key LINES."""
    path.write_text(puller.allowed_signers(list(lines), identity))
    return str(path)


class SshAgent:
    """A real ssh-agent on a socket in DIRECTORY, run in the foreground (-D)
    so that it is this process's child, ended by its pid on exit."""

    def __init__(self, directory):
        self.socket = str(directory / "agent.sock")
        self.proc = subprocess.Popen(["ssh-agent", "-D", "-a", self.socket],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            # Not its socket file: ssh-agent binds it before it listens, and
            # an ssh-add that came in between failed ("could not connect").
            wait_until(self._listening, 10, "ssh-agent to listen on its socket")
        except BaseException:
            self.__exit__()
            raise
        self.env = {**os.environ, "SSH_AUTH_SOCK": self.socket}

    def _listening(self):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            try:
                s.connect(self.socket)
            except OSError:
                return False
        return True

    def add(self, key_path):
        subprocess.run(["ssh-add", "-q", str(key_path)], env=self.env, check=True, timeout=30,
                       stdin=subprocess.DEVNULL, capture_output=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=10)
