"""Web servers in the test chroot: TLS certificates from data, nginx sites,
Apache sites, snippets and modules, each change tested by the server's own
configuration test (`nginx -t`, `apache2ctl configtest`, run in the chroot)
before a reload.  No server runs in a chroot, so no reload happens here:
the properties say so."""

import os
import subprocess

import pytest

import hy  # noqa: F401
from consfig.apply.combinators import on_change
from consfig.data.items import reset_data_sources
from consfig.errors import PropspecError
from consfig.props import apache, apt, nginx, service, tls

from proptest import (HOSTNAME, apply_twice, checks_clean, data_item, deploy_propspec, diffs, failure_text,
                      in_chroot, said, this_os, unapply)

pytestmark = pytest.mark.chroot


@pytest.fixture(scope="module")
def root(debian_chroot, chroot_chain):
    deploy_propspec(chroot_chain, [this_os(), service.without_starting_services(
        nginx.installed(), apache.installed(), apt.installed("ssl-cert", "openssl"))])
    return debian_chroot


@pytest.fixture(autouse=True)
def no_sources():
    reset_data_sources()
    yield
    reset_data_sources()


def keypair(directory, cn, days=30):
    key, cert = directory / f"{cn}.key", directory / f"{cn}.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}",
                    "-days", str(days), "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=120)
    return cert.read_bytes(), key.read_bytes()


def provide(tmp_path, name, cert, key, iden1=HOSTNAME):
    data_item(tmp_path, iden1, f"/etc/ssl/certs/{name}.pem", cert)
    data_item(tmp_path, iden1, f"/etc/ssl/private/{name}.key", key)


def mode_owner(path):
    st = os.stat(path)
    return st.st_mode & 0o7777, st.st_uid, st.st_gid


def gid(root, group):
    return int(in_chroot(root, f"getent group {group} | cut -d: -f3").stdout)


# TLS


def test_certificate_and_key_are_installed_from_data(tmp_path, chroot_chain, root):
    cert, key = keypair(tmp_path, "shop")
    provide(tmp_path, "shop", cert, key)
    events = apply_twice(chroot_chain, [this_os(), tls.certificate_installed("shop")])
    assert (root / "etc/ssl/certs/shop.pem").read_bytes() == cert
    assert (root / "etc/ssl/private/shop.key").read_bytes() == key
    assert mode_owner(root / "etc/ssl/private/shop.key") == (0o640, 0, gid(root, "ssl-cert"))
    assert mode_owner(root / "etc/ssl/certs/shop.pem") == (0o644, 0, 0)
    assert b"PRIVATE KEY" not in str(events).encode(), "the key is in no event"
    assert not [d for d in diffs(events) if d["path"].endswith(".key")]


def test_a_key_without_a_group_is_roots_alone(tmp_path, chroot_chain, root):
    cert, key = keypair(tmp_path, "solo")
    provide(tmp_path, "solo", cert, key, iden1="_web")
    apply_twice(chroot_chain, [this_os(), tls.certificate_installed("solo", iden1="_web",
                                                                    key_group=None)])
    assert mode_owner(root / "etc/ssl/private/solo.key") == (0o600, 0, 0)
    unapply(chroot_chain, tls.certificate_installed("solo", iden1="_web", key_group=None))
    assert not (root / "etc/ssl/private/solo.key").exists()
    assert not (root / "etc/ssl/certs/solo.pem").exists()


def test_a_key_that_is_not_the_certificates_changes_nothing(tmp_path, chroot_chain, root):
    cert, key = keypair(tmp_path, "pair")
    provide(tmp_path, "pair", cert, key)
    deploy_propspec(chroot_chain, [this_os(), tls.certificate_installed("pair")])
    reset_data_sources()
    new_cert, _ = keypair(tmp_path, "other")
    provide(tmp_path, "pair", new_cert, key)
    outcome, events = deploy_propspec(chroot_chain, [this_os(), tls.certificate_installed("pair")],
                                      check=False)
    assert outcome.status == "failed"
    assert "is not the key of the certificate" in failure_text(events), failure_text(events)
    assert (root / "etc/ssl/certs/pair.pem").read_bytes() == cert, "the old certificate stays"


