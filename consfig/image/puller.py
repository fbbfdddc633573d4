"""The puller: what a host runs, from its timer, to fetch, check and apply
its own image.

    python3 /usr/local/lib/consfig/puller.py /etc/consfig/pull.json

It needs nothing but Python 3.9+ and its standard library, and
`ssh-keygen` (openssh-client, OpenSSH 8.2 or later), which checks the
signatures: `ssh-keygen -Y verify -n consfig-image -I IDENTITY -f
ALLOWED_SIGNERS`.  The property `image.pulled-from` installs it with its
configuration and the allowed-signers file; `consfig publish` writes what
it fetches.  The format of the signature file is defined here, once, for
both sides.

One run:

1. GET URL/HOST.sshsig, conditionally (If-None-Match / If-Modified-Since of
   the copy kept last time): the signed statement.  No signature, a
   signature by none of the allowed signers, a statement for another host,
   expired, or older than the one applied last: refused.
2. GET URL/HOST, conditionally: the image.  Its size and SHA-256 must be
   the statement's (one retry, for a publication caught half-way between
   its two renames); otherwise refused.
3. Keep the image as the last good one, and apply it (`python3 IMAGE`),
   one application at a time on the host.

Exit status: the image's own (0 success, 1 failures) when it was applied;
3 refused (nothing applied); 4 could not fetch (nothing applied); 64 a bad
configuration (or no ssh-keygen); 75 another application was running
(nothing applied).
"""

import base64
import datetime
import fcntl
import hashlib
import http.client
import json
import re
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unicodedata
import urllib.error
import urllib.parse
import urllib.request

__all__ = ["FORMAT", "NAMESPACE", "IDENTITY", "SUFFIX", "LEGACY_KEY_PREFIX", "PUBLISHED",
           "Refused", "Unverifiable", "check_identity", "public_key", "fingerprint",
           "allowed_signers", "trusted_fingerprints", "statement_bytes", "signature_file",
           "read_signature_file", "verify_signature", "check_statement", "main"]

FORMAT = "consfig-signed-image 2"
# The namespace every signature is made and checked in: an admin's key that
# also signs git commits or files (other namespaces) cannot have those
# signatures taken for an image's.
NAMESPACE = "consfig-image"
# The principal the site's keys are listed under in the allowed-signers
# file, unless `image.pulled-from` is given another.
IDENTITY = "consfig-publisher"
SUFFIX = ".sshsig"
# What `consfig keygen` wrote before keys were OpenSSH keys: the same
# Ed25519 public key, which is still accepted as a key to trust.
LEGACY_KEY_PREFIX = "consfig-ed25519"
MAX_SIGNATURE = 64 * 1024
# Publication times are UTC, to the microsecond, in one fixed width: compared
# as strings, they sort in time order.
PUBLISHED = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z"
# What may name a signer: it goes into ssh-keygen's arguments (-I) and into
# the allowed-signers file as a principal, where `,` `*` `?` `!` would make
# a pattern of it and a space or a quote would end it.
_IDENTITY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+=-]{0,127}")
KEY_TYPES = ("ssh-ed25519", "sk-ssh-ed25519@openssh.com", "ecdsa-sha2-nistp256",
             "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "sk-ecdsa-sha2-nistp256@openssh.com",
             "ssh-rsa")
_ARMOR = re.compile(rb"-----BEGIN SSH SIGNATURE-----\n[A-Za-z0-9+/=\n]{1,16384}"
                    rb"-----END SSH SIGNATURE-----\n")
VERIFY_TIMEOUT = 60

EX_REFUSED = 3
EX_UNREACHABLE = 4
EX_CONFIG = 64
EX_BUSY = 75


class Refused(Exception):
    """An image or a signature that must not be applied, and why."""


class Unreachable(Exception):
    """The server could not be asked, or answered with an error."""


class Unverifiable(Exception):
    """Signatures cannot be checked here: no ssh-keygen, or a bad signer."""


