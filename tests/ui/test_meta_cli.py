"""Meta-parameters end to end over [:local]: a site consfig with `with-meta`,
deployed, checked and dry-run by the consfig command, a real process."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from clirun import consfig  # noqa: E402

SITE = """(require consfig *)
(import consfig *)
(use-props consfig.props [file])

(defprop flaky :posix [counter failures]
  "Counts its attempts in COUNTER; the first FAILURES fail, as a command
waiting on a lock would."
  (:desc "flaky command")
  (:apply
    (run-script "n=$(cat \\"$1\\" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > \\"$1\\"
[ $n -gt \\"$2\\" ] || { echo \\"lock held (attempt $n)\\" >&2; exit 100; }" counter (str failures))
    :changed))

(defhost meta-@PID@.example {:deploy :local}
  (with-meta {:retry 2 :delay 0.1}
    (flaky "@ROOT@/count" 2))
  (with-meta {:reverse True}
    (file.exists-with-content "@ROOT@/reversible" "x\\n")))
"""


def write_site(tmp_path, text=SITE):
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    path = tmp_path / "site.hy"
    path.write_text(text.replace("@ROOT@", str(root)).replace("@PID@", str(os.getpid())))
    return path, root


def state_file():
    return f"/var/lib/consfig/reverse/meta-{os.getpid()}.example.json"


def test_a_deployment_retries_a_flaky_command_and_says_so(tmp_path):
    path, root = write_site(tmp_path)
    try:
        result = consfig("deploy", "--consfig", path, "meta-*")
        assert result.returncode == 0, result.stdout + result.stderr
        assert (root / "count").read_text() == "3\n"
        assert "attempt 1 of 3 failed" in result.stdout, result.stdout
        assert "lock held (attempt 2)" in result.stdout, result.stdout
        assert "There were failures" not in result.stdout, result.stdout
    finally:
        if os.path.exists(state_file()):
            os.unlink(state_file())


def test_dry_run_and_check_mode_show_the_meta_parameters(tmp_path):
    path, root = write_site(tmp_path)
    dry = consfig("deploy", "--consfig", path, "meta-*", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "meta-parameters:" in dry.stdout, dry.stdout
    assert "flaky command (retry 2, delay 0.1 s)" in dry.stdout, dry.stdout
    check = consfig("deploy", "--consfig", path, "meta-*", "--check")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "flaky command (retry 2, delay 0.1 s)" in check.stdout, check.stdout
    assert "(reverse)" in check.stdout, check.stdout
    assert list(root.iterdir()) == [], "neither changed anything"


def test_removing_a_reverse_property_from_the_consfig_unapplies_it(tmp_path):
    path, root = write_site(tmp_path)
    try:
        assert consfig("deploy", "--consfig", path, "meta-*").returncode == 0
        assert (root / "reversible").exists()
        without = SITE[:SITE.index("  (with-meta {:reverse True}")] + ")\n"
        write_site(tmp_path, without)
        result = consfig("deploy", "--consfig", path, "meta-*")
        assert result.returncode == 0, result.stdout + result.stderr
        assert not (root / "reversible").exists(), result.stdout
        assert "no longer in the propspec, unapplied" in result.stdout, result.stdout
        assert not os.path.exists(state_file())
    finally:
        if os.path.exists(state_file()):
            os.unlink(state_file())


def test_an_unknown_meta_parameter_is_refused_at_load_with_file_and_line(tmp_path):
    path, root = write_site(tmp_path, SITE.replace("{:retry 2 :delay 0.1}", "{:retyr 2}"))
    result = consfig("deploy", "--consfig", path, "meta-*")
    assert result.returncode == 1, result.stdout + result.stderr
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if ":retyr" in text)
    assert f"site.hy:{line}:" in result.stderr, result.stderr
    assert "did you mean :retry?" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert list(root.iterdir()) == []
