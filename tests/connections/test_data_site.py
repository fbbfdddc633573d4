"""Issue 12, end to end: a site whose files, template, secret, tree and git
snapshot come from its data sources — a `data/` tree, a `pass` store (with a
gpg key made for the test) and a git repository — deployed to the SSH lab by
the `consfig` command over `[[:ssh …] :sudo :python]` and `[[:ssh …] :sudo]`.

What is checked: everything lands, with the secret at mode 0600; a second
deployment uploads nothing; a new version of one item uploads that item
only; a file gone from the site's tree is gone from the target; the secret's
value is nowhere — in no output (-vvv, --json, --dry-run, --check --diff),
no process's command line or environment, no file on either side but its
destinations and the encrypted store; and a missing item, a failing source
and an undefined template variable are each one error before anything
connects.
"""

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import textwrap
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "ui"))
from clirun import REPO  # noqa: E402
from sshlab import processes_seen  # noqa: E402
from harness import unavailable  # noqa: E402

HOST = "web.lab.test"


def run(*argv, env=None, input=None, check=True):
    proc = subprocess.run(argv, capture_output=True, env=env, input=input, timeout=120)
    if check:
        assert proc.returncode == 0, f"{argv}: {proc.stdout!r} {proc.stderr!r}"
    return proc


class Site:
    """A site in a temporary directory: consfig.hy, data/, templates/,
    files/, a pass store under GNUPGHOME, a git repository, the target
    directory the host's properties write into, and the environment the
    `consfig` command runs in (its own cache directory)."""

    def __init__(self, root, lab):
        self.root = root
        self.lab = lab
        self.secret = f"S3CRET-{uuid.uuid4().hex}"
        self.site = root / "site"
        self.store = root / "store"
        self.repo = root / "repo"
        self.target = root / "target"
        self.cache = root / "controller-cache"
        # gpg-agent's socket path must be short: not below pytest's tmp_path.
        self.gnupg = tempfile.mkdtemp(prefix="cfg-gpg-", dir="/tmp")
        self.env = dict(os.environ, GNUPGHOME=self.gnupg, XDG_CACHE_HOME=str(self.cache),
                        PASSWORD_STORE_DIR=str(self.store))
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)

    def make(self):
        run("gpg", "--batch", "--passphrase", "", "--quick-gen-key",
            "consfig test <test@consfig.invalid>", "default", "default", "never", env=self.env)
        fpr = [line.split(":")[9] for line in
               run("gpg", "--batch", "--with-colons", "--list-secret-keys", env=self.env)
               .stdout.decode().splitlines() if line.startswith("fpr:")][0]
        run("pass", "init", fpr, env=self.env)
        run("pass", "insert", "--multiline", "_db/password", env=self.env,
            input=(self.secret + "\n").encode())

        self.repo.mkdir()
        (self.repo / "app.py").write_text("print('v1')\n")
        run("git", "-C", str(self.repo), "init", "-q", "-b", "main")
        run("git", "-C", str(self.repo), "add", "-A")
        run("git", "-C", str(self.repo), "-c", "user.name=t", "-c", "user.email=t@t",
            "commit", "-q", "-m", "v1")

        t = self.target
        self.write(f"data/{HOST}/{t}/motd", "Welcome to web\n")
        self.write("data/_shared/banner", "BANNER\n")
        self.write("templates/app.conf.j2",
                   "host = {{ hostname }}\nport = {{ port }}\nbanner = {{ data('_shared', 'banner') }}")
        self.write("templates/db.conf.j2", "password = {{ data('_db', 'password') }}")
        self.write("files/www/index.html", "<p>hello</p>\n")
        self.write("files/www/css/site.css", "p {}\n")
        self.write("files/www/old.html", "<p>old</p>\n")
        self.write("consfig.hy", textwrap.dedent(f"""\
            (require consfig *)
            (import consfig *)
            (use-props consfig.props [file git])
            (try-register-data-source :files-tree :location "data")
            (try-register-data-source :pass :location "../store")
            (try-register-data-source :git-snapshot :name "app" :repo "../repo" :branch "main")

            (defhost {HOST}
              "A web server whose content comes from the site's data."
              (file.directory-exists "{t}")
              (file.host-data-uploaded "{t}/motd")
              (file.data-uploaded "_shared" "banner" "{t}/banner")
              (file.secret-uploaded "_db" "password" "{t}/db-password")
              (file.templated "{t}/app.conf" "templates/app.conf.j2" :vars {{:port 8080}})
              (file.templated "{t}/db.conf" "templates/db.conf.j2")
              (file.copied-from-site "{t}/www" "files/www" :delete True)
              (git.snapshot-extracted "{t}/srv" "app"))
            """))
        return self

    def write(self, rel, text):
        p = self.site / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)

    def consfig(self, *args, check=True, sample=False):
        """Run the consfig command on this site; its CompletedProcess (text),
        with `.seen` the processes sampled meanwhile when SAMPLE."""
        argv = [sys.executable, "-m", "consfig", *args]
        if sample:
            with processes_seen() as seen:
                proc = subprocess.run(argv, capture_output=True, text=True, env=self.env,
                                      cwd=REPO, timeout=300)
            proc.seen = seen
        else:
            proc = subprocess.run(argv, capture_output=True, text=True, env=self.env,
                                  cwd=REPO, timeout=300)
        if check:
            assert proc.returncode in (0, 2), proc.stdout + proc.stderr
        return proc

    def deploy(self, chain, *extra, **kw):
        return self.consfig("deploy", "--consfig", str(self.site / "consfig.hy"), HOST,
                            "--via", chain, *extra, **kw)

    def close(self):
        subprocess.run(["gpgconf", "--kill", "all"], env=self.env, capture_output=True,
                       timeout=60)
        shutil.rmtree(self.gnupg, ignore_errors=True)


