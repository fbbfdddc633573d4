"""What the consfig command prints, and its conventions, run as a user would."""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from clirun import REPO, consfig  # noqa: E402

DEMO = REPO / "hosts" / "demo.hy"


def test_version_prints_the_version():
    result = consfig("--version")
    assert result.returncode == 0
    assert result.stdout.startswith("consfig "), result.stdout


def test_json_writes_one_event_per_line_and_every_event(tmp_path):
    result = consfig("deploy", "--consfig", DEMO, "demo", "--json", env_dir=tmp_path)
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    kinds = {e["event"] for e in events}
    assert {"start", "end", "summary"} <= kinds, kinds
    assert all({"event", "host", "depth", "time"} <= set(e) for e in events), events[0]
    assert events[-1]["event"] == "summary" and events[-1]["status"] == "changed"
    starts = sum(e["event"] == "start" for e in events)
    ends_of_started = sum(e["event"] == "end" and e["status"] != "skipped" for e in events)
    assert ends_of_started >= starts


def test_summary_counts_statuses_and_time(tmp_path):
    result = consfig("deploy", "--consfig", DEMO, "demo", env_dir=tmp_path)
    summary = [line for line in result.stdout.splitlines() if "Changes were made." in line]
    assert summary and " done, 0 failed in " in summary[0], result.stdout


def test_deploy_these_applies_several_forms_in_order(tmp_path):
    result = consfig("deploy-these", "--consfig", DEMO, "demo",
                     f'(file.directory-exists "{tmp_path}/d") '
                     f'(file.has-content "{tmp_path}/d/f" "x\\n")', env_dir=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "d" / "f").read_text() == "x\n"


def test_hosts_piped_into_a_reader_that_stops_ends_quietly(tmp_path):
    # Far more than a pipe holds, so that writing fails once head has gone.
    site = tmp_path / "many.hy"
    site.write_text('(require consfig *)\n(import consfig *)\n'
                    '(for [i (range 3000)]\n'
                    '  (make-host f"host-{i}.a-rather-long-domain-name.example.org" {} '
                    '"a host among many" (eseqprops)))\n')
    pipeline = subprocess.run(
        f"{sys.executable} -m consfig hosts --consfig {site} | head -n 1",
        shell=True, capture_output=True, text=True, timeout=120)
    assert pipeline.stdout.startswith("host-0."), pipeline.stdout + pipeline.stderr
    assert "Traceback" not in pipeline.stderr, pipeline.stderr
    assert "BrokenPipeError" not in pipeline.stderr, pipeline.stderr


def test_repl_without_a_file_loads_consfig_hy_from_the_current_directory(tmp_path):
    (tmp_path / "consfig.hy").write_text(
        '(require consfig *)\n(import consfig *)\n(defhost here.test {:deploy :local})\n')
    result = consfig("repl", stdin="(. here hostname)\n", cwd=tmp_path)
    assert '"here.test"' in result.stdout, result.stdout + result.stderr


def test_using_the_demo_when_no_consfig_is_found_is_said(tmp_path):
    result = consfig("hosts", cwd=tmp_path)
    assert "using the demo consfig" in result.stderr, result.stderr
    assert "demo.localhost" in result.stdout


def test_dry_run_prints_the_propspec_one_propapp_per_line(tmp_path):
    result = consfig("deploy", "--consfig", DEMO, "demo", "--dry-run", env_dir=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    tree = lines[lines.index("  propspec:") + 1:]
    assert len(tree) > 5 and all(line.lstrip().startswith("(") for line in tree), tree
    assert not (tmp_path / "log").exists(), "nothing connected, nothing applied"


def test_reload_consfig_rebinds_hosts_to_their_new_definition(tmp_path):
    site = tmp_path / "box.hy"
    body = ('(require consfig *)\n(import consfig *)\n(use-props consfig.props [file])\n'
            '(defhost box.test {:deploy :local} (file.has-content "%s" "%s\\n"))\n')
    out = tmp_path / "out"
    site.write_text(body % (out, "one"))
    script = ('(box)\n'
              f'(with [f (open "{site}" "w")] (.write f {json.dumps(body % (out, "two"))}))\n'
              '(reload-consfig)\n(box)\n')
    result = consfig("repl", site, stdin=script)
    assert out.read_text() == "two\n", result.stdout + result.stderr