def test_a_certificate_that_is_no_certificate_is_refused(tmp_path, chroot_chain, root):
    _, key = keypair(tmp_path, "junk")
    provide(tmp_path, "junk", b"-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n", key)
    outcome, events = deploy_propspec(chroot_chain, [this_os(), tls.certificate_installed("junk")],
                                      check=False)
    assert outcome.status == "failed"
    assert "is not one openssl can read" in failure_text(events)
    assert not (root / "etc/ssl/private/junk.key").exists()


def test_check_mode_says_what_would_be_installed_and_installs_nothing(tmp_path, chroot_chain, root):
    cert, key = keypair(tmp_path, "later")
    provide(tmp_path, "later", cert, key)
    outcome, events = deploy_propspec(chroot_chain, [this_os(), tls.certificate_installed("later")],
                                      check_mode=True)
    assert outcome.exit_code(True) == 2
    assert "/etc/ssl/private/later.key would be written from data" in said(events)
    assert not (root / "etc/ssl/private/later.key").exists()


# nginx

SITE = """server {{
    listen 8443 ssl;
    server_name shop.example;
    ssl_certificate /etc/ssl/certs/{name}.pem;
    ssl_certificate_key /etc/ssl/private/{name}.key;
    root /var/www/html;
}}
"""


def test_nginx_site_is_written_enabled_and_tested(tmp_path, chroot_chain, root):
    cert, key = keypair(tmp_path, "ngx")
    provide(tmp_path, "ngx", cert, key)
    events = apply_twice(chroot_chain, [this_os(), tls.certificate_installed("ngx"),
                                        nginx.site_enabled("ngx", SITE.format(name="ngx"))])
    assert (root / "etc/nginx/sites-available/ngx").read_text() == SITE.format(name="ngx")
    assert os.readlink(root / "etc/nginx/sites-enabled/ngx") == "/etc/nginx/sites-available/ngx"
    assert "not reloading nginx: services are not started in a chroot" in said(events)
    in_chroot(root, "nginx -t -q")
    unapply(chroot_chain, nginx.site_enabled("ngx", SITE.format(name="ngx")))
    assert not os.path.lexists(root / "etc/nginx/sites-enabled/ngx")
    assert (root / "etc/nginx/sites-available/ngx").exists(), "the site's file stays"


def test_an_nginx_site_that_fails_the_test_is_never_left_enabled(chroot_chain, root):
    bad = "server { listen 8080; no_such_directive on; }\n"
    outcome, events = deploy_propspec(chroot_chain, [this_os(), nginx.site_enabled("broken", bad)],
                                      check=False)
    assert outcome.status == "failed"
    text = failure_text(events)
    assert "nginx site broken fails `nginx -t -q`; put back as it was" in text, text
    assert "no_such_directive" in text, text
    assert not os.path.lexists(root / "etc/nginx/sites-enabled/broken")
    assert not (root / "etc/nginx/sites-available/broken").exists()
    in_chroot(root, "nginx -t -q")


def test_a_bad_change_to_an_enabled_nginx_site_puts_the_old_text_back(chroot_chain, root):
    good = "server { listen 8081; server_name good.example; }\n"
    deploy_propspec(chroot_chain, [this_os(), nginx.site_enabled("good", good)])
    outcome, events = deploy_propspec(
        chroot_chain, [this_os(), nginx.site_available("good", "server { listen 8081; oops }\n")],
        check=False)
    assert outcome.status == "failed"
    assert (root / "etc/nginx/sites-available/good").read_text() == good
    assert os.path.lexists(root / "etc/nginx/sites-enabled/good")


def test_nginx_check_mode_shows_the_diff(chroot_chain, root):
    text = "server { listen 8082; }\n"
    outcome, events = deploy_propspec(chroot_chain, [this_os(), nginx.site_enabled("peek", text)],
                                      check_mode=True)
    assert outcome.exit_code(True) == 2
    assert [d["path"] for d in diffs(events)] == ["/etc/nginx/sites-available/peek"]
    assert "/etc/nginx/sites-enabled/peek would link to /etc/nginx/sites-available/peek" in said(events)
    assert not (root / "etc/nginx/sites-available/peek").exists()


