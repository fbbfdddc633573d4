"""`during` over real chains (the `sshlab` fixture): the fact is read on
the target and the record of what was applied kept there, through a
`:python` hop and through a shell alone."""

import json
import os
import pathlib

import pytest

import hy  # noqa: F401
from hy.models import Keyword as K

import consfig.deployer.deployment
from consfig.apply.combinators import during, seqprops
from consfig.model.host import make_host
from consfig.image.build import state_directory
from consfig.props import fact, file

deploy_these = getattr(consfig.deployer.deployment, hy.mangle("deploy-these*"))


def ssh(lab):
    return [K("ssh"), K("config"), lab.config, K("host"), "lab"]


CHAINS = {
    "ssh-sudo-python": lambda lab: [ssh(lab), K("sudo"), K("python")],
    "ssh-sudo": lambda lab: [ssh(lab), K("sudo")],
}


@pytest.fixture
def record(request):
    hostname = f"during-{request.node.callspec.params['chain_id']}-{os.getpid()}.consfig.invalid"
    path = pathlib.Path(state_directory()) / "during" / f"{hostname}.json"
    path.unlink(missing_ok=True)
    yield hostname, path
    path.unlink(missing_ok=True)


@pytest.mark.parametrize("chain_id", list(CHAINS))
def test_during_applies_while_the_fact_holds_and_retracts_after_over_a_chain(
        sshlab, record, tmp_path, chain_id, events):
    hostname, record_file = record
    chain = CHAINS[chain_id](sshlab)
    # A name a shell would mangle (a newline is refused in a path at load):
    # the fact must read this very file.
    flag, page, note = (str(tmp_path / n) for n in ("-flag $(false) 'x\t\"", "page", "note"))
    block = during(fact.file_exists(flag),
                   file.exists_with_content(page, "down for maintenance\n"),
                   file.has_content(note, "it happened\n"))
    host = make_host(hostname, None, None, seqprops())

    open(flag, "w").close()
    first = deploy_these(chain, host, block, sink=events)
    assert first.status == "changed", events.ends()
    assert open(page).read() == "down for maintenance\n", "applied while the flag is there"
    assert len(json.loads(record_file.read_text())["applied"]) == 1, "recorded on the target"

    os.unlink(flag)
    events.events.clear()
    check = deploy_these(chain, host, block, sink=events, check=True)
    notes = [e["text"] for e in events.events if e["event"] == "output" and e["stream"] == "note"]
    assert f"during {flag} exists: does not hold" in notes, notes
    assert events.status_of(f"Unapplied: {page} exists with content") == "would-change", events.ends()
    assert check.status == "changed" and os.path.exists(page), "a check changes nothing"

    events.events.clear()
    second = deploy_these(chain, host, block, sink=events)
    assert second.status == "changed", events.ends()
    assert not os.path.exists(page), "retracted once the flag is gone"
    assert [e["dropped"] for e in events.events if "dropped" in e] == [f"{note} has content"]
    assert os.path.exists(note), "what cannot be unapplied is dropped, not undone"
    assert not record_file.exists(), "nothing applied any more"
