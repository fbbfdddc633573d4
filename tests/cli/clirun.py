"""Running the consfig command as a user would: a real process."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def consfig(*args, env_dir=None, stdin=None, cwd=None):
    """Run `python -m consfig ARGS…` and return the CompletedProcess."""
    env = dict(os.environ)
    # Let Hy cache bytecode between these many short-lived processes.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if env_dir is not None:
        env["CONSFIG_DEMO_DIR"] = str(env_dir)
    return subprocess.run([sys.executable, "-m", "consfig", *map(str, args)],
                          capture_output=True, text=True, env=env, input=stdin,
                          cwd=cwd or REPO, timeout=120)
