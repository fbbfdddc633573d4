"""The consfig command, run as a user would: a real process, real files."""

import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from clirun import REPO, consfig  # noqa: E402

DEMO = REPO / "hosts" / "demo.hy"


def test_demo_deploys_then_second_run_reports_no_changes(tmp_path):
    first = consfig("deploy", "--consfig", DEMO, "demo", "--detailed-exitcode", env_dir=tmp_path)
    assert first.returncode == 2, first.stdout + first.stderr
    assert "demo.localhost :: Changes were made." in first.stdout
    assert (tmp_path / "www/example.org/index.html").read_text().startswith("<!doctype html>")
    assert (tmp_path / "current").resolve() == tmp_path / "www/example.org"
    assert oct((tmp_path / "etc/demo.conf").stat().st_mode & 0o777) == "0o640"
    assert len((tmp_path / "restarts.log").read_text().splitlines()) == 1

    second = consfig("deploy", "--consfig", DEMO, "demo", "--detailed-exitcode", env_dir=tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "demo.localhost :: No changes were made." in second.stdout
    assert " ... done" not in second.stdout
    assert len((tmp_path / "restarts.log").read_text().splitlines()) == 1, "no restart without change"


def test_exit_status_is_zero_with_or_without_changes(tmp_path):
    assert consfig("deploy", "--consfig", DEMO, "demo", env_dir=tmp_path).returncode == 0
    assert consfig("deploy", "--consfig", DEMO, "demo", env_dir=tmp_path).returncode == 0


def test_demo_is_the_default_consfig(tmp_path):
    result = consfig("deploy", "demo", env_dir=tmp_path, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "log/README").exists()


def test_repl_loads_the_consfig_and_calling_a_host_deploys_it(tmp_path):
    result = consfig("repl", DEMO, env_dir=tmp_path, stdin="(demo)\n")
    assert "Changes were made." in result.stdout, result.stdout + result.stderr
    assert (tmp_path / "www/example.org/index.html").exists()
    again = consfig("repl", DEMO, env_dir=tmp_path, stdin="(. (demo) status)\n")
    assert "No changes were made." in again.stdout
    assert '"no-change"' in again.stdout


def test_repl_reports_a_mistake_without_a_traceback(tmp_path):
    result = consfig("repl", DEMO, env_dir=tmp_path, stdin='(find-host "nonesuch")\n(+ 40 2)\n')
    assert "consfig: error: unknown host nonesuch; known hosts: demo.localhost" in result.stderr
    assert "Traceback" not in result.stderr
    assert "=> 42" in result.stdout, "the REPL carries on"


def test_hosts_lists_hostname_chain_groups_and_description():
    result = consfig("hosts", "--consfig", DEMO)
    assert result.returncode == 0
    assert result.stdout.split()[:4] == ["demo.localhost", "[:local]", "-", "This"]


SITE = r'''
(require consfig *)
(import consfig *)
(use-props consfig.props [file cmd])

(setv root "@ROOT@")

(defproplist web-site [name]
  (:desc f"web site {name}")
  (file.directory-exists f"{root}/www/{name}")
  (file.has-content f"{root}/www/{name}/index.html" f"hello from {name}\n"))

(defpropspec motd [lines]
  `(eseqprops ~@(lfor l lines `(file.contains-lines ~f"{root}/motd" ~l))))

(defhost site.example {:deploy :local}
  (web-site "a.example")
  (motd ["line one" "line two"])
  (on-change (file.has-content f"{root}/app.conf" "port = 80\n")
    (cmd.single "sh" "-c" "echo restarted >> \"$1\"" "sh" f"{root}/restarts"))
  (unapplied (file.contains-lines f"{root}/motd" "obsolete line"))
  (desc* "dotted group"
    (file.directory-exists f"{root}/dotted")
    (file.has-content f"{root}/dotted/f" "x")))
'''


def write_site(tmp_path, text=SITE, name="site.hy"):
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    path = tmp_path / name
    path.write_text(text.replace("@ROOT@", str(root)))
    return path, root


def test_site_with_defproplist_defpropspec_dotted_unapplied_on_change(tmp_path):
    path, root = write_site(tmp_path)
    (root / "motd").write_text("obsolete line\nkeep me\n")
    first = consfig("deploy", "--consfig", path, "site", "--detailed-exitcode")
    assert first.returncode == 2, first.stdout + first.stderr
    assert (root / "www/a.example/index.html").read_text() == "hello from a.example\n"
    assert (root / "motd").read_text() == "keep me\nline one\nline two\n"
    assert (root / "restarts").read_text() == "restarted\n"
    assert (root / "dotted/f").read_text() == "x"
    out = first.stdout
    assert "site.example :: web site a.example\n" in out
    assert "site.example ::   " + str(root) + "/www/a.example exists ... done" in out
    assert "site.example :: Unapplied: " + str(root) + "/motd contains obsolete line ... done" in out
    assert "site.example :: dotted group ... done" in out

    second = consfig("deploy", "--consfig", path, "site", "--detailed-exitcode")
    assert second.returncode == 0, second.stdout + second.stderr
    assert (root / "restarts").read_text() == "restarted\n"


def test_deploy_these_applies_only_the_given_propspec(tmp_path):
    path, root = write_site(tmp_path)
    result = consfig("deploy-these", "--consfig", path, "site",
                     f'(file.has-content "{root}/only" "just this\\n")')
    assert result.returncode == 0, result.stderr
    assert (root / "only").read_text() == "just this\n"
    assert not (root / "www").exists()


def test_deploy_these_takes_several_forms_as_several_arguments(tmp_path):
    # As the README shows it: each propapp its own shell word.
    path, root = write_site(tmp_path)
    result = consfig("deploy-these", "--consfig", path, "site",
                     f'(file.has-content "{root}/one" "1\n")',
                     f'(file.has-content "{root}/two" "2\n")')
    assert result.returncode == 0, result.stderr
    assert (root / "one").read_text() == "1\n" and (root / "two").read_text() == "2\n"


def test_deploy_these_with_unbalanced_parentheses_is_one_clear_line(tmp_path):
    path, root = write_site(tmp_path)
    result = consfig("deploy-these", "--consfig", path, "site",
                     f'(file.has-content "{root}/only" "x\\n"')
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.startswith("consfig: error: cannot read the propspec"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert not (root / "only").exists()


def test_deploy_these_with_a_wrong_typed_argument_applies_nothing(tmp_path):
    path, root = write_site(tmp_path)
    result = consfig("deploy-these", "--consfig", path, "site",
                     f'(file.has-content "{root}/only" "x" :mode "0640")')
    assert result.returncode == 1, result.stdout + result.stderr
    assert ':mode must be a file mode (an integer such as 0o640), not "0640"' in result.stderr
    assert not (root / "only").exists()


def test_mode_prints_in_octal_in_dry_run(tmp_path):
    path = tmp_path / "modes.hy"
    path.write_text('(require consfig *)\n(import consfig *)\n(use-props consfig.props [file])\n'
                    f'(defhost modes.example {{:deploy :local}} (file.has-content "{tmp_path}/m" "x" :mode 0o640))\n')
    result = consfig("deploy", "--consfig", path, "modes", "--dry-run")
    assert result.returncode == 0, result.stdout + result.stderr
    assert ":mode 0o640" in result.stdout, result.stdout


def test_dry_run_prints_the_propspec_and_touches_nothing(tmp_path):
    path, root = write_site(tmp_path)
    result = consfig("deploy", "--consfig", path, "site", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "(consfig.combinators.seqprops" in result.stdout
    assert ":hostname [\"site.example\"]" in result.stdout
    assert list(root.iterdir()) == []


def test_via_overrides_the_chain_and_a_bad_chain_is_an_error(tmp_path):
    path, root = write_site(tmp_path)
    assert consfig("deploy", "--consfig", path, "site", "--via", "[:local]").returncode == 0
    bad = consfig("deploy", "--consfig", path, "site", "--via", "[:teleport]")
    assert bad.returncode == 1
    assert "unknown hop type :teleport" in bad.stderr


# Each malformed --via, and what its one line must say.
BAD_VIA = {
    "port-not-a-number": ('[[:ssh :port "abc"]]', 'hop :ssh: :port wants a port number (1-65535), not "abc"'),
    "host-not-a-string": ("[[:ssh :host 5]]", "hop :ssh: :host wants a non-empty string, not 5"),
    "chroot-without-into": ("[[:chroot]]", "hop :chroot needs :into"),
    "a-number": ("5", "a connection chain is a list of hops, not 5"),
    "a-dict": ("{:a 1}", "a connection chain is a list of hops"),
    "timeout-not-a-number": ('[:ssh :timeout "abc"]', ':timeout wants a positive number of seconds, not "abc"'),
    "misspelt-hop": ("[:shh]", "unknown hop type :shh; did you mean :ssh?"),
    "misspelt-argument": ("[[:ssh :prot 22]]", "hop :ssh has no argument :prot; did you mean :port?"),
    "empty": ("", "--via"),
    "empty-list": ("[]", "needs at least one hop"),
    "unreadable": ("[:ssh", "--via"),
}


@pytest.mark.parametrize("case", sorted(BAD_VIA))
def test_a_malformed_via_is_one_clear_line(tmp_path, case):
    via, message = BAD_VIA[case]
    path, root = write_site(tmp_path)
    result = consfig("deploy", "--consfig", path, "site", "--via", via)
    assert_clean_error(result, message)
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert list(root.iterdir()) == [], "nothing was applied"


def test_a_bad_deploy_chain_in_defhost_names_file_line_and_host(tmp_path):
    text = SITE.replace("{:deploy :local}", '{:deploy [[:ssh :port "x"]]}')
    path, root = write_site(tmp_path, text)
    result = consfig("hosts", "--consfig", path)
    line = line_of(path.read_text(), "(defhost")
    assert_clean_error(result, f"site.hy:{line}: defhost site.example: :deploy: hop :ssh: :port wants")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def assert_clean_error(result, *fragments):
    assert result.returncode == 1, result.stdout + result.stderr
    assert "consfig: error:" in result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


def line_of(text, start):
    return next(i for i, line in enumerate(text.splitlines(), 1) if line.strip().startswith(start))


# The broken form, the line the error must name (of the form itself, or of
# the defhost that a missing parenthesis leaves open), and what it must say.
BROKEN = {
    "unknown-property": ('(file.has-contents "@ROOT@/x" "y")', "(file.has-contents", "file.has-contents"),
    "wrong-arity": ('(file.has-content "@ROOT@/x")', '(file.has-content "@ROOT@/x")', "path #^ content content"),
    "syntax-error": ('(file.has-content "@ROOT@/x" "y"', "(defhost", "premature end of input"),
    "unknown-module": ('(filez.has-content "@ROOT@/x" "y")', "(filez", "use-props"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_consfig_mistakes_name_file_and_line_and_touch_nothing(tmp_path, case):
    form, line_start, what = BROKEN[case]
    text = SITE.replace('(web-site "a.example")', '(web-site "a.example")\n  ' + form)
    path, root = write_site(tmp_path, text)
    result = consfig("deploy", "--consfig", path, "site")
    line = line_of(path.read_text(), line_start.replace("@ROOT@", str(root)))
    assert_clean_error(result, f"site.hy:{line}:", what)
    assert list(root.iterdir()) == []


def test_unknown_host_is_named_with_the_known_ones(tmp_path):
    path, root = write_site(tmp_path)
    result = consfig("deploy", "--consfig", path, "nosuchhost")
    assert_clean_error(result, "unknown host nosuchhost", "site.example")


def test_missing_consfig_is_a_clear_error(tmp_path):
    result = consfig("deploy", "--consfig", tmp_path / "nope.hy", "site")
    assert_clean_error(result, "cannot read consfig", "no such file")


def test_error_at_top_level_of_consfig_names_the_line(tmp_path):
    path, root = write_site(tmp_path, SITE + "\n(/ 1 0)\n")
    result = consfig("deploy", "--consfig", path, "site")
    assert_clean_error(result, "ZeroDivisionError", f"site.hy:{line_of(path.read_text(), '(/ 1 0)')}:")


def test_wrong_command_line_arguments_exit_64_with_the_subcommands_usage():
    result = consfig("deploy")
    assert result.returncode == 64, "not 2, which --detailed-exitcode means as changes made"
    assert "usage: consfig deploy" in result.stderr


@pytest.mark.parametrize("chain", [":local", "[:local :python]"])
def test_a_site_edited_within_the_same_second_and_size_deploys_its_new_content(tmp_path, chain):
    # Python trusts a cached compile whose source has the same mtime (whole
    # seconds) and size: a site edited and redeployed quickly, as scripts do,
    # must still deploy what its file says now, here and on a target that
    # runs the site's own property from its cache.
    target = tmp_path / "out"
    site = tmp_path / "quick.hy"

    def write_site(word):
        site.write_text(
            "(require consfig *)\n(import consfig *)\n(use-props consfig.props [file])\n"
            f'(defproplist says [] (file.has-content "{target}" "{word}\\n"))\n'
            f"(defhost quick.test {{:deploy {chain}}} (says))\n")

    write_site("CCC1")
    stamp = site.stat().st_mtime_ns
    first = consfig("deploy", "--consfig", site, "quick.test")
    assert first.returncode == 0, first.stderr
    assert target.read_text() == "CCC1\n"
    write_site("DDD1")
    os.utime(site, ns=(stamp, stamp))
    second = consfig("deploy", "--consfig", site, "quick.test")
    assert second.returncode == 0, second.stderr
    assert target.read_text() == "DDD1\n", "the old compile of the site was deployed"


def write_content_site(site, hostname, target, word):
    """Write SITE: a consfig whose one host HOSTNAME (over :local) puts WORD
    in TARGET; its source, as bytes."""
    site.write_text(
        "(require consfig *)\n(import consfig *)\n(use-props consfig.props [file])\n"
        f'(defhost {hostname} {{:deploy :local}} (file.has-content "{target}" "{word}\\n"))\n')
    return site.read_bytes()


def test_a_site_compiled_by_another_consfig_is_compiled_again(tmp_path):
    # A site's compile holds the expansions of consfig's macros: bytecode that
    # another consfig (an upgrade, an older install, an edited checkout)
    # cached for the very same source must not be run by this one.  The
    # stand-in: CCC1's code cached under the hash of DDD1's source alone, as
    # a consfig that hashes only the source would have left it.
    import importlib.util
    import marshal
    from consfig.site.load import _SiteLoader, module_name_for
    target = tmp_path / "out"
    site = tmp_path / "other.hy"
    old = write_content_site(site, "other.test", target, "CCC1")
    code = _SiteLoader(module_name_for(str(site)), str(site)).source_to_code(old, str(site))
    new = write_content_site(site, "other.test", target, "DDD1")
    cached = importlib.util.cache_from_source(str(site))
    os.makedirs(os.path.dirname(cached), exist_ok=True)
    with open(cached, "wb") as f:
        f.write(importlib.util.MAGIC_NUMBER + (0b11).to_bytes(4, "little")
                + importlib.util.source_hash(new) + marshal.dumps(code))
    r = consfig("deploy", "--consfig", site, "other.test")
    assert r.returncode == 0, r.stderr
    assert target.read_text() == "DDD1\n", "bytecode another compiler left was run"


def test_with_bytecode_writing_off_a_site_is_compiled_once_into_consfigs_cache(tmp_path):
    # PYTHONDONTWRITEBYTECODE=1 left every run compiling the site again (most
    # of W1's whole-process time then); its compile goes to consfig's own
    # private cache instead, checked by hash, so an edit is still deployed.
    target = tmp_path / "out"
    site = tmp_path / "nowrite.hy"
    cache = tmp_path / "cache"

    def deploy(word):
        write_content_site(site, "nowrite.test", target, word)
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", XDG_CACHE_HOME=str(cache))
        r = subprocess.run([sys.executable, "-m", "consfig", "deploy", "--consfig", str(site),
                            "nowrite.test"], capture_output=True, text=True, env=env,
                           cwd=tmp_path, timeout=120)
        assert r.returncode == 0, r.stderr
        return target.read_text()

    stamp = None
    assert deploy("EEE1") == "EEE1\n"
    stamp = site.stat().st_mtime_ns
    cached = list((cache / "consfig" / "sites").iterdir())
    assert len(cached) == 1, f"the site's compile was not cached: {cached}"
    assert not (tmp_path / "__pycache__").exists(), "bytecode written beside the site"
    assert oct((cache / "consfig").stat().st_mode & 0o777) == "0o700"
    assert deploy("FFF1") == "FFF1\n", "the cached compile of the old site was run"
    os.utime(site, ns=(stamp, stamp))
    assert deploy("GGG1") == "GGG1\n", "an edit within the same second was not deployed"


def test_a_host_vetoed_by_a_property_names_the_property_and_its_line(tmp_path):
    text = SITE.replace('(web-site "a.example")',
                        '(web-site "a.example")\n  (apt.installed "nginx")').replace(
                        "[file cmd]", "[file cmd apt]")
    path, root = write_site(tmp_path, text)
    result = consfig("deploy", "--consfig", path, "site")
    line = line_of(path.read_text(), "(apt.installed")
    assert_clean_error(result, f"site.hy:{line}: ", "apt.installed",
                       "needs an OS of type debian")
    assert list(root.iterdir()) == []


def test_a_decimal_mode_in_a_defhost_is_one_line_naming_its_line(tmp_path):
    text = SITE.replace('(web-site "a.example")',
                        '(web-site "a.example")\n  (file.has-content "@ROOT@/m" "m\\n" :mode 644)')
    path, root = write_site(tmp_path, text)
    result = consfig("deploy", "--consfig", path, "site")
    line = line_of(path.read_text(), '(file.has-content "')
    assert_clean_error(result, f"site.hy:{line}: ", ":mode 644 is the decimal number 644")
    assert "expanding macro" not in result.stderr and "PropspecError" not in result.stderr, \
        result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_bug_in_a_site_property_over_python_is_located_at_the_site_file(tmp_path):
    text = SITE.replace("(defhost site.example {:deploy :local}",
                        '(defprop buggy :posix []\n  "A bug."\n  (:apply (get {} "nope")))\n\n'
                        "(defhost site.example {:deploy [:local :python]}\n  (buggy)")
    path, root = write_site(tmp_path, text)
    result = consfig("deploy", "--consfig", path, "site")
    line = line_of(path.read_text(), "(:apply (get {}")
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"(at site.hy:{line})" in result.stdout, result.stdout
    assert "consfig_site_" not in result.stdout, result.stdout
