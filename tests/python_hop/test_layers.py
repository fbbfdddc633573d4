"""The bundle's layers: the libraries are sent to a target once, and an edit
of the site sends only the site's own small layer, whose new version is what
the target applies, even when the edit keeps the file's size and second.
Over [:local :python]: a real child interpreter and a real cache."""

import os
import sys

import pytest
from hy.models import Keyword

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from remote_helpers import deploy  # noqa: E402

import consfig.python_hop.keep as keep  # noqa: E402
import consfig.python_hop.controller as remote  # noqa: E402
from consfig.site.load import load_consfig  # noqa: E402

LOCAL_PYTHON = [Keyword("local"), Keyword("python")]

SITE = """(require consfig *)
(import consfig *)
(use-props consfig.props [file])
(import os)

(defprop says :python [path]
  "PATH says the site's word."
  (:desc f"{{path}} says the word")
  (:check (and (os.path.exists path) (= (.read (open path)) "{word}\\n")))
  (:apply (with [f (open path "w")] (.write f "{word}\\n"))))

(defhost layered.test {{:deploy [:local :python]}}
  (says "{target}"))
"""


@pytest.fixture
def site(tmp_path, monkeypatch):
    """Write the site saying WORD (same size each time, same mtime), load it,
    and return its host."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "layered.hy"
    target = tmp_path / "out"
    stamp = []

    def write(word):
        path.write_text(SITE.format(word=word, target=target))
        if stamp:
            os.utime(path, ns=(stamp[0], stamp[0]))
        else:
            stamp.append(path.stat().st_mtime_ns)
        load_consfig(str(path))
        return "layered.test"

    write.target = target
    write.bundles = tmp_path / "cache" / "consfig" / "bundles"
    return write


def layers(bundles):
    return {d.name: d for d in bundles.iterdir()}


def test_an_edited_site_sends_only_its_own_layer_and_deploys_its_new_version(site):
    host = site("CCC1")
    outcome = deploy(LOCAL_PYTHON, host, sink=lambda e: None)
    assert outcome.status == "changed", outcome
    assert site.target.read_text() == "CCC1\n"
    before = layers(site.bundles)
    sent = remote.stats["layers-sent"]
    host = site("DDD1")
    outcome = deploy(LOCAL_PYTHON, host, sink=lambda e: None)
    assert outcome.status == "changed", outcome
    assert site.target.read_text() == "DDD1\n", "the old version of the site was applied"
    assert remote.stats["layers-sent"] - sent == 1, "more than the site's layer was sent"
    [new] = [d for name, d in layers(site.bundles).items() if name not in before]
    assert (new / "consfig_site_layered.hy").exists(), sorted(os.listdir(new))
    assert not (new / "consfig").exists(), "the libraries were sent again"


def test_a_kept_python_takes_the_edited_site_without_starting_again(site):
    try:
        host = site("CCC1")
        assert deploy(LOCAL_PYTHON, host, sink=lambda e: None, persist=60).status == "changed"
        sessions, sent = remote.stats["sessions"], remote.stats["layers-sent"]
        host = site("DDD1")
        outcome = deploy(LOCAL_PYTHON, host, sink=lambda e: None, persist=60)
        assert outcome.status == "changed", outcome
        assert site.target.read_text() == "DDD1\n", "the kept Python applied the old site"
        assert remote.stats["sessions"] == sessions, "another Python was started"
        assert remote.stats["layers-sent"] - sent == 1, "more than the site's layer was sent"
        host = site("EEE1")
        assert deploy(LOCAL_PYTHON, host, sink=lambda e: None, persist=60).status == "changed"
        assert site.target.read_text() == "EEE1\n", "the second edit was not taken"
    finally:
        keep.disconnect()


def test_a_target_that_has_both_layers_is_sent_no_code(site):
    host = site("CCC1")
    deploy(LOCAL_PYTHON, host, sink=lambda e: None)
    sent = remote.stats["layers-sent"]
    site.target.unlink()
    assert deploy(LOCAL_PYTHON, host, sink=lambda e: None).status == "changed"
    assert remote.stats["layers-sent"] == sent, "code was sent to a target that had it"


def test_gathering_the_library_layer_imports_none_of_its_packages():
    # The controller finds the libraries' files by their import specs: it
    # once imported hyrule to learn where it lives, and hyrule's macros cost
    # each warm `consfig deploy` some 0.6 s of CPU.
    import subprocess
    code = ("import sys, consfig.python_hop.bundle as b; from consfig.props import file;"
            " b.bundle_for(file.has_content('/x', 'y'));"
            " print(sorted(m for m in sys.modules if m.split('.')[0] == 'hyrule'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"gathering the bundle imported {out.stdout.strip()}"


def test_the_site_layer_is_named_for_the_libraries_it_was_compiled_against():
    # The site's bytecode holds the expansions of the consfig that compiled
    # it: the same site sources over another library layer are another layer,
    # so a target never runs a site compiled by an older consfig.
    import consfig.python_hop.bundle as bundle
    files = {"consfig_site_x.hy": __file__}
    assert bundle.Layer(files, ["a" * 32]).hash != bundle.Layer(files, ["b" * 32]).hash, \
        "the libraries below are not part of the site layer's name"
    from consfig.props import file
    b = bundle.bundle_for(file.has_content("/x", "y"))
    assert b.layers[-1].hash == bundle.Layer(b.layers[-1].files, b.libraries).hash, \
        "bundle_for names the site layer without its libraries"
