"""The README's examples work as written."""

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


def section(title):
    return README.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_readme_property_example_deploys_and_is_idempotent(tmp_path):
    code = re.search(r"```hy\n(.*?)```", section("Writing a property"), re.S).group(1)
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
    code = re.search(r"```hy\n(.*?)```", section("A tour of a consfig"), re.S).group(1)
    result = dry_run(tmp_path, code, "athena")
    assert 'chain: [[:ssh :user "root"] :python]' in result.stdout
    assert '"type" "debian-stable"' in result.stdout


def test_readme_facts_from_other_hosts_example_reads_the_other_hosts(tmp_path):
    code = re.search(r"```hy\n(\(require.*?)```", section("Facts from other hosts"), re.S).group(1)
    result = dry_run(tmp_path, code, "lb")
    assert "server web1.example.org web1.example.org:8080 check" in result.stdout, result.stdout
    assert "web1.example.org ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFdlYjFob3N0a2V5" in result.stdout, result.stdout
    assert "lb.example.org ssh-ed25519" in result.stdout, result.stdout


def test_property_reference_is_up_to_date():
    result = subprocess.run([sys.executable, str(REPO / "docs" / "gen_reference.py"), "--check"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, (
        "docs/properties.md is stale; run python3 docs/gen_reference.py\n" + result.stdout + result.stderr)


def test_readme_data_site_checks_and_names_a_template_mistake(tmp_path):
    text = section("A tour of a consfig").split("### Files, templates and secrets from the site\n", 1)[1]
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
