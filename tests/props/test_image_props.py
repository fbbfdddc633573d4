"""image.pulled-from and image.applied-periodically, inside a Debian chroot
with python3 (and, for the systemd tests, systemd) installed.

No systemd runs in the chroot, and tests never touch this machine's own
services, so a timer is never started: the tests check the units with
`systemd-analyze verify` and then run the service's own command (its
ExecStart=) inside the chroot, as the timer would.  The cron fallback is
run the same way, through the job's script.  Images are stand-ins (a zip
application noting each run in /var/tmp/applied); the puller fetches them
from a loopback HTTP server outside the chroot."""

import io
import json
import re
import shlex
import shutil
import subprocess
import time
import zipfile

import pytest

import hy  # noqa: F401
from hy.models import Keyword
from consfig.image import build as consfig_image, publish, puller
from consfig.props import apt, file, image, service
from consfig.errors import PropspecError

from harness import in_ci, wait_until
from imageserver import ImageServer, stand_in_image
from sshsigning import new_key, old_key
from consfig.apply.combinators import eseqprops
from consfig.data.items import forget_data_source, register_data_source
from consfig.deployer.deployment import __dict__ as _deployment
from consfig.model.host import make_host
from proptest import (CHROOT_ENV, HOSTNAME, apply_twice, checks_clean, deploy_propspec, failure_text, in_chroot, this_os,
                      unapply)

deploy = _deployment[hy.mangle("deploy*")]

pytestmark = pytest.mark.chroot

MARKER = "/var/tmp/applied"
SYSTEMD = Keyword("systemd")
CRON = Keyword("cron")
NO_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOJCxcEOU50i4tJ90M458DckdpVAlvRSPK06SAuBprEZ"


@pytest.fixture(scope="module")
def root(debian_chroot, chroot_chain):
    # python3.11 brings the whole standard library the puller uses (urllib,
    # json); python3-minimal the python3 command; openssh-client the
    # ssh-keygen that checks signatures.  No `cryptography`.
    deploy_propspec(chroot_chain, [this_os(), service.without_starting_services(
        apt.installed_minimally("systemd", "python3-minimal", "python3.11", "cron",
                                "openssh-client"))])
    assert in_chroot(debian_chroot, "python3 -c 'import cryptography'", check=False).returncode
    return debian_chroot


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    return {name: (signer, signer.line)
            for name in ("good", "bad") for signer in [new_key(d, name)]}


@pytest.fixture
def server(tmp_path):
    with ImageServer(tmp_path / "pub") as s:
        s.directory = tmp_path / "pub"
        yield s


def publish_stand_in(server, key, text):
    data = stand_in_image(server.directory.parent / "image.pyz", MARKER, text)
    publish.publish_images({HOSTNAME: data}, str(server.directory), key)


def applied(root):
    marker = root / MARKER.lstrip("/")
    return marker.read_text().splitlines() if marker.exists() else []


def reset(root):
    """Leave nothing of an earlier test's images, pullers or schedules."""
    (root / MARKER.lstrip("/")).unlink(missing_ok=True)
    for d in ["var/lib/consfig", "usr/local/lib/consfig", "etc/consfig"]:
        shutil.rmtree(root / d, ignore_errors=True)
    for pattern in ["etc/systemd/system/consfig-*", "etc/systemd/system/timers.target.wants/consfig-*",
                    "etc/cron.d/consfig-*", "usr/local/bin/consfig-*_cronjob"]:
        for path in root.glob(pattern):
            path.unlink()


def unit_text(root, name):
    return (root / f"etc/systemd/system/{name}").read_text()


def exec_start(root, name):
    line = re.search(r"^ExecStart=(.*)$", unit_text(root, name), re.M).group(1)
    return shlex.split(line)


def verified(root, *units):
    """Assert `systemd-analyze verify` accepts UNITS, in ROOT, without a word."""
    if not shutil.which("systemd-analyze"):
        if in_ci():
            pytest.fail("systemd-analyze is missing, and CI must verify the units")
        pytest.skip("systemd-analyze is not installed here (apt-get install systemd)")
    r = subprocess.run(["systemd-analyze", "verify", f"--root={root}",
                        *[f"/etc/systemd/system/{u}" for u in units]],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), \
        f"systemd-analyze verify: {r.returncode}\n{r.stdout}{r.stderr}"