def check_identity(identity):
    """IDENTITY, when it can name a signer (`consfig-publisher`,
    `fleet@example.org`); ValueError otherwise."""
    if not (isinstance(identity, str) and _IDENTITY.fullmatch(identity)):
        raise ValueError(f"not a signer identity (a letter or digit, then letters, digits and "
                         f"._@+=-, at most 128): {identity!r}")
    return identity


def public_key(text):
    """`(type, base64, comment)` of a public key line: an OpenSSH one
    (`ssh-ed25519 AAAA… comment`, as in a KEY.pub) or, converted to the
    same key as OpenSSH names it, one of consfig's old `consfig-ed25519
    BASE64 comment`.  ValueError when it is neither, or holds a character
    that could end a line or a field of the allowed-signers file."""
    if not isinstance(text, str):
        raise ValueError(f"a public key is a line of text, not {text!r}")
    line = text.strip()
    shown = repr(line[:60])
    if any(unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in line):
        raise ValueError(f"a public key is one line without control characters: {shown}")
    words = line.split(None, 2)
    if len(words) < 2:
        raise ValueError(f"not a public key (TYPE BASE64 [COMMENT]): {shown}")
    kind, data, comment = words[0], words[1], words[2] if len(words) > 2 else ""
    try:
        blob = base64.b64decode(data, validate=True)
    except ValueError:
        raise ValueError(f"the key's base64 is garbled: {shown}") from None
    if kind == LEGACY_KEY_PREFIX:
        if len(blob) != 32:
            raise ValueError(f"not a {LEGACY_KEY_PREFIX} key (32 bytes in base64): {shown}")
        kind = "ssh-ed25519"
        blob = b"".join(len(x).to_bytes(4, "big") + x for x in (kind.encode(), blob))
        data = base64.b64encode(blob).decode()
    if kind not in KEY_TYPES:
        raise ValueError(f"not a public key type ssh-keygen signs with ({', '.join(KEY_TYPES)}, "
                         f"or {LEGACY_KEY_PREFIX}): {shown}")
    # The key's data starts with its type, as an SSH string.
    if blob[:4 + len(kind)] != len(kind).to_bytes(4, "big") + kind.encode():
        raise ValueError(f"the key's data is not a {kind} key: {shown}")
    return kind, data, comment


def fingerprint(data):
    """The SHA256 fingerprint of a key given as its base64 (what `ssh-keygen
    -l` prints)."""
    digest = hashlib.sha256(base64.b64decode(data)).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def allowed_signers(keys, identity=IDENTITY):
    """The allowed-signers file (ssh-keygen(1), ALLOWED SIGNERS) trusting
    each of KEYS (public key lines, see `public_key`) to sign images as
    IDENTITY, in the `consfig-image` namespace only."""
    check_identity(identity)
    if not keys:
        raise ValueError("no public key to trust")
    lines = []
    for k in keys:
        kind, data, comment = public_key(k)
        line = " ".join(filter(None, [identity, f'namespaces="{NAMESPACE}"', kind, data, comment]))
        if "\n" in line or "\r" in line:
            raise ValueError(f"an allowed-signers line must be one line: {line!r}")
        lines.append(line + "\n")
    return "".join(lines)


def trusted_fingerprints(text):
    """The fingerprints of the keys in an allowed-signers file's TEXT."""
    found = []
    for line in text.splitlines():
        words = line.split()
        for i, w in enumerate(words[:-1]):
            if w in KEY_TYPES:
                try:
                    found.append(fingerprint(words[i + 1]))
                except ValueError:
                    pass
                break
    return found


