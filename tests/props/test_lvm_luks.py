"""lvm and luks on real loop devices of this machine (over :local): physical
volumes and volume groups with lvm2, LUKS2 with cryptsetup and a key from
data on standard input.  (This kernel has no device-mapper: logical volumes
and opened LUKS devices cannot be made here, and these modules have no
property for them.)"""

import json
import os
import shutil
import subprocess

import pytest

import hy  # noqa: F401
from consfig.data.items import reset_data_sources
from consfig.errors import PropspecError
from consfig.props import luks, lvm

from proptest import (HOSTNAME, LOCAL, apply_twice, data_item, deploy_propspec, failure_text,
                      said)

from harness import unavailable


def sh(*argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "LVM_SUPPRESS_FD_WARNINGS": "1"}, **kw)


@pytest.fixture(autouse=True)
def private_lvm_directory(tmp_path, monkeypatch):
    """LVM's directory for these tests (its configuration, and the archive
    and backup of each group's metadata): a copy of this machine's
    /etc/lvm, named by LVM_SYSTEM_DIR, which the commands consfig runs over
    :local inherit.  The groups the tests make and remove are archived
    there, never in this machine's /etc/lvm."""
    private = tmp_path / "etc-lvm"
    if os.path.isdir("/etc/lvm"):
        shutil.copytree("/etc/lvm", private, symlinks=True,
                        ignore=shutil.ignore_patterns("archive", "backup"))
    for d in ("archive", "backup"):
        (private / d).mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("LVM_SYSTEM_DIR", str(private))
    return private


@pytest.fixture
def loops(tmp_path):
    for tool in ["losetup", "pvcreate", "cryptsetup", "blkid"]:
        if not shutil.which(tool):
            unavailable(f"{tool} is not installed")
    devices = []
    try:
        for i in range(2):
            backing = tmp_path / f"disk{i}.img"
            sh("truncate", "-s", "64M", str(backing))
            r = sh("losetup", "--show", "--find", str(backing))
            assert r.returncode == 0, r.stderr
            devices.append((r.stdout.strip(), backing))
        yield devices
    finally:
        vg = f"cftest{os.getpid()}"
        sh("vgremove", "-q", "-f", vg)
        for d, _ in devices:
            sh("pvremove", "-q", "-ff", "-y", d)
            sh("losetup", "--detach", d)


@pytest.fixture(autouse=True)
def no_sources():
    reset_data_sources()
    yield
    reset_data_sources()


def vg_name():
    return f"cftest{os.getpid()}"


def pvs():
    out = sh("pvs", "--noheadings", "-o", "pv_name,vg_name,pv_size", "--units", "m",
             "--nosuffix").stdout
    return {w[0]: w[1:] for w in (line.split() for line in out.splitlines()) if w}


def test_physical_volumes_and_a_group_made_then_extended_then_nothing_to_do(loops):
    (a, _), (b, _) = loops
    apply_twice(LOCAL, [lvm.physical_volume(a), lvm.volume_group(vg_name(), a)])
    assert pvs()[a][0] == vg_name()
    apply_twice(LOCAL, [lvm.physical_volume(a), lvm.physical_volume(b),
                        lvm.volume_group(vg_name(), a, b)])
    assert pvs()[b][0] == vg_name(), "extended with the second"


def _metadata_copies(directory):
    # LVM's backup of a group's metadata, and the archive of its earlier ones.
    return sorted(str(p.relative_to(directory))
                  for p in [*directory.glob(f"archive/{vg_name()}_*"), *directory.glob(f"backup/{vg_name()}")])


def test_a_group_made_here_is_backed_up_in_the_tests_lvm_directory_not_this_machines(
        loops, private_lvm_directory):
    from pathlib import Path
    (a, _), (b, _) = loops
    deploy_propspec(LOCAL, [lvm.physical_volume(a), lvm.physical_volume(b),
                            lvm.volume_group(vg_name(), a)])
    deploy_propspec(LOCAL, lvm.volume_group(vg_name(), a, b))
    assert len(_metadata_copies(private_lvm_directory)) >= 2, \
        f"the group's metadata was backed up and archived in the copy: {_metadata_copies(private_lvm_directory)}"
    assert not _metadata_copies(Path("/etc/lvm")), \
        f"this machine's /etc/lvm has the test's group: {_metadata_copies(Path('/etc/lvm'))}"


KEY = b"\x00a key file\n$(reboot)\xff"


def test_luks_is_formatted_with_the_key_from_data_once(loops, tmp_path):
    (a, _), _ = loops
    data_item(tmp_path, f"--luks-key--{HOSTNAME}", a, KEY)
    events = apply_twice(LOCAL, luks.formatted(a, iter_time=50))
    assert sh("cryptsetup", "isLuks", a).returncode == 0
    opened = subprocess.run(["cryptsetup", "open", "--test-passphrase", "--key-file=-", a],
                            input=KEY, capture_output=True, timeout=120)
    assert opened.returncode == 0, opened.stderr
    assert "a key file" not in json.dumps(events)


def test_a_luks_device_the_key_does_not_open_is_never_reformatted(loops, tmp_path):
    (a, _), _ = loops
    data_item(tmp_path, f"--luks-key--{HOSTNAME}", a, KEY)
    deploy_propspec(LOCAL, luks.formatted(a, iter_time=50))
    header = sh("cryptsetup", "luksUUID", a).stdout
    reset_data_sources()
    data_item(tmp_path, f"--luks-key--{HOSTNAME}", a, b"another key")
    outcome, events = deploy_propspec(LOCAL, luks.formatted(a, iter_time=50), check=False)
    assert outcome.status == "failed"
    assert "its key from data does not open it: not reformatted" in failure_text(events)
    assert sh("cryptsetup", "luksUUID", a).stdout == header


def test_luks_is_not_formatted_over_a_filesystem_and_check_mode_formats_nothing(loops, tmp_path):
    (a, _), (b, _) = loops
    data_item(tmp_path, f"--luks-key--{HOSTNAME}", a, KEY)
    data_item(tmp_path, f"--luks-key--{HOSTNAME}", b, KEY)
    assert sh("mkfs.ext4", "-q", a).returncode == 0
    outcome, events = deploy_propspec(LOCAL, luks.formatted(a), check=False)
    assert "holds ext4, which consfig was not told to replace" in failure_text(events)
    outcome, events = deploy_propspec(LOCAL, luks.formatted(b), check_mode=True)
    assert "would be formatted as LUKS2" in said(events)
    assert sh("cryptsetup", "isLuks", b).returncode != 0


@pytest.mark.parametrize("bad", [
    lambda: lvm.physical_volume("/dev/loop0 /dev/sda"),
    lambda: lvm.volume_group("-vg", "/dev/loop0"),
    lambda: lvm.volume_group("vg"),
    lambda: lvm.volume_group("vg/x", "/dev/loop0"),
    lambda: luks.formatted("/dev/loop0", iter_time=1),
    lambda: luks.formatted("/dev/loop0;x"),
    lambda: luks.formatted("/dev/loop0", iden1="a\nb"),
])
def test_hostile_arguments_are_refused_where_written(bad):
    with pytest.raises(PropspecError):
        bad()