def run_in(root, argv):
    return in_chroot(root, shlex.join(argv), check=False)


def pulled(server, key_line, via, **kw):
    return image.pulled_from(server.url, public_key=key_line, every="15min", via=via, **kw)


def test_pulled_from_installs_a_timer_systemd_accepts(chroot_chain, root, keys, server):
    reset(root)
    apply_twice(chroot_chain, [this_os(), pulled(server, keys["good"][1], SYSTEMD)])
    checks_clean(chroot_chain, [this_os(), pulled(server, keys["good"][1], SYSTEMD)])
    verified(root, "consfig-pull.service", "consfig-pull.timer")
    timer = unit_text(root, "consfig-pull.timer")
    assert "OnUnitActiveSec=15min\n" in timer and "RandomizedDelaySec=225\n" in timer, timer
    assert (root / "etc/systemd/system/timers.target.wants/consfig-pull.timer").is_symlink()
    assert "After=network-online.target" in unit_text(root, "consfig-pull.service")


def test_the_installed_puller_fetches_checks_and_applies(chroot_chain, root, keys, server):
    reset(root)
    deploy_propspec(chroot_chain, [this_os(), pulled(server, keys["good"][1], SYSTEMD)])
    publish_stand_in(server, keys["good"][0], "v1")
    command = exec_start(root, "consfig-pull.service")
    r = run_in(root, command)
    assert r.returncode == 0, r.stderr
    assert "checked with /usr/bin/ssh-keygen" in r.stdout, r.stdout
    assert applied(root) == ["v1"]
    before = server.answers
    assert run_in(root, command).returncode == 0
    assert sorted(server.answers[len(before):]) == [(f"/{HOSTNAME}", 304), (f"/{HOSTNAME}.sshsig", 304)], \
        "a second pull downloaded something"
    assert applied(root) == ["v1", "v1"]


def test_the_installed_puller_refuses_a_tampered_image(chroot_chain, root, keys, server):
    reset(root)
    deploy_propspec(chroot_chain, [this_os(), pulled(server, keys["good"][1], SYSTEMD)])
    publish_stand_in(server, keys["good"][0], "v1")
    command = exec_start(root, "consfig-pull.service")
    assert run_in(root, command).returncode == 0
    (server.directory / HOSTNAME).write_bytes(
        stand_in_image(server.directory.parent / "evil.pyz", MARKER, "evil"))
    r = run_in(root, command)
    assert r.returncode == puller.EX_REFUSED and "REFUSED" in r.stderr, (r.returncode, r.stderr)
    assert applied(root) == ["v1"], "something was applied after a refusal"


def test_the_installed_puller_refuses_another_key(chroot_chain, root, keys, server):
    reset(root)
    deploy_propspec(chroot_chain, [this_os(), pulled(server, keys["good"][1], SYSTEMD)])
    publish_stand_in(server, keys["bad"][0], "v1")
    r = run_in(root, exec_start(root, "consfig-pull.service"))
    assert r.returncode == puller.EX_REFUSED and "not by a trusted key" in r.stderr, r.stderr
    assert applied(root) == []


def test_unapplying_pulled_from_removes_timer_puller_and_state(chroot_chain, root, keys, server):
    reset(root)
    p = pulled(server, keys["good"][1], SYSTEMD)
    deploy_propspec(chroot_chain, [this_os(), p])
    publish_stand_in(server, keys["good"][0], "v1")
    assert run_in(root, exec_start(root, "consfig-pull.service")).returncode == 0
    unapply(chroot_chain, p)
    for path in ["etc/systemd/system/consfig-pull.service", "etc/systemd/system/consfig-pull.timer",
                 "etc/systemd/system/timers.target.wants/consfig-pull.timer",
                 "usr/local/lib/consfig/puller.py", "etc/consfig/pull.json",
                 "etc/consfig/allowed_signers", "var/lib/consfig/pull"]:
        assert not (root / path).exists() and not (root / path).is_symlink(), f"{path} is left"


