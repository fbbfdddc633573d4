"""Large output over a :python hop: what the target sends about it is
bounded, the controller's memory stays small, and a large frame still
arriving is word from the target, not silence."""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from remote_helpers import HERE  # noqa: E402

from consfig.transport.local import LocalConnection  # noqa: E402
from consfig.transport.frames import bounded  # noqa: E402
from consfig.python_hop.controller import Session  # noqa: E402

CONTROLLER = """
import json, sys
sys.path.insert(0, {here!r})
from hy.models import Keyword
from remote_helpers import deploy, seqprops
from consfig.model.host import Host
from consfig.model.property import find_property
script = find_property("consfig.props.cmd.script")
ends = []
outcome = deploy([Keyword("local"), Keyword("python")],
                 Host("target.example", seqprops(script(sys.argv[1]))),
                 sink=lambda e: ends.append(e) if e["event"] == "end" else None)
# VmHWM, not getrusage: ru_maxrss survives exec, and would count the peak of
# the process that started this one.
peak = next(int(line.split()[1]) for line in open("/proc/self/status")
            if line.startswith("VmHWM:"))
print(json.dumps({{"status": outcome.status, "message": ends[-1].get("message", ""),
                  "rss": peak * 1024}}))
"""


def test_a_command_printing_100_mb_keeps_the_controllers_memory_small():
    failing = "head -c 100000000 /dev/zero | tr '\\0' x; exit 1"
    result = subprocess.run([sys.executable, "-c", CONTROLLER.format(here=HERE), failing],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["status"] == "failed", report["message"][:500]
    assert "bytes left out" in report["message"], report["message"][:500]
    assert len(report["message"]) < 100_000, len(report["message"])
    assert report["rss"] < 100 * 2**20, f"the controller reached {report['rss'] / 2**20:.0f} MiB"


def test_bounded_keeps_head_and_tail_and_counts_what_it_left_out():
    text = "a" * 1000 + "é" * 1000 + "z" * 1000
    short = bounded(text, 100)
    assert short.startswith("a" * 50) and short.endswith("z" * 50), short
    assert "[… 3900 bytes left out …]" in short, short
    assert bounded("small", 100) == "small"


# A target whose only frame, 8 MiB, comes a chunk at a time over 3 s.
SLOW_TARGET = """
import json, struct, sys, time
body = json.dumps({"op": "events", "events": [{"text": "x" * (8 << 20)}]}).encode()
out = sys.stdout.buffer
out.write(struct.pack(">II", len(body), 0))
for i in range(0, len(body), len(body) // 30):
    out.write(body[i:i + len(body) // 30])
    out.flush()
    time.sleep(0.1)
sys.stdin.read()
"""


def test_a_large_frame_still_arriving_is_word_from_the_target():
    process = LocalConnection().start_process([sys.executable, "-c", SLOW_TARGET])
    session = Session(process)
    try:
        started = time.monotonic()
        message = session.receive(1)
        assert time.monotonic() - started > 2, "the frame came faster than the test means"
        assert message["op"] == "events", message
    finally:
        session.close()
