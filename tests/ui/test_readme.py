"""The examples of the README and of the documentation in docs/ work as
written, wherever they are; and the documentation builds as a site."""

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
DOCS = REPO / "docs"


def section(title, text=README):
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def page(path):
    """The Markdown page docs/PATH."""
    return (DOCS / path).read_text()


def test_readme_property_example_deploys_and_is_idempotent(tmp_path):
    code = re.search(r"```hy\n(.*?)```", page("guide/writing-properties.md"), re.S).group(1)
    target = tmp_path / "lines.txt"
    target.write_text("one\n")
    site = tmp_path / "prop.hy"
    site.write_text(code + f'''
(defhost readme.example {{:deploy :local}}
  (os.linux :amd64)
  (has-line-count "{target}" 3))
''')
    run = lambda: subprocess.run(
        [sys.executable, "-m", "consfig", "deploy", "--consfig", str(site), "readme",
         "--detailed-exitcode"], capture_output=True, text=True, timeout=120)
    first = run()
    assert first.returncode == 2, first.stdout + first.stderr
    assert target.read_text() == "one\n\n\n"
    assert f"{target} has 3 lines ... done" in first.stdout
    assert run().returncode == 0


def test_readme_commands_are_what_ci_runs():
    ci = (REPO / ".ci" / "run").read_text()
    test_command = re.search(r"pip install -e '\.\[test\]' && (python3 -m pytest -q)", README)
    assert test_command, "the README names its test command"
    assert test_command.group(1) in ci


