"""An image run inside the test chroot: a Debian with python3-minimal and
nothing else of consfig's applies its host, a second run changes nothing,
and a check changes nothing."""

import pytest

from consfig.model.host import Host
from consfig.image.build import write_image
from consfig.model.property import find_property

from proptest import in_chroot

pytestmark = pytest.mark.chroot

HOSTNAME = "chroot-image.test"


def host():
    p = find_property
    return Host(HOSTNAME, p("consfig.combinators.seqprops")(
        p("consfig.props.file.directory-exists")("/srv/image"),
        p("consfig.props.file.has-content")("/srv/image/motd", "from an image\n"),
        p("consfig.props.file.contains-lines")("/etc/image.conf", "a=1", "b=2"),
        p("consfig.props.file.has-mode")("/srv/image/motd", 0o640)))


@pytest.fixture(scope="module")
def chroot(debian_chroot):
    in_chroot(debian_chroot, "DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-minimal")
    assert in_chroot(debian_chroot, "python3 -c 'import hy'", check=False).returncode != 0, \
        "the chroot's Python has hy: it would not show an image needs nothing installed"
    write_image(host(), debian_chroot / "root/chroot-image.pyz")
    return debian_chroot


def apply(chroot, *args):
    return in_chroot(chroot, "python3 /root/chroot-image.pyz --as-host --detailed-exitcode "
                             + " ".join(args), check=False)


def test_an_image_applies_its_host_in_a_chroot_then_changes_nothing(chroot):
    first = apply(chroot)
    assert first.returncode == 2, first.stdout + first.stderr
    assert (chroot / "srv/image/motd").read_text() == "from an image\n"
    assert (chroot / "srv/image/motd").stat().st_mode & 0o777 == 0o640
    assert (chroot / "etc/image.conf").read_text() == "a=1\nb=2\n"
    second = apply(chroot)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "No changes were made." in second.stdout, second.stdout


def test_an_image_in_check_mode_changes_nothing_in_a_chroot(chroot):
    apply(chroot)
    (chroot / "etc/image.conf").write_text("a=1\n")
    r = apply(chroot, "--check")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "would change" in r.stdout, r.stdout
    assert (chroot / "etc/image.conf").read_text() == "a=1\n"


def test_an_image_records_its_run_in_the_chroot(chroot):
    apply(chroot)
    state = (chroot / "var/lib/consfig/runs" / f"{HOSTNAME}.json").read_text()
    assert '"status": "no-change"' in state or '"status": "changed"' in state, state
