"""Deploying a fleet: several hosts at once, and choosing them by name, glob
and group — run as a user would, on :local hosts, hosts of the SSH lab and
an unreachable one."""

import json
import os
import pathlib
import re
import sys
import tempfile
import textwrap

sys.path.insert(0, os.path.dirname(__file__))
from clirun import consfig  # noqa: E402

# Each host of a group that must run side by side waits, bounded, until
# all of them have started: run one after another, the first one fails.
BARRIER = ("sh", "-c", 'touch "$0/$1"; i=0; while [ "$(ls "$0" | wc -l)" -lt "$2" ]; do '
           'i=$((i+1)); [ $i -gt 200 ] && exit 1; sleep 0.05; done', "@ROOT@/barrier")

SITE = textwrap.dedent("""\
    (require consfig *)
    (import consfig *)
    (use-props consfig.props [file cmd])

    (defprop in-group :posix [name]
      "Puts the host in group NAME, from its hostattrs."
      (:hostattrs (push-hostattr "groups" name)))

    (defhost web1.eu.test {:deploy :local :groups ["web" "eu"]}
      (file.has-content "@ROOT@/out/web1" "x\\n"))
    (defhost web2.us.test {:deploy :local :groups ["web" "us"]}
      (file.has-content "@ROOT@/out/web2" "x\\n"))
    (defhost db1.eu.test {:deploy :local :groups ["eu"]}
      (in-group "db")
      (file.has-content "@ROOT@/out/db1" "x\\n"))
    (defhost bad.test {:deploy :local}
      (cmd.single "false")
      (file.has-content "@ROOT@/out/bad" "x\\n"))
    (defhost gone.test {:deploy [[:ssh :host "127.0.0.1" :port 1]]}
      (file.has-content "@ROOT@/out/gone" "x\\n"))
    """)

# Three hosts that are three targets — root here, the lab's user over SSH,
# its other user through sudo — each with a deployment lock of its own, so
# that they can run side by side.
BARRIER_SITE = textwrap.dedent("""\
    (require consfig *)
    (import consfig *)
    (use-props consfig.props [file cmd])
    (for [[i chain] (enumerate [:local
                                [[:ssh :config "@CONFIG@" :host "lab"]]
                                [:local [:sudo :user "@PWUSER@"]]])]
      (make-host f"side{i}.test" {:deploy chain} None
        (eseqprops (file.has-content f"@ROOT@/out/side{i}-a" "x\\n")
                   (cmd.single @BARRIER@ f"side{i}" "3")
                   (file.has-content f"@ROOT@/out/side{i}-b" "x\\n"))))
    """)


def barrier_site(lab):
    """The side-by-side site, its files in a directory all three targets
    may write to: sticky, as /tmp is, since a shell-only chain refuses to
    walk through a directory others may rename in (docs/security.md)."""
    root = tempfile.mkdtemp(dir=lab.root)
    os.chmod(root, 0o1777)
    for d in ["out", "barrier"]:
        os.mkdir(os.path.join(root, d))
        os.chmod(os.path.join(root, d), 0o1777)
    path = os.path.join(root, "site.hy")
    with open(path, "w") as f:
        f.write(BARRIER_SITE.replace("@BARRIER@", " ".join(json.dumps(a) for a in BARRIER))
                .replace("@ROOT@", root).replace("@CONFIG@", lab.config)
                .replace("@PWUSER@", lab.pwuser))
    return pathlib.Path(path)


def site(tmp_path):
    (tmp_path / "out").mkdir(exist_ok=True)
    path = tmp_path / "site.hy"
    path.write_text(SITE.replace("@ROOT@", str(tmp_path)))
    return path


def hostnames(output):
    return [line.split()[0] for line in output.splitlines() if line.strip()]


def recap(output):
    """host → status, from the recap table."""
    rows = {}
    for line in output.split("Recap", 1)[1].splitlines():
        cells = [c.strip() for c in re.split(r"[│┃]", line) if c.strip()]
        if len(cells) > 2 and cells[0] != "host":
            rows[cells[0]] = cells[1]
    return rows


def json_events(result):
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_a_failing_and_an_unreachable_host_do_not_stop_the_others(tmp_path):
    result = consfig("deploy", "--consfig", site(tmp_path), "web1", "bad", "gone", "web2",
                     env_dir=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"web1", "web2", "bad"}
    assert recap(result.stdout) == {"web1.eu.test": "changed", "web2.us.test": "changed",
                                    "bad.test": "failed", "gone.test": "failed"}, result.stdout
    failures = result.stdout.split("Failures:", 1)[1]
    assert "gone.test :: connection: " in failures and "connection refused" in failures
    assert "bad.test :: cmd.single: " in failures