def test_nginx_default_site_is_disabled(chroot_chain, root):
    apply_twice(chroot_chain, [this_os(), nginx.site_disabled("default")])
    assert not os.path.lexists(root / "etc/nginx/sites-enabled/default")
    assert (root / "etc/nginx/sites-available/default").exists()


def test_nginx_reloaded_refuses_a_configuration_that_fails(chroot_chain, root):
    events = deploy_propspec(chroot_chain, [this_os(), nginx.reloaded()])[1]
    assert "not reloading nginx" in said(events)
    (root / "etc/nginx/conf.d/typo.conf").write_text("this is not nginx\n")
    try:
        outcome, events = deploy_propspec(chroot_chain, [this_os(), nginx.reloaded()], check=False)
        assert outcome.status == "failed"
        assert "nginx's configuration fails `nginx -t -q`; nothing reloaded" in failure_text(events)
    finally:
        (root / "etc/nginx/conf.d/typo.conf").unlink()


def test_a_site_file_that_is_not_a_link_is_left_alone(chroot_chain, root):
    (root / "etc/nginx/sites-enabled/mine").write_text("server { listen 8083; }\n")
    try:
        outcome, events = deploy_propspec(
            chroot_chain, [this_os(), nginx.site_enabled("mine", "server { listen 8084; }\n")],
            check=False)
        assert outcome.status == "failed"
        assert "/etc/nginx/sites-enabled/mine is not a symbolic link; not replacing it" \
            in failure_text(events)
        assert (root / "etc/nginx/sites-enabled/mine").read_text() == "server { listen 8083; }\n"
    finally:
        (root / "etc/nginx/sites-enabled/mine").unlink()


def test_hostile_nginx_text_is_only_ever_file_content(chroot_chain, root):
    text = "# $(touch /tmp/pwned) `touch /tmp/pwned` '\"\nserver { listen 8085; }\n"
    apply_twice(chroot_chain, [this_os(), nginx.site_enabled("quoted", text)])
    assert (root / "etc/nginx/sites-available/quoted").read_text() == text
    assert not (root / "tmp/pwned").exists()


# Apache

VHOST = """<VirtualHost *:8090>
    ServerName {name}.example
    DocumentRoot /var/www/html
</VirtualHost>
"""


def test_apache_site_is_written_enabled_and_tested(chroot_chain, root):
    # With Apache as the module installed it, and reloaded on a change.
    spec = [this_os(), apache.installed(), apache.site_available("blog", VHOST.format(name="blog")),
            on_change(apache.site_enabled("blog", VHOST.format(name="blog")), apache.reloaded())]
    events = apply_twice(chroot_chain, spec)
    checks_clean(chroot_chain, spec)
    assert (root / "etc/apache2/sites-available/blog.conf").read_text() == VHOST.format(name="blog")
    assert os.path.lexists(root / "etc/apache2/sites-enabled/blog.conf")
    assert "not reloading apache2: services are not started in a chroot" in said(events)
    unapply(chroot_chain, apache.site_enabled("blog"))
    assert not os.path.lexists(root / "etc/apache2/sites-enabled/blog.conf")
    assert (root / "etc/apache2/sites-available/blog.conf").exists()


def test_an_apache_site_that_fails_the_test_is_never_left_enabled(chroot_chain, root):
    bad = "<VirtualHost *:8091>\n    NoSuchDirective on\n</VirtualHost>\n"
    outcome, events = deploy_propspec(chroot_chain, [this_os(), apache.site_enabled("bad", bad)],
                                      check=False)
    assert outcome.status == "failed"
    text = failure_text(events)
    assert "Apache site bad fails `apache2ctl configtest`; put back as it was" in text, text
    assert "NoSuchDirective" in text, text
    assert not os.path.lexists(root / "etc/apache2/sites-enabled/bad.conf")
    assert not (root / "etc/apache2/sites-available/bad.conf").exists()
    in_chroot(root, "apache2ctl configtest")


def test_apache_module_is_enabled_with_its_dependencies_and_disabled(chroot_chain, root):
    apply_twice(chroot_chain, [this_os(), apache.module_enabled("ssl")])
    enabled = root / "etc/apache2/mods-enabled"
    assert os.path.lexists(enabled / "ssl.load")
    assert os.path.lexists(enabled / "socache_shmcb.load"), "its dependency too"
    unapply(chroot_chain, apache.module_enabled("ssl"))
    assert not os.path.lexists(enabled / "ssl.load")
    apply_twice(chroot_chain, [this_os(), apache.module_disabled("socache_shmcb")])
    checks_clean(chroot_chain, [this_os(), apache.module_disabled("socache_shmcb")])
    assert not os.path.lexists(enabled / "socache_shmcb.load")


