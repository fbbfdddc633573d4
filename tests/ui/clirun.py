"""Running the consfig command as a user would: a real process."""

import fcntl
import os
import select
import subprocess
import sys
import termios
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def consfig(*args, env_dir=None, stdin=None, cwd=None, timeout=120):
    """Run `python -m consfig ARGS…` and return the CompletedProcess."""
    env = dict(os.environ)
    # Let Hy cache bytecode between these many short-lived processes.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if env_dir is not None:
        env["CONSFIG_DEMO_DIR"] = str(env_dir)
    return subprocess.run([sys.executable, "-m", "consfig", *map(str, args)],
                          capture_output=True, text=True, env=env, input=stdin,
                          cwd=cwd or REPO, timeout=timeout)


class Terminal:
    """`python -m consfig ARGS…` with a pty of its own as its controlling
    terminal, where getpass asks: `read_until` what it shows, `write` what
    a person types.  Used as a context manager, which ends the process."""

    def __init__(self, *args, cwd=None):
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        self.fd, secondary = os.openpty()
        self.seen = bytearray()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "consfig", *map(str, args)],
            stdin=secondary, stdout=secondary, stderr=secondary, cwd=cwd or REPO, env=env,
            start_new_session=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
        os.close(secondary)

    def read_until(self, predicate, timeout):
        """Read what the terminal shows into `seen` until PREDICATE(seen) or
        the end of its output; fail after TIMEOUT seconds."""
        deadline = time.monotonic() + timeout
        while not predicate(self.seen):
            left = deadline - time.monotonic()
            assert left > 0, f"waited {timeout} s on the terminal, which shows: {self.text()!r}"
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:
                    return self.seen
                if not chunk:
                    return self.seen
                self.seen += chunk
        return self.seen

    def read_to_end(self, timeout):
        return self.read_until(lambda seen: False, timeout)

    def write(self, data):
        os.write(self.fd, data)

    def text(self):
        return bytes(self.seen).decode(errors="replace")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        os.close(self.fd)