def test_detailed_exitcode_is_2_when_hosts_changed_and_none_failed(tmp_path):
    result = consfig("deploy", "--consfig", site(tmp_path), "@web", "--detailed-exitcode",
                     env_dir=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr


def test_hosts_run_side_by_side(sshlab):
    path = barrier_site(sshlab)
    result = consfig("deploy", "--consfig", path, "side*", "-j", "3")
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(list((path.parent / "out").iterdir())) == 6


def test_jobs_1_deploys_one_host_after_another(tmp_path):
    result = consfig("deploy", "--consfig", site(tmp_path), "web1", "web2", "db1", "-j", "1",
                     "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    hosts = [e["host"] for e in json_events(result)]
    assert _contiguous(hosts), hosts
    assert list(dict.fromkeys(hosts)) == ["web1.eu.test", "web2.us.test", "db1.eu.test"]


def _contiguous(hosts):
    """Whether each host's items come together, never interleaved."""
    seen, last = set(), None
    for h in hosts:
        if h != last:
            if h in seen:
                return False
            seen.add(h)
            last = h
    return True


def test_each_hosts_lines_are_printed_together(sshlab):
    result = consfig("deploy", "--consfig", barrier_site(sshlab), "side*", "-j", "3")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line.split(" :: ")[0] for line in result.stdout.splitlines() if " :: " in line]
    lines = lines[:lines.index("Failures:") if "Failures:" in lines else None]
    assert len(set(lines)) == 3 and _contiguous(lines), result.stdout


def test_json_lines_of_hosts_side_by_side_are_whole(sshlab):
    result = consfig("deploy", "--consfig", barrier_site(sshlab), "side*", "-j", "3", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    events = json_events(result)
    assert {e["host"] for e in events} == {"side0.test", "side1.test", "side2.test"}
    assert not _contiguous([e["host"] for e in events]), "the hosts did not run side by side"


def test_serial_deploys_in_batches(tmp_path):
    # Batches of 2: the third host starts after the first two ended.
    result = consfig("deploy", "--consfig", site(tmp_path), "web1", "web2", "db1",
                     "--serial", "2", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    events = json_events(result)
    kinds = [(e["event"], e["host"]) for e in events]
    last_of_batch = max(kinds.index(("summary", h)) for h in ["web1.eu.test", "web2.us.test"])
    first_of_next = min(i for i, (_, h) in enumerate(kinds) if h == "db1.eu.test")
    assert last_of_batch < first_of_next, kinds


def test_max_fail_stops_starting_hosts(tmp_path):
    result = consfig("deploy", "--consfig", site(tmp_path), "bad", "web1", "web2",
                     "-j", "1", "--max-fail", "1")
    assert result.returncode == 1, result.stdout + result.stderr
    assert not (tmp_path / "out" / "web1").exists() and not (tmp_path / "out" / "web2").exists()
    assert recap(result.stdout) == {"bad.test": "failed", "web1.eu.test": "not-started",
                                    "web2.us.test": "not-started"}, result.stdout
    assert "web1.eu.test :: Not started" in result.stdout


def test_max_fail_as_a_percentage(tmp_path):
    result = consfig("deploy", "--consfig", site(tmp_path), "bad", "gone", "web1",
                     "-j", "1", "--max-fail", "50%", "--json")
    summaries = {e["host"]: e["status"] for e in json_events(result) if e["event"] == "summary"}
    assert summaries == {"bad.test": "failed", "gone.test": "failed",
                         "web1.eu.test": "not-started"}, summaries


def test_hosts_are_chosen_by_glob_group_and_exclusion(tmp_path):
    path = site(tmp_path)

    def chosen(*patterns):
        result = consfig("hosts", "--consfig", path, *patterns)
        assert result.returncode == 0, result.stderr
        return hostnames(result.stdout)

    assert chosen("web*") == ["web1.eu.test", "web2.us.test"]
    assert chosen("@eu") == ["db1.eu.test", "web1.eu.test"]
    assert chosen("@web:!@eu") == ["web2.us.test"]
    assert chosen("*.eu.test:!web1") == ["db1.eu.test"]
    assert chosen("@db", "bad") == ["bad.test", "db1.eu.test"], "a group from hostattrs"
    assert chosen("*", "--limit", "@eu") == ["db1.eu.test", "web1.eu.test"]


def test_hosts_lists_declared_and_hostattr_groups(tmp_path):
    result = consfig("hosts", "--consfig", site(tmp_path), "db1")
    assert result.stdout.split()[:3] == ["db1.eu.test", "[:local]", "eu,db"], result.stdout


def test_a_pattern_that_matches_nothing_is_an_error_naming_it(tmp_path):
    result = consfig("deploy", "--consfig", site(tmp_path), "web1", "@nosuch")
    assert result.returncode == 1
    assert "'@nosuch' matches no host" in result.stderr, result.stderr
    assert "groups: db, eu, us, web" in result.stderr, result.stderr
    assert not (tmp_path / "out" / "web1").exists(), "nothing may be deployed"


def test_a_limit_that_leaves_nothing_is_an_error(tmp_path):
    result = consfig("deploy", "--consfig", site(tmp_path), "@us", "--limit", "@eu")
    assert result.returncode == 1
    assert "--limit '@eu' leaves none of the hosts @us" in result.stderr, result.stderr


def test_a_mistake_in_any_hosts_hostattrs_stops_all_before_connecting(tmp_path):
    path = site(tmp_path)
    path.write_text(path.read_text() + textwrap.dedent("""\
        (defprop not-here :posix []
          "Vetoes any host."
          (:hostattrs (inapplicable "not on this host")))
        (defhost vetoed.test {:deploy :local}
          (not-here))
        """))
    result = consfig("deploy", "--consfig", path, "web1", "vetoed", "web2")
    assert result.returncode == 1
    assert "vetoed.test" in result.stderr, result.stdout + result.stderr
    assert list((tmp_path / "out").iterdir()) == [], "no host may be deployed"
