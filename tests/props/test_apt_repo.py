"""apt's third-party repositories, in the Debian chroot: keys in
/etc/apt/keyrings, deb822 sources with Signed-By, pinning, and the indexes
updated when sources change — against real repositories signed with gpg
and read by the chroot's apt through file: URIs."""

import subprocess

import pytest

import hy  # noqa: F401
from hy.models import Keyword
from consfig.errors import PropspecError
from consfig.props import apt, cmd, os as os_

from aptrepo import PACKAGE, SigningKey, make_repo
from proptest import (apply_twice, checks_clean, deploy_propspec, diffs, failure_text, in_chroot,
                      statuses, this_os, unapply)

pytestmark = pytest.mark.chroot


@pytest.fixture(scope="module")
def key(tmp_path_factory):
    k = SigningKey(tmp_path_factory.mktemp("gnupg"))
    yield k
    k.close()


@pytest.fixture(scope="module")
def other_key(tmp_path_factory):
    k = SigningKey(tmp_path_factory.mktemp("gnupg-other"), uid="someone else <x@example.invalid>")
    yield k
    k.close()


@pytest.fixture(scope="module")
def repos(debian_chroot, key):
    """Two repositories inside the chroot: /srv/repo-1 with the test package
    at 1.0, /srv/repo-2 with it at 2.0, both signed by KEY."""
    make_repo(str(debian_chroot / "srv/repo-1"), key, version="1.0")
    make_repo(str(debian_chroot / "srv/repo-2"), key, version="2.0")
    return debian_chroot


def source(uri="file:///srv/repo-1", **kw):
    return apt.source("test", uris=[uri], suites=["./"], **kw)


def installed_version(root):
    r = in_chroot(root, f"dpkg-query -W -f '${{Version}}' {PACKAGE} 2>/dev/null", check=False)
    return r.stdout if r.returncode == 0 else None


def purge(root):
    in_chroot(root, f"dpkg --purge {PACKAGE} >/dev/null 2>&1; "
                    "rm -f /etc/apt/sources.list.d/test.* /etc/apt/keyrings/test.* "
                    "/etc/apt/keyrings/other.* /etc/apt/preferences.d/test.pref "
                    "/var/lib/consfig/apt-update-needed; apt-get -qq update >/dev/null 2>&1 || true")


@pytest.fixture
def chroot(repos):
    purge(repos)
    yield repos
    purge(repos)


def test_a_package_installs_from_a_source_signed_by_its_key(chroot, chroot_chain, key):
    spec = [this_os(), apt.trusts_key("test", key.armored), source(), apt.installed(PACKAGE)]
    apply_twice(chroot_chain, spec)
    checks_clean(chroot_chain, spec)
    assert installed_version(chroot) == "1.0"
    keyring = chroot / "etc/apt/keyrings/test.asc"
    assert keyring.read_text() == key.armored
    assert oct(keyring.stat().st_mode & 0o777) == "0o644"
    assert (chroot / "etc/apt/sources.list.d/test.sources").read_text() == (
        "Types: deb\nURIs: file:///srv/repo-1\nSuites: ./\n"
        "Signed-By: /etc/apt/keyrings/test.asc\n")
    assert not (chroot / "var/lib/consfig/apt-update-needed").exists(), \
        "the update the source asked for was made"


def test_a_binary_key_goes_to_a_gpg_keyring(chroot, chroot_chain, key):
    apply_twice(chroot_chain, [this_os(), apt.trusts_key("test", key.binary), source(),
                               apt.installed(PACKAGE)])
    assert (chroot / "etc/apt/keyrings/test.gpg").read_bytes() == key.binary
    assert "Signed-By: /etc/apt/keyrings/test.gpg\n" in \
        (chroot / "etc/apt/sources.list.d/test.sources").read_text()
    assert installed_version(chroot) == "1.0"


def test_a_key_given_in_the_other_form_replaces_the_first(chroot, chroot_chain, key):
    deploy_propspec(chroot_chain, [this_os(), apt.trusts_key("test", key.binary)])
    apply_twice(chroot_chain, [this_os(), apt.trusts_key("test", key.armored)])
    assert (chroot / "etc/apt/keyrings/test.asc").exists()
    assert not (chroot / "etc/apt/keyrings/test.gpg").exists()


