"""Signing, publishing and pulling images: `consfig keygen`'s keys, the
signature files `consfig publish` writes, the pure-Python Ed25519 verifier
against `cryptography`, and the puller run as a host runs it — its two files
copied into a directory of their own, started with this machine's python3 —
against a loopback HTTP server.  The images are stand-ins (a zip application
that notes each run), so that what is tested is the fetching, checking and
applying, not the image."""

import fcntl
import hashlib
import http.server
import json
import os
import pathlib
import shutil
import subprocess
import sys
import threading
import time

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import hy  # noqa: F401
from consfig import ed25519, publish, puller
from consfig.errors import ConsfigError
from imageserver import ImageServer, stand_in_image

HOST = "web1.example.org"
PYTHON3 = shutil.which("python3", path="/usr/bin:/bin") or sys.executable


@pytest.fixture
def key(tmp_path):
    publish.keygen(str(tmp_path / "signing"))
    return publish.load_signing_key(str(tmp_path / "signing"))


def public_line(k):
    return puller.public_key_text(publish.public_key_of(k))


def test_keygen_writes_a_private_key_only_its_owner_reads(tmp_path):
    line = publish.keygen(str(tmp_path / "k"))
    assert (tmp_path / "k").stat().st_mode & 0o777 == 0o600, "the private key is 0600"
    assert (tmp_path / "k.pub").read_text() == line
    assert line.startswith("consfig-ed25519 ") and line.endswith(" k\n"), line
    k = publish.load_signing_key(str(tmp_path / "k"))
    assert publish.read_public_key(str(tmp_path / "k.pub")) == publish.public_key_of(k)


def test_keygen_never_overwrites_a_key(tmp_path):
    publish.keygen(str(tmp_path / "k"))
    before = (tmp_path / "k").read_bytes()
    with pytest.raises(ConsfigError, match="exists: not overwriting"):
        publish.keygen(str(tmp_path / "k"))
    assert (tmp_path / "k").read_bytes() == before


def test_a_file_that_is_not_a_key_is_named(tmp_path):
    (tmp_path / "notakey").write_text("hello\n")
    with pytest.raises(ConsfigError, match="notakey is not an unencrypted PEM private key"):
        publish.load_signing_key(str(tmp_path / "notakey"))


def test_a_signature_checks_with_its_key_and_not_another(key):
    sig = publish.sign_image(key, HOST, b"image bytes")
    fields = puller.check_statement(sig, [publish.public_key_of(key)], HOST)
    assert fields["sha256"] == hashlib.sha256(b"image bytes").hexdigest()
    other = Ed25519PrivateKey.generate()
    with pytest.raises(puller.Refused, match="not by a trusted key"):
        puller.check_statement(sig, [publish.public_key_of(other)], HOST)
    with pytest.raises(puller.Refused, match="is for web1.example.org, not for db1"):
        puller.check_statement(sig, [publish.public_key_of(key)], "db1.example.org")


def test_an_altered_statement_is_not_by_the_key(key):
    sig = publish.sign_image(key, HOST, b"image bytes")
    forged = sig.replace(b"size 11", b"size 12")
    with pytest.raises(puller.Refused, match="not by a trusted key"):
        puller.check_statement(forged, [publish.public_key_of(key)], HOST)


def test_the_pure_python_verifier_agrees_with_cryptography():
    keys = [Ed25519PrivateKey.generate() for _ in range(4)]
    for i in range(120):
        k = keys[i % 4]
        pub = publish.public_key_of(k)
        message = os.urandom(i * 7 % 300)
        sig = k.sign(message)
        assert ed25519.verify(pub, sig, message), f"message {i}: a good signature refused"
        assert not ed25519.verify(pub, sig, message + b"\0"), f"message {i}: longer accepted"
        assert not ed25519.verify(publish.public_key_of(keys[(i + 1) % 4]), sig, message), \
            f"message {i}: another key's signature accepted"
        flipped = bytearray(sig)
        flipped[i % 64] ^= 1 << (i % 8)
        assert not ed25519.verify(pub, bytes(flipped), message), \
            f"message {i}: a signature with bit {i % 8} of byte {i % 64} flipped accepted"


def test_the_pure_python_verifier_passes_rfc_8032_vectors():
    # RFC 8032, 7.1, TEST 1, 2 and 3.
    vectors = [
        ("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
         "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb88215"
         "90a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"),
        ("3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c", "72",
         "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e4"
         "3e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"),
        ("fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025", "af82",
         "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b53"
         "8d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a"),
    ]
    for pub, msg, sig in vectors:
        assert ed25519.verify(bytes.fromhex(pub), bytes.fromhex(sig), bytes.fromhex(msg)), pub


