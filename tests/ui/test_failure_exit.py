"""No failure is lost: every entry point exits 1 and names the failed property.

Each site below reproduces a failure that once deployed with exit 0 or 2,
or printed a traceback."""

import os
import sys
import textwrap

sys.path.insert(0, os.path.dirname(__file__))
from clirun import consfig  # noqa: E402

SITE = textwrap.dedent("""\
    (require consfig *)
    (import consfig *)
    (use-props consfig.props [file])

    (defprop bad-desc :posix []
      "A site property with a bug in its description."
      (:desc (undefined-thing))
      (:apply None))

    (defhost flag.test {:deploy :local}
      (with-flagfile "/proc/no/such/flag" (file.has-content "@ROOT@/flagged" "x\\n")))

    (defhost buggy.test {:deploy :local}
      (bad-desc)
      (file.has-content "@ROOT@/after" "x\\n"))
    """)


ODD = textwrap.dedent("""\
    (require consfig *)
    (import consfig *)
    (use-props consfig.props [file])

    (defhost odd.test {:deploy :local}
      (file.contains-conf-equals "@ROOT@/odd.conf" "a" "1" "b"))
    """)


def site(tmp_path, text=SITE):
    path = tmp_path / "site.hy"
    path.write_text(text.replace("@ROOT@", str(tmp_path)))
    return path


def line_of(path, text):
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_odd_conf_pairs_exit_1_naming_the_property_and_line(tmp_path):
    path = site(tmp_path, ODD)
    result = consfig("deploy", "--consfig", path, "odd.test", "--detailed-exitcode")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "file.contains-conf-equals" in result.stdout + result.stderr
    assert f"site.hy:{line_of(path, 'contains-conf-equals')}" in result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert not (tmp_path / "odd.conf").exists()


def test_deploy_these_failure_exits_1_without_a_traceback(tmp_path):
    result = consfig("deploy-these", "--consfig", site(tmp_path), "flag.test",
                     f'(file.contains-conf-equals "{tmp_path}/odd.conf" "a" "1" "b")')
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert "file.contains-conf-equals" in result.stdout + result.stderr


def test_with_flagfile_that_cannot_make_its_flag_is_not_a_change(tmp_path):
    result = consfig("deploy", "--consfig", site(tmp_path), "flag.test", "--detailed-exitcode")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "with-flagfile /proc/no/such/flag ... failed" in result.stdout
    assert "There were failures." in result.stdout


def test_bug_in_a_site_desc_names_the_property_and_line_and_the_rest_applies(tmp_path):
    path = site(tmp_path)
    result = consfig("deploy", "--consfig", path, "buggy.test")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "buggy.test :: bad-desc ... failed" in result.stdout
    assert "NameError: name 'undefined_thing' is not defined" in result.stdout
    assert f"(at site.hy:{line_of(path, '(undefined-thing)')})" in result.stdout
    assert "seqprops" not in result.stdout, "the failure is not blamed on a combinator"
    assert (tmp_path / "after").exists(), "the host's body is a seqprops: the rest applies"


def test_traceback_of_a_site_bug_is_shown_at_verbose(tmp_path):
    result = consfig("deploy", "--consfig", site(tmp_path), "buggy.test", "-v")
    assert "Traceback" in result.stdout


def test_repl_exits_1_after_a_failed_deployment(tmp_path):
    result = consfig("repl", site(tmp_path), stdin="(buggy)\n")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "bad-desc ... failed" in result.stdout


def test_repl_exits_0_when_its_deployments_succeed(tmp_path):
    result = consfig("repl", site(tmp_path), stdin="(+ 1 1)\n")
    assert result.returncode == 0, result.stdout + result.stderr
