"""The puller: what a host runs, from its timer, to fetch, check and apply
its own image.

    python3 /usr/local/lib/consfig/puller.py /etc/consfig/pull.json

It needs nothing but Python 3.9+ and its standard library (and
`ed25519.py`, installed beside it, when the `cryptography` package is not
importable).  The property `image.pulled-from` installs it with its
configuration; `consfig publish` writes what it fetches.  The format of the
signature file is defined here, once, for both sides.

One run:

1. GET URL/HOST.sig, conditionally (If-None-Match / If-Modified-Since of
   the copy kept last time): the signed statement.  No signature, a
   signature by none of the trusted keys, a statement for another host or
   older than the one applied last: refused.
2. GET URL/HOST, conditionally: the image.  Its size and SHA-256 must be
   the statement's (one retry, for a publication caught half-way between
   its two renames); otherwise refused.
3. Keep the image as the last good one, and apply it (`python3 IMAGE`),
   one application at a time on the host.

Exit status: the image's own (0 success, 1 failures) when it was applied;
3 refused (nothing applied); 4 could not fetch (nothing applied); 64 a bad
configuration; 75 another application was running (nothing applied).
"""

import base64
import datetime
import fcntl
import hashlib
import json
import re
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

__all__ = ["FORMAT", "KEY_PREFIX", "PUBLISHED", "Refused", "public_key_bytes", "public_key_text",
           "key_id", "statement_bytes", "verifier_name", "signature_file", "read_signature_file",
           "verify_signature", "check_statement", "main"]

FORMAT = "consfig-signed-image 1"
KEY_PREFIX = "consfig-ed25519"
MAX_SIGNATURE = 64 * 1024
# Publication times are UTC, to the microsecond, in one fixed width: compared
# as strings, they sort in time order.
PUBLISHED = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z"

EX_REFUSED = 3
EX_UNREACHABLE = 4
EX_CONFIG = 64
EX_BUSY = 75


class Refused(Exception):
    """An image or a signature that must not be applied, and why."""


class Unreachable(Exception):
    """The server could not be asked, or answered with an error."""


def public_key_bytes(text):
    """The 32 bytes of a public key written as `consfig-ed25519 BASE64
    [COMMENT]` (a KEYFILE.pub line) or as bare BASE64."""
    words = text.split()
    if words and words[0] == KEY_PREFIX:
        words = words[1:]
    try:
        raw = base64.b64decode(words[0], validate=True) if words else b""
    except ValueError:
        raw = b""
    if len(raw) != 32:
        raise ValueError(f"not a consfig public key ({KEY_PREFIX} and 32 bytes in base64): "
                         f"{text.strip()[:60]!r}")
    return raw


def public_key_text(raw, comment=""):
    """The one line of a KEYFILE.pub for the public key RAW (32 bytes)."""
    return " ".join(filter(None, [KEY_PREFIX, base64.b64encode(raw).decode(), comment])) + "\n"


def key_id(raw):
    """A short name for the public key RAW: the start of its SHA-256."""
    return hashlib.sha256(raw).hexdigest()[:16]


def statement_bytes(host, sha256, size, published, key, expires=None):
    """The signed part of a signature file: what the signature vouches for.
    Naming the host keeps one host's image from being served to another;
    the publication time keeps an old image from being served again; the
    expiry keeps a server (or a mirror) from serving the last signed image
    for ever: past it, a host refuses the statement and says how old its
    last good one is, so that a frozen host shows (as TUF's timestamp role)."""
    for value in (host, sha256, published, key, *([expires] if expires else [])):
        if not value or any(c.isspace() for c in value):
            raise ValueError(f"a statement field must be one word: {value!r}")
    return (f"{FORMAT}\nhost {host}\nsha256 {sha256}\nsize {int(size)}\n"
            f"published {published}\n" + (f"expires {expires}\n" if expires else "") +
            f"key {key}\n").encode()


def signature_file(statement, signature):
    """The whole signature file: STATEMENT and the Ed25519 SIGNATURE of it."""
    return statement + b"signature " + base64.b64encode(signature) + b"\n"


def read_signature_file(data):
    """`(fields, statement, signature)` of a signature file's bytes; Refused
    when it is not one."""
    head, sep, last = data.rstrip(b"\n").rpartition(b"\nsignature ")
    if not sep or not head.startswith(FORMAT.encode() + b"\n"):
        raise Refused(f"not a consfig signature file (no {FORMAT!r} statement and signature)")
    statement = head + b"\n"
    try:
        signature = base64.b64decode(last, validate=True)
        lines = statement.decode("ascii").splitlines()[1:]
    except ValueError:
        raise Refused("the signature file is garbled") from None
    fields = dict(line.partition(" ")[::2] for line in lines)
    missing = {"host", "sha256", "size", "published", "key"} - set(fields)
    if missing:
        raise Refused(f"the signed statement lacks {', '.join(sorted(missing))}")
    if not (fields["size"].isdigit() and re.fullmatch(PUBLISHED, fields["published"])
            and re.fullmatch(PUBLISHED, fields.get("expires", fields["published"]))):
        raise Refused("the signed statement's size, publication or expiry time is garbled")
    return fields, statement, signature


