"""Keys and signatures of published images: `consfig keygen`'s OpenSSH
keys (and keys of consfig's old format converted to them), signing with
`ssh-keygen -Y sign` from a key file or a real ssh-agent, checking with
`ssh-keygen -Y verify` against an allowed-signers file, and the values that
must never reach ssh-keygen's arguments or that file."""

import base64
import hashlib
import os
import re
import subprocess

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

import hy  # noqa: F401
from consfig.image import publish, puller
from consfig.errors import ConsfigError
from sshsigning import SshAgent, allowed, new_key, old_key

HOST = "web1.example.org"


@pytest.fixture
def signer(tmp_path):
    return new_key(tmp_path, "signing")


@pytest.fixture
def trusted(tmp_path, signer):
    """The allowed-signers file trusting `signer`."""
    return allowed(tmp_path / "allowed_signers", signer.line)


def test_keygen_makes_an_openssh_pair_only_its_owner_reads(tmp_path):
    line = publish.keygen(str(tmp_path / "k"), "fleet-2026")
    assert (tmp_path / "k").stat().st_mode & 0o777 == 0o600, "the private key is 0600"
    assert (tmp_path / "k.pub").read_text() == line
    assert line.startswith("ssh-ed25519 AAAA") and line.endswith(" fleet-2026\n"), line
    r = subprocess.run(["ssh-keygen", "-y", "-f", tmp_path / "k"], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=30)
    assert r.returncode == 0 and r.stdout.split()[:2] == line.split()[:2], r.stderr


def test_keygen_never_overwrites_a_key(tmp_path):
    publish.keygen(str(tmp_path / "k"))
    before = (tmp_path / "k").read_bytes()
    with pytest.raises(ConsfigError, match="exists: not overwriting"):
        publish.keygen(str(tmp_path / "k"))
    assert (tmp_path / "k").read_bytes() == before


def test_keygen_refuses_a_comment_of_more_than_one_line(tmp_path):
    with pytest.raises(ConsfigError, match="one line of printable text"):
        publish.keygen(str(tmp_path / "k"), "fleet\nconsfig-publisher ssh-ed25519 AAAA")
    assert not list(tmp_path.iterdir()), "a key was made all the same"


def test_keygen_from_an_old_key_makes_the_same_key_for_ssh_keygen(tmp_path):
    old, old_line = old_key(tmp_path)
    line = publish.keygen_from(old, str(tmp_path / "new"))
    assert (tmp_path / "new").stat().st_mode & 0o777 == 0o600
    assert puller.public_key(line)[:2] == puller.public_key(old_line)[:2], \
        "the old public line and the new one are not the same key"
    signer = publish.signing_key(str(tmp_path / "new"))
    sig = publish.sign_image(signer, HOST, b"image")
    fields = puller.check_statement(sig, allowed(tmp_path / "allowed", old_line), HOST)
    assert fields["key"] == signer.fingerprint


def test_an_old_format_key_given_to_sign_says_how_to_move(tmp_path):
    old, _ = old_key(tmp_path)
    with pytest.raises(ConsfigError, match="consfig keygen --from OLDKEY -o NEWKEY.*--legacy-key"):
        publish.signing_key(old)
    with pytest.raises(ConsfigError, match="public key of consfig's old format"):
        publish.signing_key(old + ".pub")


def test_a_file_that_is_not_a_key_is_named(tmp_path):
    (tmp_path / "notakey").write_text("hello\n")
    with pytest.raises(ConsfigError, match="notakey is neither an OpenSSH private key nor a public key"):
        publish.signing_key(str(tmp_path / "notakey"))
    with pytest.raises(ConsfigError, match="cannot read the signing key .*missing"):
        publish.signing_key(str(tmp_path / "missing"))


def test_a_signature_checks_with_its_key_and_not_another(tmp_path, signer, trusted):
    sig = publish.sign_image(signer, HOST, b"image bytes")
    fields = puller.check_statement(sig, trusted, HOST)
    assert fields["sha256"] == hashlib.sha256(b"image bytes").hexdigest()
    assert fields["key"] == signer.fingerprint
    other = new_key(tmp_path, "other")
    with pytest.raises(puller.Refused, match=re.escape(
            f"not by a trusted key (it names key {signer.fingerprint}; this host trusts "
            f"{other.fingerprint} as consfig-publisher)")):
        puller.check_statement(sig, allowed(tmp_path / "other_allowed", other.line), HOST)
    with pytest.raises(puller.Refused, match="is for web1.example.org, not for db1"):
        puller.check_statement(sig, trusted, "db1.example.org")