def test_a_source_trusts_no_key_but_its_own(chroot, chroot_chain, key, other_key):
    # Signed by KEY, but the source trusts only OTHER-KEY: apt refuses it,
    # though KEY is in /etc/apt/keyrings too.
    deploy_propspec(chroot_chain, [this_os(), apt.trusts_key("test", key.armored),
                                   apt.trusts_key("other", other_key.armored),
                                   source(signed_by="other")])
    outcome, events = deploy_propspec(chroot_chain, [this_os(), apt.installed(PACKAGE)],
                                      check=False)
    assert outcome.status == "failed"
    assert "NO_PUBKEY" in failure_text(events) or "not signed" in failure_text(events), \
        failure_text(events)
    assert installed_version(chroot) is None


def test_a_source_naming_a_key_the_host_lacks_fails_saying_what_to_add(chroot, chroot_chain):
    outcome, events = deploy_propspec(chroot_chain, [this_os(), source()], check=False)
    assert outcome.status == "failed"
    assert '(apt.trusts-key "test" KEY)' in failure_text(events), failure_text(events)
    assert not (chroot / "etc/apt/sources.list.d/test.sources").exists()


def test_a_source_given_a_keyring_path_uses_it(chroot, chroot_chain, key):
    (chroot / "usr/share/keyrings/consfig-test.gpg").write_bytes(key.binary)
    apply_twice(chroot_chain, [this_os(), source(signed_by="/usr/share/keyrings/consfig-test.gpg"),
                               apt.installed(PACKAGE)])
    assert installed_version(chroot) == "1.0"


def test_an_old_one_line_list_of_the_same_name_is_removed(chroot, chroot_chain, key):
    old = chroot / "etc/apt/sources.list.d/test.list"
    old.write_text("deb [signed-by=/etc/apt/keyrings/vendor.gpg] file:///srv/repo-1 ./\n")
    apply_twice(chroot_chain, [this_os(), apt.trusts_key("test", key.armored), source()])
    assert not old.exists()


def test_a_source_change_is_remembered_until_an_update_even_across_a_failed_run(
        chroot, chroot_chain, key):
    apply_twice(chroot_chain, [this_os(), apt.trusts_key("test", key.armored), source(),
                               apt.installed(PACKAGE)])
    assert installed_version(chroot) == "1.0"
    # The source moves to the repository with 2.0, and the deployment fails
    # before any apt property could update the indexes.
    trust = apt.trusts_key("test", key.armored)
    outcome, events = deploy_propspec(chroot_chain, [this_os(), trust, source("file:///srv/repo-2"),
                                                     cmd.script("exit 3")], check=False)
    assert statuses(events)["apt source test"] == "changed", statuses(events)
    assert outcome.status == "failed"
    assert (chroot / "var/lib/consfig/apt-update-needed").exists()
    # The next deployment has nothing to change in the sources, yet its
    # upgrade sees 2.0: it updated first.
    deploy_propspec(chroot_chain, [this_os(), trust, source("file:///srv/repo-2"), apt.upgraded()])
    assert installed_version(chroot) == "2.0"
    assert not (chroot / "var/lib/consfig/apt-update-needed").exists()


def test_pinned_holds_a_package_at_a_version(chroot, chroot_chain, key):
    deploy_propspec(chroot_chain, [this_os(), apt.trusts_key("test", key.armored),
                                   apt.source("test", uris=["file:///srv/repo-1", "file:///srv/repo-2"],
                                              suites=["./"])])
    apply_twice(chroot_chain, [this_os(), apt.pinned("test", PACKAGE, 1001, version="1.0")])
    assert (chroot / "etc/apt/preferences.d/test.pref").read_text() == (
        f"Package: {PACKAGE}\nPin: version 1.0\nPin-Priority: 1001\n")
    deploy_propspec(chroot_chain, [this_os(), apt.installed(PACKAGE)])
    assert installed_version(chroot) == "1.0", "the pin, not the newest version, won"
    policy = in_chroot(chroot, f"apt-cache policy {PACKAGE}").stdout
    assert "Candidate: 1.0" in policy, policy
    unapply(chroot_chain, [this_os(), apt.pinned("test", PACKAGE, 1001, version="1.0")])
    assert not (chroot / "etc/apt/preferences.d/test.pref").exists()
    assert "Candidate: 2.0" in in_chroot(chroot, f"apt-cache policy {PACKAGE}").stdout


