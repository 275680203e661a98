"""Engine architectures as real block devices: `raidlab create` -> ext4 / fio -> fail ->
replace -> check -> destroy --keep-images -> assemble, through the CLI, as a user runs it;
and an array of members with different disk models (`--disk-model a,b,c`).

Each test uses its own RAIDLAB_HOME (tmp_path), so the leftover checks see only its lab.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from raidlab.tools import fio
from raidlab.tools.mkfs import e2fsck, mkfs_ext4
from raidlab.tools.mount import mount, umount

from lab_leftovers import leftovers
from trees import remount, verify_tree, write_tree

pytestmark = [pytest.mark.root, pytest.mark.live]

ARCHS = ["raid0", "raid1", "raid10", "raid5", "chained", "raidx", "sa1"]
REDUNDANT = {"raid1", "raid10", "raid5", "chained", "raidx"}


class Raidlab:
    def __init__(self, cmd: list[str], home: Path):
        self.cmd, self.home = cmd, home
        self.env = {**os.environ, "RAIDLAB_HOME": str(home), "COLUMNS": "400"}

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([*self.cmd, *args], capture_output=True, text=True, env=self.env, timeout=600)
        if check and proc.returncode != 0:
            raise AssertionError(f"raidlab {' '.join(args)} -> {proc.returncode}\n{proc.stderr}")
        return proc


@pytest.fixture
def rl(raidlab_cmd, tmp_path):
    r = Raidlab(raidlab_cmd, tmp_path / "home")
    yield r
    for entry in (tmp_path / "home" / "labs").glob("*"):
        r("destroy", entry.name, check=False)


def detached(device: str) -> bool:
    """The loop device no longer serves a raidlab volume (FUSE files show as "(/volume)")."""
    out = subprocess.run(["losetup", "-a"], capture_output=True, text=True, check=True).stdout
    return not any(line.startswith(device + ":") and "(/volume)" in line for line in out.splitlines())


def fio_verify(device: str, size: str = "8m") -> None:
    run = fio.run_job(fio.FioJob(name="verify", filename=device, rw="randwrite", bs="4k", size=size,
                                 iodepth=8, verify="crc32c", seed=7))
    assert run.ok and all(job.error == 0 for job in run.jobs)
    assert run.jobs[0].read.ios == run.jobs[0].write.ios > 0


@pytest.mark.parametrize("arch", ARCHS)
def test_architecture_serves_ext4_and_fio_through_failure_and_rebuild(rl, arch, tmp_path):
    disks = "2" if arch == "raid1" else "4"
    device = rl("create", "a", "--arch", arch, "--disks", disks, "--disk-size", "48M", "--chunk", "64K").stdout.strip()
    assert device.startswith("/dev/loop")
    fio_verify(device)  # raw device first; the filesystem goes on top afterwards
    mkfs_ext4(device)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    mount(device, mnt)
    try:
        sums = write_tree(mnt, seed=1)
        remount(device, mnt)
        verify_tree(mnt, sums)
        if arch in REDUNDANT:
            rl("fail", "a", "--disk", "1")
            Path("/proc/sys/vm/drop_caches").write_text("3\n")
            verify_tree(mnt, sums)  # served from the surviving copies / parity
            more = write_tree(mnt / "after-fail", seed=2, files=20)  # degraded writes
            sums.update({f"after-fail/{rel}": digest for rel, digest in more.items()})
            rl("replace", "a", "--disk", "1")
            remount(device, mnt)
            verify_tree(mnt, sums)
        else:
            proc = rl("fail", "a", "--disk", "1", check=False)
            assert proc.returncode == 2 and "no redundancy" in proc.stderr
    finally:
        umount(mnt)
    assert e2fsck(device).clean
    if arch in REDUNDANT:
        check = rl("check", "a", "--json")
        assert '"mismatches": []' in check.stdout
    status = rl("status", "a", "--json").stdout
    assert '"state": "optimal"' in status
    lab_dir = rl.home / "labs" / "a"
    rl("destroy", "a")
    assert leftovers(lab_dir, "a") == {}
    assert detached(device)
    assert not lab_dir.exists()


def test_destroy_keep_images_then_assemble_and_refusals(rl, tmp_path):
    device = rl("create", "r5", "--arch", "raid5", "--disks", "3", "--disk-size", "32M", "--chunk", "64K").stdout.strip()
    mkfs_ext4(device)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    mount(device, mnt)
    sums = write_tree(mnt, seed=3, files=30)
    umount(mnt)
    rl("destroy", "r5", "--keep-images")
    lab_dir = rl.home / "labs" / "r5"
    assert leftovers(lab_dir, "r5") == {} and detached(device)
    images = lab_dir / "images"
    # Members out of order are refused, with nothing left attached.
    (images / "d0.img").rename(images / "tmp.img")
    (images / "d1.img").rename(images / "d0.img")
    (images / "tmp.img").rename(images / "d1.img")
    proc = rl("assemble", "r5", check=False)
    assert proc.returncode == 2 and "position" in proc.stderr and "Traceback" not in proc.stderr
    assert leftovers(lab_dir, "r5") == {}
    (images / "d0.img").rename(images / "tmp.img")
    (images / "d1.img").rename(images / "d0.img")
    (images / "tmp.img").rename(images / "d1.img")
    # A member of another array is refused.
    rl("create", "other", "--arch", "raid5", "--disks", "3", "--disk-size", "32M", "--chunk", "64K")
    rl("destroy", "other", "--keep-images")
    (images / "d2.img").rename(images / "mine.img")
    (rl.home / "labs" / "other" / "images" / "d2.img").rename(images / "d2.img")
    proc = rl("assemble", "r5", check=False)
    assert proc.returncode == 2 and "another array" in proc.stderr
    (images / "d2.img").unlink()
    (images / "mine.img").rename(images / "d2.img")
    # The right members in the right order come back with the data.
    device = rl("assemble", "r5").stdout.strip()
    assert e2fsck(device).clean
    mount(device, mnt)
    try:
        verify_tree(mnt, sums)
    finally:
        umount(mnt)
    rl("destroy", "r5")
    rl("destroy", "other", check=False)
    assert leftovers(lab_dir, "r5") == {}


@pytest.mark.parametrize(
    "args, message",
    [
        (["--arch", "raid5", "--disks", "2"], "at least 3 disks"),
        (["--arch", "raid0", "--disks", "3", "--chunk", "96K", "--disk-size", "33M"], "does not divide"),
        (["--arch", "raid6", "--disks", "4"], "unknown architecture"),
        (["--arch", "raid0", "--disks", "2", "--disk-model", "hp-9999"], "unknown"),
        (["--arch", "raid0", "--disks", "2", "--disk-size", "1000"], "multiple of 512"),
    ],
)
def test_bad_create_input_is_one_line_exit_two_nothing_made(rl, args, message):
    proc = rl("create", "bad", *args, check=False)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (rl.home / "labs" / "bad" / "array.json").exists()


# ---- per-member disk models (VC-RAID Table 1: four different drives in one array) ----

MEMBER_MODELS = ["ibm-dnes-318350", "seagate-st52160n", "hp-c2200a"]


def test_raid5_over_three_different_models(rl):
    device = rl("create", "mm", "--arch", "raid5", "--disks", "3", "--disk-model", ",".join(MEMBER_MODELS),
                "--disk-size", "16M", "--chunk", "64K").stdout.strip()
    assert device.startswith("/dev/loop")
    status = json.loads(rl("status", "mm", "--json").stdout)
    assert status["member_models"] == MEMBER_MODELS
    assert [m["model"] for m in status["statistics"]["members"]] == MEMBER_MODELS
    assert status["spec"]["disk_model"] == ",".join(MEMBER_MODELS)
    listed = json.loads(rl("list", "--json").stdout)
    assert [a["disk_model"] for a in listed if a["name"] == "mm"] == [",".join(MEMBER_MODELS)]
    text = rl("status", "mm").stdout
    assert ", ".join(MEMBER_MODELS) in text and all(m in text for m in MEMBER_MODELS)

    # A replaced member is built with its own model again, not the first member's.
    rl("fail", "mm", "--disk", "1")
    rl("replace", "mm", "--disk", "1")
    status = json.loads(rl("status", "mm", "--json").stdout)
    assert [m["model"] for m in status["statistics"]["members"]] == MEMBER_MODELS
    assert status["statistics"]["state"] == "optimal"

    lab_dir = rl.home / "labs" / "mm"
    rl("destroy", "mm")
    assert leftovers(lab_dir, "mm") == {}
    assert not lab_dir.exists()