def test_the_pure_python_verifier_refuses_what_is_not_a_signature():
    k = Ed25519PrivateKey.generate()
    pub, sig = publish.public_key_of(k), k.sign(b"m")
    assert not ed25519.verify(pub, sig[:63], b"m"), "a short signature accepted"
    big_s = sig[:32] + (int.from_bytes(sig[32:], "little") + ed25519._L).to_bytes(32, "little")
    assert not ed25519.verify(pub, big_s, b"m"), "S + L (a malleated signature) accepted"
    with pytest.raises(ed25519.InvalidKey):
        ed25519.verify(b"\xff" * 32, sig, b"m")


def test_publish_writes_image_signature_and_index(tmp_path, key):
    out = tmp_path / "pub"
    publish.publish_images({HOST: b"one", "db1.example.org": b"two"}, str(out), key)
    assert (out / HOST).read_bytes() == b"one"
    fields = puller.check_statement((out / f"{HOST}.sig").read_bytes(),
                                    [publish.public_key_of(key)], HOST)
    index = json.loads((out / "index.json").read_text())
    assert index["hosts"][HOST]["sha256"] == fields["sha256"] == hashlib.sha256(b"one").hexdigest()
    assert sorted(index["hosts"]) == ["db1.example.org", HOST]
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")], "temporaries left"


def test_republishing_an_unchanged_image_touches_nothing(tmp_path, key):
    out = tmp_path / "pub"
    publish.publish_images({HOST: b"one"}, str(out), key)
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.iterdir()}
    result = publish.publish_images({HOST: b"one"}, str(out), key)
    assert result[0][2] is False, "an unchanged image was published again"
    assert {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.iterdir()} == before


def test_publishing_replaces_files_whole(tmp_path, key):
    out = tmp_path / "pub"
    publish.publish_images({HOST: b"old image"}, str(out), key)
    with open(out / HOST, "rb") as served:
        publish.publish_images({HOST: b"the new image"}, str(out), key)
        assert served.read() == b"old image", \
            "the file being read was rewritten in place, not replaced by a rename"
    assert (out / HOST).read_bytes() == b"the new image"


def test_a_new_publication_is_later_than_the_last(tmp_path, key):
    out = tmp_path / "pub"
    publish.publish_images({HOST: b"one"}, str(out), key)
    sig = out / f"{HOST}.sig"
    # As if the last publication came from a clock far ahead of this one.
    sig.write_bytes(publish.sign_image(key, HOST, b"one", "2999-01-01T00:00:00.000000Z"))
    publish.publish_images({HOST: b"two"}, str(out), key)
    fields = puller.check_statement(sig.read_bytes(), [publish.public_key_of(key)], HOST)
    assert fields["published"] == "2999-01-01T00:00:00.000001Z", fields


class Host:
    """A host's side: the puller installed in a directory of its own, its
    configuration and state directory, and a marker file its stand-in images
    write to when applied."""

    def __init__(self, root, url, keys, python=(PYTHON3,)):
        self.root = root
        lib = root / "lib"
        lib.mkdir(parents=True)
        for name in ("puller.py", "ed25519.py"):
            shutil.copyfile(pathlib.Path(puller.__file__).with_name(name), lib / name)
        self.state = root / "state"
        self.marker = root / "applied"
        self.config = root / "pull.json"
        self.config.write_text(json.dumps({
            "url": url, "host": HOST, "public-keys": keys,
            "state-directory": str(self.state), "python": PYTHON3}))
        self.argv = [*python, str(lib / "puller.py"), str(self.config)]

    def pull(self):
        env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
        return subprocess.run(self.argv, capture_output=True, text=True, timeout=120, env=env)

    def applied(self):
        return self.marker.read_text().splitlines() if self.marker.exists() else []


def published(tmp_path, key, text, host_marker):
    out = tmp_path / "pub"
    image = stand_in_image(tmp_path / "image.pyz", host_marker, text)
    publish.publish_images({HOST: image}, str(out), key)
    return out


def test_the_puller_fetches_checks_and_applies(tmp_path, key):
    out = published(tmp_path, key, "v1", tmp_path / "host/applied")
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [public_line(key)])
        r = host.pull()
        assert r.returncode == 0, r.stderr
        assert host.applied() == ["v1"]
        assert "new image for web1.example.org" in r.stdout, r.stdout
        assert (host.state / "image.pyz").read_bytes() == (out / HOST).read_bytes()
        assert (host.state.stat().st_mode & 0o777) == 0o700, "the state may hold secrets"


def test_a_second_pull_downloads_nothing(tmp_path, key):
    out = published(tmp_path, key, "v1", tmp_path / "host/applied")
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [public_line(key)])
        assert host.pull().returncode == 0
        before = server.answers
        r = host.pull()
        assert r.returncode == 0, r.stderr
        again = server.answers[len(before):]
        assert sorted(again) == [(f"/{HOST}", 304), (f"/{HOST}.sig", 304)], again
        assert host.applied() == ["v1", "v1"], "an unchanged image is still applied"


