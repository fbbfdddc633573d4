"""dpkg's and apt's own state in the Debian chroot: purged and held
packages, apt's recommends, diversions, foreign architectures,
alternatives and debconf answers."""

import pytest

import hy  # noqa: F401
from consfig.errors import PropspecError
from consfig.props import alternatives, apt, debconf, dpkg

from proptest import apply_twice, deploy_propspec, failure_text, in_chroot, this_os, unapply

pytestmark = pytest.mark.chroot


def status(root, package):
    return in_chroot(root, f"dpkg-query -W -f '${{db:Status-Abbrev}}' {package} || true").stdout.strip()


def test_purged_purges_a_package_and_its_configuration(chroot_chain, debian_chroot):
    # logrotate has a conffile, /etc/logrotate.conf, which removing it leaves.
    deploy_propspec(chroot_chain, [this_os(), apt.installed_minimally("logrotate", "hello")])
    deploy_propspec(chroot_chain, [this_os(), apt.removed("logrotate")])
    assert status(debian_chroot, "logrotate") == "rc"
    apply_twice(chroot_chain, [this_os(), apt.purged("logrotate", "hello")])
    for p in ["logrotate", "hello"]:
        assert status(debian_chroot, p) in ("", "un", "pn"), status(debian_chroot, p)
    assert not (debian_chroot / "etc/logrotate.conf").exists()


def test_purged_of_a_package_never_installed_changes_nothing(chroot_chain):
    apply_twice(chroot_chain, [this_os(), apt.purged("sl")], changes=False)


def test_held_holds_and_unapplying_releases(chroot_chain, debian_chroot):
    deploy_propspec(chroot_chain, [this_os(), apt.installed_minimally("hello")])
    apply_twice(chroot_chain, [this_os(), apt.held("hello")])
    assert in_chroot(debian_chroot, "apt-mark showhold").stdout.split() == ["hello"]
    unapply(chroot_chain, [this_os(), apt.held("hello")])
    assert in_chroot(debian_chroot, "apt-mark showhold").stdout.strip() == ""


def test_package_names_starting_with_a_dash_are_refused():
    for p in [apt.held, apt.purged]:
        with pytest.raises(PropspecError):
            p("--version")


def test_recommends_not_installed_is_read_by_apt(chroot_chain, debian_chroot):
    apply_twice(chroot_chain, [this_os(), apt.recommends_not_installed()])
    got = in_chroot(debian_chroot, "apt-config dump APT::Install-Recommends").stdout
    assert got.strip() == 'APT::Install-Recommends "false";', got
    unapply(chroot_chain, [this_os(), apt.recommends_not_installed()])
    assert not (debian_chroot / "etc/apt/apt.conf.d/50consfig-no-recommends").exists()


def test_diverted_moves_the_file_and_unapplying_brings_it_back(chroot_chain, debian_chroot):
    issue = (debian_chroot / "etc/issue").read_text()
    apply_twice(chroot_chain, [this_os(), dpkg.diverted("/etc/issue")])
    assert (debian_chroot / "etc/issue.distrib").read_text() == issue
    assert not (debian_chroot / "etc/issue").exists()
    assert in_chroot(debian_chroot, "dpkg-divert --truename /etc/issue").stdout.strip() == "/etc/issue.distrib"
    apply_twice(chroot_chain, [this_os(), dpkg.diverted("/etc/issue", to="/etc/issue.debian")])
    assert (debian_chroot / "etc/issue.debian").read_text() == issue
    unapply(chroot_chain, [this_os(), dpkg.diverted("/etc/issue", to="/etc/issue.debian")])
    assert (debian_chroot / "etc/issue").read_text() == issue
    assert in_chroot(debian_chroot, "dpkg-divert --list /etc/issue").stdout.strip() == ""


def test_architecture_added_and_removed(chroot_chain, debian_chroot):
    apply_twice(chroot_chain, [this_os(), dpkg.architecture_added("s390x")])
    assert "s390x" in in_chroot(debian_chroot, "dpkg --print-foreign-architectures").stdout
    unapply(chroot_chain, [this_os(), dpkg.architecture_added("s390x")])
    assert in_chroot(debian_chroot, "dpkg --print-foreign-architectures").stdout.strip() == ""