@pytest.fixture
def site(tmp_path, sshlab):
    # The site's secrets come from a real password store: without its
    # tools the suite is skipped saying why (an error in CI).
    missing = [t for t in ("gpg", "pass", "git") if shutil.which(t) is None]
    if missing:
        unavailable(f"the data site needs {', '.join(missing)} (Debian: gnupg, pass, git)")
    s = Site(tmp_path, sshlab).make()
    yield s
    s.close()


def chain(lab, python):
    ssh = f'[:ssh :host "lab" :config "{lab.config}"]'
    return f"[{ssh} :sudo{' :python' if python else ''}]"


def events(proc):
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def uploads(proc):
    """The non-secret items a --json deployment says it sent, as
    (iden1, iden2) pairs.  (A secret is sent, in memory, each time it is
    needed, and never kept on the target.)"""
    return sorted((e["iden1"], e["iden2"]) for e in events(proc)
                  if e.get("event") == "output" and e.get("stream") == "data"
                  and not e.get("secret"))


def files_under(*roots, skip=()):
    for root in roots:
        for d, dirs, files in os.walk(root):
            dirs[:] = [x for x in dirs if os.path.join(d, x) not in skip]
            for f in files:
                p = os.path.join(d, f)
                if p not in skip and os.path.isfile(p) and not os.path.islink(p):
                    yield p


def holding(secret, paths):
    found = []
    for p in paths:
        try:
            with open(p, "rb") as f:
                if secret.encode() in f.read():
                    found.append(p)
        except OSError:
            pass
    return found


