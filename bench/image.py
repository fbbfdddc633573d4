"""Benchmark: W1 N=100 (one directory plus 100 files of fixed content, see
bench/w1.py) applied by the host's image, against the same host deployed
over [:local :python].

    python3 bench/image.py [--runs 5] [--python /usr/bin/python3]

Measures:

  size         the image's bytes, and how long building it takes
  image first  `python3 IMAGE`, its cache empty, the files absent (unpacks,
               compiles, applies)
  image cold   the same, the cache warm, the files absent
  image warm   the same, nothing to change
  hop first    `consfig deploy --via '[:local :python]'` as a whole process,
               the target's bundle cache and the controller's compiled
               cache empty, the files absent
  hop cold     the same, both caches warm, the files absent
  hop warm     the same, nothing to change
  hop in-process warm   one deploy* call over [:local :python] in this
               process (what bench/w1.py measures), nothing to change

Every figure but the first ones is the median of --runs; times are wall
clock seconds of whole processes.  The image runs with --as-host under
--python (a Python with nothing of consfig's installed, if there is one).
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TARGET = "/var/tmp/consfig-bench-image"
HOSTNAME = "w1-image.bench.test"

SITE = """
(require consfig *)
(import consfig *)
(use-props consfig.props [file])
(defhost {hostname} {{:deploy :local}}
  (file.directory-exists "{target}")
{files})
"""


def write_site(path, n):
    files = "\n".join(f'  (file.has-content "{TARGET}/f{i}" "fixed content\\n")' for i in range(n))
    with open(path, "w") as f:
        f.write(SITE.format(hostname=HOSTNAME, target=TARGET, files=files))


def wall(argv, env, expect=0):
    started = time.perf_counter()
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    elapsed = time.perf_counter() - started
    if r.returncode != expect:
        raise SystemExit(f"{argv[:3]}… exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    return elapsed


def fresh_target():
    shutil.rmtree(TARGET, ignore_errors=True)


def median(f, runs, before=None):
    times = []
    for _ in range(runs):
        if before:
            before()
        times.append(f())
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--python", default="/usr/bin/python3" if os.path.exists("/usr/bin/python3")
                   else sys.executable)
    args = p.parse_args()
    scratch = tempfile.mkdtemp(prefix="consfig-bench-image-")
    try:
        run(args, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        fresh_target()
        # What the image's runs recorded (as root; as another user, under
        # its state directory).
        for d in ["/var/lib/consfig", os.path.expanduser("~/.local/state/consfig")]:
            try:
                os.unlink(os.path.join(d, "runs", HOSTNAME + ".json"))
            except OSError:
                pass


def run(args, scratch):
    site = os.path.join(scratch, "site.hy")
    write_site(site, 100)
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["XDG_CACHE_HOME"] = os.path.join(scratch, "hop-cache")
    os.makedirs(env["XDG_CACHE_HOME"], 0o700)
    img = os.path.join(scratch, "w1.pyz")
    consfig = [sys.executable, "-m", "consfig"]
    build = wall([*consfig, "image", "--consfig", site, HOSTNAME, "-o", img], env)
    size = os.path.getsize(img)

    image_env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
                 "XDG_CACHE_HOME": os.path.join(scratch, "image-cache")}
    apply_image = [args.python, img, "--as-host"]
    fresh_target()
    image_first = wall(apply_image, image_env)
    image_cold = median(lambda: wall(apply_image, image_env), args.runs, fresh_target)
    image_warm = median(lambda: wall(apply_image, image_env), args.runs)

    hop = [*consfig, "deploy", "--consfig", site, HOSTNAME, "--via", "[:local :python]"]
    fresh_target()
    hop_first = wall(hop, env)
    hop_cold = median(lambda: wall(hop, env), args.runs, fresh_target)
    hop_warm = median(lambda: wall(hop, env), args.runs)

    sys.path.insert(0, os.path.dirname(HERE))
    os.environ["XDG_CACHE_HOME"] = env["XDG_CACHE_HOME"]
    import hy  # noqa: F401
    from hy.models import Keyword as K
    from rich.console import Console
    import consfig.deployer.deployment
    from consfig.deployer.report import Reporter
    from consfig.site.load import load_consfig
    load_consfig(site)
    deploy = getattr(consfig.deployer.deployment, hy.mangle("deploy*"))

    def in_process():
        sink = Reporter(console=Console(file=open(os.devnull, "w"), highlight=False))
        started = time.perf_counter()
        outcome = deploy([K("local"), K("python")], HOSTNAME, sink=sink)
        elapsed = time.perf_counter() - started
        assert outcome.status == "no-change", outcome
        return elapsed
    hop_in_process = median(in_process, args.runs)

    print(f"W1 N=100, {args.runs} runs, image run by {args.python}")
    print(f"  image size            {size / 1024:8.0f} KiB   (built in {build:.2f} s, "
          "a whole `consfig image` process)")
    print(f"  image first           {image_first:8.2f} s")
    print(f"  image cold            {image_cold:8.2f} s")
    print(f"  image warm            {image_warm:8.2f} s")
    print(f"  hop first             {hop_first:8.2f} s")
    print(f"  hop cold              {hop_cold:8.2f} s")
    print(f"  hop warm              {hop_warm:8.2f} s")
    print(f"  hop in-process warm   {hop_in_process:8.2f} s")


if __name__ == "__main__":
    main()