def test_hostile_dpkg_values_are_refused():
    for bad in [lambda: dpkg.architecture_added("--force-all"), lambda: dpkg.diverted("etc/issue"),
                lambda: dpkg.diverted("/etc/issue", to="x\0y")]:
        with pytest.raises(PropspecError):
            bad()


@pytest.fixture(scope="module")
def demo_alternative(debian_chroot):
    in_chroot(debian_chroot, "for p in one two; do printf '#!/bin/sh\\necho %s\\n' $p > /usr/local/bin/demo-$p;"
                             " chmod +x /usr/local/bin/demo-$p;"
                             " update-alternatives --install /usr/local/bin/demo demo /usr/local/bin/demo-$p"
                             " $([ $p = one ] && echo 20 || echo 10); done")
    return "demo"


def test_selected_sets_an_alternative_and_unapplying_returns_to_auto(chroot_chain, debian_chroot,
                                                                     demo_alternative):
    apply_twice(chroot_chain, alternatives.selected("demo", "/usr/local/bin/demo-two"))
    assert in_chroot(debian_chroot, "/usr/local/bin/demo").stdout == "two\n"
    unapply(chroot_chain, alternatives.selected("demo", "/usr/local/bin/demo-two"))
    assert in_chroot(debian_chroot, "/usr/local/bin/demo").stdout == "one\n"


def test_selected_of_no_choice_fails_naming_the_choices(chroot_chain, demo_alternative):
    outcome, events = deploy_propspec(chroot_chain, alternatives.selected("demo", "/bin/false"),
                                      check=False)
    assert outcome.status == "failed"
    assert "/usr/local/bin/demo-one" in failure_text(events), failure_text(events)


def test_automatic_returns_to_the_highest_priority(chroot_chain, debian_chroot, demo_alternative):
    in_chroot(debian_chroot, "update-alternatives --set demo /usr/local/bin/demo-two")
    apply_twice(chroot_chain, alternatives.automatic("demo"))
    assert in_chroot(debian_chroot, "/usr/local/bin/demo").stdout == "one\n"


def test_alternative_names_starting_with_a_dash_are_refused():
    with pytest.raises(PropspecError):
        alternatives.automatic("--all")


def test_preseeded_sets_an_answer_a_later_install_takes(chroot_chain, debian_chroot):
    p = [this_os(), debconf.preseeded("consfig-demo", "consfig-demo/colour", "string", "deep blue")]
    apply_twice(chroot_chain, p)
    got = in_chroot(debian_chroot, "echo GET consfig-demo/colour | debconf-communicate consfig-demo").stdout
    assert got.strip() == "0 deep blue", got


def test_preseeded_refuses_a_value_with_a_newline():
    with pytest.raises(PropspecError):
        debconf.preseeded("tzdata", "tzdata/Areas", "select", "Europe\nother q string x")
    with pytest.raises(PropspecError):
        debconf.preseeded("tzdata", "tzdata/Areas", "select; rm", "Europe")


def test_marked_auto_and_manual(chroot_chain, debian_chroot):
    deploy_propspec(chroot_chain, [this_os(), apt.installed_minimally("hello")])
    apply_twice(chroot_chain, [this_os(), apt.marked_auto("hello")])
    assert "hello" in in_chroot(debian_chroot, "apt-mark showauto").stdout.split()
    apply_twice(chroot_chain, [this_os(), apt.marked_manual("hello")])
    assert "hello" in in_chroot(debian_chroot, "apt-mark showmanual").stdout.split()
    unapply(chroot_chain, [this_os(), apt.marked_manual("hello")])
    assert "hello" in in_chroot(debian_chroot, "apt-mark showauto").stdout.split()


def test_marks_refuse_options():
    for p in [apt.marked_auto, apt.marked_manual]:
        with pytest.raises(PropspecError):
            p("--config-file=/tmp/x")