def test_a_module_whose_configuration_fails_is_undone_with_its_dependencies(chroot_chain, root):
    # ssl.conf is fine; a snippet that needs a directive ssl alone does not
    # provide makes the test fail after a2enmod enabled ssl and socache_shmcb.
    conf = root / "etc/apache2/mods-available/ssl.conf"
    original = conf.read_bytes()
    conf.write_bytes(original + b"\nSSLNoSuchThing on\n")
    try:
        outcome, events = deploy_propspec(chroot_chain, [this_os(), apache.module_enabled("ssl")],
                                          check=False)
        assert outcome.status == "failed"
        assert "Apache module ssl fails `apache2ctl configtest`; put back as it was" \
            in failure_text(events)
        enabled = root / "etc/apache2/mods-enabled"
        assert not os.path.lexists(enabled / "ssl.load")
        assert not os.path.lexists(enabled / "socache_shmcb.load")
    finally:
        conf.write_bytes(original)
    in_chroot(root, "apache2ctl configtest")


def test_a_module_that_does_not_exist_is_a_clear_failure(chroot_chain, root):
    outcome, events = deploy_propspec(chroot_chain, [this_os(), apache.module_enabled("nosuchmod")],
                                      check=False)
    assert outcome.status == "failed"
    assert "Module nosuchmod does not exist" in failure_text(events), failure_text(events)


def test_apache_conf_snippet_is_enabled(chroot_chain, root):
    text = "ServerTokens Prod\n"
    apply_twice(chroot_chain, [this_os(), apache.conf_enabled("tokens", text)])
    checks_clean(chroot_chain, [this_os(), apache.conf_enabled("tokens", text)])
    assert os.path.lexists(root / "etc/apache2/conf-enabled/tokens.conf")
    unapply(chroot_chain, apache.conf_enabled("tokens", text))
    assert not os.path.lexists(root / "etc/apache2/conf-enabled/tokens.conf")


def test_apache_default_site_is_disabled(chroot_chain, root):
    apply_twice(chroot_chain, [this_os(), apache.site_disabled("000-default")])
    checks_clean(chroot_chain, [this_os(), apache.site_disabled("000-default")])
    assert not os.path.lexists(root / "etc/apache2/sites-enabled/000-default.conf")


def test_apache_https_site_with_a_certificate_from_data(tmp_path, chroot_chain, root):
    cert, key = keypair(tmp_path, "secure")
    provide(tmp_path, "secure", cert, key)
    vhost = ("<VirtualHost *:8443>\n    ServerName secure.example\n    SSLEngine on\n"
             "    SSLCertificateFile /etc/ssl/certs/secure.pem\n"
             "    SSLCertificateKeyFile /etc/ssl/private/secure.key\n</VirtualHost>\n")
    spec = [this_os(), tls.certificate_installed("secure"), apache.module_enabled("ssl"),
            apache.site_enabled("secure", vhost)]
    apply_twice(chroot_chain, spec)
    checks_clean(chroot_chain, spec)
    in_chroot(root, "apache2ctl configtest")


@pytest.mark.parametrize("call", [
    lambda: nginx.site_enabled("../../etc/passwd"),
    lambda: nginx.site_enabled("-rf"),
    lambda: nginx.site_enabled("a b"),
    lambda: nginx.site_enabled("x\ny"),
    lambda: nginx.site_available("x", "a\x00b"),
    lambda: apache.site_enabled("../x"),
    lambda: apache.module_enabled("ssl; rm -rf /"),
    lambda: apache.conf_enabled(".hidden"),
    lambda: tls.certificate_installed("../../etc/shadow"),
    lambda: tls.certificate_installed("x", key_group="-x"),
    lambda: tls.certificate_installed("x", iden1="a\nb"),
])
def test_hostile_names_are_refused_when_written(call):
    with pytest.raises(PropspecError):
        call()