def test_check_mode_shows_the_source_it_would_write_and_writes_nothing(chroot, chroot_chain, key):
    outcome, events = deploy_propspec(chroot_chain, [this_os(), apt.trusts_key("test", key.armored),
                                                     source()], check_mode=True)
    assert outcome.exit_code(True) == 2, statuses(events)
    shown = "".join(e["text"] for e in diffs(events))
    assert "+URIs: file:///srv/repo-1" in shown, shown
    assert "+Signed-By: /etc/apt/keyrings/test.asc" in shown, shown
    assert not (chroot / "etc/apt/sources.list.d/test.sources").exists()
    assert not (chroot / "etc/apt/keyrings/test.asc").exists()
    assert not (chroot / "var/lib/consfig/apt-update-needed").exists()


def test_unapplied_source_and_key_are_removed(chroot, chroot_chain, key):
    spec = [this_os(), apt.trusts_key("test", key.armored), source()]
    deploy_propspec(chroot_chain, spec)
    unapply(chroot_chain, spec)
    assert not (chroot / "etc/apt/sources.list.d/test.sources").exists()
    assert not (chroot / "etc/apt/keyrings/test.asc").exists()


def test_a_key_from_data_is_installed_in_binary_form(chroot, chroot_chain, key, tmp_path):
    from consfig.data.items import register_data_source, reset_data_sources
    (tmp_path / "_apt").mkdir()
    (tmp_path / "_apt/test-key").write_text(key.armored)
    reset_data_sources()
    register_data_source("files-tree", location=str(tmp_path))
    try:
        apply_twice(chroot_chain, [this_os(), apt.trusts_key("test", data=["_apt", "test-key"]),
                                   source(), apt.installed(PACKAGE)])
    finally:
        reset_data_sources()
    assert (chroot / "etc/apt/keyrings/test.gpg").read_bytes() == key.binary
    assert installed_version(chroot) == "1.0"


