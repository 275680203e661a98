"""Members that are partitions of whole emulated drives, live (`raidlab create --partitions`, the
SA-RAID paper's b8-c1-d1-e1 notation), on one shared bus: the drives' images are whole sparse
drives, each member's bytes land at its partition's place, the array keeps a file system
across destroy --keep-images and assemble, and nothing is left behind."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from raidlab.disks import catalog, partitions
from raidlab.tools.mkfs import e2fsck, mkfs_ext4
from raidlab.tools.mount import mount, umount

from lab_leftovers import leftovers
from trees import verify_tree, write_tree

pytestmark = [pytest.mark.root, pytest.mark.live]

MODEL = "ibm-ultrastar-9lzx"


def run(cmd, home, *args, check=True):
    env = {**os.environ, "RAIDLAB_HOME": str(home), "COLUMNS": "400"}
    proc = subprocess.run([*cmd, *args], capture_output=True, text=True, env=env, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"raidlab {' '.join(args)} -> {proc.returncode}\n{proc.stderr}")
    return proc


def test_partitions_of_shared_drives_on_one_bus(raidlab_cmd, tmp_path):
    home = tmp_path / "home"
    refused = run(raidlab_cmd, home, "create", "p", "--arch", "raid0", "--disk-model", MODEL,
                  "--partitions", "b1-b8-c1", "--disk-size", "64M", check=False)
    assert refused.returncode == 2 and "--disk-size" in refused.stderr and "Traceback" not in refused.stderr
    assert not (home / "labs" / "p" / "array.json").exists()
    device = run(raidlab_cmd, home, "create", "p", "--arch", "raid0", "--disk-model", MODEL, "--partitions",
                 "b1-b8-c1", "--bus", "shared", "--chunk", "4K").stdout.strip()
    status = json.loads(run(raidlab_cmd, home, "status", "p", "--json").stdout)
    members = status["statistics"]["members"]
    where = partitions.layout("b1-b8-c1", MODEL)
    assert [(m["disk"], m["start"], m["size"]) for m in members] == [
        (f"drive-{where.drive_labels[p.drive]}", p.start, p.size) for p in where.members]
    assert status["spec"]["partitions"] == "b1-b8-c1" and status["spec"]["bus"] == "shared"
    mkfs_ext4(device)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    mount(device, mnt)
    try:
        sums = write_tree(mnt, seed=5, files=40)
    finally:
        umount(mnt)
    lab = home / "labs" / "p"
    run(raidlab_cmd, home, "destroy", "p", "--keep-images")
    assert leftovers(lab, "p") == {}
    images = sorted(p.name for p in (lab / "images").iterdir())
    assert images == ["drive-b.img", "drive-c.img"]
    drive_bytes = catalog.get(MODEL).media_capacity_bytes
    for name in images:
        image = lab / "images" / name
        assert image.stat().st_size == drive_bytes
        assert image.stat().st_blocks * 512 < 2 * 128 << 20        # sparse: only the partitions hold data
    with open(lab / "images" / "drive-b.img", "rb") as fh:       # member 1 is partition 8 of drive b
        fh.seek(where.members[1].start)
        assert fh.read(4096).strip(b"\0"), "member 1's superblock is not at partition 8's place"
        fh.seek(where.members[1].start - (64 << 20))
        assert not fh.read(1 << 20).strip(b"\0")
    device = run(raidlab_cmd, home, "assemble", "p").stdout.strip()
    assert e2fsck(device).clean
    mount(device, mnt)
    try:
        verify_tree(mnt, sums)
    finally:
        umount(mnt)
    run(raidlab_cmd, home, "destroy", "p")
    assert leftovers(lab, "p") == {} and not lab.exists()
