"""A real `consfig converge HOST --json` process, its events read back from
the file its standard output goes to, as a user (or a service) runs it."""

import json
import os
import signal
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "ui"))

from clirun import REPO  # noqa: E402
from harness import wait_until  # noqa: E402


def lab_chain(lab, *more):
    """The SSH lab as a chain in a consfig's text."""
    return f'[[:ssh :host "lab" :config "{lab.config}"] {" ".join(more)}]'


def write_site(path, hostname, chain, body, uses="file fact"):
    path.write_text(f"""(require consfig *)
(import consfig *)
(use-props consfig.props [{uses}])
(defhost {hostname} {{:deploy {chain}}}
  {body})
""")
    return path


class Converging:
    """`python -m consfig converge ARGS… --json`, started at once; `of(what)`
    the converge events it printed so far; `stop()` interrupts it as Ctrl-C
    does.  Used as a context manager, which ends it (and fails the test if
    it outlives that)."""

    def __init__(self, tmp_path, *args, wait_watching=True, name="agent"):
        self.out = tmp_path / f"{name}.events"
        self.err = tmp_path / f"{name}.stderr"
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        with open(self.out, "w") as o, open(self.err, "w") as e:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "consfig", "converge", *map(str, args), "--json"],
                stdout=o, stderr=e, cwd=REPO, env=env, stdin=subprocess.DEVNULL)
        if wait_watching:
            [self.watching] = wait_until(lambda: self.ended() or self.of("watching"), 300,
                                         "the agent to watch")[:1] or [None]
            assert self.watching, f"the agent ended: {self.stderr()}"

    def ended(self):
        return self.proc.poll() is not None

    def stderr(self):
        return self.err.read_text()

    def events(self):
        out = []
        for line in self.out.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass   # a line being written
        return out

    def of(self, what, desc=None):
        return [e for e in self.events() if e.get("event") == "converge" and e["what"] == what
                and (desc is None or desc in e.get("desc", ""))]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(60)

    def __enter__(self):
        return self

    def __exit__(self, *_):
        try:
            self.stop()
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