def holding(root, lock, seconds):
    """A process holding the fcntl lock on ROOT/LOCK, as apt takes it, for
    SECONDS or until killed; returns it once the lock is held."""
    p = subprocess.Popen(
        ["python3", "-c", "import fcntl, sys, time\n"
                          "f = open(sys.argv[1], 'w'); fcntl.lockf(f, fcntl.LOCK_EX)\n"
                          "print('held', flush=True); time.sleep(float(sys.argv[2]))",
         str(root / lock), str(seconds)],
        stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "held\n"
    return p


def test_an_update_waits_for_the_lists_lock_another_apt_holds(chroot, chroot_chain):
    holder = holding(chroot, "var/lib/apt/lists/lock", 3)
    try:
        outcome, events = deploy_propspec(chroot_chain, [this_os(), apt.updated()])
        assert holder.poll() is not None, "it finished only after the lock was released"
        assert any("waiting for it" in e.get("text", "") for e in events), events
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_held_past_the_lock_timeout_fails_saying_so(chroot, chroot_chain):
    holder = holding(chroot, "var/lib/dpkg/lock-frontend", 120)
    try:
        outcome, events = deploy_propspec(chroot_chain, [this_os(), apt.lock_timeout(2),
                                                         apt.installed("hello")], check=False)
        assert outcome.status == "failed"
        assert "waited 2 s for the lock" in failure_text(events), failure_text(events)
        assert holder.poll() is None, "it gave up while the lock was still held"
    finally:
        holder.kill()
        holder.wait()


def test_install_waits_for_dpkgs_lock(chroot, chroot_chain):
    in_chroot(chroot, "dpkg --purge hello >/dev/null 2>&1 || true")
    holder = holding(chroot, "var/lib/dpkg/lock-frontend", 3)
    try:
        deploy_propspec(chroot_chain, [this_os(), apt.installed("hello")])
        assert holder.poll() is not None
    finally:
        holder.kill()
        holder.wait()
    assert in_chroot(chroot, "hello").stdout == "Hello, world!\n"


def test_backports_of_the_hosts_suite_are_enabled(chroot, chroot_chain):
    from proptest import host_mirror, host_suite
    suite = host_suite()
    spec = [this_os(), apt.mirrors(host_mirror(suite)), apt.backports_enabled()]
    try:
        apply_twice(chroot_chain, spec)
        checks_clean(chroot_chain, spec)
        text = (chroot / "etc/apt/sources.list.d/debian-backports.sources").read_text()
        assert f"Suites: {suite}-backports\n" in text, text
        assert "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n" in text, text
        deploy_propspec(chroot_chain, [this_os(), apt.updated()])
        policy = in_chroot(chroot, "apt-cache policy").stdout
        assert f"n={suite}-backports" in policy, policy
    finally:
        unapply(chroot_chain, spec)
        deploy_propspec(chroot_chain, [this_os(), apt.updated()])
    assert not (chroot / "etc/apt/sources.list.d/debian-backports.sources").exists()


def test_unattended_upgrades_run_daily_as_apt_reads_it(chroot, chroot_chain):
    spec = [this_os(), apt.unattended_upgrades_enabled(mail="root@example.org",
                                                       automatic_reboot=True,
                                                       reboot_time="03:30")]
    apply_twice(chroot_chain, spec)
    checks_clean(chroot_chain, spec)
    dump = in_chroot(chroot, "apt-config dump").stdout
    for line in ['APT::Periodic::Update-Package-Lists "1";',
                 'APT::Periodic::Unattended-Upgrade "1";',
                 'Unattended-Upgrade::Mail "root@example.org";',
                 'Unattended-Upgrade::Automatic-Reboot-Time "03:30";']:
        assert line in dump, dump
    unapply(chroot_chain, spec)
    assert 'APT::Periodic::Unattended-Upgrade "0";' in in_chroot(chroot, "apt-config dump").stdout


def test_hostile_values_are_refused_where_they_are_written():
    for make in [lambda: apt.source("../../etc/passwd", uris=["file:///x"], suites=["./"]),
                 lambda: apt.source("t", uris=["file:///x\nURIs: http://evil"], suites=["./"]),
                 lambda: apt.source("t", uris=["file:///x"], suites=["stable\nSigned-By: /x"],
                                    components=["main"]),
                 lambda: apt.source("t", uris=["file:///x"], suites=["./"], signed_by="-x"),
                 lambda: apt.source("t", uris=["file:///x"], suites=["stable"],
                                    components=["main contrib"]),
                 lambda: apt.pinned("p", ["x\nPin: origin evil"], 1, release="a=b"),
                 lambda: apt.pinned("p.d", "x", 1, release="a=b"),
                 lambda: apt.trusts_key("$(reboot)", "x"),
                 lambda: apt.unattended_upgrades_enabled(mail='a@b"; APT::x "1'),
                 lambda: apt.lock_timeout(-1),
                 lambda: apt.backports_enabled(components=["main\nSigned-By: /tmp/evil"]),
                 lambda: apt.backports_enabled(components=["main contrib"])]:
        with pytest.raises(PropspecError):
            make()


def test_a_private_key_is_refused_without_being_shown():
    secret = ("-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQVYBGSECRETSECRET\n"
              "-----END PGP PRIVATE KEY BLOCK-----\n")
    with pytest.raises(PropspecError) as e:
        apt.trusts_key("k", secret)
    assert "SECRETSECRET" not in str(e.value)
    assert "private key" in str(e.value)


def test_backports_need_a_stable_suite():
    from consfig.model.host import make_host, preprocess_host
    from consfig.errors import ConsfigError
    from consfig.apply.combinators import eseqprops
    host = make_host("bp.example.invalid", None, None,
                     eseqprops(os_.debian_unstable(Keyword("amd64")), apt.backports_enabled()))
    with pytest.raises(ConsfigError) as e:
        preprocess_host(host)
    assert "debian-stable" in str(e.value), str(e.value)
