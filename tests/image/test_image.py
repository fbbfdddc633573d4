"""Images: built reproducibly, run by a Python with nothing of consfig
installed, applying their host with deploy's report and exit statuses, and
recording each run for `consfig status`."""

import base64
import io
import json
import os
import pwd
import shutil
import socket
import stat
import subprocess
import sys
import uuid
import zipfile

import pytest

from hy.models import Keyword as K

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "ui"))
from clirun import consfig  # noqa: E402

import consfig.image.build as image  # noqa: E402
from consfig.errors import ConsfigError  # noqa: E402
from consfig.transport.chain import close_chain, establish_chain, parse_chain  # noqa: E402
from consfig.site.load import load_consfig  # noqa: E402

# A Python with nothing of consfig's: hy, rich and consfig come from the image.
BARE_PYTHON = "/usr/bin/python3"
SECRET = "image-test-secret-4f1d"

SITE = """
(require consfig *)
(import consfig *)
(use-props consfig.props [file user])

(try-register-data-source :files-tree :location "data")

(defhost {here} {{:deploy :local}}
  "This machine, applying itself."
  (file.directory-exists "{out}")
  (file.has-content "{out}/motd" "hello\\n")
  (file.contains-lines "{out}/conf" "a=1" "b=2"))

(defhost failing-{tag}.image.test {{:deploy :local}}
  (file.has-content "{out}/reached" "yes\\n")
  (file.has-content "{out}/no-such-directory/f" "x\\n"))

(defhost data-{tag}.image.test {{:deploy :local}}
  (file.directory-exists "{out}/data")
  (file.data-uploaded "_image" "motd" "{out}/data/motd")
  (file.templated "{out}/data/conf" "conf.j2" :vars {{"colour" "blue"}})
  (file.secret-uploaded "_image" "secret" "{out}/data/private"))

(defhost status-{tag}.image.test {{:deploy :local}}
  (file.has-content "{out}/status" "recorded\\n"))

(defprop site-marker :posix [path]
  "A property of the site's own: the image must carry the site's code."
  (:desc f"{{path}} is marked")
  (:check (= (read-remote-file path) "marked\\n"))
  (:apply (write-remote-file path "marked\\n")))

(defhost leaky-{tag}.image.test {{:deploy :local}}
  (site-marker "{out}/marked")
  (user.has-enabled-password "nobody" :initial-password "{secret}-leaky"))

(defhost fetch-{tag}.image.test {{:deploy :local}}
  (file.has-content "{out}/fetch-src" "fetch me\\n")
  (file.fetched "{out}/fetch-src" "{out}/fetch-dest"))

(defhost modules-{tag}.image.test {{:deploy [:local [:python :modules ["colorsys"]]]}}
  (file.has-content "{out}/modules" "shipped\\n"))
"""


@pytest.fixture(scope="module")
def bare_python():
    if not os.path.exists(BARE_PYTHON):
        pytest.skip(f"{BARE_PYTHON} is needed to run an image as a host would")
    has_hy = subprocess.run([BARE_PYTHON, "-c", "import hy"], capture_output=True,
                            env={"PATH": "/usr/bin:/bin"})
    if has_hy.returncode == 0:
        pytest.skip(f"{BARE_PYTHON} has hy installed: it would not show an image needs nothing")
    return BARE_PYTHON


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A consfig with the hosts above; `out` is where they write."""
    root = tmp_path_factory.mktemp("image-site")
    tag = uuid.uuid4().hex[:8]
    out = root / "out"
    path = root / "site.hy"
    out.mkdir()
    (root / "data" / "_image").mkdir(parents=True)
    (root / "data" / "_image" / "motd").write_text("motd from data\n")
    (root / "data" / "_image" / "secret").write_text(SECRET + "\n")
    (root / "conf.j2").write_text("colour={{ colour }} on {{ hostname }}\n")
    path.write_text(SITE.format(here=socket.gethostname(), out=out, tag=tag, secret=SECRET))
    load_consfig(str(path))
    yield {"path": path, "out": out, "tag": tag, "root": root}
    for host in ["failing", "data", "status", "fetch"]:
        try:
            os.unlink(image.state_file(f"{host}-{tag}.image.test"))
        except FileNotFoundError:
            pass


def write(site, host, name, **kw):
    path = site["root"] / name
    image.write_image(host, path, **kw)
    return path


def contents(path):
    """Every entry of the image at PATH, uncompressed, end to end."""
    with zipfile.ZipFile(path) as z:
        return b"".join(z.read(name) for name in z.namelist())


def run(python, path, *args, cache):
    """`python3 IMAGE ARGS…` with an environment that names nothing of consfig's
    (but the test run's own state directory, where the image records its run
    and `consfig status` reads it)."""
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "XDG_CACHE_HOME": str(cache),
           "STATE_DIRECTORY": os.environ["STATE_DIRECTORY"]}
    return subprocess.run([python, str(path), *args], capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.fixture(scope="module")
def applied(site, bare_python, tmp_path_factory):
    """This machine's image, built, and run once."""
    cache = tmp_path_factory.mktemp("image-cache")
    path = write(site, socket.gethostname(), "here.pyz")
    first = run(bare_python, path, "--detailed-exitcode", cache=cache)
    return {"path": path, "cache": cache, "first": first}