def test_pulled_from_installs_the_allowed_signers_of_its_keys(chroot_chain, root, keys, server):
    reset(root)
    lines = [keys["good"][1], keys["bad"][1]]
    apply_twice(chroot_chain, [this_os(), pulled(server, lines, SYSTEMD, identity="fleet@example.org")])
    signers = root / "etc/consfig/allowed_signers"
    assert signers.read_text() == puller.allowed_signers(lines, "fleet@example.org")
    assert signers.stat().st_mode & 0o777 == 0o644
    config = json.loads((root / "etc/consfig/pull.json").read_text())
    assert (config["allowed-signers"], config["identity"]) == \
        ("/etc/consfig/allowed_signers", "fleet@example.org")
    publish_stand_in(server, keys["bad"][0], "v1")
    r = run_in(root, exec_start(root, "consfig-pull.service"))
    assert r.returncode == 0, r.stderr
    assert applied(root) == ["v1"], "either key is trusted"


def test_a_host_set_up_by_the_old_pulled_from_moves_to_openssh_signatures(chroot_chain, root, tmp_path,
                                                                        server):
    # The site keeps its key and its consfig (the old public line): the key,
    # converted, signs; the host trusts the same key as OpenSSH names it.
    reset(root)
    old, old_line = old_key(tmp_path)
    publish.keygen_from(old, str(tmp_path / "fleet"))
    signer = publish.signing_key(str(tmp_path / "fleet"))
    (root / "usr/local/lib/consfig").mkdir(parents=True)
    (root / "usr/local/lib/consfig/ed25519.py").write_text("# the old verifier\n")
    (root / "var/lib/consfig/pull").mkdir(parents=True, mode=0o700)
    (root / "var/lib/consfig/pull/image.sig").write_text("consfig-signed-image 1\n")
    p = pulled(server, old_line, SYSTEMD)
    apply_twice(chroot_chain, [this_os(), p])
    assert not (root / "usr/local/lib/consfig/ed25519.py").exists(), "the old verifier is left"
    publish_stand_in(server, signer, "v1")
    r = run_in(root, exec_start(root, "consfig-pull.service"))
    assert r.returncode == 0, r.stderr
    assert applied(root) == ["v1"]
    assert not (root / "var/lib/consfig/pull/image.sig").exists()


def test_pulled_from_fails_saying_what_to_install_where_ssh_keygen_is_missing(fresh_chroot, keys,
                                                                              server):
    chain = [[Keyword("chroot"), Keyword("into"), str(fresh_chroot)]]
    assert in_chroot(fresh_chroot, "command -v ssh-keygen", check=False).returncode, \
        "the fresh chroot has ssh-keygen"
    outcome, events = deploy_propspec(chain, [pulled(server, keys["good"][1], SYSTEMD)], check=False)
    assert outcome.status == "failed", outcome
    assert 'add (apt.installed "openssh-client")' in failure_text(events), failure_text(events)
    for path in ["usr/local/lib/consfig/puller.py", "etc/consfig/pull.json",
                 "etc/systemd/system/consfig-pull.timer"]:
        assert not (fresh_chroot / path).exists(), f"{path} installed for a puller that cannot verify"


@pytest.mark.parametrize("given", [
    {"identity": "-I"}, {"identity": "fleet\nx"}, {"identity": "fleet,*"},
    {"public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOJCxcEOU50i4tJ90M458DckdpVAlvRSPK06SAuBprEZ a\n"
                   "consfig-publisher ssh-ed25519 AAAA"},
    {"public_key": "cert-authority ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOJCxcEOU50i4tJ90M458DckdpVAlvRSPK06SAuBprEZ"},
    {"public_key": []},
])
def test_pulled_from_refuses_a_hostile_identity_or_key_when_built(keys, given):
    with pytest.raises(PropspecError, match=f"image.pulled-from: :{next(iter(given)).replace('_', '-')} must be"):
        image.pulled_from("https://config.example.org/consfig",
                          **{"public_key": keys["good"][1], **given})


def test_pulled_from_uses_cron_where_systemd_does_not_run(chroot_chain, root, keys, server):
    reset(root)
    p = pulled(server, keys["good"][1], Keyword("auto"))
    apply_twice(chroot_chain, [this_os(), service.without_starting_services(p)])
    assert not (root / "etc/systemd/system/consfig-pull.timer").exists()
    job = (root / "etc/cron.d/consfig-pull").read_text()
    assert "*/15 * * * *\troot\t/usr/local/bin/consfig-pull_cronjob\n" in job, job
    publish_stand_in(server, keys["good"][0], "v1")
    # The job's own script, as an admin runs it by hand: no :random-delay
    # was given, so it does not sleep first.
    started = time.monotonic()
    r = in_chroot(root, "/usr/local/bin/consfig-pull_cronjob", check=False)
    assert time.monotonic() - started < 60, "the job slept before pulling"
    assert r.returncode == 0 and r.stdout == "", f"{r.returncode}: {r.stdout}{r.stderr}"
    assert applied(root) == ["v1"]
    unapply(chroot_chain, p)
    assert not (root / "etc/cron.d/consfig-pull").exists()


