"""git: clones, pulls and settings inside a Debian chroot, from a bare
repository in the chroot (made from outside with this machine's git)."""

import subprocess

import pytest

import hy  # noqa: F401
from consfig.props import git

from proptest import apply_twice, deploy_propspec, in_chroot, statuses, this_os, unapply

pytestmark = pytest.mark.chroot

URL = "file:///srv/origin.git"
ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
       "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
       "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}


def sh(*argv, cwd=None):
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60,
                          cwd=cwd, env=ENV).stdout.strip()


@pytest.fixture(scope="module")
def origin(debian_chroot, tmp_path_factory):
    """A bare repository at /srv/origin.git in the chroot, with branches
    main and other; returns a function that adds a commit to main."""
    bare = debian_chroot / "srv/origin.git"
    work = tmp_path_factory.mktemp("work")
    sh("git", "init", "-q", "--bare", "-b", "main", str(bare))
    sh("git", "init", "-q", "-b", "main", str(work))

    def commit(message, branch="main"):
        sh("git", "checkout", "-q", "-B", branch, cwd=work) if branch != "main" else None
        (work / "file").write_text(message + "\n")
        sh("git", "add", "file", cwd=work)
        sh("git", "commit", "-q", "-m", message, cwd=work)
        sh("git", "push", "-q", str(bare), f"HEAD:{branch}", cwd=work)
        rev = sh("git", "rev-parse", "HEAD", cwd=work)
        if branch != "main":
            sh("git", "checkout", "-q", "main", cwd=work)
        return rev

    commit("first")
    commit("other", branch="other")
    return commit


def head(root, repo):
    return in_chroot(root, f"git -C {repo} rev-parse HEAD").stdout.strip()


def test_installed(chroot_chain):
    apply_twice(chroot_chain, [this_os(), git.installed()])


def test_cloned_then_unapplied_removes_the_clone(chroot_chain, debian_chroot, origin):
    apply_twice(chroot_chain, [this_os(), git.cloned(URL, "/srv/clone")])
    assert (debian_chroot / "srv/clone/file").read_text() == "first\n"
    unapply(chroot_chain, git.cloned(URL, "/srv/clone"))
    assert not (debian_chroot / "srv/clone").exists()
    assert in_chroot(debian_chroot, "command -v git").returncode == 0


def test_cloned_at_a_branch_and_at_a_commit(chroot_chain, debian_chroot, origin):
    apply_twice(chroot_chain, [this_os(), git.cloned(URL, "/srv/branch", branch="other")])
    assert (debian_chroot / "srv/branch/file").read_text() == "other\n"
    first = in_chroot(debian_chroot, "git -C /srv/branch rev-parse origin/main").stdout.strip()
    apply_twice(chroot_chain, [this_os(), git.cloned(URL, "/srv/branch", commit=first)])
    assert head(debian_chroot, "/srv/branch") == first
    assert (debian_chroot / "srv/branch/file").read_text() == "first\n"


def test_a_directory_holding_something_else_is_left_alone(chroot_chain, debian_chroot, origin):
    (debian_chroot / "srv/taken").mkdir()
    (debian_chroot / "srv/taken/precious").write_text("keep\n")
    outcome, events = deploy_propspec(chroot_chain, [this_os(), git.cloned(URL, "/srv/taken")],
                                      check=False)
    assert outcome.status == "failed"
    assert any("is not a clone of" in (e.get("message") or "") for e in events)
    assert (debian_chroot / "srv/taken/precious").read_text() == "keep\n"


def test_pulled_follows_new_commits(chroot_chain, debian_chroot, origin):
    apply_twice(chroot_chain, [this_os(), git.pulled(URL, "/srv/pulled")])
    new = origin("second")
    outcome, events = deploy_propspec(chroot_chain, [this_os(), git.pulled(URL, "/srv/pulled")])
    assert statuses(events)["/srv/pulled pulled"] == "changed"
    assert head(debian_chroot, "/srv/pulled") == new
    outcome, _ = deploy_propspec(chroot_chain, [this_os(), git.pulled(URL, "/srv/pulled")])
    assert outcome.status == "no-change"


def test_repo_configured(chroot_chain, debian_chroot, origin):
    p = git.repo_configured("/srv/origin.git", "core.sharedRepository", "group")
    apply_twice(chroot_chain, [this_os(), p])
    assert in_chroot(debian_chroot, "git -C /srv/origin.git config core.sharedRepository"
                     ).stdout == "group\n"
    unapply(chroot_chain, p)
    assert in_chroot(debian_chroot, "git -C /srv/origin.git config core.sharedRepository",
                     check=False).returncode == 1