def test_building_an_image_twice_gives_the_same_bytes(site):
    host = f"status-{site['tag']}.image.test"
    assert image.build_image(host) == image.build_image(host)


def test_an_image_holds_no_time_and_no_path_of_the_controller(site):
    data = image.build_image(f"status-{site['tag']}.image.test")
    z = zipfile.ZipFile(io.BytesIO(data))
    assert {i.date_time for i in z.infolist()} == {(1980, 1, 1, 0, 0, 0)}
    assert z.namelist() == sorted(z.namelist())
    checkout = os.fsencode(image.__file__.rsplit("/consfig/", 1)[0])
    assert checkout in os.fsencode(image.__file__)
    assert checkout not in b"".join(z.read(name) for name in z.namelist())


def test_an_image_ships_the_modules_its_hosts_python_hop_is_told_to(site):
    data = image.build_image(f"modules-{site['tag']}.image.test")
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert any(n.startswith("layers/") and n.endswith("/colorsys.py") for n in names), names


def test_consfig_image_writes_the_same_file_as_the_function(site):
    host = f"status-{site['tag']}.image.test"
    out = site["root"] / "cli.pyz"
    r = consfig("image", "--consfig", site["path"], host, "-o", out)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == image.build_image(host)
    assert image.make_image(host).sha256 in r.stdout
    assert stat.S_IMODE(out.stat().st_mode) == 0o755


def test_an_image_applies_its_host_with_a_python_that_has_nothing_installed(site, applied):
    r = applied["first"]
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Changes were made." in r.stdout, r.stdout
    assert (site["out"] / "motd").read_text() == "hello\n"
    assert (site["out"] / "conf").read_text() == "a=1\nb=2\n"


def test_an_image_run_registers_none_of_the_sites_data_sources(site, bare_python, tmp_path):
    # The image carries its data; the site's sources (a files tree beside
    # the consfig on the controller) mean nothing on a host that has no such
    # directory, not even a warning.
    path = write(site, socket.gethostname(), "nodata.pyz")
    data = site["root"] / "data"
    data.rename(site["root"] / "data.away")
    try:
        r = run(bare_python, path, cache=tmp_path)
    finally:
        (site["root"] / "data.away").rename(data)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "data source skipped" not in r.stderr, r.stderr


