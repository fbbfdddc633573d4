"""`during` kept live by a real `consfig converge HOST` process: over
[:local :python] and over the SSH lab's [[:ssh] :sudo :python], the fact's
watch fires, the branch is applied within a second, retracted when the fact
stops holding, never repaired while retracted, and a flapping fact ends in
its last state without a storm (docs/converge.md, "During and facts")."""

import os
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agentcli import Converging, lab_chain, write_site  # noqa: E402
from harness import wait_until  # noqa: E402

CHAINS = {
    "local-python": lambda lab: "[:local :python]",
    "ssh-sudo-python": lambda lab: lab_chain(lab, ":sudo", ":python"),
}


@pytest.fixture(params=list(CHAINS))
def chain(request):
    if request.param == "local-python":
        return CHAINS[request.param](None)
    return CHAINS[request.param](request.getfixturevalue("sshlab"))


def during_site(tmp_path, chain):
    flag, g, page = tmp_path / "flag", tmp_path / "g", tmp_path / "page"
    site = write_site(tmp_path / "site.hy", "during.example", chain, f"""
  (file.has-content "{tmp_path / 'kept'}" "kept\\n")
  (during (fact.file-exists "{flag}")
    (file.has-content "{g}" "on\\n")
    (file.exists-with-content "{page}" "down\\n"))""")
    return site, flag, g, page


def reaction(predicate, what, bound=1.0):
    """Wait for PREDICATE; return how long it took, failing past BOUND s."""
    start = time.monotonic()
    wait_until(predicate, 10, what)
    took = time.monotonic() - start
    assert took <= bound, f"{what} took {took:.3f} s (bound {bound} s)"
    return took


def test_during_branch_is_applied_within_a_second_of_the_fact_holding(tmp_path, chain):
    site, flag, g, page = during_site(tmp_path, chain)
    with Converging(tmp_path, "--consfig", site, "during") as agent:
        assert not g.exists() and not page.exists(), "the fact does not hold: nothing applied"
        flag.touch()
        reaction(lambda: g.exists() and g.read_text() == "on\n" and page.exists(),
                 "the branch applied after the fact began to hold")
        wait_until(lambda: agent.of("applied", "during"), 5, "the agent to say so")


def test_during_branch_is_retracted_when_the_fact_stops_holding(tmp_path, chain):
    site, flag, g, page = during_site(tmp_path, chain)
    flag.touch()
    with Converging(tmp_path, "--consfig", site, "during") as agent:
        assert g.read_text() == "on\n" and page.exists(), "applied by the first pass"
        flag.unlink()
        reaction(lambda: not page.exists(), "the branch retracted")
        wait_until(lambda: agent.of("retracted", "during"), 5, "the agent to say so")
        dropped = [e for e in agent.events() if e.get("dropped")]
        assert dropped and "has content" in dropped[0]["dropped"], \
            f"has-content cannot be unapplied: dropped, with a note: {agent.events()}"


def test_a_retracted_branch_is_never_repaired(tmp_path, chain):
    site, flag, g, page = during_site(tmp_path, chain)
    with Converging(tmp_path, "--consfig", site, "during") as agent:
        g.write_text("edited by hand\n")
        page.write_text("mine\n")
        # Something the agent does keep, changed after: once it is repaired,
        # the edits before were seen and left alone.
        flag.touch()
        reaction(lambda: g.read_text() == "on\n", "the branch applied")
        flag.unlink()
        wait_until(lambda: not page.exists(), 10, "the branch retracted")
        g.write_text("edited while retracted\n")
        page.write_text("mine again\n")
        # A property the agent keeps, edited after: once it is repaired, the
        # agent has seen the edits before it, and left them alone.
        (tmp_path / "kept").write_text("edited\n")
        wait_until(lambda: agent.of("repaired", "kept"), 10, "the kept file repaired")
        assert g.read_text() == "edited while retracted\n", "a retracted property repaired"
        assert page.read_text() == "mine again\n", "a retracted property kept unapplied"
        assert not [e for e in agent.of("drift") if str(g) in e.get("desc", "")], agent.events()


def test_a_flapping_fact_ends_in_its_last_state_without_a_storm(tmp_path, chain):
    site, flag, g, page = during_site(tmp_path, chain)
    with Converging(tmp_path, "--consfig", site, "during") as agent:
        for _ in range(200):
            flag.touch()
            flag.unlink()
        flag.touch()
        wait_until(lambda: page.exists(), 10, "the last state, holding, applied")
        for _ in range(200):
            flag.touch()
            flag.unlink()
        wait_until(lambda: not page.exists(), 10, "the last state, not holding, retracted")
        evaluations = agent.of("applied") + agent.of("retracted")
        # A burst of 5 and one a second after: the two flaps take well
        # under 10 s between them.
        assert len(evaluations) <= 20, f"{len(evaluations)} evaluations: a storm"
        assert len(agent.of("fight", "during")) >= 1, "the flapping is reported"