def statement_bytes(host, sha256, size, published, expires, key):
    """The signed part of a signature file: what the signature vouches for.
    Naming the host keeps one host's image from being served to another;
    the publication time keeps an old image from being served again; the
    expiry keeps a server (or a mirror) from serving the last signed image
    for ever: past it, a host refuses the statement and says how old its
    last good one is, so that a frozen host shows (as TUF's timestamp role).
    KEY names the signing key, for people (its SHA256 fingerprint)."""
    for value in (host, sha256, published, expires, key):
        if not value or any(c.isspace() for c in value):
            raise ValueError(f"a statement field must be one word: {value!r}")
    return (f"{FORMAT}\nhost {host}\nsha256 {sha256}\nsize {int(size)}\n"
            f"published {published}\nexpires {expires}\nkey {key}\n").encode()


def signature_file(statement, armor):
    """The whole signature file: STATEMENT, then ARMOR, the SSH signature of
    it that `ssh-keygen -Y sign -n consfig-image` wrote."""
    if not _ARMOR.fullmatch(armor):
        raise ValueError("not an armored SSH signature")
    return statement + armor


def read_signature_file(data):
    """`(fields, statement, armor)` of a signature file's bytes; Refused when
    it is not one."""
    begin = data.find(b"-----BEGIN SSH SIGNATURE-----\n")
    statement, armor = data[:begin], data[begin:]
    if begin < 0 or not statement.startswith(FORMAT.encode() + b"\n"):
        raise Refused(f"not a consfig signature file (no {FORMAT!r} statement and SSH signature)")
    if not _ARMOR.fullmatch(armor):
        raise Refused("the signature file's SSH signature is garbled")
    try:
        lines = statement.decode("ascii").splitlines()[1:]
    except ValueError:
        raise Refused("the signature file is garbled") from None
    fields = dict(line.partition(" ")[::2] for line in lines)
    missing = {"host", "sha256", "size", "published", "expires", "key"} - set(fields)
    if missing:
        raise Refused(f"the signed statement lacks {', '.join(sorted(missing))}")
    if not (fields["size"].isdigit() and re.fullmatch(PUBLISHED, fields["published"])
            and re.fullmatch(PUBLISHED, fields["expires"])):
        raise Refused("the signed statement's size, publication or expiry time is garbled")
    return fields, statement, armor


def find_ssh_keygen():
    """The ssh-keygen on PATH; Unverifiable when there is none."""
    found = shutil.which("ssh-keygen")
    if not found:
        raise Unverifiable("ssh-keygen is not installed (or not on PATH): it checks the images' "
                           "signatures; install openssh-client")
    return found


def verify_signature(statement, armor, signers, identity=IDENTITY, ssh_keygen=None,
                     timeout=VERIFY_TIMEOUT):
    """Whether ARMOR is a good signature of STATEMENT, in the consfig-image
    namespace, by a key the allowed-signers file SIGNERS lists for
    IDENTITY: `ssh-keygen -Y verify` says."""
    return _verify(statement, armor, signers, identity, ssh_keygen, timeout).returncode == 0


