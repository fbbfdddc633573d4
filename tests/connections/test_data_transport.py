"""Prerequisite data over the SSH lab, on [[:ssh …] :sudo :python] and
[[:ssh …] :sudo]: a version travels once, a bumped version alone travels
again, another host's data never reaches this target, and a secret is in no
process's arguments or environment and in no cache on either side."""

import os
import pwd
import stat
import sys
import time

import pytest
import hy  # noqa: F401
from hy.models import Keyword as K

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from labservers import ssh_hop  # noqa: E402

import consfig.data.items as data  # noqa: E402
import consfig.deployer.deployment  # noqa: E402
from consfig.apply.combinators import eseqprops  # noqa: E402
from consfig.model.host import make_host  # noqa: E402
from consfig.props import file  # noqa: E402
from sshlab import ROOT_ENVIRONMENT, processes_seen, sudo_password_known  # noqa: E402

deploy = getattr(consfig.deployer.deployment, hy.mangle("deploy*"))

HOST = "data.lab.test"
OTHER = "other.lab.test"


def chains(lab):
    return {"ssh-sudo-python": [ssh_hop(lab.config), K("sudo"), K("python")],
            "ssh-sudo": [ssh_hop(lab.config), K("sudo")]}


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A data tree with items for HOST, shared ones and OTHER's, each with a
    value found nowhere else; the destination directory; the controller's
    cache apart from the target's (the target is root on this machine)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "controller-cache"))
    tag = os.urandom(6).hex()
    values = {"motd": f"motd-{tag}\n", "conf": f"conf-{tag}\n", "secret": f"secret-{tag}",
              "other-data": f"other-data-{tag}", "other-secret": f"other-secret-{tag}"}
    tree = tmp_path / "data"
    for rel, value in [("_shared/motd", values["motd"]), (f"{HOST}/app.conf", values["conf"]),
                       (f"{HOST}/app.key", values["secret"]),
                       (f"{OTHER}/app.conf", values["other-data"]),
                       (f"{OTHER}/app.key", values["other-secret"])]:
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(value)
    dest = tmp_path / "dest"
    dest.mkdir(mode=0o700)
    data.reset_data_sources()
    data.register_data_source("files-tree", location=str(tree))
    make_host(OTHER, None, None, eseqprops(
        file.data_uploaded(OTHER, "app.conf", str(dest / "other.conf")),
        file.secret_uploaded(OTHER, "app.key", str(dest / "other.key"))))
    yield {"tree": tree, "dest": dest, "values": values}
    data.reset_data_sources()


def host(dest):
    return make_host(HOST, None, None, eseqprops(
        file.data_uploaded("_shared", "motd", str(dest / "motd")),
        file.data_uploaded(HOST, "app.conf", str(dest / "app.conf"), mode=0o640),
        file.secret_uploaded(HOST, "app.key", str(dest / "app.key"))))


def sent(events, secret=False):
    """(iden1, iden2) of each item whose content was sent, secret or not."""
    return [(e["iden1"], e["iden2"]) for e in events
            if e.get("stream") == "data" and e.get("secret") == secret]


def run(chain, dest, **kw):
    events = []
    outcome = deploy(chain, host(dest), sink=events.append, verbosity=3, **kw)
    assert outcome.status != "failed", [e for e in events if e.get("status") == "failed"]
    return outcome, events


def bump(path, value):
    path.write_text(value)
    later = time.time() + 5
    os.utime(path, (later, later))


def target_caches():
    """The target user's (root's, through sudo) consfig caches: the test
    run's own, which the lab's sudo keeps (conftest.py, sshlab.py)."""
    return os.path.join(ROOT_ENVIRONMENT["XDG_CACHE_HOME"], "consfig")


def files_holding(top, needles, since=0):
    """(path, needle) for each regular file below TOP changed since SINCE
    (its ctime, which no one can set back) that holds one of NEEDLES.  Only
    regular files: root's ~/.cache also holds the test chroot's tree, whose
    dev/zero, read whole, filled 24 GB."""
    found = []
    for directory, _, names in os.walk(top):
        for name in names:
            path = os.path.join(directory, name)
            try:
                st = os.lstat(path)
                if not stat.S_ISREG(st.st_mode) or st.st_ctime < since:
                    continue
                with open(path, "rb") as f:
                    content = f.read()
            except OSError:
                continue
            found += [(path, n) for n in needles if n.encode() in content]
    return found


@pytest.mark.parametrize("chain_id", ["ssh-sudo-python", "ssh-sudo"])
def test_each_version_is_sent_once(sshlab, site, chain_id):
    chain, dest = chains(sshlab)[chain_id], site["dest"]
    outcome, events = run(chain, dest)
    assert outcome.status == "changed"
    assert sorted(sent(events)) == [("_shared", "motd"), (HOST, "app.conf")], sent(events)
    assert (dest / "motd").read_text() == site["values"]["motd"]
    assert (dest / "app.key").read_text() == site["values"]["secret"]
    assert oct((dest / "app.key").stat().st_mode & 0o777) == "0o600"
    assert oct((dest / "app.conf").stat().st_mode & 0o777) == "0o640"

    outcome, events = run(chain, dest)
    assert outcome.status == "no-change"
    assert sent(events) == [], "a second deployment sends no data again"

    bump(site["tree"] / "_shared" / "motd", "bumped\n")
    outcome, events = run(chain, dest)
    assert outcome.status == "changed"
    assert sent(events) == [("_shared", "motd")], "only the bumped item travels"
    assert (dest / "motd").read_text() == "bumped\n"