def _verifier():
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    except ImportError:
        import ed25519
        return "pure-Python Ed25519", ed25519.verify

    def verify(raw, signature, message):
        try:
            Ed25519PublicKey.from_public_bytes(raw).verify(signature, message)
            return True
        except InvalidSignature:
            return False
    return "cryptography", verify


def verifier_name():
    """What checks signatures here: "cryptography" or "pure-Python Ed25519"."""
    return _verifier()[0]


def verify_signature(raw, signature, message):
    """Whether SIGNATURE is RAW's (a 32-byte public key) Ed25519 signature
    of MESSAGE: with `cryptography` when it is importable, else with the
    pure-Python `ed25519` module installed beside this file."""
    return _verifier()[1](raw, signature, message)


def check_statement(data, keys, host):
    """The fields of the signature file DATA, once its signature is found to
    be by one of KEYS (32-byte public keys) and its statement to be about
    HOST; Refused otherwise."""
    fields, statement, signature = read_signature_file(data)
    if not any(verify_signature(k, signature, statement) for k in keys):
        raise Refused(f"the signature is not by a trusted key (it names key {fields['key']}; "
                      f"this host trusts {', '.join(key_id(k) for k in keys)})")
    if fields["host"] != host:
        raise Refused(f"the signed statement is for {fields['host']}, not for {host}")
    return fields


def _utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _age(since, now):
    """How long from SINCE to NOW (two PUBLISHED times), for people."""
    fmt = "%Y-%m-%dT%H:%M:%S.%fZ"
    seconds = (datetime.datetime.strptime(now, fmt) -
               datetime.datetime.strptime(since, fmt)).total_seconds()
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f} days"
    if seconds >= 7200:
        return f"{seconds / 3600:.1f} hours"
    return f"{seconds:.0f} s"


def _say(priority, message):
    # Under systemd, a <N> prefix gives the journal the line's priority
    # (sd-daemon(3)); elsewhere (cron, a terminal) it would only be noise.
    prefix = f"<{priority}>" if os.environ.get("JOURNAL_STREAM") else ""
    print(f"{prefix}consfig-pull: {message}", file=sys.stderr if priority <= 4 else sys.stdout,
          flush=True)