def _verify(statement, armor, signers, identity, ssh_keygen, timeout=VERIFY_TIMEOUT):
    check_identity(identity)
    argv = [ssh_keygen or find_ssh_keygen(), "-Y", "verify", "-n", NAMESPACE, "-I", identity,
            "-f", os.path.abspath(signers), "-s"]
    with tempfile.TemporaryDirectory(prefix="consfig-verify-") as scratch:
        path = os.path.join(scratch, "statement.sig")
        with open(path, "wb") as f:
            f.write(armor)
        try:
            r = subprocess.run([*argv, path], input=statement, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise Refused(f"ssh-keygen took more than {timeout} s to check the signature") from None
        except OSError as e:
            raise Unverifiable(f"cannot run {argv[0]}: {e.strerror}") from None
    return r


def check_statement(data, signers, host, identity=IDENTITY, ssh_keygen=None):
    """The fields of the signature file DATA, once its signature is found to
    be by a key the allowed-signers file SIGNERS lists for IDENTITY, and its
    statement to be about HOST; Refused otherwise."""
    fields, statement, armor = read_signature_file(data)
    r = _verify(statement, armor, signers, identity, ssh_keygen)
    if r.returncode:
        try:
            with open(signers) as f:
                trusted = ", ".join(trusted_fingerprints(f.read())) or "none"
        except OSError:
            trusted = "none"
        said = r.stderr.decode("utf-8", "replace").strip().splitlines()
        raise Refused(f"the signature is not by a trusted key (it names key {fields['key']}; "
                      f"this host trusts {trusted} as {identity}" +
                      (f"; ssh-keygen: {said[-1][:200]}" if said else "") + ")")
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


class _Deadline:
    """The end of one whole fetch, from connecting to the last byte: the
    connections it opened are shut down when it passes, whatever they are
    waiting for (the status line, a header trickling a byte at a time, the
    body), since a socket timeout bounds only each wait."""

    def __init__(self, seconds):
        self.seconds = seconds
        self.end = time.monotonic() + seconds
        self.passed = False
        self._lock = threading.Lock()
        self._sockets = []
        self._timer = threading.Timer(seconds, self._pass)
        self._timer.daemon = True
        self._timer.start()

    def remaining(self):
        return max(0.001, self.end - time.monotonic())

    def _shut(self, sock):
        try:
            # socket.socket's own shutdown, also on an SSLSocket: it wakes
            # the read blocked in another thread without touching the TLS
            # state that read is using.
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
        except OSError:
            pass

    def _pass(self):
        with self._lock:
            self.passed = True
            sockets = list(self._sockets)
        for sock in sockets:
            self._shut(sock)

    def watch(self, sock):
        with self._lock:
            self._sockets.append(sock)
            passed = self.passed
        if passed:
            self._shut(sock)

    def cancel(self):
        self._timer.cancel()

    def connection(self, base):
        """BASE (an http.client connection class) connecting within the
        deadline, and shut down when it passes."""
        deadline = self

        class Connection(base):
            def connect(self):
                self.timeout = min(self.timeout, deadline.remaining())
                super().connect()
                deadline.watch(self.sock)

        return Connection


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline):
        super().__init__()
        self.deadline = deadline

    def do_open(self, http_class, req, **kwargs):
        return super().do_open(self.deadline.connection(http_class), req, **kwargs)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline):
        super().__init__()
        self.deadline = deadline

    def do_open(self, http_class, req, **kwargs):
        return super().do_open(self.deadline.connection(http_class), req, **kwargs)


