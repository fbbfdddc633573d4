"""Looking properties up where you work: `consfig doc` and `(doc …)` at the
REPL, run as a user runs them."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from clirun import Terminal, consfig  # noqa: E402


def test_doc_shows_a_propertys_signature_types_defaults_and_docstring():
    r = consfig("doc", "file.has-content")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith("(file.has-content [#^ abs-path path #^ content content *"), out
    assert "  :mode: file-mode — a file mode" in out and "(default None)" in out, out
    assert "PATH has exactly CONTENT" in out, "the docstring"
    assert "Unapplying: cannot be unapplied" in out, out
    assert "Watches: what it manages" in out, out
    assert "Usage: (file.has-content PATH CONTENT)" in out, out


def test_doc_shows_the_docstrings_example_and_what_it_watches():
    r = consfig("doc", "alternatives.selected")
    assert r.returncode == 0, r.stderr
    assert "Unapplying: can be unapplied" in r.stdout, r.stdout
    assert 'Example:\n  (alternatives.selected "editor" "/usr/bin/vim.basic")' in r.stdout, r.stdout


def test_doc_of_a_watching_property_says_what_its_example_watches():
    r = consfig("doc", "user.group-has-members")
    assert r.returncode == 0, r.stderr
    assert 'Example:\n  (user.group-has-members "adm" "alice" "bob")' in r.stdout, r.stdout
    assert "Watches: what it manages; for the example, the path /etc/passwd; the path /etc/group" \
        in r.stdout, r.stdout


def test_doc_of_an_unknown_property_says_the_nearest_name():
    r = consfig("doc", "file.has-contnt")
    assert r.returncode == 1
    assert "no property file.has-contnt; did you mean file.has-content?" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_doc_list_lists_matching_properties_with_their_first_sentence():
    r = consfig("doc", "--list", "apt.*")
    assert r.returncode == 0, r.stderr
    names = [line.split()[0] for line in r.stdout.splitlines()]
    assert "apt.installed" in names and all(n.startswith("apt.") for n in names), names
    line = next(l for l in r.stdout.splitlines() if l.startswith("apt.installed "))
    assert line.endswith("Each of PACKAGES (names, or lists of names) is installed, with its recommends."), line


def test_doc_list_without_a_pattern_lists_every_property():
    r = consfig("doc", "--list")
    assert r.returncode == 0, r.stderr
    names = {line.split()[0] for line in r.stdout.splitlines()}
    assert {"file.has-content", "apt.installed", "eseqprops", "user.has-account"} <= names


def test_doc_knows_a_sites_own_properties(tmp_path):
    site = tmp_path / "site.hy"
    site.write_text('(require consfig *)\n(import consfig *)\n'
                    '(defproplist web-base [#^ (list-of string) names]\n'
                    '  "The base of every web server."\n  (eseqprops))\n')
    r = consfig("doc", "--consfig", site, "web-base")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("(web-base [#^ (list-of string) names])"), r.stdout
    assert "The base of every web server." in r.stdout, r.stdout


def test_doc_at_the_repl_shows_the_property_without_a_traceback():
    with Terminal("repl") as t:
        t.read_until(lambda seen: b"=> " in seen, 60)
        t.write(b"(doc file.has-content)\n")
        t.read_until(lambda seen: b"Usage: (file.has-content PATH CONTENT)" in seen, 60)
        t.write(b"(doc file.has-contnt)\n")
        t.read_until(lambda seen: b"did you mean file.has-content?" in seen, 60)
        t.write(b"(quit)\n")
        t.read_to_end(30)
    text = t.text()
    assert "(file.has-content [#^ abs-path path" in text, text
    assert "Traceback" not in text and "NameError" not in text, text
