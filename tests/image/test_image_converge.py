"""An image's converge mode (`python3 IMAGE --converge`), as the service
`converge.running` installs runs it: applies its host, repairs drift, ends
cleanly on SIGTERM."""

import json
import os
import signal
import socket
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from harness import wait_until  # noqa: E402

import consfig.image.build as image  # noqa: E402
from consfig.site.load import load_consfig  # noqa: E402

BARE_PYTHON = "/usr/bin/python3"


def events(path):
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except ValueError:
        return []


def converge_events(path, what):
    return [e for e in events(path) if e["event"] == "converge" and e["what"] == what]


def _site(tmp_path, out, content):
    site = tmp_path / "site.hy"
    site.write_text(f"""(require consfig *)
(import consfig *)
(use-props consfig.props [file])
(defhost {socket.gethostname()} {{:deploy :local}}
  (file.has-content "{out}/motd" "{content}\\n"))
""")
    load_consfig(str(site))


def _start(tmp_path, content):
    """The image of a host whose /motd (below OUT) holds CONTENT, at PATH,
    run in converge mode (AGENT), its events in the file STDOUT."""
    if not os.path.exists(BARE_PYTHON):
        pytest.skip(f"{BARE_PYTHON} is needed to run an image as a host would")
    out = tmp_path / "out"
    out.mkdir()
    _site(tmp_path, out, content)
    path = tmp_path / "here.pyz"
    image.write_image(socket.gethostname(), path)
    stdout = tmp_path / "stdout"
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    with open(stdout, "w") as f:
        agent = subprocess.Popen([BARE_PYTHON, str(path), "--converge", "--json",
                                  "--log-directory", str(tmp_path / "state")],
                                 stdout=f, stderr=subprocess.PIPE, env=env)
    return out, path, stdout, agent


def _sigterm(agent):
    agent.send_signal(signal.SIGTERM)
    assert agent.wait(30) == 0, agent.stderr.read()


def _reap(agent):
    if agent.poll() is None:
        agent.kill()
        agent.wait(10)


def test_an_image_in_converge_mode_repairs_drift_and_ends_on_sigterm(tmp_path):
    out, path, stdout, agent = _start(tmp_path, "hello")
    try:
        wait_until(lambda: agent.poll() is not None or converge_events(stdout, "watching"), 300,
                   "the image's agent to watch")
        assert agent.poll() is None, agent.stderr.read()
        assert (out / "motd").read_text() == "hello\n", "applied first"
        (out / "motd").write_text("edited\n")
        wait_until(lambda: converge_events(stdout, "repaired"), 10, "the drift repaired")
        assert (out / "motd").read_text() == "hello\n"
        _sigterm(agent)
    finally:
        _reap(agent)
    assert converge_events(stdout, "stopped"), "it said it stopped"
    log = tmp_path / "state" / "converge" / f"{socket.gethostname()}.jsonl"
    assert converge_events(log, "repaired"), "its log has the repair"


def test_an_image_agent_whose_image_is_replaced_runs_the_new_one(tmp_path):
    out, path, stdout, agent = _start(tmp_path, "old")
    try:
        wait_until(lambda: agent.poll() is not None or converge_events(stdout, "watching"), 300,
                   "the image's agent to watch")
        assert (out / "motd").read_text() == "old\n", "the old image applied first"
        # A push installs the new image as image.installed does: whole, by rename.
        _site(tmp_path, out, "new")
        image.write_image(socket.gethostname(), tmp_path / "new.pyz")
        os.replace(tmp_path / "new.pyz", path)
        wait_until(lambda: agent.poll() is not None or len(converge_events(stdout, "watching")) == 2,
                   300, "the agent to run the new image and watch again")
        assert agent.poll() is None, agent.stderr.read()
        assert (out / "motd").read_text() == "new\n", "the new image's propspec applied"
        assert converge_events(stdout, "replaced"), "it said its image was replaced"
        assert not converge_events(stdout, "drift"), "nothing checked against the old propspec"
        (out / "motd").write_text("edited\n")
        wait_until(lambda: (out / "motd").read_text() == "new\n", 10, "kept by the new propspec")
        _sigterm(agent)
    finally:
        _reap(agent)