def test_an_altered_statement_is_not_by_the_key(signer, trusted):
    sig = publish.sign_image(signer, HOST, b"image bytes")
    for forged in [sig.replace(b"size 11", b"size 12"),
                   sig.replace(b"host web1.", b"host web2."),
                   sig.replace(b"\nexpires 2", b"\nexpires 3")]:
        assert forged != sig
        with pytest.raises(puller.Refused, match="not by a trusted key"):
            puller.check_statement(forged, trusted, HOST)


def test_a_signature_made_in_another_namespace_is_refused(tmp_path, signer, trusted):
    # The admin's key also signs git commits: such a signature of the very
    # same bytes must not pass for an image's.
    statement = publish.sign_image(signer, HOST, b"image").partition(b"-----BEGIN")[0]
    (tmp_path / "statement").write_bytes(statement)
    subprocess.run(["ssh-keygen", "-Y", "sign", "-n", "git", "-f", signer.path,
                    tmp_path / "statement"], check=True, capture_output=True, timeout=30)
    sig = puller.signature_file(statement, (tmp_path / "statement.sig").read_bytes())
    with pytest.raises(puller.Refused, match="not by a trusted key"):
        puller.check_statement(sig, trusted, HOST)


def test_a_key_listed_for_another_identity_is_refused(tmp_path, signer):
    sig = publish.sign_image(signer, HOST, b"image")
    signers = allowed(tmp_path / "allowed", signer.line, identity="someone-else")
    with pytest.raises(puller.Refused, match="not by a trusted key"):
        puller.check_statement(sig, signers, HOST)
    assert puller.check_statement(sig, signers, HOST, identity="someone-else")["host"] == HOST


def test_allowed_signers_lists_each_key_for_the_identity_in_the_namespace(tmp_path, signer):
    other = new_key(tmp_path, "other")
    text = puller.allowed_signers([signer.line, other.line], "fleet@example.org")
    lines = text.splitlines()
    assert len(lines) == 2 and text.endswith("\n"), text
    for line, key in zip(lines, [signer, other]):
        kind, data, _ = puller.public_key(key.line)
        assert line.startswith(f'fleet@example.org namespaces="consfig-image" {kind} {data}'), line
    assert puller.trusted_fingerprints(text) == [signer.fingerprint, other.fingerprint]


@pytest.mark.parametrize("identity", ["-x", "--help", "a\nb", "a,b", "*", "a*", "!a", "", "a b",
                                      'a"b', "a\0b", "é", "a" * 129, None, 7])
def test_a_hostile_identity_never_reaches_ssh_keygen(tmp_path, signer, trusted, identity):
    with pytest.raises(ValueError, match="not a signer identity"):
        puller.check_identity(identity)
    with pytest.raises(ValueError, match="not a signer identity"):
        puller.allowed_signers([signer.line], identity)
    statement, _, armor = publish.sign_image(signer, HOST, b"image").partition(b"-----BEGIN")
    with pytest.raises(ValueError, match="not a signer identity"):
        puller.verify_signature(statement, b"-----BEGIN" + armor, trusted, identity,
                                ssh_keygen=str(tmp_path / "never-run"))


def _key_data(signer):
    return signer.line.split()[1]


@pytest.mark.parametrize("make", [
    lambda s: f"{s.line.strip()}\nconsfig-publisher ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEvil",
    lambda s: f"{s.line.strip()}\rmore",
    lambda s: f"{s.line.strip()} \u2028consfig-publisher",
    lambda s: f"ssh-ed25519 {_key_data(s)} a\0b",
    lambda s: f"ssh-rsa {_key_data(s)}",
    lambda s: f"cert-authority ssh-ed25519 {_key_data(s)}",
    lambda s: f"-oops {_key_data(s)}",
    lambda s: "ssh-ed25519 not*base64",
    lambda s: "ssh-ed25519",
    lambda s: "",
    lambda s: "consfig-ed25519 AAAA",
    lambda s: None,
])
def test_a_hostile_public_key_never_reaches_the_allowed_signers_file(signer, make):
    text = make(signer)
    with pytest.raises(ValueError):
        puller.public_key(text)
    with pytest.raises(ValueError):
        puller.allowed_signers([text])


def test_an_old_public_key_line_is_the_same_key_for_ssh_keygen(tmp_path):
    old, old_line = old_key(tmp_path)
    kind, data, comment = puller.public_key(old_line)
    assert (kind, comment) == ("ssh-ed25519", "old")
    raw = base64.b64decode(old_line.split()[1])
    assert base64.b64decode(data)[-32:] == raw, "not the same 32 bytes of key"


