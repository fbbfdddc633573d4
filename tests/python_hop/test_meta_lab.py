"""Meta-parameters over the SSH lab, applied by the target's Python
([:ssh :python]): retries happen on the target, and `:reverse` is kept in the
lab user's own state directory there."""

import os
import pwd
import subprocess
import sys

from hy.models import Keyword as K

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import meta_testprops as mp  # noqa: E402
from remote_helpers import deploy  # noqa: E402

from consfig.model.host import Host  # noqa: E402
from consfig.model.property import find_property  # noqa: E402

with_meta = find_property("consfig.meta.with-meta")
eseqprops = find_property("consfig.combinators.eseqprops")
exists_with_content = find_property("consfig.props.file.exists-with-content")

HOSTNAME = f"meta-lab-{os.getpid()}.example"


def chain(sshlab):
    return [[K("ssh"), K("host"), "lab", K("config"), sshlab.config], K("python")]


def fresh_dir(owner, name):
    d = os.path.join(pwd.getpwnam(owner).pw_dir, name)
    subprocess.run(["rm", "-rf", d], check=True)
    subprocess.run(["install", "-d", "-o", owner, d], check=True)
    return d


def test_retry_over_ssh_python_tries_again_on_the_target(sshlab, events):
    d = fresh_dir(sshlab.user, "meta-retry")
    host = Host(HOSTNAME, with_meta({K("retry"): 3, K("delay"): 0.05},
                                    mp.fails_until(f"{d}/count", 2)))
    outcome = deploy(chain(sshlab), host, sink=events)
    assert outcome.status == "changed", events.ends()
    assert open(f"{d}/count").read() == "3"
    assert [e["attempt"] for e in events.events if "attempt" in e] == [1, 2]
    assert os.stat(f"{d}/count").st_uid == pwd.getpwnam(sshlab.user).pw_uid, \
        "counted by the lab user's Python, on the target"


def test_reverse_over_ssh_python_unapplies_what_left_the_propspec(sshlab, events):
    d = fresh_dir(sshlab.user, "meta-reverse")
    kept = os.path.join(pwd.getpwnam(sshlab.user).pw_dir, ".local/state/consfig/reverse",
                        f"{HOSTNAME}.json")
    managed = exists_with_content(f"{d}/managed", "x\n")
    first = deploy(chain(sshlab), Host(HOSTNAME, with_meta({K("reverse"): True}, managed)),
                   sink=events)
    assert first.status == "changed", events.ends()
    assert os.path.exists(kept), "recorded in the lab user's state directory"
    events.events.clear()
    second = deploy(chain(sshlab), Host(HOSTNAME, eseqprops()), sink=events)
    assert second.status == "changed", events.ends()
    assert not os.path.exists(f"{d}/managed"), events.ends()
    assert not os.path.exists(kept), "forgotten once unapplied"


def test_noop_over_ssh_python_reports_drift_and_changes_nothing(sshlab, events):
    d = fresh_dir(sshlab.user, "meta-noop")
    host = Host(HOSTNAME, with_meta({K("noop"): True}, exists_with_content(f"{d}/f", "x\n")))
    outcome = deploy(chain(sshlab), host, sink=events)
    assert not os.path.exists(f"{d}/f"), "nothing was changed"
    assert (outcome.changes, outcome.drift) == (0, 1), events.ends()
    assert events.summary()["drift"] == 1, events.summary()
