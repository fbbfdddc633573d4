"""The lab's servers as connection tests reach them: an `:ssh` hop to one,
and a second sshd for tests that kill or freeze their server."""

import shutil

from hy.models import Keyword as K


def ssh_hop(config, host="lab", **kw):
    """An :ssh hop to HOST as the ssh_config CONFIG names it; KW are more of
    the hop's arguments (`timeout=1`)."""
    hop = [K("ssh"), K("host"), host, K("config"), config]
    for k, v in kw.items():
        hop += [K(k.replace("_", "-")), v]
    return hop


def second_server(sshlab, tmp_path):
    """Start an sshd of its own; return it and an ssh_config whose `lab`
    host is it, with its key known."""
    server = sshlab.start_sshd()
    config = sshlab.write_config(str(tmp_path / "config"), server.port,
                                 known_hosts=str(tmp_path / "known_hosts"))
    shutil.copy(sshlab.known_hosts, tmp_path / "known_hosts")
    with open(tmp_path / "known_hosts", "a") as f:
        key = open(sshlab.host_key + ".pub").read().split()
        f.write(f"[127.0.0.1]:{server.port} {key[0]} {key[1]}\n")
    return server, config