def test_publish_writes_image_signature_and_index(tmp_path, signer, trusted):
    out = tmp_path / "pub"
    publish.publish_images({HOST: b"one", "db1.example.org": b"two"}, str(out), signer)
    assert (out / HOST).read_bytes() == b"one"
    fields = puller.check_statement((out / f"{HOST}.sshsig").read_bytes(), trusted, HOST)
    index = (out / "index.json").read_text()
    assert fields["sha256"] == hashlib.sha256(b"one").hexdigest() and fields["sha256"] in index
    assert signer.fingerprint in index
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["index.json", HOST, f"{HOST}.sshsig", "db1.example.org", "db1.example.org.sshsig"]), \
        "temporaries or other files left"


def test_publish_signs_every_image_with_one_ssh_keygen(tmp_path, signer, trusted):
    # A key with a passphrase is asked for it once per publication, not
    # once per host: what one ssh-keygen for all the statements gives.
    statements = [puller.statement_bytes(f"h{i}", "0" * 64, i, "2026-01-01T00:00:00.000000Z",
                                         "2026-01-08T00:00:00.000000Z", signer.fingerprint)
                  for i in range(3)]
    armors = publish.sign_statements(signer, statements)
    for i, (statement, armor) in enumerate(zip(statements, armors)):
        assert puller.check_statement(puller.signature_file(statement, armor), trusted, f"h{i}")


def test_publish_signs_with_a_key_held_by_ssh_agent(tmp_path, monkeypatch):
    signer = new_key(tmp_path, "held")
    public = tmp_path / "only.pub"
    public.write_text(signer.line)
    with SshAgent(tmp_path) as agent:
        agent.add(signer.path)
        os.unlink(signer.path)
        monkeypatch.setenv("SSH_AUTH_SOCK", agent.socket)
        held = publish.signing_key(str(public))
        assert held.agent, held
        publish.publish_images({HOST: b"one"}, str(tmp_path / "pub"), held)
    fields = puller.check_statement((tmp_path / "pub" / f"{HOST}.sshsig").read_bytes(),
                                    allowed(tmp_path / "allowed", signer.line), HOST)
    assert fields["key"] == signer.fingerprint


def test_a_public_key_without_an_agent_says_what_to_do(tmp_path, monkeypatch):
    signer = new_key(tmp_path, "k")
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    with pytest.raises(ConsfigError, match="private half must be in ssh-agent.*SSH_AUTH_SOCK"):
        publish.signing_key(signer.path + ".pub")
    with SshAgent(tmp_path) as agent:
        monkeypatch.setenv("SSH_AUTH_SOCK", agent.socket)
        held = publish.signing_key(signer.path + ".pub")
        os.unlink(signer.path)
        with pytest.raises(ConsfigError, match="cannot sign with .*ssh-add.*No private key found"):
            publish.publish_images({HOST: b"one"}, str(tmp_path / "pub"), held)
    assert not (tmp_path / "pub" / HOST).exists(), "an image was published unsigned"


def test_publish_checks_each_signature_before_writing_anything(tmp_path, signer):
    # KEY.pub is another key's: hosts trusting the .pub would refuse what
    # the private key signs.  ssh-keygen sees it first, and publish would
    # after; either way nothing is published.
    other = new_key(tmp_path, "other")
    (tmp_path / "signing.pub").write_text(other.line)
    mismatched = publish.signing_key(signer.path)
    with pytest.raises(ConsfigError, match="doesn't match|does not check with its public key"):
        publish.publish_images({HOST: b"one"}, str(tmp_path / "pub"), mismatched)
    assert list((tmp_path / "pub").iterdir()) == [], "something was published"


def test_republishing_an_unchanged_image_touches_nothing(tmp_path, signer):
    out = tmp_path / "pub"
    publish.publish_images({HOST: b"one"}, str(out), signer)
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.iterdir()}
    result = publish.publish_images({HOST: b"one"}, str(out), signer)
    assert result[0][2] is False, "an unchanged image was published again"
    assert {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.iterdir()} == before


def test_another_signing_key_signs_an_unchanged_image_again(tmp_path, signer):
    out = tmp_path / "pub"
    publish.publish_images({HOST: b"one"}, str(out), signer)
    other = new_key(tmp_path, "other")
    [[_, _, changed]] = publish.publish_images({HOST: b"one"}, str(out), other)
    assert changed, "still signed by the key no longer used"
    puller.check_statement((out / f"{HOST}.sshsig").read_bytes(),
                           allowed(tmp_path / "allowed", other.line), HOST)