def test_switching_to_systemd_removes_the_cron_job(chroot_chain, root, keys, server):
    reset(root)
    deploy_propspec(chroot_chain, [this_os(), service.without_starting_services(
        pulled(server, keys["good"][1], CRON))])
    assert (root / "etc/cron.d/consfig-pull").exists()
    deploy_propspec(chroot_chain, [this_os(), pulled(server, keys["good"][1], SYSTEMD)])
    assert not (root / "etc/cron.d/consfig-pull").exists(), "two schedulers would pull"
    assert (root / "etc/systemd/system/consfig-pull.timer").exists()
    checks_clean(chroot_chain, [this_os(), pulled(server, keys["good"][1], SYSTEMD)])
    unapply(chroot_chain, pulled(server, keys["good"][1], SYSTEMD))


def install_stand_in(root, text):
    (root / "var/lib/consfig").mkdir(mode=0o700, parents=True, exist_ok=True)
    stand_in_image(root / image.IMAGE_PATH.lstrip("/"), MARKER, text)


def test_applied_periodically_runs_the_image_from_a_timer(chroot_chain, root):
    reset(root)
    p = image.applied_periodically(every=Keyword("daily"), via=SYSTEMD)
    apply_twice(chroot_chain, [this_os(), p])
    checks_clean(chroot_chain, [this_os(), p])
    verified(root, "consfig-apply.service", "consfig-apply.timer")
    timer = unit_text(root, "consfig-apply.timer")
    assert "OnUnitActiveSec=1d\n" in timer and "RandomizedDelaySec=3600\n" in timer, timer
    assert "OnBootSec=5min\n" in timer, f"the first run is not five minutes after boot: {timer}"
    install_stand_in(root, "periodic")
    command = exec_start(root, "consfig-apply.service")
    r = run_in(root, command)
    assert r.returncode == 0, r.stderr
    assert applied(root) == ["periodic"]


def test_applied_periodically_first_runs_as_soon_after_boot_as_told(chroot_chain, root):
    reset(root)
    apply_twice(chroot_chain, [this_os(), image.applied_periodically(via=SYSTEMD, first_after=5)])
    verified(root, "consfig-apply.service", "consfig-apply.timer")
    timer = unit_text(root, "consfig-apply.timer")
    assert "OnBootSec=5s\n" in timer and "OnUnitActiveSec=1h\n" in timer, timer


@pytest.mark.parametrize("first_after", [0, "5s", -1, 86401, True])
def test_applied_periodically_refuses_a_first_run_that_is_not_whole_seconds_after_boot(first_after):
    with pytest.raises(PropspecError, match="first-after"):
        image.applied_periodically(first_after=first_after)


def test_applied_periodically_runs_one_application_at_a_time(chroot_chain, root):
    reset(root)
    deploy_propspec(chroot_chain, [this_os(), image.applied_periodically(via=SYSTEMD)])
    install_stand_in(root, "periodic")
    command = exec_start(root, "consfig-apply.service")
    assert "SuccessExitStatus=75" in unit_text(root, "consfig-apply.service")
    r = in_chroot(root, f"flock {image.APPLY_LOCK} {shlex.join(command)}", check=False)
    assert r.returncode == image.EX_BUSY, (r.returncode, r.stderr)
    assert applied(root) == [], "applied while another application held the lock"


def test_unapplying_applied_periodically_removes_the_timer(chroot_chain, root):
    reset(root)
    p = image.applied_periodically(via=SYSTEMD)
    deploy_propspec(chroot_chain, [this_os(), p])
    unapply(chroot_chain, p)
    for path in ["etc/systemd/system/consfig-apply.service", "etc/systemd/system/consfig-apply.timer",
                 "etc/systemd/system/timers.target.wants/consfig-apply.timer"]:
        assert not (root / path).exists() and not (root / path).is_symlink(), f"{path} is left"


