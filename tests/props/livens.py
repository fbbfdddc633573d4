"""Deployments over :local to this machine's running kernel, isolated in
namespaces of their own: for the properties that act on the running kernel
(sysctl, swap), which a chroot leaves alone.

`in_namespaces(steps, tmpfs=[...], overlay=[...])` runs this file under
`unshare --net --mount`, with an empty tmpfs mounted on each directory of
TMPFS and a writable overlay (over a tmpfs) on each of OVERLAY, so that what
the deployment writes to /etc stays in the namespace, and net.* parameters
are the namespace's own.  STEPS is a list of

    ["apply", PROPAPP] ["unapply", PROPAPP] ["check", PROPAPP] ["sh", SCRIPT]

and the result one dict per step: {"status", "exit_code", "notes",
"failures"} for a deployment, {"stdout", "returncode"} for a script.
"""

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def in_namespaces(steps, *, tmpfs=(), overlay=(), timeout=300):
    import hy
    import consfig.model.propspec
    to_data = getattr(consfig.model.propspec, hy.mangle("propspec->data"))
    encoded = [[kind, arg if kind == "sh" else to_data(arg)] for kind, arg in steps]
    # Mounted on inside the namespace only: outside, it stays empty.
    scratch = tempfile.mkdtemp(prefix="livens-")
    try:
        setup = [f'mount -t tmpfs tmpfs "{d}"' for d in tmpfs]
        if overlay:
            setup.append(f'mount -t tmpfs tmpfs "{scratch}"')
        for i, d in enumerate(overlay):
            setup.append(f'mkdir "{scratch}/u{i}" "{scratch}/w{i}" && '
                         f'mount -t overlay overlay -o "lowerdir={d},upperdir={scratch}/u{i},'
                         f'workdir={scratch}/w{i}" "{d}"')
        script = " && ".join(setup + ['exec "$@"'])
        proc = subprocess.run(["unshare", "--net", "--mount", "sh", "-c", script, "sh",
                               sys.executable, os.path.abspath(__file__), json.dumps(encoded)],
                              capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "PYTHONPATH": HERE + os.pathsep
                                   + os.environ.get("PYTHONPATH", "")})
    finally:
        os.rmdir(scratch)
    assert proc.returncode == 0, f"in namespaces: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def _main(steps):
    import hy
    import consfig.model.propspec
    from proptest import LOCAL, deploy_propspec, failure_text
    from_data = getattr(consfig.model.propspec, hy.mangle("data->propspec"))
    for kind, arg in steps:
        if kind == "sh":
            p = subprocess.run(["sh", "-c", arg], capture_output=True, text=True, timeout=120)
            result = {"stdout": p.stdout, "returncode": p.returncode}
        else:
            outcome, events = deploy_propspec(LOCAL, from_data(arg), check=False,
                                              unapply=kind == "unapply",
                                              check_mode=kind == "check")
            result = {"status": outcome.status, "exit_code": outcome.exit_code(True),
                      "notes": [e["text"] for e in events if e.get("event") == "output"],
                      "failures": failure_text(events)}
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    _main(json.loads(sys.argv[1]))
