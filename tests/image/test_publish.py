"""`consfig keygen` and `consfig publish` as a user runs them, and a real
published image pulled by the puller — run as a host runs it, by a Python
with nothing of consfig installed — from a loopback HTTP server, and
applied."""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import uuid
import zipfile

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "ui"))
from clirun import Terminal, consfig  # noqa: E402

import hy  # noqa: F401,E402
import consfig.image.build as image  # noqa: E402
from consfig.image import puller  # noqa: E402
from imageserver import ImageServer  # noqa: E402
from sshsigning import SshAgent, allowed, old_key  # noqa: E402

BARE_PYTHON = "/usr/bin/python3"

SITE = """
(require consfig *)
(import consfig *)
(use-props consfig.props [file])

(defhost {host} {{:deploy :local}}
  (file.has-content "{out}/pulled" "{text}\\n"))
"""


@pytest.fixture
def site(tmp_path):
    host = f"pull-{uuid.uuid4().hex[:8]}.image.test"
    path = tmp_path / "site.hy"

    def write(text):
        path.write_text(SITE.format(host=host, out=tmp_path / "out", text=text))
    write("one")
    (tmp_path / "out").mkdir()
    yield {"path": path, "host": host, "out": tmp_path / "out", "write": write}
    try:
        os.unlink(image.state_file(host))
    except FileNotFoundError:
        pass


def test_keygen_writes_the_pair_and_prints_the_public_line(tmp_path):
    r = consfig("keygen", "-o", tmp_path / "fleet", "--comment", "fleet-2026")
    assert r.returncode == 0, r.stderr
    pub = (tmp_path / "fleet.pub").read_text()
    assert pub.startswith("ssh-ed25519 AAAA") and pub.endswith(" fleet-2026\n"), pub
    assert pub.strip() in r.stdout, r.stdout
    assert (tmp_path / "fleet").stat().st_mode & 0o777 == 0o600


def test_keygen_from_an_old_key_prints_the_same_key_as_openssh_names_it(tmp_path):
    old, old_line = old_key(tmp_path)
    r = consfig("keygen", "--from", old, "-o", tmp_path / "fleet")
    assert r.returncode == 0, r.stderr
    pub = (tmp_path / "fleet.pub").read_text()
    assert pub.strip() in r.stdout, r.stdout
    assert puller.public_key(pub)[:2] == puller.public_key(old_line)[:2]
    r = consfig("keygen", "--from", tmp_path / "fleet", "-o", tmp_path / "again")
    assert r.returncode == 1 and "not a key of consfig's old format" in r.stderr, r.stderr


def test_keygen_refuses_to_overwrite_a_key(tmp_path):
    assert consfig("keygen", "-o", tmp_path / "k").returncode == 0
    r = consfig("keygen", "-o", tmp_path / "k")
    assert r.returncode == 1 and "not overwriting a key" in r.stderr, r.stderr


def test_publish_writes_signed_images_and_leaves_unchanged_ones(tmp_path, site):
    assert consfig("keygen", "-o", tmp_path / "k").returncode == 0
    args = ["publish", "--consfig", site["path"], site["host"], "--to", tmp_path / "pub",
            "--signing-key", tmp_path / "k"]
    r = consfig(*args)
    assert r.returncode == 0, r.stderr
    assert f"{site['host']}: published, sha256 " in r.stdout, r.stdout
    sig = (tmp_path / "pub" / f"{site['host']}.sshsig").read_bytes()
    fields = puller.check_statement(sig, allowed(tmp_path / "allowed", (tmp_path / "k.pub").read_text()),
                                    site["host"])
    index = json.loads((tmp_path / "pub/index.json").read_text())
    assert index["hosts"][site["host"]]["sha256"] == fields["sha256"]
    mtimes = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "pub").iterdir()}
    r = consfig(*args)
    assert r.returncode == 0 and f"{site['host']}: unchanged" in r.stdout, r.stdout + r.stderr
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "pub").iterdir()} == mtimes


DATA_SITE = """
(require consfig *)
(import consfig *)
(use-props consfig.props [file])

(try-register-data-source :files-tree :location "data")

(defhost {host} {{:deploy :local}}
  (file.data-uploaded "_pub" "motd" "{out}/motd")
  (file.secret-uploaded "_pub" "key" "{out}/key"))
"""
PUBLISH_SECRET = "publish-test-secret-93c1"


def test_publish_leaves_secret_data_out_unless_told(tmp_path, site):
    (tmp_path / "data" / "_pub").mkdir(parents=True)
    (tmp_path / "data" / "_pub" / "motd").write_text("published motd\n")
    (tmp_path / "data" / "_pub" / "key").write_text(PUBLISH_SECRET + "\n")
    site["path"].write_text(DATA_SITE.format(host=site["host"], out=site["out"]))
    assert consfig("keygen", "-o", tmp_path / "k").returncode == 0
    published = tmp_path / "pub" / site["host"]
    for with_secrets in [False, True]:
        r = consfig("publish", "--consfig", site["path"], site["host"], "--to", tmp_path / "pub",
                    "--signing-key", tmp_path / "k", *(["--with-secrets"] if with_secrets else []))
        assert r.returncode == 0, r.stderr
        assert PUBLISH_SECRET not in r.stdout + r.stderr
        with zipfile.ZipFile(published) as z:
            held = b"".join(z.read(name) for name in z.namelist())
        assert b"published motd" in held, "the data that is not secret is published"
        assert (PUBLISH_SECRET.encode() in held) == with_secrets, with_secrets
        assert (published.stat().st_mode & 0o777) == (0o600 if with_secrets else 0o644)
        assert ("the image holds secrets" in r.stderr) == with_secrets, r.stderr


