"""partition and filesystem: a partition table, partitions and filesystems
made, grown and refused on a real loop device of this machine (over :local,
a file behind it), with the real sfdisk, blkid, mkfs and resize2fs."""

import json
import shutil
import subprocess

import pytest

import hy  # noqa: F401
from hy.models import Keyword as K
from consfig.errors import PropspecError
from consfig.props import filesystem, partition

from proptest import LOCAL, apply_twice, deploy_propspec, failure_text, said, unapply


def sh(*argv):
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


@pytest.fixture
def loop(tmp_path):
    for tool in ["losetup", "sfdisk", "blkid", "mkfs.ext4", "resize2fs", "partx"]:
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed")
    backing = tmp_path / "disk.img"
    sh("truncate", "-s", "64M", str(backing))
    r = sh("losetup", "--show", "--find", "--partscan", str(backing))
    if r.returncode != 0:
        pytest.skip(f"no loop device here: {r.stderr.strip()}")
    device = r.stdout.strip()
    try:
        yield device, backing
    finally:
        sh("umount", f"{device}p2")
        sh("losetup", "--detach", device)


def parts(device):
    return sh("sfdisk", "-J", device).stdout


def probe(dev):
    return dict(line.split("=", 1) for line in
                sh("blkid", "-p", "-o", "export", dev).stdout.splitlines() if "=" in line)


def size_of(dev):
    return int(sh("blockdev", "--getsize64", dev).stdout)


def fs_bytes(dev):
    head = sh("dumpe2fs", "-h", dev).stdout
    fields = dict(line.split(":", 1) for line in head.splitlines() if ":" in line)
    return int(fields["Block count"]) * int(fields["Block size"])


def layout_of(device):
    return json.loads(parts(device))["partitiontable"]


PLAN = lambda d: [partition.has_table(d, K("gpt")),  # noqa: E731
                  partition.exists(d, 1, "16M", name="boot"),
                  partition.exists(d, 2, K("rest"), name="data"),
                  filesystem.exists(f"{d}p2", K("ext4"), label="data")]


def test_a_table_partitions_and_a_filesystem_on_a_blank_device_then_nothing_to_do(loop):
    device, _ = loop
    apply_twice(LOCAL, PLAN(device))
    table = layout_of(device)
    assert table["label"] == "gpt"
    assert [p.get("name") for p in table["partitions"]] == ["boot", "data"]
    assert table["partitions"][0]["size"] * 512 == 16 * 1024 * 1024
    assert probe(f"{device}p2")["TYPE"] == "ext4" and probe(f"{device}p2")["LABEL"] == "data"


def test_a_grown_device_grows_the_last_partition_and_its_filesystem(loop):
    device, backing = loop
    deploy_propspec(LOCAL, PLAN(device))
    before = size_of(f"{device}p2")
    sh("truncate", "-s", "128M", str(backing))
    assert sh("losetup", "--set-capacity", device).returncode == 0
    apply_twice(LOCAL, PLAN(device))
    assert size_of(f"{device}p2") > before + 60 * 1024 * 1024
    assert size_of(f"{device}p2") - fs_bytes(f"{device}p2") < 1024 * 1024, \
        "the filesystem fills its partition"


def test_a_device_holding_a_filesystem_gets_no_table_unless_told(loop):
    device, _ = loop
    assert sh("mkfs.ext4", "-q", device).returncode == 0
    outcome, events = deploy_propspec(LOCAL, partition.has_table(device, K("gpt")), check=False)
    assert outcome.status == "failed"
    assert f"{device} holds ext4, which consfig was not told to replace" in failure_text(events)
    assert probe(device)["TYPE"] == "ext4", "the filesystem is untouched"
    deploy_propspec(LOCAL, partition.has_table(device, K("gpt"), replace=["ext4"]))
    assert probe(device).get("PTTYPE") == "gpt" and "TYPE" not in probe(device)


def test_a_filesystem_is_never_made_over_another_unless_told(loop):
    device, _ = loop
    deploy_propspec(LOCAL, PLAN(device)[:3])
    assert sh("mkfs.ext2", "-q", "-L", "keep", f"{device}p2").returncode == 0
    outcome, events = deploy_propspec(LOCAL, filesystem.exists(f"{device}p2", K("ext4")), check=False)
    assert outcome.status == "failed"
    assert "holds ext2, which consfig was not told to replace" in failure_text(events)
    assert probe(f"{device}p2")["LABEL"] == "keep"
    deploy_propspec(LOCAL, filesystem.exists(f"{device}p2", K("ext4"), replace=["ext2"]))
    assert probe(f"{device}p2")["TYPE"] == "ext4"


def test_a_partition_that_cannot_grow_fails_saying_why(loop):
    device, _ = loop
    deploy_propspec(LOCAL, PLAN(device)[:3])
    outcome, events = deploy_propspec(LOCAL, partition.exists(device, 1, "32M"), check=False)
    assert outcome.status == "failed"
    assert "cannot grow to 32 MiB: only 0 MiB are free after it" in failure_text(events)


def test_a_label_that_differs_is_set(loop):
    device, _ = loop
    deploy_propspec(LOCAL, PLAN(device))
    deploy_propspec(LOCAL, [partition.exists(device, 2, K("rest"), name="bulk"),
                            filesystem.exists(f"{device}p2", K("ext4"), label="bulk")])
    assert probe(f"{device}p2")["LABEL"] == "bulk"
    assert layout_of(device)["partitions"][1]["name"] == "bulk"


def test_check_mode_says_what_it_would_do_and_does_nothing(loop):
    device, _ = loop
    outcome, events = deploy_propspec(LOCAL, PLAN(device)[:1], check_mode=True)
    assert outcome.exit_code(True) == 2
    assert f"{device} would get an empty gpt partition table" in said(events)
    assert "PTTYPE" not in probe(device), "no table was written"


def test_a_mounted_partition_is_not_removed_and_an_unmounted_one_is(loop, tmp_path):
    device, _ = loop
    deploy_propspec(LOCAL, PLAN(device))
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    assert sh("mount", f"{device}p2", str(mnt)).returncode == 0
    try:
        outcome, events = deploy_propspec(LOCAL, partition.exists(device, 2, K("rest")),
                                          unapply=True, check=False)
        assert outcome.status == "failed"
        assert "is mounted at" in failure_text(events)
    finally:
        sh("umount", str(mnt))
    unapply(LOCAL, partition.exists(device, 2, K("rest")))
    assert [p.get("name") for p in layout_of(device)["partitions"]] == ["boot"]


@pytest.mark.parametrize("bad", [
    lambda: partition.has_table("/dev/loop0; reboot", K("gpt")),
    lambda: partition.has_table("/etc/passwd", K("gpt")),
    lambda: partition.has_table("/dev/-x", K("gpt")),
    lambda: partition.has_table("/dev/loop0", K("bsd")),
    lambda: partition.exists("/dev/loop0", 0, "1M"),
    lambda: partition.exists("/dev/loop0", 1, "1.5G"),
    lambda: partition.exists("/dev/loop0", 1, "1M", name='a", type=swap'),
    lambda: partition.exists("/dev/loop0", 1, "1M", name="a\nb"),
    lambda: filesystem.exists("/dev/loop0", K("ntfs")),
    lambda: filesystem.exists("/dev/loop0", K("ext4"), label="-L"),
    lambda: filesystem.exists("/dev/loop0", K("ext4"), label="x" * 17),
    lambda: filesystem.exists("/dev/loop0", K("ext4"), replace="ext2"),
])
def test_hostile_arguments_are_refused_where_written(bad):
    with pytest.raises(PropspecError):
        bad()
