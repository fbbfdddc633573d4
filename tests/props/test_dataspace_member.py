"""`dataspace.etcd-member` as a site applies it (docs/dataspace.md), in the
shared booted container (systemd as PID 1, the host's network): Debian's
etcd-server installed, /etc/default/etcd written, the service restarted on
it and running; the member then serves the site's clients, and the host
checks clean."""

import os
import sys

import pytest

import hy  # noqa: F401
from consfig.apply.combinators import eseqprops
from consfig.props import dataspace

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from etcdlab import etcdctl, free_ports, healthy  # noqa: E402
from harness import unavailable, wait_until  # noqa: E402
from proptest import checks_clean, deploy_propspec, failure_text, this_os  # noqa: E402

pytestmark = [pytest.mark.chroot, pytest.mark.slow]


def test_an_etcd_member_is_installed_configured_running_and_checks_clean(booted_container):
    import shutil
    if not shutil.which("etcdctl"):
        unavailable("etcdctl is not installed (apt-get install etcd-client)")
    client_port, peer_port = free_ports(2)
    client, peer = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
    # A cluster of one: the property is the same for three.
    propspec = eseqprops(this_os(), dataspace.etcd_member("m0", client, peer, {"m0": peer}))
    try:
        outcome, events = deploy_propspec(booted_container.chain, propspec, check=False)
        assert outcome.status == "changed", failure_text(events)
        wait_until(lambda: healthy(client), 60, "the member to serve clients")
        assert etcdctl(client, "put", "/consfig-test/k", "v").returncode == 0
        got = etcdctl(client, "get", "--print-value-only", "/consfig-test/k").stdout
        assert got == "v\n", got
        members = etcdctl(client, "member", "list").stdout
        assert "m0" in members and peer in members, members
        checks_clean(booted_container.chain, propspec)
    finally:
        # The shared container goes on: its etcd does not.
        booted_container.inside("systemctl", "disable", "--now", "etcd")
    assert not healthy(client), "the member still serves"