def test_a_new_publication_is_fetched_and_applied(tmp_path, key):
    out = published(tmp_path, key, "v1", tmp_path / "host/applied")
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [public_line(key)])
        assert host.pull().returncode == 0
        published(tmp_path, key, "v2", tmp_path / "host/applied")
        r = host.pull()
        assert r.returncode == 0, r.stderr
        assert host.applied() == ["v1", "v2"]
        assert server.downloads(f"/{HOST}") == 2


def test_a_tampered_image_is_refused_and_nothing_applied(tmp_path, key):
    out = published(tmp_path, key, "v1", tmp_path / "host/applied")
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [public_line(key)])
        assert host.pull().returncode == 0
        good = (host.state / "image.pyz").read_bytes()
        evil = stand_in_image(tmp_path / "evil.pyz", tmp_path / "host/applied", "evil")
        (out / HOST).write_bytes(evil)
        r = host.pull()
        assert r.returncode == puller.EX_REFUSED, (r.returncode, r.stderr)
        assert "REFUSED" in r.stderr and "is not the one signed" in r.stderr, r.stderr
        assert host.applied() == ["v1"], "something was applied after a refusal"
        assert (host.state / "image.pyz").read_bytes() == good, "the last good image was lost"


def test_an_image_signed_by_another_key_is_refused(tmp_path, key):
    other = Ed25519PrivateKey.generate()
    out = published(tmp_path, other, "v1", tmp_path / "host/applied")
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [public_line(key)])
        r = host.pull()
        assert r.returncode == puller.EX_REFUSED, (r.returncode, r.stderr)
        assert "not by a trusted key" in r.stderr, r.stderr
        assert host.applied() == [] and not (host.state / "image.pyz").exists()


def test_an_unsigned_image_is_refused(tmp_path, key):
    out = published(tmp_path, key, "v1", tmp_path / "host/applied")
    (out / f"{HOST}.sig").unlink()
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [public_line(key)])
        r = host.pull()
        assert r.returncode == puller.EX_REFUSED, (r.returncode, r.stderr)
        assert "an unsigned image is never applied" in r.stderr, r.stderr
        assert host.applied() == []


def test_an_older_image_is_refused(tmp_path, key):
    out = published(tmp_path, key, "v1", tmp_path / "host/applied")
    old = {p.name: p.read_bytes() for p in out.iterdir()}
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [public_line(key)])
        published(tmp_path, key, "v2", tmp_path / "host/applied")
        assert host.pull().returncode == 0
        for name, data in old.items():
            (out / name).write_bytes(data)
        r = host.pull()
        assert r.returncode == puller.EX_REFUSED, (r.returncode, r.stderr)
        assert "older than the one applied last" in r.stderr, r.stderr
        assert host.applied() == ["v2"]


def test_either_of_two_trusted_keys_will_do(tmp_path, key):
    new = Ed25519PrivateKey.generate()
    out = published(tmp_path, new, "v1", tmp_path / "host/applied")
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [public_line(key), public_line(new)])
        r = host.pull()
        assert r.returncode == 0, r.stderr
        assert host.applied() == ["v1"]


def test_the_puller_verifies_without_cryptography(tmp_path, key):
    # python3 -S: no site-packages, so no `cryptography`; the puller must
    # fall back on ed25519.py beside it.
    probe = subprocess.run([PYTHON3, "-S", "-c", "import cryptography"], capture_output=True)
    assert probe.returncode != 0, "cryptography is importable even with -S"
    out = published(tmp_path, key, "v1", tmp_path / "host/applied")
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [public_line(key)], python=(PYTHON3, "-S"))
        r = host.pull()
        assert r.returncode == 0, r.stderr
        assert "pure-Python Ed25519" in r.stdout, r.stdout
        assert host.applied() == ["v1"]
        other = Ed25519PrivateKey.generate()
        published(tmp_path, other, "v2", tmp_path / "host/applied")
        r = host.pull()
        assert r.returncode == puller.EX_REFUSED and "not by a trusted key" in r.stderr, r.stderr
        assert host.applied() == ["v1"]


def test_an_unreachable_server_is_reported_and_nothing_applied(tmp_path, key):
    out = published(tmp_path, key, "v1", tmp_path / "host/applied")
    with ImageServer(out) as server:
        url = server.url
    host = Host(tmp_path / "host", url, [public_line(key)])
    r = host.pull()
    assert r.returncode == puller.EX_UNREACHABLE, (r.returncode, r.stderr)
    assert "could not fetch" in r.stderr and host.applied() == []


