"""The :ssh hop on Fabric: what it takes from ssh_config through Fabric and
paramiko, and what a controller imports for it."""

import os
import socket
import subprocess
import sys
import time

import pytest

import hy  # noqa: F401
from hy.models import Keyword as K

from consfig.transport.chain import close_chain, establish_chain, parse_chain
from consfig.apply.combinators import eseqprops
from consfig.model.context import establishing_for
from consfig.errors import ChainError, ConnectionFailed
from consfig.model.host import make_host

LAB_CONFIG = """Match exec "test -e {marker}"
    HostName 127.0.0.1
    Port {port}
    User {user}
    IdentityFile {key}
    IdentitiesOnly yes
    UserKnownHostsFile {known}
"""


def whoami_over(config, host):
    chain = parse_chain([[K("ssh"), K("config"), config, K("host"), host]])
    with establishing_for(make_host(host, None, None, eseqprops())):
        conns = establish_chain(chain)
    try:
        return conns[-1].run(["id", "-un"]).stdout.strip()
    finally:
        close_chain(conns)


WHOAMI = """
import sys
sys.path.insert(0, {tests!r})
from test_ssh_config import whoami_over
print(whoami_over({config!r}, {host!r}))
"""


def test_match_exec_in_ssh_config_is_honoured(sshlab, tmp_path):
    # paramiko runs Match exec's command with invoke.  (In a process of its
    # own: invoke reads the standard input, which pytest refuses.)
    marker = tmp_path / "marker"
    marker.write_text("")
    config = tmp_path / "ssh_config"
    config.write_text(LAB_CONFIG.format(marker=marker, port=sshlab.port, user=sshlab.user,
                                        key=sshlab.client_key, known=sshlab.known_hosts))
    code = WHOAMI.format(tests=os.path.dirname(__file__), config=str(config), host="matched.invalid")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == sshlab.user, r.stdout


def test_user_at_host_port_in_host_is_understood(sshlab):
    host = f"{sshlab.user}@127.0.0.1:{sshlab.port}"
    config = sshlab.write_config(os.path.join(sshlab.root, "ssh_config_plain"), sshlab.port)
    # Only the lab's key and known hosts from the "lab" block are needed:
    # give them for every host.
    with open(config, "a") as f:
        f.write(f"Host *\n    IdentityFile {sshlab.client_key}\n    IdentitiesOnly yes\n"
                f"    UserKnownHostsFile {sshlab.known_hosts}\n")
    assert whoami_over(config, host) == sshlab.user


def test_proxycommand_in_ssh_config_carries_the_connection(sshlab, tmp_path):
    # The command relays its standard input and output to the lab's port
    # (bash's /dev/tcp); it leaves a mark, so the test knows it carried it.
    mark = tmp_path / "relayed"
    config = sshlab.write_config(str(tmp_path / "config"), sshlab.port)
    with open(config) as f:
        text = f.read().replace(
            "    ConnectTimeout 5\n",
            "    ConnectTimeout 5\n"
            f"    ProxyCommand bash -c 'touch {mark}; exec 3<>/dev/tcp/%h/%p; cat <&3 & exec cat >&3'\n")
    with open(config, "w") as f:
        f.write(text)
    assert whoami_over(config, "lab") == sshlab.user
    assert mark.exists(), "the connection went through the ProxyCommand"


def test_a_proxyjump_hosts_unknown_key_is_refused_naming_the_jump(sshlab, tmp_path):
    # Fabric would open the jump with its AutoAddPolicy; the hop opens it
    # itself, with the known_hosts check every :ssh connection has.
    known = tmp_path / "known_hosts"
    known.write_text("")
    config = sshlab.write_config(str(tmp_path / "config"), sshlab.port, known_hosts=str(known))
    with pytest.raises(ConnectionFailed,
                       match=r"ssh lab-jump: through lab: the host key of \[127\.0\.0\.1\]:\d+ is not known"):
        whoami_over(config, "lab-jump")
    assert known.read_text() == ""


def test_a_user_given_in_host_and_as_user_is_refused_before_connecting(tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text("")
    chain = parse_chain([[K("ssh"), K("config"), str(config), K("host"), "deploy@db1.invalid",
                          K("user"), "root"]])
    with pytest.raises(ChainError, match=r'hop :ssh: :host "deploy@db1.invalid" gives the user, '
                                         r"and so does :user; give it once"):
        with establishing_for(make_host("db1.invalid", None, None, eseqprops())):
            establish_chain(chain)


def test_connect_timeout_in_ssh_config_bounds_a_connection_to_a_silent_port(sshlab, tmp_path):
    # A listening socket whose accept queue is full drops every further
    # SYN: the port is blackholed, and only a timeout ends the connect.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        filler = socket.create_connection(("127.0.0.1", port), timeout=5)
        try:
            config = sshlab.write_config(str(tmp_path / "config"), port)
            with open(config) as f:
                text = f.read().replace("ConnectTimeout 5", "ConnectTimeout 2")
            with open(config, "w") as f:
                f.write(text)
            started = time.monotonic()
            with pytest.raises(ConnectionFailed, match=rf"timed out after 2 s connecting to 127\.0\.0\.1:{port}"):
                whoami_over(config, "lab")
            took = time.monotonic() - started
        finally:
            filler.close()
    assert 1.5 < took < 6, f"gave up after {took:.1f} s, not ConnectTimeout's 2 s"


CHILD = """
import sys, hy
from hy.models import Keyword as K
from consfig.transport.chain import parse_chain
parse_chain([[K("ssh"), K("host"), "db1.example.org"], K("sudo"), K("python")])
import consfig.connections.ssh as ssh
print(sorted(m for m in ("paramiko", "fabric", "invoke") if m in sys.modules))
"""


def test_parsing_an_ssh_chain_imports_no_ssh_library():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split("\n")[0]
    assert out == "[]", out