def test_publishing_replaces_files_whole(tmp_path, signer):
    out = tmp_path / "pub"
    publish.publish_images({HOST: b"old image"}, str(out), signer)
    with open(out / HOST, "rb") as served:
        publish.publish_images({HOST: b"the new image"}, str(out), signer)
        assert served.read() == b"old image", \
            "the file being read was rewritten in place, not replaced by a rename"
    assert (out / HOST).read_bytes() == b"the new image"


def test_a_new_publication_is_later_than_the_last(tmp_path, signer, trusted):
    out = tmp_path / "pub"
    publish.publish_images({HOST: b"one"}, str(out), signer)
    sig = out / f"{HOST}.sshsig"
    # As if the last publication came from a clock far ahead of this one.
    sig.write_bytes(publish.sign_image(signer, HOST, b"one", "2999-01-01T00:00:00.000000Z"))
    publish.publish_images({HOST: b"two"}, str(out), signer)
    fields = puller.check_statement(sig.read_bytes(), trusted, HOST)
    assert fields["published"] == "2999-01-01T00:00:00.000001Z", fields


def test_publish_signs_an_unchanged_image_again_once_half_its_validity_is_gone(tmp_path, signer):
    out = tmp_path / "pub"
    [[_, _, first]] = publish.publish_images({HOST: b"one"}, str(out), signer, valid_for=3600)
    [[_, _, again]] = publish.publish_images({HOST: b"one"}, str(out), signer, valid_for=3600)
    assert (first, again) == (True, False), "well within its validity: untouched"
    [[_, _, renewed]] = publish.publish_images({HOST: b"one"}, str(out), signer, valid_for=100000)
    assert renewed, "less than half of a longer validity left: signed again"


def _legacy_fields(data, raw):
    """What a puller before OpenSSH signatures accepts of DATA, trusting
    the Ed25519 public key RAW: its checks, with the library it used."""
    head, sep, last = data.rstrip(b"\n").rpartition(b"\nsignature ")
    assert sep and head.startswith(b"consfig-signed-image 1\n"), data
    statement = head + b"\n"
    Ed25519PublicKey.from_public_bytes(raw).verify(base64.b64decode(last, validate=True), statement)
    return dict(line.partition(" ")[::2] for line in statement.decode().splitlines()[1:])


@pytest.fixture
def legacy(tmp_path):
    """A key of consfig's old format, loaded, and its public line."""
    old, old_line = old_key(tmp_path)
    return publish.load_legacy_key(old), old_line


def test_with_a_legacy_key_publish_also_signs_the_old_way(tmp_path, signer, trusted, legacy):
    legacy, old_line = legacy
    out = tmp_path / "pub"
    publish.publish_images({HOST: b"one"}, str(out), signer, legacy_key=legacy)
    fields = puller.check_statement((out / f"{HOST}.sshsig").read_bytes(), trusted, HOST)
    old_fields = _legacy_fields((out / f"{HOST}.sig").read_bytes(),
                                base64.b64decode(old_line.split()[1]))
    assert {k: old_fields[k] for k in ("host", "sha256", "size", "published", "expires")} == \
        {k: fields[k] for k in ("host", "sha256", "size", "published", "expires")}
    before = (out / f"{HOST}.sig").stat().st_mtime_ns
    publish.publish_images({HOST: b"one"}, str(out), signer, legacy_key=legacy)
    assert (out / f"{HOST}.sig").stat().st_mtime_ns == before, "an unchanged old signature rewritten"


def test_without_a_legacy_key_an_old_signature_file_is_removed(tmp_path, signer, legacy):
    out = tmp_path / "pub"
    publish.publish_images({HOST: b"one"}, str(out), signer, legacy_key=legacy[0])
    publish.publish_images({HOST: b"one"}, str(out), signer)
    assert not (out / f"{HOST}.sig").exists(), "an old signature file is left to be served"


def test_a_new_publication_is_later_than_the_last_old_format_one(tmp_path, signer, trusted, legacy):
    legacy, _ = legacy
    out = tmp_path / "pub"
    publish.publish_images({HOST: b"one"}, str(out), signer, legacy_key=legacy)
    fields = puller.check_statement((out / f"{HOST}.sshsig").read_bytes(), trusted, HOST)
    (out / f"{HOST}.sig").write_bytes(publish.legacy_signature(
        legacy, {**fields, "published": "2999-01-01T00:00:00.000000Z"}))
    publish.publish_images({HOST: b"two"}, str(out), signer, legacy_key=legacy)
    fields = puller.check_statement((out / f"{HOST}.sshsig").read_bytes(), trusted, HOST)
    assert fields["published"] == "2999-01-01T00:00:00.000001Z", \
        "hosts still on the old puller would refuse the next image as older"