def test_applied_periodically_uses_cron_where_systemd_does_not_run(chroot_chain, root):
    reset(root)
    p = image.applied_periodically(every="2h", random_delay=0)
    apply_twice(chroot_chain, [this_os(), service.without_starting_services(p)])
    checks_clean(chroot_chain, [this_os(), service.without_starting_services(p)])
    job = (root / "etc/cron.d/consfig-apply").read_text()
    assert "0 */2 * * *\troot\t/usr/local/bin/consfig-apply_cronjob\n" in job, job
    install_stand_in(root, "from cron")
    r = in_chroot(root, "/usr/local/bin/consfig-apply_cronjob", check=False)
    assert r.returncode == 0 and r.stdout == "", f"{r.returncode}: {r.stdout}{r.stderr}"
    assert applied(root) == ["from cron"]
    unapply(chroot_chain, p)
    assert not (root / "etc/cron.d/consfig-apply").exists()
    assert not (root / "usr/local/bin/consfig-apply_cronjob").exists()


def scheduled_by_cron(argv, **kw):
    return service.without_starting_services(
        image.scheduled("consfig-test", "a test job", argv, "15min", via=CRON, **kw))


def test_a_cron_job_given_a_random_delay_sleeps_up_to_it(chroot_chain, root):
    reset(root)
    deploy_propspec(chroot_chain, [this_os(), scheduled_by_cron(["/bin/true"], random_delay=30)])
    script = (root / "usr/local/bin/consfig-test_cronjob").read_text()
    assert "sleep $(shuf -i 0-30 -n 1)" in script, script


def test_a_hung_cron_job_is_ended_at_its_bound(chroot_chain, root):
    reset(root)
    deploy_propspec(chroot_chain, [this_os(), scheduled_by_cron(
        ["/bin/sh", "-c", "echo started >> /var/tmp/runs; exec sleep 613"], timeout=3)])
    (root / "var/tmp/runs").unlink(missing_ok=True)
    started = time.monotonic()
    r = in_chroot(root, "/usr/local/bin/consfig-test_cronjob", check=False)
    took = time.monotonic() - started
    assert (root / "var/tmp/runs").read_text() == "started\n", "the job did not run"
    assert r.returncode != 0, "a job ended at its bound is a failure cron mails"
    assert took < 30, f"the job ran {took:.0f} s, for a bound of 3 s"
    left = subprocess.run(["pgrep", "-f", "-x", "sleep 613"], capture_output=True, text=True)
    assert left.stdout == "", f"the hung command is left running: {left.stdout}"


