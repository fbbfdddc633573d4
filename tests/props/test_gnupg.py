"""gnupg: public keys in a user's keyring, from the consfig or from data,
in the test chroot.  The keys are made here with this machine's gpg, in
keyrings of the test's own."""

import subprocess

import pytest

import hy  # noqa: F401
from consfig.data.items import reset_data_sources
from consfig.errors import PropspecError
from consfig.props import apt, gnupg, user

from proptest import (apply_twice, data_item, deploy_propspec, failure_text, in_chroot, said,
                      this_os, unapply)

pytestmark = pytest.mark.chroot


class Keys:
    """A keyring of this test's own, to make keys in and export them."""

    def __init__(self, home):
        self.home = home
        home.mkdir(mode=0o700)

    def gpg(self, *args, input=None):
        return subprocess.run(["gpg", "--homedir", str(self.home), "--batch", "--pinentry-mode",
                               "loopback", "--passphrase", "", *args],
                              input=input, capture_output=True, check=True, timeout=120).stdout

    def make(self, uid):
        self.gpg("--quick-gen-key", uid, "ed25519", "sign", "1y")
        listing = self.gpg("--with-colons", "--list-keys", uid).decode()
        return [l.split(":")[9] for l in listing.splitlines() if l.startswith("fpr")][0]

    def public(self, *fprs):
        return self.gpg("--armor", "--export", *fprs).decode()

    def secret(self, fpr):
        return self.gpg("--armor", "--export-secret-keys", fpr).decode()

    def stop(self):
        subprocess.run(["gpgconf", "--homedir", str(self.home), "--kill", "all"],
                       capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    k = Keys(tmp_path_factory.mktemp("gnupg") / "home")
    yield k
    k.stop()


@pytest.fixture(scope="module")
def root(debian_chroot, chroot_chain):
    deploy_propspec(chroot_chain, [this_os(), apt.installed_minimally("gnupg"),
                                   user.has_account("keyholder")])
    return debian_chroot


@pytest.fixture(autouse=True)
def no_sources():
    reset_data_sources()
    yield
    reset_data_sources()


def in_keyring(root, fpr, who="keyholder"):
    return in_chroot(root, f"runuser -u {who} -- gpg --batch --no-autostart --with-colons "
                     f"--list-keys {fpr}", check=False).returncode == 0


def test_a_key_given_is_imported_into_the_users_keyring(chroot_chain, root, keys):
    fpr = keys.make("Alice <alice@example.org>")
    apply_twice(chroot_chain, [this_os(), gnupg.has_public_key("keyholder", fpr,
                                                               keys.public(fpr))])
    assert in_keyring(root, fpr)
    owners = in_chroot(root, "find /home/keyholder/.gnupg -not -user keyholder").stdout
    assert owners == "", f"not keyholder's: {owners}"


def test_a_key_from_data_with_a_spaced_fingerprint(tmp_path, chroot_chain, root, keys):
    fpr = keys.make("Bob <bob@example.org>")
    data_item(tmp_path, "--pgp-key", fpr, keys.public(fpr))
    spaced = " ".join(fpr[i:i + 4] for i in range(0, 40, 4)).lower()
    apply_twice(chroot_chain, [this_os(), gnupg.has_public_key("keyholder", spaced)])
    assert in_keyring(root, fpr)


def test_a_key_with_a_new_user_id_is_imported_again(chroot_chain, root, keys):
    fpr = keys.make("Carol <carol@example.org>")
    deploy_propspec(chroot_chain, [this_os(), gnupg.has_public_key("keyholder", fpr,
                                                                   keys.public(fpr))])
    keys.gpg("--quick-add-uid", fpr, "Carol <carol@work.example>")
    apply_twice(chroot_chain, [this_os(), gnupg.has_public_key("keyholder", fpr,
                                                               keys.public(fpr))])
    listing = in_chroot(root, f"runuser -u keyholder -- gpg --batch --list-keys {fpr}").stdout
    assert "carol@work.example" in listing, listing


def test_material_of_another_key_is_refused(chroot_chain, root, keys):
    mine, other = keys.make("Dan <dan@example.org>"), keys.make("Eve <eve@example.org>")
    outcome, events = deploy_propspec(
        chroot_chain, [this_os(), gnupg.has_public_key("keyholder", mine, keys.public(other))],
        check=False)
    assert outcome.status == "failed"
    assert f"the key given is not the key {mine} alone: it holds {other}" in failure_text(events)
    assert not in_keyring(root, other) and not in_keyring(root, mine)


def test_material_with_two_keys_is_refused(chroot_chain, root, keys):
    a, b = keys.make("Fay <fay@example.org>"), keys.make("Gus <gus@example.org>")
    outcome, events = deploy_propspec(
        chroot_chain, [this_os(), gnupg.has_public_key("keyholder", a, keys.public(a, b))],
        check=False)
    assert outcome.status == "failed"
    assert "not the key" in failure_text(events) and b in failure_text(events)
    assert not in_keyring(root, a) and not in_keyring(root, b)


def test_a_secret_key_is_refused(chroot_chain, root, keys):
    fpr = keys.make("Hal <hal@example.org>")
    outcome, events = deploy_propspec(
        chroot_chain, [this_os(), gnupg.has_public_key("keyholder", fpr, keys.secret(fpr))],
        check=False)
    assert outcome.status == "failed"
    assert "is a secret key" in failure_text(events)
    assert "PRIVATE KEY" not in str(events)
    assert not in_keyring(root, fpr)


def test_garbage_is_refused(chroot_chain, root):
    outcome, events = deploy_propspec(
        chroot_chain, [this_os(), gnupg.has_public_key("keyholder", "A" * 40, "not a key\n")],
        check=False)
    assert outcome.status == "failed"
    assert "is not an OpenPGP key that gpg can read" in failure_text(events)


def test_check_mode_makes_no_keyring(chroot_chain, root, keys):
    fpr = keys.make("Ivy <ivy@example.org>")
    deploy_propspec(chroot_chain, [this_os(), user.has_account("nokeys")])
    outcome, events = deploy_propspec(
        chroot_chain, [this_os(), gnupg.has_public_key("nokeys", fpr, keys.public(fpr))],
        check_mode=True)
    assert outcome.exit_code(True) == 2
    assert f"nokeys's keyring would get {fpr}" in said(events)
    assert not (root / "home/nokeys/.gnupg").exists()


def test_unapplied_key_is_deleted(chroot_chain, root, keys):
    fpr = keys.make("Jo <jo@example.org>")
    p = gnupg.has_public_key("keyholder", fpr, keys.public(fpr))
    deploy_propspec(chroot_chain, [this_os(), p])
    unapply(chroot_chain, p)
    assert not in_keyring(root, fpr)


@pytest.mark.parametrize("call", [
    lambda: gnupg.has_public_key("-rf", "A" * 40, "k"),
    lambda: gnupg.has_public_key("root", "A" * 39, "k"),
    lambda: gnupg.has_public_key("root", "A" * 40 + "; rm -rf /", "k"),
    lambda: gnupg.has_public_key("root", "A" * 40 + "\n", "k"),
    lambda: gnupg.has_public_key("root", "G" * 40, "k"),
    lambda: gnupg.has_public_key("root", "A" * 40, "a\x00b"),
])
def test_hostile_values_are_refused_when_written(call):
    with pytest.raises(PropspecError):
        call()
