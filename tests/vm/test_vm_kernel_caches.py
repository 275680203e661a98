"""The kernel's descendants of the papers' ideas in the lab VM, as a user runs them: `raidlab
create --arch ARCH --runner vm`, a file system through the runner session, fio writing and
verifying every block it wrote, the kernel's own counters in `raidlab status` showing that
the cache took the writes, and nothing left after `raidlab destroy`; then the write-back
caches across power cuts (`raidlab crashtest`: every fsync'ed file intact after assembly)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from lab_leftovers import leftovers
from test_md_host import Raidlab

from raidlab.lab import Lab
from raidlab.runners.session import open_session

pytestmark = [pytest.mark.root, pytest.mark.vm, pytest.mark.long]

FIO_VERIFY = ["fio", "--name=verify", "--filename=/mnt/f", "--size=12M", "--rw=randwrite", "--bs=4k", "--direct=1",
              "--ioengine=psync", "--verify=crc32c", "--do_verify=1", "--verify_fatal=1", "--output-format=json"]


def _counters_moved(arch: str, doc: dict) -> None:
    """What the kernel says it did with the writes, per architecture."""
    counters = doc["kcache"] if doc["kind"] == "kcache" else doc["md"]
    if arch == "md-raid5-wb":
        assert counters["consistency_policy"] == "journal" and counters["journal_mode"] == "write-back", counters
        assert counters["stripe_cache_size"] == "1024", counters
    elif arch == "md-raid5-ppl":
        assert counters["consistency_policy"] == "ppl", counters
    elif arch == "dm-writecache":
        assert counters["error"] == 0 and counters["write_blocks"] >= 3072 and counters["flushes"] > 0, counters
    elif arch == "bcache":
        # bcache folds its hit counters in on a timer, so right after the run they may still
        # read 0; the cache device's own drive shows the writes it took
        assert counters["cache_mode"] == "writeback", counters
        assert doc["statistics"]["members"][1]["bytes_written"] >= 4 << 20, doc["statistics"]["members"][1]
    else:
        assert counters["policy"] == "smq" and counters["features"][0] == "writeback", counters
        assert counters["write_hits"] + counters["write_misses"] > 0, counters


@pytest.mark.parametrize("arch, args, fs", [
    # slow: md's `mdadm --stop` of a write-back journal after fio's writes hung in the guest
    # for the command's 120 s in 2 of 5 runs (results/reliability/NOTES.md), so destroy
    # gives up and the daemon outlives it; the case runs with `-m slow`
    pytest.param("md-raid5-wb", ["--disks", "3", "-o", "assume_clean=true", "-o", "journal=8M", "-o",
                                 "stripe_cache_size=1024"], "ext4", marks=pytest.mark.slow),
    ("md-raid5-ppl", ["--disks", "3", "-o", "assume_clean=true"], "ext4"),
    ("dm-writecache", ["--disks", "1", "-o", "cache_size=16M"], "ext2"),
    ("bcache", ["--disks", "1", "-o", "cache_size=16M", "-o", "bucket=16K"], "ext4"),
    ("dm-cache", ["--disks", "3", "--chunk", "64K", "-o", "cache_size=16M", "-o", "metadata=4M"], "ext4"),
])
def test_a_descendant_serves_a_file_system_and_fio_verifies_it(raidlab_cmd, tmp_path, arch, args, fs):
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 not installed (apt-get install qemu-system-x86)")
    rl = Raidlab(raidlab_cmd, tmp_path / "home")
    try:
        ready = json.loads(rl("create", "k", "--arch", arch, *args, "--disk-size", "48M", "--runner", "vm",
                              "--json").stdout)
        assert ready["device"] is None and ready["guest_device"].startswith("/dev/")
        assert ready["capacity"] >= 40 << 20
        session = open_session(Lab("k", home=rl.home))
        session.exec([f"mkfs.{fs}", "-F", "-q", session.device], timeout=300)
        session.exec(["mount", session.device, "/mnt"], timeout=60)
        result = session.exec(FIO_VERIFY, timeout=900)
        job = json.loads(result.stdout_text)["jobs"][0]
        assert job["error"] == 0 and job["write"]["io_bytes"] == 12 << 20, job
        assert job["read"]["io_bytes"] == 12 << 20, "fio read back and verified every block it wrote"
        session.exec(["umount", "/mnt"], timeout=60)
        doc = json.loads(rl("status", "k", "--json").stdout)
        _counters_moved(arch, doc)
        written = sum(member["bytes_written"] for member in doc["statistics"]["members"])
        assert written >= 12 << 20, "the emulated drives took the writes"
        log = (rl.home / "labs" / "k" / ("commands.log" if doc["kind"] == "kcache" else "mdadm-commands.log"))
        assert all(json.loads(line)["rc"] == 0 for line in log.read_text().splitlines())
    finally:
        rl("destroy", "k", check=False)
    rl.nothing_left("k")


@pytest.mark.parametrize("target", ["dm-writecache", pytest.param("bcache", marks=pytest.mark.slow)])
def test_a_write_back_cache_keeps_every_fsynced_file_across_power_cuts(raidlab_cmd, tmp_path, target):
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 not installed (apt-get install qemu-system-x86)")
    home = tmp_path / "home"
    proc = subprocess.run([*raidlab_cmd, "crashtest", target, "--points", "1", "--seed", "1", "--mode", "power",
                           "--json"], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "RAIDLAB_HOME": str(home)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["points"] == summary["passed"] == 1 and summary["errors"] == 0, summary
    point = summary["results"][0]
    assert point["fsck_clean"] and point["intact"] == point["fsynced"] > 0, point
    assert set(point["power_cut"]) == {"d0.img", "d1.img"}, point   # the data disk's and the cache's power cut
    assert leftovers(home / "labs" / f"crashtest-{target}", f"crashtest-{target}") == {}
