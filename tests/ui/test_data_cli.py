"""Prerequisite data from the command line: a site with a data tree; a
secret never shows in any output, at any verbosity, in JSON, in a dry run or
a check with diffs; a missing item is one error before anything connects."""

import os
import sys
import textwrap

sys.path.insert(0, os.path.dirname(__file__))
from clirun import Terminal, consfig  # noqa: E402


def site(tmp_path, secret):
    data = tmp_path / "data" / "_app"
    data.mkdir(parents=True)
    (data / "motd").write_text("hello\n")
    (data / "key").write_text(secret)
    out = tmp_path / "out"
    out.mkdir()
    path = tmp_path / "site.hy"
    path.write_text(textwrap.dedent(f"""\
        (require consfig *)
        (import consfig *)
        (use-props consfig.props [file])
        (try-register-data-source :files-tree :location "data")
        (defhost app.test {{:deploy :local}}
          (file.data-uploaded "_app" "motd" "{out}/motd")
          (file.secret-uploaded "_app" "key" "{out}/key"))
        (defhost broken.test {{:deploy [[:ssh :host "nowhere.invalid"]]}}
          (file.secret-uploaded "_app" "absent" "/etc/absent"))
        """))
    return path, out


def test_a_secret_shows_in_no_output(tmp_path):
    secret = f"secret-{os.urandom(6).hex()}"
    path, out = site(tmp_path, secret)
    runs = [consfig("deploy", "--consfig", path, "app", "--dry-run"),
            consfig("deploy", "--consfig", path, "app", "--check", "--diff", "-vvv"),
            consfig("deploy", "--consfig", path, "app", "--json", "-vvv"),
            consfig("deploy", "--consfig", path, "app", "-vvv")]
    for r in runs:
        assert r.returncode == 0, r.stdout + r.stderr
        assert secret not in r.stdout + r.stderr, r.args
    assert (out / "key").read_text() == secret
    assert oct((out / "key").stat().st_mode & 0o777) == "0o600"
    assert '"stream": "data"' in runs[2].stdout, "an upload is a JSON event"


def test_missing_data_is_one_error_before_connecting(tmp_path):
    path, _ = site(tmp_path, "x")
    r = consfig("deploy", "--consfig", path, "broken")
    assert r.returncode != 0
    assert "missing prerequisite data" in r.stderr + r.stdout, r.stderr
    assert '("_app" "absent")' in r.stderr + r.stdout, r.stderr
    assert "site.hy:9\n" in r.stderr, "the site's line that wrote the property: " + r.stderr
    assert "nowhere.invalid" not in r.stderr + r.stdout, "nothing tried to connect"
    assert "Traceback" not in r.stderr, r.stderr


def test_dry_run_lists_the_data_a_host_needs_and_a_missing_item(tmp_path):
    path, _ = site(tmp_path, "x")
    r = consfig("deploy", "--consfig", path, "app", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert '("_app" "key") version' in r.stdout and "(secret)" in r.stdout, r.stdout
    r = consfig("deploy", "--consfig", path, "broken", "--dry-run")
    assert r.returncode != 0 and '("_app" "absent")' in r.stderr + r.stdout, r.stdout + r.stderr


def test_end_of_input_at_a_prompt_is_an_error_not_a_traceback(tmp_path):
    out = tmp_path / "token"
    site = tmp_path / "site.hy"
    site.write_text(textwrap.dedent(f"""\
        (require consfig *)
        (import consfig *)
        (use-props consfig.props [file])
        (try-register-data-source :prompt :items [["_api" "token"]])
        (defhost api.test {{:deploy :local}}
          (file.secret-uploaded "_api" "token" "{out}"))
        """))
    with Terminal("deploy", "--consfig", site, "api.test") as terminal:
        terminal.read_until(lambda s: b"data (_api token)" in s, 60)
        terminal.write(b"\x04")  # ^D
        terminal.read_to_end(60)
        status = terminal.proc.wait(timeout=30)
    assert status == 1, terminal.text()
    assert "Traceback" not in terminal.text(), terminal.text()
    assert "no answer" in terminal.text(), terminal.text()
    assert not out.exists()
