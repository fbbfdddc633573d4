"""What the :python hop's tests share: the properties they deploy and a way to
compare event streams."""

import os
import sys

import hy

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import remote_testprops as rp  # noqa: E402

import consfig.deployer.deployment  # noqa: E402
from consfig.model.host import Host  # noqa: E402
from consfig.model.property import find_property  # noqa: E402

deploy = getattr(consfig.deployer.deployment, hy.mangle("deploy*"))
seqprops = find_property("consfig.combinators.seqprops")
has_content = find_property("consfig.props.file.has-content")
directory_exists = find_property("consfig.props.file.directory-exists")
single = find_property("consfig.props.cmd.single")
script = find_property("consfig.props.cmd.script")


def mixed_host(d, hostname="target.example"):
    """A host whose propspec mixes :posix and :python properties, under D."""
    return Host(hostname, seqprops(
        directory_exists(f"{d}/etc"),
        has_content(f"{d}/etc/motd", "hello\n"),
        rp.python_wrote(f"{d}/etc/py", "from Python\n"),
        script('echo ran > "$1"', f"{d}/etc/ran", creates=f"{d}/etc/ran")))


def shape(events, d):
    """EVENTS with the directory D written as D, to compare runs in different
    places, without the controller's progress notes (sending code once)."""
    return [{k: (v.replace(str(d), "D") if isinstance(v, str) else v) for k, v in e.items()}
            for e in events if e.get("stream") != "progress"]