def _write_atomically(path, data, mode=0o600):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _get(url, cache, limit, timeout, deadline=300, min_rate=1024):
    """`(status, body, validators)` of a GET of URL.  CACHE holds the
    validators of the copy we have (or is None): then a 304 means it is
    still current and the body is None.  More than LIMIT bytes is Refused.
    TIMEOUT bounds each wait for the server; DEADLINE (seconds) the whole
    body, and past the first 10 s, a body coming slower than MIN_RATE
    bytes a second is given up: a server that trickles a byte at a time
    would otherwise hold every pull, and the host would never update."""
    request = urllib.request.Request(url, headers={"User-Agent": "consfig-pull"})
    if cache:
        if cache.get("etag"):
            request.add_header("If-None-Match", cache["etag"])
        if cache.get("last-modified"):
            request.add_header("If-Modified-Since", cache["last-modified"])
    try:
        started = time.monotonic()
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = _read_bounded(response, url, limit + 1, started, deadline, min_rate)
            headers = response.headers
    except urllib.error.HTTPError as e:
        if e.code == 304 and cache:
            return 304, None, cache
        if e.code in (404, 410):
            return e.code, None, None
        raise Unreachable(f"{url}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        raise Unreachable(f"{url}: {getattr(e, 'reason', e)}") from None
    if len(body) > limit:
        raise Refused(f"larger than the {limit} bytes expected")
    return 200, body, {"etag": headers.get("ETag"), "last-modified": headers.get("Last-Modified")}


def _read_bounded(response, url, limit, started, deadline, min_rate):
    chunks, got = [], 0
    while got < limit:
        chunk = response.read1(min(65536, limit - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
        elapsed = time.monotonic() - started
        if elapsed > deadline:
            raise Unreachable(f"{url}: {got} bytes in {elapsed:.0f} s, past the deadline of "
                              f"{deadline} s (\"deadline\" in the configuration)")
        if elapsed > 10 and got / elapsed < min_rate:
            raise Unreachable(f"{url}: {got} bytes in {elapsed:.0f} s, slower than the "
                              f"minimum of {min_rate} bytes/s (\"min-rate\")")
    return b"".join(chunks)


class Puller:
    """One run of the puller with the configuration CONFIG (a dict)."""

    def __init__(self, config):
        self.url = config["url"].rstrip("/")
        self.host = config["host"]
        self.keys = [public_key_bytes(k) for k in config["public-keys"]]
        self.directory = config["state-directory"]
        self.python = config.get("python") or sys.executable
        self.arguments = list(config.get("arguments", []))
        self.lock = config.get("lock") or os.path.join(self.directory, "apply.lock")
        self.timeout = config.get("timeout", 60)
        # Bounds on a whole fetch, whatever each read does (see `_get`).
        self.deadline = config.get("deadline", 300)
        self.min_rate = config.get("min-rate", 1024)
        self.image = os.path.join(self.directory, "image.pyz")
        self.signature = os.path.join(self.directory, "image.sig")
        self.state_file = os.path.join(self.directory, "state.json")
        if not self.keys:
            raise ValueError("no public key to trust")

    def _state(self):
        try:
            with open(self.state_file) as f:
                return json.load(f)
        except FileNotFoundError:
            return {}

    def _kept(self, path):
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def _address(self, suffix=""):
        return f"{self.url}/{urllib.parse.quote(self.host)}{suffix}"

    def fetch(self, state, conditional=True):
        """The verified `(fields, signature, image, validators)` now
        published for this host; Refused or Unreachable otherwise."""
        kept_sig, kept_image = self._kept(self.signature), self._kept(self.image)
        url = self._address(".sig")
        status, sig, sig_cache = _get(url, conditional and kept_sig and state.get("signature"),
                                      MAX_SIGNATURE, self.timeout, self.deadline, self.min_rate)
        if status in (404, 410):
            raise Refused(f"no signature at {url}: an unsigned image is never applied")
        if status == 304:
            sig = kept_sig
        fields = check_statement(sig, self.keys, self.host)
        now = _utc_now()
        if fields.get("expires") and fields["expires"] < now:
            last = (f"the last good one, applied here, was signed {state['published']} "
                    f"({_age(state['published'], now)} ago)" if state.get("published")
                    else "none was ever applied here")
            raise Refused(f"the signed statement expired {fields['expires']} "
                          f"({_age(fields['expires'], now)} ago): the server may be frozen, "
                          f"or the site no longer publishes; {last}")
        if state.get("published") and fields["published"] < state["published"]:
            raise Refused(f"the image signed {fields['published']} is older than the one "
                          f"applied last (signed {state['published']}): not going back")
        url = self._address()
        have = kept_image if conditional and kept_image is not None and \
            hashlib.sha256(kept_image).hexdigest() == fields["sha256"] else None
        try:
            status, image, image_cache = _get(url, have is not None and state.get("image"),
                                              int(fields["size"]), self.timeout, self.deadline,
                                              self.min_rate)
        except Refused as e:
            raise Refused(f"the image at {url} is not the one signed ({e}): it was altered, "
                          "or is being published") from None
        if status in (404, 410):
            raise Refused(f"no image at {url}")
        if status == 304:
            image = have
        if hashlib.sha256(image).hexdigest() != fields["sha256"]:
            raise Refused(f"the image at {url} is not the one signed "
                          f"(SHA-256 {hashlib.sha256(image).hexdigest()}, signed "
                          f"{fields['sha256']}): it was altered, or is being published")
        return fields, sig, image, {"signature": sig_cache, "image": image_cache}

    def run(self):
        """Fetch, check, keep and apply; return the exit status."""
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        os.chmod(self.directory, 0o700)
        state = self._state()
        try:
            try:
                fields, sig, image, validators = self.fetch(state)
            except Refused:
                # One more time from scratch: a publication caught between
                # writing the image and writing its signature.
                fields, sig, image, validators = self.fetch(state, conditional=False)
        except Refused as e:
            _say(3, f"REFUSED {self._address()}: {e}; nothing applied")
            return EX_REFUSED
        except Unreachable as e:
            _say(3, f"could not fetch: {e}; nothing applied")
            return EX_UNREACHABLE
        if fields["sha256"] != state.get("sha256") or self._kept(self.image) is None:
            _write_atomically(self.image, image)
            _say(5, f"new image for {self.host}: SHA-256 {fields['sha256']}, "
                    f"signed {fields['published']} by key {fields['key']} "
                    f"(checked with {verifier_name()})")
        else:
            _say(6, f"image unchanged (SHA-256 {fields['sha256']})")
        if sig != self._kept(self.signature):
            _write_atomically(self.signature, sig)
        state.update(validators, sha256=fields["sha256"], published=fields["published"],
                     key=fields["key"])
        _write_atomically(self.state_file, json.dumps(state, indent=1).encode())
        return self.apply(state)

    def apply(self, state):
        """Run the last good image, unless an application is running."""
        with open(self.lock, "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                _say(4, "another application is running: not applying now")
                return EX_BUSY
            status = subprocess.run([self.python, self.image, *self.arguments],
                                    stdin=subprocess.DEVNULL).returncode
        state["applied"] = {"time": datetime.datetime.now(datetime.timezone.utc)
                            .strftime("%Y-%m-%dT%H:%M:%SZ"),
                            "sha256": state["sha256"], "status": status}
        _write_atomically(self.state_file, json.dumps(state, indent=1).encode())
        if status:
            _say(3, f"applying the image failed (exit status {status})")
        return status


def main(argv=None):
    """Run the puller with the configuration file named in ARGV."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        _say(3, "usage: puller.py CONFIG.json")
        return EX_CONFIG
    try:
        with open(argv[0]) as f:
            puller = Puller(json.load(f))
    except (OSError, ValueError, KeyError, TypeError) as e:
        _say(3, f"bad configuration {argv[0]}: {e!r}")
        return EX_CONFIG
    return puller.run()


if __name__ == "__main__":
    sys.exit(main())
