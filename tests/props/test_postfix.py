"""postfix: the real Postfix installed in the test chroot; main.cf set with
postconf and checked with `postfix check`, /etc/aliases with newaliases,
and a relay's password from data that no event shows."""

import json

import pytest

import hy  # noqa: F401
from consfig.data.items import reset_data_sources
from consfig.errors import PropspecError
from consfig.props import postfix

from proptest import (HOSTNAME, apply_twice, checks_clean, data_item, deploy_propspec, failure_text,
                      in_chroot, said, this_os, unapply)

pytestmark = pytest.mark.chroot

RELAY = "[smtp.example.com]:587"
PASSWORD = "s3cret-relay-pw-$(reboot)"


@pytest.fixture(scope="module")
def root(debian_chroot, chroot_chain):
    deploy_propspec(chroot_chain, [this_os(), postfix.installed()])
    return debian_chroot


@pytest.fixture(autouse=True)
def no_sources():
    reset_data_sources()
    yield
    reset_data_sources()


def postconf(root, name):
    return in_chroot(root, f"postconf -h {name}").stdout.rstrip("\n")


def test_a_satellite_with_aliases_and_a_relay_login_then_nothing_to_do(chroot_chain, root, tmp_path):
    data_item(tmp_path, f"--postfix-relay--{HOSTNAME}", RELAY, PASSWORD + "\n")
    props = [this_os(), postfix.installed(), postfix.satellite(RELAY),
             postfix.has_alias("root", "admin@example.com", "ops@example.com"),
             postfix.sender_relay("@example.org", "[mail.example.org]:25"),
             postfix.relay_password(RELAY, "alice")]
    events = apply_twice(chroot_chain, props)
    checks_clean(chroot_chain, props)
    assert postconf(root, "relayhost") == RELAY
    assert postconf(root, "inet_interfaces") == "loopback-only"
    assert postconf(root, "smtp_sasl_password_maps") == "hash:/etc/postfix/sasl_passwd"
    assert postconf(root, "sender_dependent_relayhost_maps") == "hash:/etc/postfix/sender_relay"
    assert "root: admin@example.com, ops@example.com\n" in (root / "etc/aliases").read_text()
    assert (root / "etc/aliases.db").exists(), "newaliases ran"
    sasl = root / "etc/postfix/sasl_passwd"
    assert sasl.read_text() == f"{RELAY} alice:{PASSWORD}\n"
    assert oct(sasl.stat().st_mode & 0o777) == "0o600"
    assert (root / "etc/postfix/sasl_passwd.db").exists(), "postmap ran"
    assert (root / "etc/postfix/sender_relay").read_text() == "@example.org [mail.example.org]:25\n"
    assert PASSWORD not in json.dumps(events), "the password is in no event"
    assert in_chroot(root, "postfix check").returncode == 0


def test_a_setting_postfix_check_refuses_is_undone_and_fails(chroot_chain, root):
    before = (root / "etc/postfix/main.cf").read_text()
    outcome, events = deploy_propspec(chroot_chain, postfix.has_settings("mail_owner", "nosuchuser"),
                                      check=False)
    assert outcome.status == "failed"
    assert "postfix check refused the change, and main.cf is as it was" in failure_text(events)
    assert "nosuchuser" in failure_text(events), "what postfix check said"
    assert (root / "etc/postfix/main.cf").read_text() == before


def test_check_mode_says_what_would_change_and_changes_nothing(chroot_chain, root, tmp_path):
    before = (root / "etc/postfix/main.cf").read_text()
    data_item(tmp_path, f"--postfix-relay--{HOSTNAME}", "[other]:25", "pw-not-shown\n")
    outcome, events = deploy_propspec(chroot_chain, [
        postfix.has_settings({"message_size_limit": "20480000"}),
        postfix.relay_password("[other]:25", "bob")], check_mode=True)
    assert outcome.exit_code(True) == 2
    assert "message_size_limit = 10240000 → 20480000" in said(events)
    assert "secret: no diff" in said(events)
    assert "pw-not-shown" not in json.dumps(events)
    assert (root / "etc/postfix/main.cf").read_text() == before
    assert "[other]" not in (root / "etc/postfix/sasl_passwd").read_text()


def test_unapplying_removes_settings_aliases_and_lines(chroot_chain, root):
    props = [postfix.has_settings("message_size_limit", "20480000"),
             postfix.has_alias("webmaster", "root"),
             postfix.sender_relay("bob@example.net", "[relay.example.net]")]
    apply_twice(chroot_chain, props)
    unapply(chroot_chain, props)
    assert postconf(root, "message_size_limit") == "10240000", "back to the default"
    assert "webmaster" not in (root / "etc/aliases").read_text()
    assert "bob@example.net" not in (root / "etc/postfix/sender_relay").read_text()


def test_virtual_aliases_transports_and_sender_rewriting_are_tables_then_removed(chroot_chain, root):
    props = [postfix.virtual_alias("@example.org", "root", "bob@example.net"),
             postfix.transport(".example.org", "smtp:[mx.example.org]:25"),
             postfix.sender_canonical("www-data@example.org", "noreply@example.org")]
    apply_twice(chroot_chain, props)
    checks_clean(chroot_chain, props)
    assert (root / "etc/postfix/virtual").read_text() == "@example.org root, bob@example.net\n"
    assert (root / "etc/postfix/transport").read_text() == ".example.org smtp:[mx.example.org]:25\n"
    assert postconf(root, "virtual_alias_maps") == "hash:/etc/postfix/virtual"
    assert postconf(root, "transport_maps") == "hash:/etc/postfix/transport"
    assert postconf(root, "sender_canonical_maps") == "hash:/etc/postfix/sender_canonical"
    looked = in_chroot(root, "postmap -q www-data@example.org hash:/etc/postfix/sender_canonical")
    assert looked.stdout == "noreply@example.org\n", "postmap made the table"
    unapply(chroot_chain, props)
    assert (root / "etc/postfix/virtual").read_text() == ""
    assert in_chroot(root, "postfix check").returncode == 0


@pytest.mark.parametrize("bad", [
    lambda: postfix.has_settings("relayhost"),
    lambda: postfix.has_settings("-e", "x"),
    lambda: postfix.has_settings("relayhost", "a\nmydestination=evil"),
    lambda: postfix.has_settings({"relay host": "x"}),
    lambda: postfix.has_alias("root"),
    lambda: postfix.has_alias("-root", "x"),
    lambda: postfix.has_alias("root", "a, b"),
    lambda: postfix.has_alias("root", "a\nevil: |sh"),
    lambda: postfix.relay_password("[smtp]:587\nx", "alice"),
    lambda: postfix.relay_password(RELAY, "al ice"),
    lambda: postfix.sender_relay("nobody", RELAY),
    lambda: postfix.satellite("$(reboot)"),
    lambda: postfix.virtual_alias("@example.org"),
    lambda: postfix.virtual_alias("@example.org", "a,b"),
    lambda: postfix.transport("example.org", "smtp:[x] 25"),
    lambda: postfix.transport("-example.org", "smtp:x"),
    lambda: postfix.sender_canonical("a@b", "c@d\nx"),
])
def test_hostile_arguments_are_refused_where_written(bad):
    with pytest.raises(PropspecError):
        bad()