def test_publish_names_a_signing_key_it_cannot_use(tmp_path, site):
    (tmp_path / "k").write_text("not a key\n")
    r = consfig("publish", "--consfig", site["path"], site["host"], "--to", tmp_path / "pub",
                "--signing-key", tmp_path / "k")
    assert r.returncode == 1 and f"{tmp_path / 'k'} is neither an OpenSSH private key nor a public key" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "pub").exists(), "published without a key"


def test_publish_signs_with_the_key_ssh_agent_holds(tmp_path, site):
    assert consfig("keygen", "-o", tmp_path / "k").returncode == 0
    with SshAgent(tmp_path) as agent:
        agent.add(tmp_path / "k")
        os.unlink(tmp_path / "k")
        r = subprocess.run([sys.executable, "-m", "consfig", "publish", "--consfig", str(site["path"]),
                            site["host"], "--to", str(tmp_path / "pub"),
                            "--signing-key", str(tmp_path / "k.pub")],
                           capture_output=True, text=True, timeout=120,
                           env={k: v for k, v in agent.env.items() if k != "PYTHONDONTWRITEBYTECODE"})
    assert r.returncode == 0, r.stderr
    sig = (tmp_path / "pub" / f"{site['host']}.sshsig").read_bytes()
    puller.check_statement(sig, allowed(tmp_path / "allowed", (tmp_path / "k.pub").read_text()),
                           site["host"])


def test_a_key_with_a_passphrase_is_asked_for_it_once_on_the_terminal(tmp_path, site):
    assert consfig("keygen", "-o", tmp_path / "k").returncode == 0
    subprocess.run(["ssh-keygen", "-q", "-p", "-N", "sesame-8d1", "-f", tmp_path / "k"],
                   check=True, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    other = site["host"].replace("pull-", "other-")
    with open(site["path"], "a") as f:
        f.write(f"(defhost {other} {{:deploy :local}} (file.has-content \"{site['out']}/o\" \"o\\n\"))\n")
    with Terminal("publish", "--consfig", site["path"], site["host"], other,
                  "--to", tmp_path / "pub", "--signing-key", tmp_path / "k") as terminal:
        terminal.read_until(lambda seen: b"passphrase" in seen, 120)
        terminal.write(b"sesame-8d1\n")
        terminal.read_to_end(120)
        assert terminal.proc.wait(timeout=60) == 0, terminal.text()
    assert terminal.text().count("passphrase") == 1, terminal.text()
    assert "sesame" not in terminal.text(), "the passphrase was echoed"
    for host in (site["host"], other):
        assert (tmp_path / "pub" / f"{host}.sshsig").exists(), terminal.text()


def test_a_published_image_is_pulled_and_applied(tmp_path, site):
    if not os.path.exists(BARE_PYTHON):
        pytest.skip(f"{BARE_PYTHON} is needed to run the puller as a host would")
    assert consfig("keygen", "-o", tmp_path / "k").returncode == 0
    publish = ["publish", "--consfig", site["path"], site["host"], "--to", tmp_path / "pub",
               "--signing-key", tmp_path / "k"]
    assert consfig(*publish).returncode == 0
    lib = tmp_path / "lib"
    lib.mkdir()
    shutil.copyfile(pathlib.Path(puller.__file__).with_name("puller.py"), lib / "puller.py")
    with ImageServer(tmp_path / "pub") as server:
        config = tmp_path / "pull.json"
        config.write_text(json.dumps({
            "url": server.url, "host": site["host"],
            "allowed-signers": allowed(tmp_path / "allowed", (tmp_path / "k.pub").read_text()),
            "state-directory": str(tmp_path / "state"), "python": BARE_PYTHON,
            # The image is of another host than this machine.
            "arguments": ["--as-host"]}))
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "XDG_CACHE_HOME": str(tmp_path / "cache")}

        def pull():
            return subprocess.run([BARE_PYTHON, str(lib / "puller.py"), str(config)],
                                   capture_output=True, text=True, env=env, timeout=300)
        r = pull()
        assert r.returncode == 0, r.stdout + r.stderr
        assert (site["out"] / "pulled").read_text() == "one\n"
        r = pull()
        assert r.returncode == 0 and "No changes were made." in r.stdout, r.stdout + r.stderr
        assert server.downloads(f"/{site['host']}") == 1, server.answers
        site["write"]("two")
        assert consfig(*publish).returncode == 0
        r = pull()
        assert r.returncode == 0, r.stdout + r.stderr
        assert (site["out"] / "pulled").read_text() == "two\n"
