"""How the :ssh hop resolves where and how to connect, from its arguments
and a real ssh_config file, before anything connects: unit tests of
consfig/connections/ssh.hy's resolution (the lab tests connect for real)."""

import hy  # noqa: F401
import pytest

import consfig.connections.ssh as ssh
from consfig.errors import ChainError

m = hy.mangle


@pytest.fixture
def resolve(tmp_path):
    """resolve(config text, alias, **hop arguments) -> the fabric Connection,
    prepared as the hop prepares it, and its known_hosts files."""
    getattr(ssh, m("_import-ssh-libraries"))()

    def run(config, alias, user=None, port=None, timeout=None, identity=None, strict=None):
        path = tmp_path / "ssh_config"
        path.write_text(config)
        c = getattr(ssh, m("_fabric-connection"))(alias, user, port, str(path), timeout,
                                                  identity, None)
        known = getattr(ssh, m("_prepare"))(c, strict, timeout)
        return c, known

    return run


def test_an_alias_takes_hostname_port_and_user_from_ssh_config(resolve):
    c, _ = resolve("Host web\n  HostName 192.0.2.7\n  Port 2222\n  User deploy\n", "web")
    assert (c.host, c.port, c.user) == ("192.0.2.7", 2222, "deploy")


def test_the_hops_user_and_port_win_over_ssh_config(resolve):
    c, _ = resolve("Host web\n  Port 2222\n  User deploy\n", "web", user="root", port=22)
    assert (c.port, c.user) == (22, "root")


def test_a_user_given_in_the_alias_and_as_an_argument_is_refused(resolve):
    with pytest.raises(ChainError, match="gives the user, and so does :user; give it once"):
        resolve("", "admin@web", user="root")


def test_connect_timeout_from_ssh_config_bounds_every_wait_of_connecting(resolve):
    c, _ = resolve("Host web\n  ConnectTimeout 7\n", "web")
    assert c.connect_timeout == 7, "ssh_config's ConnectTimeout is honoured"
    assert [c.connect_kwargs[k] for k in ("banner_timeout", "auth_timeout", "channel_timeout")] \
        == [7, 7, 7]


def test_the_hops_timeout_wins_over_connect_timeout(resolve):
    assert resolve("Host web\n  ConnectTimeout 7\n", "web", timeout=50)[0].connect_timeout == 50


def test_without_connect_timeout_the_hops_timeout_then_30_s_bound_connecting(resolve):
    assert resolve("", "web", timeout=12)[0].connect_timeout == 12
    assert resolve("", "other")[0].connect_timeout == ssh.DEFAULT_CONNECT_TIMEOUT == 30


def test_identities_only_keeps_the_agent_and_default_keys_out(resolve):
    c, _ = resolve("Host web\n  IdentitiesOnly yes\n  IdentityFile /k/id\n", "web")
    assert c.connect_kwargs["allow_agent"] is False and c.connect_kwargs["look_for_keys"] is False


def test_the_hops_identity_replaces_ssh_configs_identity_file(resolve):
    c, _ = resolve("Host web\n  IdentityFile /k/from-config\n", "web", identity=["/k/mine"])
    assert c.connect_kwargs["key_filename"] == ["/k/mine"]


def test_known_hosts_files_come_from_ssh_config_the_first_taking_new_keys(resolve, tmp_path):
    c, known = resolve(f"Host web\n  UserKnownHostsFile {tmp_path}/kh1 {tmp_path}/kh2\n", "web")
    assert known == [f"{tmp_path}/kh1", f"{tmp_path}/kh2"]


@pytest.mark.parametrize("hop, config, strictness", [
    (None, "", "yes"),
    (None, "StrictHostKeyChecking accept-new", "accept-new"),
    ("no", "StrictHostKeyChecking yes", "no"),
    ("off", "", "no"),
    (False, "", "no"),
    ("ask", "", "yes"),
])
def test_host_key_strictness_is_the_hops_else_ssh_configs_and_ask_is_yes(hop, config, strictness):
    ssh_config = dict([config.lower().split()]) if config else {}
    assert getattr(ssh, m("_strictness"))(hop, ssh_config) == strictness