def test_a_cron_job_does_not_start_while_its_last_run_hangs(chroot_chain, root):
    reset(root)
    deploy_propspec(chroot_chain, [this_os(), scheduled_by_cron(
        ["/bin/sh", "-c", "echo started >> /var/tmp/runs; exec sleep 600"], timeout=10)])
    runs = root / "var/tmp/runs"
    runs.unlink(missing_ok=True)
    first = subprocess.Popen(["chroot", str(root), "/usr/local/bin/consfig-test_cronjob"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=CHROOT_ENV)
    try:
        wait_until(lambda: runs.exists(), 30, "the first run to start")
        r = in_chroot(root, "/usr/local/bin/consfig-test_cronjob", check=False)
        assert runs.read_text() == "started\n", "a second run started beside the hung one"
        assert r.stdout == "", f"cron would mail a skipped run: {r.stdout}"
    finally:
        # Its bound ends the first run.
        first.wait(timeout=60)


def deploy_host(chain, props, **kw):
    """Deploy the host whose own propspec is PROPS (as a defhost would make
    it: `installed` puts the image of the host's own propspec, not of what
    `deploy-these` adds); return the outcome."""
    events = []
    host = make_host(HOSTNAME, None, None, eseqprops(this_os(), *props))
    outcome = deploy(chain, host, sink=events.append, **kw)
    assert outcome.status != "failed", failure_text(events)
    return outcome


def image_bytes(root):
    return (root / image.IMAGE_PATH.lstrip("/")).read_bytes()


def test_installed_puts_the_hosts_own_image_on_it(chroot_chain, root):
    reset(root)
    apply_twice(chroot_chain, [this_os(), image.installed()])
    checks_clean(chroot_chain, [this_os(), image.installed()])
    installed = root / image.IMAGE_PATH.lstrip("/")
    assert installed.stat().st_mode & 0o777 == 0o755, oct(installed.stat().st_mode)
    assert (root / "var/lib/consfig").stat().st_mode & 0o777 == 0o700
    with zipfile.ZipFile(installed) as z:
        meta = json.loads(z.read("consfig-image.json"))
    assert meta["hostname"] == HOSTNAME, meta


def test_the_installed_image_applies_and_leaves_itself_alone(chroot_chain, root):
    reset(root)
    deploy_host(chroot_chain, [image.installed(), file.has_content("/var/tmp/from-image", "hi\n")])
    (root / "var/tmp/from-image").unlink()
    before = image_bytes(root)
    r = in_chroot(root, f"python3 {image.IMAGE_PATH} --as-host", check=False)
    assert r.returncode == 0, f"{r.returncode}: {r.stdout}{r.stderr}"
    assert (root / "var/tmp/from-image").read_text() == "hi\n", "the image did not apply"
    assert image_bytes(root) == before, "the image replaced itself"


def test_installed_rewrites_the_image_only_when_it_changed(chroot_chain, root):
    reset(root)
    deploy_host(chroot_chain, [image.installed()])
    first = image_bytes(root)
    assert deploy_host(chroot_chain, [image.installed()]).status == "no-change"
    outcome = deploy_host(chroot_chain, [image.installed(), file.has_content("/var/tmp/more", "x\n")])
    assert outcome.status == "changed" and image_bytes(root) != first, "the image was not updated"
    unapply(chroot_chain, image.installed())
    assert not (root / image.IMAGE_PATH.lstrip("/")).exists()


def test_the_installed_image_carries_the_hosts_data_and_its_secrets_unless_told(
        chroot_chain, root, tmp_path):
    reset(root)
    secret = "installed-image-secret-5e0b"
    (tmp_path / "_img").mkdir()
    (tmp_path / "_img" / "motd").write_text("motd from data\n")
    (tmp_path / "_img" / "key").write_text(secret + "\n")
    source = register_data_source("files-tree", location=str(tmp_path))
    props = [file.data_uploaded("_img", "motd", "/var/tmp/img-motd"),
             file.secret_uploaded("_img", "key", "/var/tmp/img-key")]
    installed = root / image.IMAGE_PATH.lstrip("/")
    try:
        deploy_host(chroot_chain, [image.installed(), *props])
        assert installed.stat().st_mode & 0o777 == 0o600, oct(installed.stat().st_mode)
        for name in ["img-motd", "img-key"]:
            (root / "var/tmp" / name).unlink()
        r = in_chroot(root, f"python3 {image.IMAGE_PATH} --as-host", check=False)
        assert r.returncode == 0, f"{r.returncode}: {r.stdout}{r.stderr}"
        assert (root / "var/tmp/img-motd").read_text() == "motd from data\n"
        assert (root / "var/tmp/img-key").read_text() == secret + "\n"
        deploy_host(chroot_chain, [image.installed(no_secrets=True), *props])
        assert installed.stat().st_mode & 0o777 == 0o755, oct(installed.stat().st_mode)
        with zipfile.ZipFile(installed) as z:
            held = b"".join(z.read(name) for name in z.namelist())
        assert b"motd from data" in held and secret.encode() not in held
    finally:
        forget_data_source(source)
        unapply(chroot_chain, image.installed())


def test_a_timer_applies_the_installed_image(chroot_chain, root):
    reset(root)
    deploy_host(chroot_chain, [image.installed(),
                               image.applied_periodically(via=SYSTEMD, arguments=["--as-host"]),
                               file.has_content("/var/tmp/periodic", "p\n")])
    verified(root, "consfig-apply.service", "consfig-apply.timer")
    (root / "var/tmp/periodic").unlink()
    r = run_in(root, exec_start(root, "consfig-apply.service"))
    assert r.returncode == 0, f"{r.returncode}: {r.stdout}{r.stderr}"
    assert (root / "var/tmp/periodic").read_text() == "p\n", "the service did not apply the image"
    state = json.loads((root / f"var/lib/consfig/runs/{HOSTNAME}.json").read_text())
    assert state["status"] == "changed", state


def test_a_noop_timer_reports_the_drift_of_the_installed_image_and_repairs_nothing(chroot_chain, root):
    reset(root)
    deploy_host(chroot_chain, [image.installed(),
                               image.applied_periodically(via=SYSTEMD, noop=True, arguments=["--as-host"]),
                               file.has_content("/var/tmp/periodic", "p\n")])
    verified(root, "consfig-apply.service", "consfig-apply.timer")
    command = exec_start(root, "consfig-apply.service")
    assert command[command.index(image.IMAGE_PATH) + 1:] == ["--noop", "--as-host"], command
    (root / "var/tmp/periodic").unlink()
    r = run_in(root, command)
    assert r.returncode == 0, f"{r.returncode}: {r.stdout}{r.stderr}"
    assert not (root / "var/tmp/periodic").exists(), "a --noop run repaired the drift"
    assert "/var/tmp/periodic" in r.stdout + r.stderr, f"the run did not report the drift: {r.stdout}{r.stderr}"
    state = json.loads((root / f"var/lib/consfig/runs/{HOSTNAME}.json").read_text())
    assert state["check"] is True and state["status"] == "changed", state


def test_a_noop_pulled_image_reports_drift_and_repairs_nothing(chroot_chain, root, keys, server):
    reset(root)
    host = make_host(HOSTNAME, None, None,
                     eseqprops(this_os(), file.has_content("/var/tmp/pulled", "p\n")))
    publish.publish_images({HOSTNAME: consfig_image.make_image(host).data}, str(server.directory),
                           keys["good"][0])
    deploy_propspec(chroot_chain, [this_os(), pulled(server, keys["good"][1], SYSTEMD, noop=True,
                                                     arguments=["--as-host"])])
    config = json.loads((root / image.PULL_CONFIG.lstrip("/")).read_text())
    assert config["arguments"] == ["--noop", "--as-host"], config
    r = run_in(root, exec_start(root, "consfig-pull.service"))
    assert r.returncode == 0, f"{r.returncode}: {r.stdout}{r.stderr}"
    assert not (root / "var/tmp/pulled").exists(), "a --noop pull repaired the drift"
    assert "/var/tmp/pulled" in r.stdout + r.stderr, f"the pull did not report the drift: {r.stdout}{r.stderr}"


@pytest.mark.parametrize("prop", [image.applied_periodically,
                                  lambda **kw: image.pulled_from("https://config.example.org/c",
                                                                 public_key=NO_KEY, **kw)])
def test_noop_must_be_a_boolean_when_built(prop):
    with pytest.raises(PropspecError, match=":noop must be"):
        prop(noop="yes")


def test_check_mode_installs_nothing(chroot_chain, root, keys, server):
    reset(root)
    props = [this_os(), image.installed(), pulled(server, keys["good"][1], SYSTEMD),
             image.applied_periodically(via=SYSTEMD)]
    outcome, _ = deploy_propspec(chroot_chain, props, check_mode=True)
    assert outcome.status == "changed", "check mode saw nothing to do"
    for path in ["var/lib/consfig/image.pyz", "usr/local/lib/consfig/puller.py",
                 "etc/systemd/system/consfig-pull.timer", "etc/systemd/system/consfig-apply.timer"]:
        assert not (root / path).exists(), f"check mode wrote {path}"


def test_a_machine_given_as_its_propspec_gets_an_image_of_that_propspec_not_of_its_build():
    # A VM or disk image built from a propspec is deployed wrapped in
    # service.without-starting-services; the image it applies once booted
    # must not be, or the machine never starts a service of its own.
    from consfig.nested import deploys
    own = eseqprops(this_os(), image.installed(), file.has_content("/etc/motd", "hi\n"))
    data = {"hostname": "vm9.image.invalid", "deploy": None,
            "propspec": service.without_starting_services(own), "own-propspec": own,
            "these": None}
    _, prepared = deploys._prepare_nested([[Keyword("chroot"), Keyword("into"), "/nonexistent"]],
                                          data, None)
    item = prepared.data[("--image", "vm9.image.invalid")]
    with zipfile.ZipFile(io.BytesIO(item.content())) as z:
        shipped = json.loads(z.read("host.json"))["host"]["propspec"]
    text = json.dumps(shipped)
    assert "without-starting-services" not in text, text
    assert "/etc/motd" in text, text
