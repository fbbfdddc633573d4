"""The end of a deployment's report, as a user reads it: the failures
repeated with their whole reason, and the recap of the hosts."""

import os
import sys
import textwrap

sys.path.insert(0, os.path.dirname(__file__))
from clirun import consfig  # noqa: E402

SITE = textwrap.dedent("""\
    (require consfig *)
    (import consfig *)
    (use-props consfig.props [file])

    (defprop fails-saying-two-lines :posix []
      "Fails with a reason of two lines, as a command that fails says why."
      (:desc "two-line failure")
      (:apply (raise (FailedChange "nginx -t -q failed; put back as it was:\\nnginx: [emerg] unknown directive \\"lisen\\" in /etc/nginx/sites-enabled/web1:2"))))

    (defhost outer.test {:deploy :local}
      (file.has-content "@ROOT@/outer" "x\\n")
      (deploys* :local inner.test (file.has-content "@ROOT@/inner" "x\\n")))
    (defhost inner.test {}
      (file.has-content "@ROOT@/inner-own" "x\\n"))
    (defhost bad.test {:deploy :local}
      (fails-saying-two-lines))
    """)


def site(tmp_path):
    path = tmp_path / "site.hy"
    path.write_text(SITE.replace("@ROOT@", str(tmp_path)))
    return path


def recap(output):
    rows = {}
    for line in output.split("Recap", 1)[1].splitlines():
        cells = [c.strip() for c in line.strip("│┃| ").split("│") if c.strip()]
        if len(cells) >= 2 and cells[0].endswith(".test"):
            rows[cells[0]] = cells[1]
    return rows


def test_the_failures_at_the_end_give_the_whole_reason(tmp_path):
    result = consfig("deploy", "--consfig", site(tmp_path), "bad", "outer", env_dir=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    failures = result.stdout.split("Failures:", 1)[1].split("Recap", 1)[0]
    assert "bad.test :: fails-saying-two-lines: nginx -t -q failed; put back as it was:" \
        in failures, failures
    assert 'unknown directive "lisen" in /etc/nginx/sites-enabled/web1:2' in failures, failures


def test_a_nested_host_that_succeeded_is_not_shown_as_not_finished(tmp_path):
    result = consfig("deploy", "--consfig", site(tmp_path), "bad", "outer", env_dir=tmp_path)
    assert (tmp_path / "inner").exists(), result.stdout + result.stderr
    rows = recap(result.stdout)
    assert "not finished" not in result.stdout, result.stdout
    assert rows.get("outer.test") == "changed" and rows.get("bad.test") == "failed", rows
    assert rows.get("inner.test") in (None, "changed"), rows


def test_a_nested_hosts_lines_come_within_its_parents_deployment(tmp_path):
    result = consfig("deploy", "--consfig", site(tmp_path), "bad", "outer", env_dir=tmp_path)
    lines = result.stdout.splitlines()
    inner = [i for i, line in enumerate(lines) if line.startswith("inner.test :: ")]
    deployed = lines.index("outer.test :: Deployed inner.test ... done")
    assert inner and max(inner) < deployed, result.stdout