def test_a_second_run_of_an_image_changes_nothing(site, bare_python, applied):
    r = run(bare_python, applied["path"], "--detailed-exitcode", cache=applied["cache"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "No changes were made." in r.stdout, r.stdout


def test_an_image_unpacks_its_layers_into_a_private_cache_once(applied, bare_python):
    bundles = applied["cache"] / "consfig" / "bundles"
    layers = list(bundles.iterdir())
    assert len(layers) == 3, "libraries, the report's, the site's: " + str(layers)
    for d in [bundles, *layers]:
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    assert list(bundles.rglob("*.pyc")), "the first run left no bytecode"
    before = {d: d.stat().st_ino for d in layers}
    r = run(bare_python, applied["path"], cache=applied["cache"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert {d: d.stat().st_ino for d in layers} == before, "a warm run unpacked the image again"
    assert list(bundles.rglob("*.pyc")), "a warm run threw its bytecode away"


def test_an_images_first_run_compiles_nothing_its_python_could_be_given(applied, bare_python):
    # The image carries the bytecode of the Python that built it; a host
    # whose Python makes the same (here: the same cache tag) runs from it.
    tag = subprocess.run([bare_python, "-c", "import sys; print(sys.implementation.cache_tag)"],
                         capture_output=True, text=True, check=True).stdout.strip()
    if tag != sys.implementation.cache_tag:
        pytest.skip(f"{bare_python} makes {tag} bytecode, not {sys.implementation.cache_tag}")
    carried = {n[len("layers/"):] for n in zipfile.ZipFile(applied["path"]).namelist()
               if n.endswith(".pyc")}
    bundles = applied["cache"] / "consfig" / "bundles"
    made = {str(p.relative_to(bundles)) for p in bundles.rglob("*.pyc")}
    assert made <= carried, f"the first run compiled {sorted(made - carried)}"


def test_an_image_in_check_mode_changes_nothing(site, bare_python, applied):
    motd = site["out"] / "motd"
    motd.write_text("edited\n")
    r = run(bare_python, applied["path"], "--check", "--diff", "--detailed-exitcode",
            cache=applied["cache"])
    assert r.returncode == 2, r.stdout + r.stderr
    assert "would change" in r.stdout and "+hello" in r.stdout, r.stdout
    assert motd.read_text() == "edited\n"
    r = run(bare_python, applied["path"], cache=applied["cache"])
    assert r.returncode == 0 and motd.read_text() == "hello\n", r.stdout + r.stderr


def test_an_image_writes_json_events_when_asked(bare_python, applied):
    r = run(bare_python, applied["path"], "--json", cache=applied["cache"])
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    assert events[-1]["event"] == "summary" and events[-1]["status"] == "no-change", events[-1]


def test_an_image_given_an_unknown_option_exits_as_deploy_does(bare_python, applied):
    r = run(bare_python, applied["path"], "--no-such-option", cache=applied["cache"])
    assert r.returncode == 64, r.stdout + r.stderr
    assert "usage: python3 here.pyz" in r.stderr, r.stderr


def test_an_image_refuses_a_machine_with_another_hostname(site, bare_python, tmp_path):
    path = write(site, f"failing-{site['tag']}.image.test", "failing.pyz")
    r = run(bare_python, path, cache=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"failing-{site['tag']}.image.test" in r.stderr and "--as-host" in r.stderr, r.stderr
    assert not (site["out"] / "reached").exists()


def test_a_failing_property_gives_the_exit_status_of_deploy(site, bare_python, tmp_path):
    path = write(site, f"failing-{site['tag']}.image.test", "failing.pyz")
    r = run(bare_python, path, "--as-host", "--detailed-exitcode", cache=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "There were failures." in r.stdout, r.stdout
    assert (site["out"] / "reached").read_text() == "yes\n"


def test_an_image_that_cannot_be_written_is_an_error_naming_where(site, tmp_path):
    r = consfig("image", "--consfig", site["path"], f"status-{site['tag']}.image.test",
                "-o", tmp_path / "no-such-directory" / "x.pyz")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "cannot write the image" in r.stderr and "no-such-directory" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr, r.stderr


def secret_forms(secret):
    """SECRET as an image could hold it: as it is, and in base64 at each alignment."""
    raw = (secret + "\n").encode()
    return [raw] + [base64.b64encode(raw[i:])[4:-4] for i in range(3)]


def test_an_image_carries_its_hosts_data_and_applies_it_with_nothing_installed(
        site, bare_python, tmp_path):
    shutil.rmtree(site["out"] / "data", ignore_errors=True)
    host = f"data-{site['tag']}.image.test"
    path = write(site, host, "data.pyz")
    r = run(bare_python, path, "--as-host", "--detailed-exitcode", cache=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    data = site["out"] / "data"
    assert (data / "motd").read_text() == "motd from data\n"
    assert (data / "conf").read_text() == f"colour=blue on {host}\n"
    assert (data / "private").read_text() == SECRET + "\n"
    assert stat.S_IMODE((data / "private").stat().st_mode) == 0o600
    r = run(bare_python, path, "--as-host", "--detailed-exitcode", cache=tmp_path)
    assert r.returncode == 0 and "No changes were made." in r.stdout, r.stdout + r.stderr
    assert SECRET not in r.stdout + r.stderr


def test_an_image_with_secrets_is_private_and_says_so(site, tmp_path):
    host = f"data-{site['tag']}.image.test"
    out = tmp_path / "secret.pyz"
    r = consfig("image", "--consfig", site["path"], host, "-o", out)
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert SECRET.encode() in contents(out)
    assert "holds secrets" in r.stderr and "data (_image secret)" in r.stderr, r.stderr
    assert SECRET not in r.stdout + r.stderr


def test_an_image_without_secrets_holds_none_and_fails_where_one_is_needed(site, bare_python,
                                                                          tmp_path):
    shutil.rmtree(site["out"] / "data", ignore_errors=True)
    host = f"data-{site['tag']}.image.test"
    path = tmp_path / "nosecret.pyz"
    built = image.write_image(host, path, no_secrets=True)
    assert built.secrets == [] and stat.S_IMODE(path.stat().st_mode) == 0o755
    held = contents(path)
    assert b"motd from data" in held, "the image holds the data that is not secret"
    for form in secret_forms(SECRET):
        assert form not in held, form
    r = run(bare_python, path, "--as-host", cache=tmp_path / "cache")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "(_image secret) is not in this image" in r.stdout, r.stdout
    assert "--no-secrets" in r.stdout and "consfig deploy" in r.stdout, r.stdout
    assert "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr
    data = site["out"] / "data"
    assert (data / "motd").read_text() == "motd from data\n"
    assert (data / "conf").read_text() == f"colour=blue on {host}\n"
    assert not (data / "private").exists()


def test_an_image_with_data_is_the_same_bytes_for_the_same_data_versions(site):
    host = f"data-{site['tag']}.image.test"
    for secrets in [True, False]:
        assert image.build_image(host, no_secrets=not secrets) == \
            image.build_image(host, no_secrets=not secrets), f"with secrets: {secrets}"
    before = image.build_image(host, no_secrets=True)
    motd = site["root"] / "data" / "_image" / "motd"
    st = motd.stat()
    os.utime(motd, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert image.build_image(host, no_secrets=True) != before, "a new data version, a new image"


def test_no_secrets_refuses_a_secret_written_in_site_code_the_image_carries(site, tmp_path):
    with pytest.raises(ConsfigError) as e:
        image.write_image(f"leaky-{site['tag']}.image.test", tmp_path / "leaky.pyz",
                          no_secrets=True)
    assert str(site["path"]) in str(e.value) and "leaky" in str(e.value), e.value
    assert SECRET not in str(e.value), e.value
    assert not (tmp_path / "leaky.pyz").exists()


def test_status_says_an_image_never_ran_then_what_its_last_run_did(site, bare_python, tmp_path):
    host = f"status-{site['tag']}.image.test"
    r = consfig("status", "--consfig", site["path"], host)
    assert r.returncode == 3 and "never run" in r.stdout, r.stdout + r.stderr
    path = write(site, host, "status.pyz")
    assert run(bare_python, path, "--as-host", cache=tmp_path).returncode == 0
    r = consfig("status", "--consfig", site["path"], host)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "changes made" in r.stdout and "1 changed" in r.stdout, r.stdout
    state = image.host_status(host)
    assert state["status"] == "changed" and state["counts"] == {"changed": 1}, state
    assert state["image"] == image.make_image(host).sha256, state


def test_status_records_the_failures_of_the_last_run(site, bare_python, tmp_path):
    host = f"failing-{site['tag']}.image.test"
    path = write(site, host, "failing.pyz")
    run(bare_python, path, "--as-host", cache=tmp_path)
    r = consfig("status", "--consfig", site["path"], host)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "failed: file.has-content" in r.stdout, r.stdout


LAB_SITE = """
(require consfig *)
(import consfig *)
(use-props consfig.props [file])

(defhost lab-{tag}.image.test {{:deploy [[:ssh :host "lab" :config "{config}"]]}}
  (file.has-content "{out}/over-ssh" "applied by its image\\n"))
"""


def test_an_image_run_over_ssh_applies_its_host_and_status_reads_it_back(sshlab, bare_python,
                                                                       tmp_path):
    home = pwd.getpwnam(sshlab.user).pw_dir
    out = os.path.join(home, "image-out")
    subprocess.run(["rm", "-rf", out], check=True)
    tag = uuid.uuid4().hex[:8]
    host = f"lab-{tag}.image.test"
    site = tmp_path / "lab.hy"
    site.write_text(LAB_SITE.format(tag=tag, config=sshlab.config, out=out))
    load_consfig(str(site))
    path = os.path.join(home, "lab.pyz")
    image.write_image(host, path)
    shutil.chown(path, sshlab.user)
    assert "never run" in image.format_status(host, image.host_status(host))
    conns = establish_chain(parse_chain([[K("ssh"), K("host"), "lab", K("config"), sshlab.config]]))
    try:
        r = conns[-1].run(["mkdir", "-p", out], check=False)
        assert r.exit_code == 0, r.stderr
        r = conns[-1].run([bare_python, path, "--as-host"], check=False, timeout=300)
    finally:
        close_chain(conns)
    assert r.exit_code == 0, r.stdout + r.stderr
    assert open(os.path.join(out, "over-ssh")).read() == "applied by its image\n"
    state = image.host_status(host)
    assert state["status"] == "changed", state
    assert state["path"].startswith(home), state


def pyenv_python(version):
    """The pyenv Python VERSION (a prefix: "3.9"), or a skip."""
    root = os.path.expanduser("~/.pyenv/versions")
    found = sorted(v for v in (os.listdir(root) if os.path.isdir(root) else [])
                   if v.startswith(version + "."))
    if not found:
        pytest.skip(f"no Python {version} here (pyenv)")
    return os.path.join(root, found[-1], "bin", "python3")


def test_an_image_runs_on_the_oldest_python_consfig_supports(site, tmp_path):
    python = pyenv_python("3.9")
    path = write(site, f"status-{site['tag']}.image.test", "py39.pyz")
    r = run(python, path, "--as-host", "--check", cache=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Changes would be made." in r.stdout or "Nothing would change." in r.stdout, r.stdout


def test_an_image_run_by_a_too_old_python_says_so(site, tmp_path):
    python = pyenv_python("3.8")
    path = write(site, f"status-{site['tag']}.image.test", "py38.pyz")
    r = run(python, path, cache=tmp_path)
    assert r.returncode == 97, r.stdout + r.stderr
    assert "needs Python 3.9 or later" in r.stderr, r.stderr


def test_every_module_an_image_ships_is_a_dependency_of_consfig():
    # An image ships these to whatever Python the host has (rich needs
    # typing_extensions below 3.11): a fresh install must have them all,
    # whatever the controller's own Python needs.
    import importlib.metadata
    import re
    declared = {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].lower().replace("-", "_")
                for r in importlib.metadata.requires("consfig") or [] if "extra ==" not in r}
    for module in image.IMAGE_MODULES:
        assert module.lower() in declared, \
            f"{module} goes into every image but is not a dependency in pyproject.toml"


def test_an_image_of_a_host_that_fetches_does_not_hold_what_the_controller_fetched(site):
    # file.fetched compares with DEST where the deployment runs from; an
    # image runs on its host, so the controller's copy of DEST is none of
    # its business, and must not change its bytes (nor make the host's
    # image.installed change at every push).
    host = f"fetch-{site['tag']}.image.test"
    dest = site["out"] / "fetch-dest"
    dest.write_text("fetched by the controller once\n")
    first = image.make_image(host).sha256
    dest.write_text("fetched by the controller again\n")
    assert image.make_image(host).sha256 == first, "the image holds the controller's DEST"
    dest.unlink()


def test_an_image_fetches_on_the_machine_it_runs_on_then_changes_nothing(site, bare_python,
                                                                          tmp_path):
    host = f"fetch-{site['tag']}.image.test"
    dest = site["out"] / "fetch-dest"
    dest.write_text("stale\n")
    path = write(site, host, "fetch.pyz")
    r = run(bare_python, path, "--as-host", "--detailed-exitcode", cache=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert dest.read_text() == "fetch me\n", dest.read_text()
    r = run(bare_python, path, "--as-host", "--detailed-exitcode", cache=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "No changes were made." in r.stdout, r.stdout