def test_no_application_while_another_runs(tmp_path, key):
    out = published(tmp_path, key, "v1", tmp_path / "host/applied")
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [public_line(key)])
        host.state.mkdir(mode=0o700)
        with open(host.state / "apply.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            r = host.pull()
        assert r.returncode == puller.EX_BUSY, (r.returncode, r.stderr)
        assert "another application is running" in r.stderr and host.applied() == []


def test_a_publication_caught_half_way_is_fetched_again(tmp_path, key):
    out = published(tmp_path, key, "v1", tmp_path / "host/applied")
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [public_line(key)])
        assert host.pull().returncode == 0
        # The publisher has renamed the new image into place, not yet its
        # signature: the puller reads the old signature, then the new image.
        new = stand_in_image(tmp_path / "v2.pyz", tmp_path / "host/applied", "v2")
        new_sig = publish.sign_image(key, HOST, new)
        (out / HOST).write_bytes(new)
        server.after(f"/{HOST}", lambda: (out / f"{HOST}.sig").write_bytes(new_sig))
        r = host.pull()
        assert r.returncode == 0, r.stderr
        assert host.applied() == ["v1", "v2"]


def test_under_systemd_a_refusal_is_logged_as_an_error(tmp_path, key):
    other = Ed25519PrivateKey.generate()
    out = published(tmp_path, other, "v1", tmp_path / "host/applied")
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [public_line(key)])
        r = subprocess.run(host.argv, capture_output=True, text=True, timeout=120,
                           env={"PATH": "/usr/bin:/bin", "JOURNAL_STREAM": "8:1234"})
        assert r.returncode == puller.EX_REFUSED
        assert r.stderr.startswith("<3>consfig-pull: REFUSED"), \
            f"the journal would not see an error: {r.stderr!r}"


class _Trickle(http.server.BaseHTTPRequestHandler):
    """Answers every GET with a promise of 100 kB, then a byte every 0.3 s:
    each read is quick enough for a socket timeout, the whole never ends."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "100000")
        self.end_headers()
        try:
            for _ in range(1000):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.3)
        except OSError:
            pass

    def log_message(self, *args):
        pass


def test_a_trickling_server_is_given_up_within_the_deadline(tmp_path, key):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Trickle)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        host = Host(tmp_path / "host", f"http://127.0.0.1:{server.server_port}",
                    [public_line(key)])
        config = json.loads(host.config.read_text())
        host.config.write_text(json.dumps({**config, "deadline": 3}))
        started = time.monotonic()
        r = host.pull()
        took = time.monotonic() - started
    finally:
        server.shutdown()
        server.server_close()
    assert r.returncode == puller.EX_UNREACHABLE, (r.returncode, r.stderr)
    assert took < 10, f"gave up after {took:.1f} s, for a deadline of 3 s"
    assert "deadline" in r.stderr, r.stderr
    assert host.applied() == [] and not (host.state / "image.pyz").exists()


def test_an_expired_statement_is_refused_saying_how_old_the_last_good_one_is(tmp_path, key):
    out = published(tmp_path, key, "v1", tmp_path / "host/applied")
    with ImageServer(out) as server:
        host = Host(tmp_path / "host", server.url, [public_line(key)])
        assert host.pull().returncode == 0
        # The same image, signed again a little later, but with a validity
        # that has run out: what a frozen server keeps serving.
        image = (out / HOST).read_bytes()
        published_at = "2026-01-01T00:00:00.000000Z"
        state = json.loads((host.state / "state.json").read_text())
        state["published"] = "2025-12-31T00:00:00.000000Z"
        (host.state / "state.json").write_text(json.dumps(state))
        (out / f"{HOST}.sig").write_bytes(
            publish.sign_image(key, HOST, image, published_at, valid_for=3600))
        r = host.pull()
        assert r.returncode == puller.EX_REFUSED, (r.returncode, r.stderr)
        assert "expired 2026-01-01T01:00:00.000000Z" in r.stderr, r.stderr
        assert "the last good one, applied here, was signed 2025-12-31" in r.stderr, r.stderr
        assert host.applied() == ["v1"], "nothing more applied"


def test_publish_signs_an_unchanged_image_again_once_half_its_validity_is_gone(tmp_path, key):
    image = stand_in_image(tmp_path / "image.pyz", tmp_path / "applied", "v1")
    out = tmp_path / "pub"
    [[_, _, first]] = publish.publish_images({HOST: image}, str(out), key, valid_for=3600)
    [[_, _, again]] = publish.publish_images({HOST: image}, str(out), key, valid_for=3600)
    assert (first, again) == (True, False), "well within its validity: untouched"
    [[_, _, renewed]] = publish.publish_images({HOST: image}, str(out), key, valid_for=100000)
    assert renewed, "less than half of a longer validity left: signed again"
    assert b"\nexpires " in (out / f"{HOST}.sig").read_bytes()