def dry_run(tmp_path, code, host):
    """`consfig deploy --dry-run HOST` of a site consfig made of CODE."""
    site = tmp_path / "site.hy"
    site.write_text(code)
    result = subprocess.run(
        [sys.executable, "-m", "consfig", "deploy", "--consfig", str(site), host, "--dry-run"],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_readme_tour_consfig_loads_and_preprocesses(tmp_path):
    code = re.search(r"```hy\n(.*?)```", section("A tour of one screen"), re.S).group(1)
    result = dry_run(tmp_path, code, "athena")
    assert 'chain: [[:ssh :user "root"] :python]' in result.stdout
    assert '"type" "debian-stable"' in result.stdout


def test_readme_facts_from_other_hosts_example_reads_the_other_hosts(tmp_path):
    code = re.search(r"```hy\n(\(require.*?)```", page("reference/facts.md"), re.S).group(1)
    result = dry_run(tmp_path, code, "lb")
    assert "server web1.example.org web1.example.org:8080 check" in result.stdout, result.stdout
    assert "web1.example.org ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFdlYjFob3N0a2V5" in result.stdout, result.stdout
    assert "lb.example.org ssh-ed25519" in result.stdout, result.stdout


def test_property_reference_is_up_to_date():
    result = subprocess.run([sys.executable, str(REPO / "docs" / "gen_reference.py"), "--check"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, (
        "a generated reference is stale; run python3 docs/gen_reference.py\n"
        + result.stdout + result.stderr)


def test_readme_data_site_checks_and_names_a_template_mistake(tmp_path):
    text = section("Files, templates and secrets from the site", page("guide/tour.md"))
    consfig = re.search(r"```hy\n(.*?)```", text, re.S).group(1)
    template = re.search(r"with `templates/site.conf.j2`:\n\n```\n(.*?)```", text, re.S).group(1)
    site = tmp_path / "site"
    secret = "TLS-KEY-NEVER-SHOWN"
    for rel, content in {"consfig.hy": consfig,
                         "templates/site.conf.j2": template,
                         "data/_web/banner": "Welcome\n",
                         # The secret comes from the data tree here: this
                         # machine's user has no password store.
                         "data/_web/tls.key": secret + "\n",
                         "data/web.example.org/etc/ssl/certs/web.pem": "CERT\n",
                         "www/index.html": "<p>hi</p>\n"}.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(content)
    env = dict(os.environ, PASSWORD_STORE_DIR=str(tmp_path / "no-store"))

    def check():
        # Check mode over :local changes nothing on this machine; it reads
        # what the properties compare with.
        return subprocess.run(
            [sys.executable, "-m", "consfig", "deploy", "--consfig", str(site / "consfig.hy"),
             "web", "--via", ":local", "--check", "--diff", "-v"],
            capture_output=True, text=True, timeout=120, env=env)

    result = check()
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "/etc/nginx/sites-enabled/default rendered from templates/site.conf.j2" in out, out
    assert "/etc/ssl/private/web.key" in out, out
    assert secret not in out, "the secret is shown"
    (site / "templates/site.conf.j2").write_text(template.replace("{{ port }}", "{{ prot }}"))
    result = check()
    assert result.returncode == 1, result.stdout + result.stderr
    error = result.stderr.splitlines()[-1]
    assert "site.conf.j2:2: file.templated /etc/nginx/sites-enabled/default: undefined variable 'prot'" \
        in error, result.stdout + result.stderr


def hy_blocks(text):
    return re.findall(r"^```hy\n(.*?)^```", text, re.S | re.M)


# The pages a person writes; the references are generated from the code.
WRITTEN = sorted(p for p in DOCS.rglob("*.md")
                 if p.name not in ("properties.md", "figures.md")
                 and "_build" not in p.parts
                 and p.relative_to(DOCS).as_posix() not in ("reference/types.md",
                                                            "reference/meta-parameters.md"))


def test_every_hy_example_of_the_readme_and_the_docs_reads_as_hy():
    import hy
    bad = []
    for path in [REPO / "README.md", *WRITTEN]:
        for block in hy_blocks(path.read_text()):
            try:
                list(hy.read_many(block))
            except Exception as e:
                bad.append(f"{path.relative_to(REPO)}: {type(e).__name__}: {e}\n{block[:200]}")
    assert not bad, "\n\n".join(bad)


def test_the_readme_is_a_front_door_of_one_page():
    size = len(README.encode())
    assert size <= 12 * 1024, f"README.md is {size} bytes: move the details into docs/"
    for heading in ("## Two commands", "## A tour of one screen",
                    "## A first remote host in five steps", "## Where to read on"):
        assert heading in README, heading


def test_every_page_the_readme_and_the_index_link_to_exists():
    for source in [REPO / "README.md", DOCS / "index.md"]:
        for target in re.findall(r"\]\(([^)#:]+\.md)(?:#[^)]*)?\)", source.read_text()):
            assert (source.parent / target).exists(), f"{source.name} links to {target}"


def test_the_first_remote_host_loads_as_written(tmp_path):
    code = re.search(r"```hy\n(.*?)```", section("A first remote host in five steps"), re.S).group(1)
    code = "\n".join(line[3:] if line.startswith("   ") else line for line in code.splitlines())
    result = dry_run(tmp_path, code, "web1")
    assert 'chain: [[:ssh :user "admin"] :sudo :python]' in result.stdout, result.stdout
    assert "/etc/motd" in result.stdout, result.stdout


def test_the_first_remote_host_deploys_over_ssh_and_sudo_then_changes_nothing(sshlab, tmp_path):
    # The README's five steps against the SSH lab: its user stands for
    # "admin", and a file of the test's for /etc/motd; apt is left out,
    # since the lab is this machine.
    block = re.search(r"```hy\n(.*?)```", section("A first remote host in five steps"), re.S).group(1)
    code = "\n".join(line[3:] if line.startswith("   ") else line for line in block.splitlines())
    motd = tmp_path / "motd"
    code = code.replace("/etc/motd", str(motd)).replace('(apt.installed "htop")', "")
    site = tmp_path / "consfig.hy"
    site.write_text(code)
    via = f'[[:ssh :config "{sshlab.config}" :host "lab"] :sudo :python]'

    def deploy(*extra):
        return subprocess.run(
            [sys.executable, "-m", "consfig", "deploy", "--consfig", str(site), "web1",
             "--via", via, *extra], capture_output=True, text=True, timeout=300)

    check = deploy("--check", "--diff")
    assert check.returncode == 0 and "would change" in check.stdout, check.stdout + check.stderr
    assert not motd.exists(), "a check changes nothing"
    first = deploy()
    assert first.returncode == 0, first.stdout + first.stderr
    assert motd.read_text() == "web1: managed by consfig\n"
    again = deploy("--check", "--detailed-exitcode")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "No changes were made." in deploy().stdout


def test_the_documentation_builds_as_a_site_without_a_warning(tmp_path):
    try:
        import myst_parser  # noqa: F401
        import sphinx  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            raise
        import pytest
        pytest.skip("sphinx and myst-parser are not installed (pip install -e '.[docs]')")
    result = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b",
                             "html", str(DOCS), str(tmp_path / "html")],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "html" / "guide" / "tour.html").exists()


def test_every_whole_site_example_loads_with_its_hosts(tmp_path):
    # A block that starts a site — `(require consfig *)` — loads as a
    # consfig, as written.  The tour's site of files and templates needs its
    # tree beside it: test_readme_data_site_checks_and_names_a_template_mistake
    # deploys that one.
    sites = [(path, block) for path in [REPO / "README.md", *WRITTEN]
             for block in hy_blocks(path.read_text())
             if "(require consfig *)" in block and "templates/" not in block]
    assert len(sites) >= 4, sites
    for i, (path, block) in enumerate(sites):
        site = tmp_path / f"site{i}.hy"
        site.write_text(block)
        result = subprocess.run([sys.executable, "-m", "consfig", "hosts", "--consfig", str(site)],
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, \
            f"{path.relative_to(REPO)}: {result.stdout}{result.stderr}\n{block}"
