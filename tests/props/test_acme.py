"""acme: certificates from Let's Encrypt's test CA, pebble (Debian's), on
loopback, with the real certbot: issued, renewed, a failed challenge that
replaces nothing, and a key kept private.

pebble resolves every name through pebble-challtestsrv's mock DNS (to
127.0.0.1) and checks HTTP-01 on a port of this machine's loopback, where a
plain HTTP server serves the web root the property writes the challenge
to.  All of it on free ports, stopped when the module is done; certbot's
files go to a directory of the test, never /etc/letsencrypt."""

import functools
import http.server
import json
import os
import shutil
import socket
import subprocess
import threading

import pytest

import hy  # noqa: F401
from consfig.errors import PropspecError
from consfig.props import acme

from harness import wait_until
from sshlab import free_port
from proptest import LOCAL, apply_twice, checks_clean, deploy_propspec, failure_text, said, this_os

pytestmark = pytest.mark.skipif(not (shutil.which("pebble") and shutil.which("certbot")),
                                reason="pebble and certbot are not installed")


def _listening(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


class Pebble:
    def __init__(self, directory):
        self.dir = directory
        self.procs = []

    def start(self):
        d = self.dir
        ca_key, ca, key, cert = (str(d / n) for n in ["ca.key", "ca.pem", "key.pem", "cert.pem"])
        run = functools.partial(subprocess.run, check=True, capture_output=True, timeout=60)
        run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-keyout", ca_key, "-out", ca, "-days", "2", "-subj", "/CN=consfig test CA"])
        run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-keyout", key, "-out", str(d / "req.csr"), "-subj", "/CN=127.0.0.1"])
        (d / "ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        run(["openssl", "x509", "-req", "-in", str(d / "req.csr"), "-CA", ca, "-CAkey", ca_key,
             "-CAcreateserial", "-out", cert, "-days", "2", "-extfile", str(d / "ext")])
        self.ca = ca
        self.dns, self.acme, self.http = free_port(), free_port(), free_port()
        (d / "pebble.json").write_text(json.dumps({"pebble": {
            "listenAddress": f"127.0.0.1:{self.acme}",
            "managementListenAddress": f"127.0.0.1:{free_port()}",
            "certificate": cert, "privateKey": key,
            "httpPort": self.http, "tlsPort": free_port(),
            "ocspResponderURL": "", "externalAccountBindingRequired": False}}))
        self.procs.append(subprocess.Popen(
            ["pebble-challtestsrv", "-defaultIPv4", "127.0.0.1", "-defaultIPv6", "",
             "-dns01", f"127.0.0.1:{self.dns}", "-http01", "", "-https01", "", "-tlsalpn01", "",
             "-management", f"127.0.0.1:{free_port()}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self.procs.append(subprocess.Popen(
            ["pebble", "-config", str(d / "pebble.json"), "-dnsserver", f"127.0.0.1:{self.dns}"],
            env={**os.environ, "PEBBLE_VA_NOSLEEP": "1", "PEBBLE_WFE_NONCEREJECT": "0"},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_until(lambda: _listening(self.acme), 30, "pebble to listen")
        self.server = f"https://127.0.0.1:{self.acme}/dir"

    def stop(self):
        for p in self.procs:
            p.terminate()
            p.wait(timeout=30)


class WebRoot:
    """A plain HTTP server on PORT serving DIRECTORY, while it is started."""

    def __init__(self, directory, port):
        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(directory))
        handler.log_message = lambda *a: None
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def pebble(tmp_path_factory):
    p = Pebble(tmp_path_factory.mktemp("pebble"))
    try:
        p.start()
        yield p
    finally:
        p.stop()


@pytest.fixture
def setup(pebble, tmp_path):
    webroot = tmp_path / "www"
    webroot.mkdir()
    config = tmp_path / "letsencrypt"

    def cert(name="site", domains=("example.test", "www.example.test"), **kw):
        return acme.certificate(name, list(domains), webroot=str(webroot), server=pebble.server,
                                ca_bundle=pebble.ca, config_dir=str(config), **kw)
    return pebble, webroot, config, cert


def serial(config, name="site"):
    return subprocess.run(["openssl", "x509", "-noout", "-serial", "-in",
                           str(config / "live" / name / "cert.pem")],
                          capture_output=True, text=True, timeout=30).stdout


def test_a_certificate_is_issued_once_its_key_private(setup):
    pebble, webroot, config, cert = setup
    with WebRoot(webroot, pebble.http):
        # certbot is this machine's (the module is skipped without it):
        # acme.installed finds it there.
        events = apply_twice(LOCAL, [this_os(), acme.installed(), cert()])
        checks_clean(LOCAL, [this_os(), acme.installed(), cert()])
    assert "certificate site from" in said(events)
    names = subprocess.run(["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in",
                            str(config / "live/site/cert.pem")], capture_output=True, text=True).stdout
    assert "DNS:example.test" in names and "DNS:www.example.test" in names, names
    key = (config / "live/site/privkey.pem").resolve()
    assert key.stat().st_mode & 0o077 == 0, oct(key.stat().st_mode)
    assert "PRIVATE KEY" not in json.dumps(events), "the key is in no event"


def test_a_certificate_due_for_renewal_is_renewed(setup):
    pebble, webroot, config, cert = setup
    with WebRoot(webroot, pebble.http):
        deploy_propspec(LOCAL, cert())
        first = serial(config)
        # pebble's certificates are good for five years: ten years before
        # their end is now.
        outcome, events = deploy_propspec(LOCAL, cert(renew_before=3650))
    assert outcome.status == "changed", failure_text(events)
    assert serial(config) != first


def test_a_failed_challenge_replaces_nothing(setup):
    pebble, webroot, config, cert = setup
    with WebRoot(webroot, pebble.http):
        deploy_propspec(LOCAL, cert())
    before = serial(config)
    # Nothing serves the web root now: the CA cannot see the challenge.
    outcome, events = deploy_propspec(LOCAL, cert(domains=["example.test", "new.example.test"]),
                                      check=False)
    assert outcome.status == "failed"
    assert "certbot could not get certificate site; what was there is as it was" in failure_text(events)
    assert serial(config) == before


def test_check_mode_says_it_would_ask_and_asks_nothing(setup):
    pebble, webroot, config, cert = setup
    outcome, events = deploy_propspec(LOCAL, cert(), check_mode=True)
    assert outcome.exit_code(True) == 2
    assert "there is no certificate site: one would be asked of" in said(events)
    assert not (config / "live").exists()


@pytest.mark.parametrize("bad", [
    dict(name="-x"), dict(domains=[]), dict(domains=["a b"]), dict(domains=["x;reboot"]),
    dict(server="http://insecure.example/dir"), dict(webroot="relative"),
    dict(email="--register"), dict(renew_before=0),
])
def test_hostile_arguments_are_refused_where_written(bad):
    args = dict(name="site", domains=["example.test"], webroot="/var/www")
    args.update(bad)
    with pytest.raises(PropspecError):
        acme.certificate(args.pop("name"), args.pop("domains"), **args)