@pytest.mark.parametrize("python", [True, False], ids=["ssh-sudo-python", "ssh-sudo"])
def test_a_data_site_deploys_uploads_once_and_keeps_its_secret(site, sshlab, python):
    via = chain(sshlab, python)
    t = site.target

    first = site.deploy(via, "--json", "-vvv", sample=True)
    assert first.returncode == 0, first.stdout + first.stderr
    assert (t / "motd").read_text() == "Welcome to web\n"
    assert (t / "banner").read_text() == "BANNER\n"
    assert (t / "db-password").read_text() == site.secret + "\n"
    assert os.stat(t / "db-password").st_mode & 0o777 == 0o600, "the secret at 0600"
    assert (t / "app.conf").read_text() == f"host = {HOST}\nport = 8080\nbanner = BANNER\n"
    assert (t / "db.conf").read_text() == f"password = {site.secret}\n"
    assert os.stat(t / "db.conf").st_mode & 0o777 == 0o600, "a template of a secret at 0600"
    assert sorted(os.listdir(t / "www")) == ["css", "index.html", "old.html"]
    assert (t / "srv" / "app" / "app.py").read_text() == "print('v1')\n"
    assert uploads(first), "the first deployment uploads what the host needs"

    second = site.deploy(via, "--json", "-vvv", "--detailed-exitcode")
    assert second.returncode == 0, "nothing to change: " + second.stdout + second.stderr
    assert uploads(second) == [], f"a second deployment uploads nothing: {uploads(second)}"

    # A new version of one item.
    site.write(f"data/{HOST}/{t}/motd", "Welcome back\n")
    third = site.deploy(via, "--json", "-vvv")
    assert (t / "motd").read_text() == "Welcome back\n"
    assert uploads(third) == [(HOST, f"{t}/motd")], \
        f"only the item with a new version is uploaded: {uploads(third)}"

    # A file gone from the site's tree: only the tree's manifest is new.
    (site.site / "files/www/old.html").unlink()
    fourth = site.deploy(via, "--json", "-vvv")
    assert not (t / "www" / "old.html").exists(), "the deleted file is gone from the target"
    assert (t / "www" / "index.html").exists(), "and the others stay"
    # (Over :python the manifest travels to the target; over :sudo alone it
    # is read where it was made, on the controller.)
    assert uploads(fourth) == ([("--site-tree", f"{t}/www")] if python else []), \
        f"no file of the tree is uploaded: {uploads(fourth)}"

    # The secret, nowhere but where it belongs.
    site.write(f"data/{HOST}/{t}/motd", "Welcome once more\n")
    outputs = {
        "-vvv --json": first.stdout + first.stderr,
        "second": second.stdout + second.stderr,
        "-vvv": site.deploy(via, "-vvv").stdout,
        "--dry-run": site.deploy(via, "--dry-run").stdout,
        "--check --diff -vvv": site.deploy(via, "--check", "--diff", "-vvv").stdout,
        "--check --diff --json": site.deploy(via, "--check", "--diff", "--json").stdout,
        "the propspec": site.consfig("deploy-these", "--consfig", str(site.site / "consfig.hy"),
                                     HOST, f'(file.secret-uploaded "_db" "password" "{t}/x")',
                                     "--via", via, "--check", "-vvv").stdout,
    }
    assert "file.secret-uploaded" in outputs["--dry-run"], "the propspec was printed"
    for what, text in outputs.items():
        assert site.secret not in text, f"the secret is in the output of {what}"
    for sample in first.seen:
        assert site.secret.encode() not in sample, \
            "the secret is in a process's command line or environment"
    skip = {str(site.store), str(t / "db-password"), str(t / "db.conf"), str(t / "x")}
    # Root's cache, through the lab's sudo, is the test run's own (conftest.py).
    target_caches = [os.environ["XDG_CACHE_HOME"], os.path.join(pwd.getpwnam(sshlab.user).pw_dir, ".cache")]
    leaks = holding(site.secret, files_under(str(site.root), *target_caches, skip=skip))
    assert leaks == [], f"the secret is in {leaks}"
    assert first.seen, "processes were sampled"
    if python:
        # The search reaches the target's data cache: what is not secret is there.
        assert holding("BANNER", files_under(*target_caches)), "the data cache was searched"


def test_mistakes_in_a_data_site_are_each_one_error_before_connecting(site, sshlab):
    # An ssh hop to a host that does not resolve: had anything tried to
    # connect, the error would say so.
    via = '[[:ssh :host "unreachable.invalid"] :sudo]'
    consfig = (site.site / "consfig.hy").read_text()
    cases = {
        "missing": ('(file.data-uploaded "_nowhere" "nothing" "/tmp/x")',
                    ["missing prerequisite data", '("_nowhere" "nothing")']),
        "source": ('(git.snapshot-extracted "/tmp/x" "broken")',
                   [":git-snapshot broken"]),
        "template": (f'(file.templated "{site.target}/t" "templates/bad.j2")',
                     ["bad.j2:2", "undefined variable 'prot'"]),
    }
    site.write("templates/bad.j2", "a\n{{ prot }}\n")
    for name, (propapp, expected) in cases.items():
        text = consfig.replace("(git.snapshot-extracted", propapp + "\n  (git.snapshot-extracted", 1)
        if name == "source":
            text = text.replace(
                '(try-register-data-source :git-snapshot :name "app"',
                '(try-register-data-source :git-snapshot :name "broken" :repo "../repo" '
                ':branch "no-such-branch")\n(try-register-data-source :git-snapshot :name "app"')
        site.write("consfig.hy", text)
        proc = site.consfig("deploy", "--consfig", str(site.site / "consfig.hy"), HOST,
                            "--via", via, check=False)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 1, f"{name}: {out}"
        for e in expected:
            assert e in out, f"{name}: {e!r} not in {out!r}"
        assert "Traceback" not in out and "unreachable.invalid" not in out, f"{name}: {out}"
        assert not site.target.exists(), f"{name}: something was deployed"
