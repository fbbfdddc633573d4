"""A local user driving a running `consfig converge` (as root, over
[:local :python]): a huge sparse file where a managed file was, a full disk
under its log, a check that fails at every event, files churned in a
watched directory, a symlink planted where its log goes.  The agent stays
bounded, keeps repairing, and follows no link (docs/converge.md, Faults)."""

import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agentcli import Converging, write_site  # noqa: E402
from harness import wait_until  # noqa: E402

NOBODY = 65534


def status(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])   # kB
    raise AssertionError(f"no {field} for {pid}")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def simple_site(tmp_path, body=None, uses="file"):
    g = tmp_path / "g"
    return write_site(tmp_path / "site.hy", "faults.example", "[:local :python]",
                      body or f'(file.has-content "{g}" "on\\n")', uses), g


def log_lines(log_dir):
    path = log_dir / "converge" / "faults.example.jsonl"
    return path.read_bytes().splitlines() if path.exists() else []


def test_a_huge_sparse_file_makes_a_bounded_drift_and_no_more_memory(tmp_path):
    site, g = simple_site(tmp_path)
    log = tmp_path / "log"
    with Converging(tmp_path, "--consfig", site, "faults", "--log-directory", log) as agent:
        pid = agent.watching["pid"]
        before = status(pid, "VmHWM")
        sparse = tmp_path / "sparse"
        with open(sparse, "wb") as f:
            f.truncate(20 * 1024 * 1024)      # 20 MB, no disk blocks
        os.replace(sparse, g)
        wait_until(lambda: agent.of("repaired"), 10, "the sparse file repaired")
        assert g.read_text() == "on\n"
        grown = status(pid, "VmHWM") - before
        assert grown < 8 * 1024, f"the agent's peak memory grew by {grown} kB reading a 20 MB file"
        [drift] = agent.of("drift")
        assert "too large to show: was more than 65537 bytes" in drift["diff"], drift
        longest = max(map(len, log_lines(log)))
        assert longest < 64 * 1024, f"a log line of {longest} bytes"


@pytest.fixture
def small_fs(tmp_path):
    mnt = tmp_path / "smallfs"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "consfig-test", mnt],
                   check=True)
    yield mnt
    subprocess.run(["umount", "-l", mnt], check=True)


def fill(directory):
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, b"x" * 4096):
            pass
    except OSError:
        pass    # full
    finally:
        os.close(fd)
    return filler


def test_the_agent_keeps_repairing_while_its_logs_disk_is_full_and_resumes_the_log(
        tmp_path, small_fs):
    site, g = simple_site(tmp_path)
    with Converging(tmp_path, "--consfig", site, "faults", "--log-directory", small_fs) as agent:
        filler = fill(small_fs)
        for n in range(1, 4):
            g.write_text("edited\n")
            wait_until(lambda: len(agent.of("repaired")) >= n, 10, f"repair {n} with the disk full")
        # Said once; a short line may still fit in the file's last page, and
        # the log then resumes, and is lost again, each said once.
        said = agent.of("log")[0]
        assert "cannot be written" in said["message"] and "No space left" in said["message"], said
        assert not agent.ended(), agent.stderr()
        # A line that fits in the file's last page may still be written:
        # but none cut short.
        [json.loads(line) for line in log_lines(small_fs)]

        filler.unlink()
        g.write_text("edited again\n")
        wait_until(lambda: len(agent.of("repaired")) >= 4, 10, "a repair once space is back")
        logged = [json.loads(line) for line in log_lines(small_fs)]
        resumed = [e for e in logged if e.get("what") == "log-resumed"]
        assert resumed and all(e["lost"] >= 1 for e in resumed), resumed
        assert logged[-1]["what"] == "repaired", "the log goes on"


def _error(agent):
    # A --json run says its error as an `error` event on standard output.
    return "\n".join(e.get("message", "") for e in agent.events() if e.get("event") == "error")


def test_a_users_symlink_where_the_log_goes_is_refused(tmp_path):
    site, g = simple_site(tmp_path)
    logdir = tmp_path / "users"
    (logdir / "converge").mkdir(parents=True)
    os.chmod(tmp_path, 0o755)
    victim = tmp_path / "roots"
    victim.write_text("root's\n")
    os.chmod(victim, 0o600)
    os.symlink(victim, logdir / "converge" / "faults.example.jsonl")
    for p in (logdir, logdir / "converge"):
        os.chown(p, NOBODY, NOBODY)
    os.lchown(logdir / "converge" / "faults.example.jsonl", NOBODY, NOBODY)
    agent = Converging(tmp_path, "--consfig", site, "faults", "--log-directory", logdir,
                       wait_watching=False)
    with agent:
        assert agent.proc.wait(120) == 1, agent.stderr()
    said = _error(agent)
    assert "refused" in said and str(logdir / "converge") in said, said
    assert victim.read_text() == "root's\n", "nothing appended where the link leads"