def test_each_version_is_sent_once_over_a_kept_chain(sshlab, site):
    import consfig.python_hop.keep
    import consfig.python_hop.controller
    chain, dest = chains(sshlab)["ssh-sudo-python"], site["dest"]
    try:
        outcome, events = run(chain, dest, persist=60)
        assert outcome.status == "changed"
        assert sorted(sent(events)) == [("_shared", "motd"), (HOST, "app.conf")], sent(events)
        sessions = consfig.python_hop.controller.stats["sessions"]
        outcome, events = run(chain, dest, persist=60)
        assert outcome.status == "no-change"
        assert sent(events) == [], "the kept Python has it all"
        assert sent(events, secret=True) == [(HOST, "app.key")], "a secret is sent each time"
        bump(site["tree"] / "_shared" / "motd", "bumped\n")
        outcome, events = run(chain, dest, persist=60)
        assert outcome.status == "changed"
        assert sent(events) == [("_shared", "motd")], "only the bumped item travels"
        assert (dest / "motd").read_text() == "bumped\n"
        assert consfig.python_hop.controller.stats["sessions"] == sessions, "all over the one kept Python"
    finally:
        consfig.python_hop.keep.disconnect()


def test_a_secret_travels_in_memory_each_time_over_python(sshlab, site):
    chain = chains(sshlab)["ssh-sudo-python"]
    for _ in range(2):
        _, events = run(chain, site["dest"])
        assert sent(events, secret=True) == [(HOST, "app.key")], sent(events, secret=True)


@pytest.mark.parametrize("chain_id", ["ssh-sudo-python", "ssh-sudo"])
def test_no_secret_or_other_hosts_data_leaks(sshlab, site, chain_id):
    chain, dest, values = chains(sshlab)[chain_id], site["dest"], site["values"]
    with processes_seen() as seen:
        _, events = run(chain, dest)
        bump(site["tree"] / HOST / "app.key", values["secret"] + "-2")
        _, more = run(chain, dest)
    secrets = [values["secret"], values["secret"] + "-2"]
    assert seen.samples > 10, seen.samples
    for s in secrets:
        assert not [x for x in seen if s.encode() in x], "a secret showed in ps or an environ"
        assert s not in repr(events + more), "a secret is in an event"
    assert (dest / "app.key").read_text() == secrets[1]
    caches = target_caches()
    assert files_holding(caches, secrets + [values["other-data"], values["other-secret"]]) == []
    assert files_holding(os.environ["XDG_CACHE_HOME"], secrets) == []
    assert sorted(os.listdir(dest)) == ["app.conf", "app.key", "motd"], "nothing else written"


def test_the_target_keeps_only_the_newest_version(sshlab, site):
    chain, dest = chains(sshlab)["ssh-sudo-python"], site["dest"]
    run(chain, dest)
    old = site["values"]["motd"]
    bump(site["tree"] / "_shared" / "motd", "newer\n")
    run(chain, dest)
    assert files_holding(target_caches(), [old]) == [], "the old version was pruned"
    assert files_holding(os.path.join(target_caches(), "data"), ["newer\n"]), "the new one kept"


def test_a_damaged_cached_version_is_sent_again(sshlab, site):
    chain, dest = chains(sshlab)["ssh-sudo-python"], site["dest"]
    run(chain, dest)
    [(path, _)] = files_holding(os.path.join(target_caches(), "data"), [site["values"]["conf"]])
    with open(path, "w") as f:
        f.write("damaged")
    (dest / "app.conf").unlink()
    _, events = run(chain, dest)
    assert sent(events) == [(HOST, "app.conf")], sent(events)
    assert (dest / "app.conf").read_text() == site["values"]["conf"]


def test_a_sudo_password_after_python_travels_with_the_data(sshlab, site, tmp_path):
    # The target's Python runs as the lab's password user, and sudoes to root
    # from there: the password comes from the controller's data sources, with
    # the host's data, and shows nowhere.
    chain = [ssh_hop(sshlab.config, "lab-pw"), K("python"), [K("sudo"), K("from"), "pw@lab"]]
    with sudo_password_known(sshlab.password):
        started = time.time() - 1
        with processes_seen() as seen:
            events = []
            outcome = deploy(chain, host(site["dest"]), sink=events.append, verbosity=3)
    assert outcome.status == "changed", [e for e in events if e.get("status") == "failed"]
    assert (site["dest"] / "app.key").stat().st_uid == 0, "written as root"
    secret = sshlab.password
    assert not [x for x in seen if secret.encode() in x], "the password showed in ps or an environ"
    assert secret not in repr(events)
    homes = [pwd.getpwnam(u).pw_dir for u in ["root", sshlab.pwuser]]
    assert [f for h in homes
            for f in files_holding(os.path.join(h, ".cache"), [secret], since=started)] == []


def test_an_item_unused_for_long_leaves_the_target_cache(sshlab, site):
    data_dir = os.path.join(target_caches(), "data")
    os.makedirs(data_dir, mode=0o700, exist_ok=True)
    stale = os.path.join(data_dir, "0" * 32)
    os.makedirs(stale, mode=0o700, exist_ok=True)
    with open(os.path.join(stale, "1" * 32), "w") as f:
        f.write("stale")
    long_ago = time.time() - 31 * 86400
    os.utime(stale, (long_ago, long_ago))
    run(chains(sshlab)["ssh-sudo-python"], site["dest"])
    assert not os.path.exists(stale), "an item unused for 31 days was pruned"
    assert files_holding(data_dir, [site["values"]["conf"]]), "what is used is kept"