def _get(url, cache, limit, timeout, deadline=300, min_rate=1024):
    """`(status, body, validators)` of a GET of URL.  CACHE holds the
    validators of the copy we have (or is None): then a 304 means it is
    still current and the body is None.  More than LIMIT bytes is Refused.
    TIMEOUT bounds each wait for the server; DEADLINE (seconds) the whole
    fetch, from connecting to the last byte of the body; and past the first
    10 s, a body coming slower than MIN_RATE bytes a second is given up: a
    server that trickles a byte at a time would otherwise hold every pull,
    and the host would never update."""
    request = urllib.request.Request(url, headers={"User-Agent": "consfig-pull"})
    if cache:
        if cache.get("etag"):
            request.add_header("If-None-Match", cache["etag"])
        if cache.get("last-modified"):
            request.add_header("If-Modified-Since", cache["last-modified"])
    bound = _Deadline(deadline)
    opener = urllib.request.build_opener(_HTTPHandler(bound), _HTTPSHandler(bound))
    started = time.monotonic()
    try:
        with opener.open(request, timeout=min(timeout, bound.remaining())) as response:
            body = _read_bounded(response, url, limit + 1, started, deadline, min_rate)
            headers = response.headers
        if bound.passed:
            # The shutdown ended the body early, as if it were complete.
            raise OSError("cut at the deadline")
    except urllib.error.HTTPError as e:
        if e.code == 304 and cache:
            return 304, None, cache
        if e.code in (404, 410):
            return e.code, None, None
        raise Unreachable(f"{url}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
        if bound.passed:
            raise Unreachable(f"{url}: no answer within {time.monotonic() - started:.0f} s, "
                              f"past the deadline of {deadline} s (\"deadline\" in the "
                              "configuration)") from None
        raise Unreachable(f"{url}: {getattr(e, 'reason', e)}") from None
    finally:
        bound.cancel()
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
        self.directory = config["state-directory"]
        self.identity = check_identity(config.get("identity", IDENTITY))
        self.ssh_keygen = find_ssh_keygen()
        if "allowed-signers" in config:
            self.signers, self.signers_text = config["allowed-signers"], None
            if not os.path.isabs(self.signers):
                raise ValueError(f"allowed-signers must be an absolute path: {self.signers!r}")
            with open(self.signers) as f:
                if not trusted_fingerprints(f.read()):
                    raise ValueError(f"{self.signers} lists no key to trust")
        else:
            # A configuration written for the puller before this one, which
            # listed the keys itself: they are still the keys to trust.
            self.signers = os.path.join(self.directory, "allowed_signers")
            self.signers_text = allowed_signers(config["public-keys"], self.identity)
        self.python = config.get("python") or sys.executable
        self.arguments = list(config.get("arguments", []))
        self.lock = config.get("lock") or os.path.join(self.directory, "apply.lock")
        self.timeout = config.get("timeout", 60)
        # Bounds on a whole fetch, whatever each read does (see `_get`).
        self.deadline = config.get("deadline", 300)
        self.min_rate = config.get("min-rate", 1024)
        self.image = os.path.join(self.directory, "image.pyz")
        self.signature = os.path.join(self.directory, "image" + SUFFIX)
        self.state_file = os.path.join(self.directory, "state.json")

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
        url = self._address(SUFFIX)
        status, sig, sig_cache = _get(url, conditional and kept_sig and state.get("signature"),
                                      MAX_SIGNATURE, self.timeout, self.deadline, self.min_rate)
        if status in (404, 410):
            raise Refused(f"no signature at {url}: an unsigned image is never applied")
        if status == 304:
            sig = kept_sig
        fields = check_statement(sig, self.signers, self.host, self.identity, self.ssh_keygen)
        now = _utc_now()
        if fields["expires"] < now:
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
            raise Refused(f"the image at {url} is not the one signed ({len(image)} bytes, "
                          f"SHA-256 {hashlib.sha256(image).hexdigest()}; signed: {fields['size']} "
                          f"bytes, SHA-256 {fields['sha256']}): it was cut short or altered, "
                          "or is being published")
        return fields, sig, image, {"signature": sig_cache, "image": image_cache}

    def run(self):
        """Fetch, check, keep and apply; return the exit status."""
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        os.chmod(self.directory, 0o700)
        state = self._state()
        if self.signers_text is not None and self._kept(self.signers) != self.signers_text.encode():
            _write_atomically(self.signers, self.signers_text.encode(), 0o644)
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
        except Unverifiable as e:
            _say(3, f"cannot check signatures: {e}; nothing applied")
            return EX_CONFIG
        if fields["sha256"] != state.get("sha256") or self._kept(self.image) is None:
            _write_atomically(self.image, image)
            _say(5, f"new image for {self.host}: SHA-256 {fields['sha256']}, "
                    f"signed {fields['published']} by key {fields['key']} "
                    f"(checked with {self.ssh_keygen})")
        else:
            _say(6, f"image unchanged (SHA-256 {fields['sha256']})")
        if sig != self._kept(self.signature):
            _write_atomically(self.signature, sig)
        try:
            # Kept by the puller before signatures were OpenSSH ones.
            os.unlink(os.path.join(self.directory, "image.sig"))
        except FileNotFoundError:
            pass
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
    except Unverifiable as e:
        _say(3, f"cannot check signatures: {e}; nothing applied")
        return EX_CONFIG
    except (OSError, ValueError, KeyError, TypeError) as e:
        _say(3, f"bad configuration {argv[0]}: {e!r}")
        return EX_CONFIG
    return puller.run()


if __name__ == "__main__":
    sys.exit(main())