def test_a_users_symlink_for_the_log_file_itself_is_refused(tmp_path):
    site, g = simple_site(tmp_path)
    logdir = tmp_path / "users"
    logdir.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chown(logdir, NOBODY, NOBODY)
    victim = tmp_path / "roots"
    victim.write_text("root's\n")
    # The agent's own directory, then the user's link in it: a rename in a
    # directory the user owns puts one there.
    (logdir / "converge").mkdir(mode=0o700)
    os.symlink(victim, logdir / "converge" / "faults.example.jsonl")
    os.lchown(logdir / "converge" / "faults.example.jsonl", NOBODY, NOBODY)
    agent = Converging(tmp_path, "--consfig", site, "faults", "--log-directory", logdir,
                       wait_watching=False)
    with agent:
        assert agent.proc.wait(120) == 1, agent.stderr()
    assert "it is a symbolic link; refused" in _error(agent), _error(agent)
    assert victim.read_text() == "root's\n", "nothing appended where the link leads"


FAILING = """(defprop always-fails :posix [path]
  "Its check fails, saying what PATH holds."
  (:desc f"{path} is fine")
  (:watch [(watch-path path)])
  (:check (raise (RuntimeError (.strip (.read-text (pathlib.Path path))))))
  (:apply None))
"""


def test_a_check_failing_at_every_event_is_limited_and_told_once_with_a_count(tmp_path):
    p = tmp_path / "p"
    p.write_text("broken\n")
    site = tmp_path / "site.hy"
    site.write_text(f"""(require consfig *)
(import consfig * pathlib)
{FAILING}
(defhost faults.example {{:deploy [:local :python]}}
  (always-fails "{p}"))
""")
    with Converging(tmp_path, "--consfig", site, "faults") as agent:
        pid = agent.watching["pid"]
        start = cpu_seconds(pid)
        for _ in range(3000):
            os.utime(p)
        wait_until(lambda: agent.of("failed"), 10, "the failure reported")
        used = cpu_seconds(pid) - start
        # Renamed into place: written in place, the file is empty for a moment,
        # and a check that reads it then fails with a third message, "".
        (tmp_path / "p.new").write_text("broken otherwise\n")
        os.replace(tmp_path / "p.new", p)
        wait_until(lambda: agent.of("repeated"), 10, "the repeats told")
        failed = agent.of("failed")
        assert [f["message"] for f in failed] in (["broken"], ["broken", "broken otherwise"]), \
            failed
        [repeated] = agent.of("repeated")
        # Checked at most 10 in a row, then 2 a second: far fewer than 3000.
        assert 1 <= repeated["count"] <= 30, repeated
        assert used < 3, f"the agent used {used:.1f} s of CPU on 3000 events"


def test_files_churned_in_a_watched_directory_cost_a_bounded_number_of_wakeups(tmp_path):
    site, g = simple_site(tmp_path)
    with Converging(tmp_path, "--consfig", site, "faults") as agent:
        pid = agent.watching["pid"]
        start = cpu_seconds(pid)
        junk = tmp_path / "junk"
        for i in range(20000):
            junk.write_bytes(b"x")
            junk.unlink()
        used = cpu_seconds(pid) - start
        g.write_text("edited\n")
        wait_until(lambda: agent.of("repaired"), 10, "a repair after the churn")
        assert used < 1.0, f"the agent used {used:.2f} s of CPU for 20000 junk files"


def test_over_a_shell_chain_a_huge_file_is_read_no_further_than_needed(tmp_path, sshlab):
    # The POSIX side of the same bound: `head -c`, not `cat`, through the
    # chain: the drift says sizes, and the check reads 64 KiB, not 20 MB.
    from agentcli import lab_chain
    from clirun import consfig
    g = tmp_path / "g"
    with open(g, "wb") as f:
        f.truncate(20 * 1024 * 1024)
    site = write_site(tmp_path / "site.hy", "faults.example", lab_chain(sshlab, ":sudo"),
                      f'(file.has-content "{g}" "on\\n")', "file")
    r = consfig("deploy", "--consfig", site, "faults", "--check", "--diff", "-v")
    assert r.returncode == 0, r.stderr
    assert "too large to show: was more than 65537 bytes (not read further)" in r.stdout, r.stdout
    assert len(r.stdout) < 64 * 1024, f"{len(r.stdout)} bytes of output"
    r = consfig("deploy", "--consfig", site, "faults")
    assert r.returncode == 0, r.stdout + r.stderr
    assert g.read_text() == "on\n"
