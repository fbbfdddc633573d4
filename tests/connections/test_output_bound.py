"""A command's output over a POSIX chain is kept in bounded memory: whole up
to `OUTPUT-LIMIT`, past that its head and tail with the count of bytes left
out; `read-file` alone gets the whole, however large.  Over the sshd lab."""

import json
import subprocess
import sys

from hy.models import Keyword as K

from consfig.transport.chain import close_chain, establish_chain, parse_chain
from consfig.model.context import establishing_for
from consfig.transport.frames import OUTPUT_LIMIT, OutputBuffer
from consfig.apply.combinators import eseqprops
from consfig.transport.hop import Script
from consfig.model.host import Host

CONTROLLER = """
import json, sys
from hy.models import Keyword as K
import hy, consfig.deployer.deployment
from consfig.model.host import Host
from consfig.apply.combinators import seqprops
from consfig.model.property import find_property
deploy = getattr(consfig.deployer.deployment, hy.mangle("deploy*"))
script = find_property("consfig.props.cmd.script")
ends = []
chain = [[K("ssh"), K("host"), "lab", K("config"), sys.argv[1]], K("sudo")]
outcome = deploy(chain, Host("lab.example", seqprops(script(sys.argv[2]))),
                 sink=lambda e: ends.append(e) if e["event"] == "end" else None)
# VmHWM, not getrusage: ru_maxrss survives exec, and would count the peak of
# the process that started this one.
peak = next(int(line.split()[1]) for line in open("/proc/self/status")
            if line.startswith("VmHWM:"))
print(json.dumps({"status": outcome.status, "message": ends[-1].get("message", ""),
                  "rss": peak * 1024}))
"""


def test_a_command_printing_100_mb_over_ssh_sudo_keeps_the_controllers_memory_small(sshlab):
    failing = "head -c 100000000 /dev/zero | tr '\\0' x; echo; echo the-end; exit 1"
    result = subprocess.run([sys.executable, "-c", CONTROLLER, sshlab.config, failing],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.splitlines()[-1])
    print(f"controller peak: {report['rss'] / 2**20:.0f} MiB")
    assert report["status"] == "failed", report["message"][:500]
    assert "bytes left out" in report["message"], report["message"][:500]
    assert "the-end" in report["message"], report["message"][-500:]
    assert len(report["message"]) < 100_000, len(report["message"])
    assert report["rss"] < 200 * 2**20, f"the controller reached {report['rss'] / 2**20:.0f} MiB"


def established(sshlab):
    chain = parse_chain([[K("ssh"), K("host"), "lab", K("config"), sshlab.config], K("sudo")])
    with establishing_for(Host("lab.example", eseqprops())):
        return establish_chain(chain)


def test_output_past_the_limit_keeps_head_and_tail_and_read_file_keeps_all(sshlab, tmp_path):
    size = OUTPUT_LIMIT + 3 * 2**20
    big = tmp_path / "big"
    big.write_bytes(b"h" + b"m" * (size - 2) + b"t")
    conns = established(sshlab)
    try:
        conn = conns[-1]
        assert conn.read_file(str(big)) == big.read_bytes(), "read-file lost part of the file"
        out = conn.run(Script('cat -- "$1"', str(big))).stdout
        left_out = size - OUTPUT_LIMIT
        assert f"[… {left_out} bytes left out …]" in out, out[OUTPUT_LIMIT // 2 - 10:][:100]
        assert out.startswith("hm") and out.endswith("mt"), (out[:5], out[-5:])
        assert len(out) < OUTPUT_LIMIT + 100, len(out)
        small = conn.run(Script('head -c "$1" -- "$2"', str(OUTPUT_LIMIT), str(big))).stdout
        assert len(small) == OUTPUT_LIMIT, "output at the limit was not kept whole"
    finally:
        close_chain(conns)


def test_output_buffer_keeps_the_whole_up_to_its_limit_then_head_and_tail():
    buffer = OutputBuffer(10)
    for chunk in [b"abc", b"defg", b"hij"]:
        buffer.add(chunk)
    assert buffer.getvalue() == b"abcdefghij"
    for chunk in [b"klmnopqrstuvwxyz", b"1", b"2"]:
        buffer.add(chunk)
    assert buffer.getvalue() == "abcde\n[… 18 bytes left out …]\nxyz12".encode()
    whole = OutputBuffer(None)
    for _ in range(5):
        whole.add(b"abc")
    assert whole.getvalue() == b"abc" * 5
