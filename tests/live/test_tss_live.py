"""TSS as a real block device, driven as a user drives it: `raidlab create --arch tss` ->
ext4 -> a file tree and fio --verify while a policy runs as its own process (`raidlab tss
policy`), moving stripes between RAID1, RAID5 and cRAID5 -> verify, fsck -> status shows
the personalities and migrations -> a daemon killed with SIGKILL -> assemble -> verify ->
destroy, nothing left behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raidlab.tools import fio
from raidlab.tools.mkfs import mkfs_ext4
from raidlab.tools.mount import mount, umount

import trees
from lab_leftovers import leftovers
from test_dcd_vcraid_live import Raidlab, fsck_clean, mnt, rl  # noqa: F401 - fixtures
from trees import remount, verify_tree

pytestmark = [pytest.mark.root, pytest.mark.live]


@pytest.mark.long
def test_tss_serves_ext4_and_fio_verify_while_a_policy_process_migrates(rl, mnt):
    device = rl("create", "t", "--arch", "tss", "--disks", "4", "--disk-size", "48M", "--chunk", "16K",
                "-o", "logical_stripes=1200", "-o", "log=on", "-o", "writes=async").stdout.strip()
    assert device.startswith("/dev/loop")
    lab_dir = rl.home / "labs" / "t"
    status = rl.status("t")
    assert status["kind"] == "tss" and status["counts"]["personalities"]["invalid"] == 1200
    mkfs_ext4(device)
    mount(device, mnt)
    policy = subprocess.Popen([*rl.cmd, "tss", "policy", "t", "five-minute", "--raid1-raid5", "1",
                               "--raid5-craid5", "2"], env=rl.env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        sums = trees.write_tree(mnt, seed=3, files=60)
        job = fio.FioJob(name="verify", filename=str(mnt / "fio.dat"), rw="randwrite", bs="4k", size="6m",
                         iodepth=8, verify="crc32c", seed=7)
        for _round in range(3):  # fio's verify reads come back through stripes the policy moved
            run = fio.run_job(job)
            assert run.ok and run.jobs[0].error == 0
            time.sleep(2.5)
        remount(device, mnt)
        verify_tree(mnt, sums)
    finally:
        policy.send_signal(signal.SIGTERM)
        out, err = policy.communicate(timeout=60)
        umount(mnt)
    assert policy.returncode == 0, err
    assert "five-minute policy stopped; migrations:" in out and "raid1->raid5" in out
    assert fsck_clean(rl, "t", device)
    stats = rl.status("t")
    moved = {k: v for k, v in stats["statistics"].items() if k.startswith(("promote_", "victimize_"))}
    assert moved.get("victimize_raid1_to_raid5", 0) > 0 and moved.get("victimize_raid5_to_craid5", 0) > 0
    assert stats["counts"]["personalities"]["craid5"] > 0
    text = rl("status", "t").stdout
    assert "personalities:" in text and "migrations:" in text

    # A crash: the daemon dies with SIGKILL; the map table on the private area brings it back.
    pid = stats["pid"]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
        time.sleep(0.1)
    rl("lab", "cleanup", "t")
    device = rl("assemble", "t").stdout.strip()
    assert fsck_clean(rl, "t", device)
    after = rl.status("t")["counts"]["personalities"]
    assert after == stats["counts"]["personalities"]
    mount(device, mnt)
    try:
        verify_tree(mnt, sums)
        # A column fails under the mounted filesystem; everything still reads; a replacement
        # is rebuilt while files are written; the scrub finds the redundancy whole.
        rl("fail", "t", "--disk", "1")
        assert "degraded" in rl.status("t")["report"][0]
        verify_tree(mnt, sums)
        more = trees.write_tree(mnt / "degraded", seed=4, files=20)
        assert rl("check", "t", check=False).returncode == 2  # nothing to check against
        rl("replace", "t", "--disk", "1")
        assert rl.status("t")["report"][0] == "state: active"
        remount(device, mnt)
        verify_tree(mnt, sums)
        verify_tree(mnt / "degraded", more)
    finally:
        umount(mnt)
    checked = json.loads(rl("check", "t", "--json").stdout)
    assert checked["mismatches"] == [] and checked["checked_bytes"] > 0
    rl("destroy", "t")
    assert leftovers(lab_dir, "t") == {} and not lab_dir.exists()


def test_tss_control_calls_refuse_bad_input_in_one_line(rl):
    rl("create", "t", "--arch", "tss", "--disks", "3", "--disk-size", "16M", "--chunk", "16K")
    rl("create", "r", "--arch", "raid5", "--disks", "3", "--disk-size", "16M", "--chunk", "16K")
    for args, message in [
        (("tss", "promote", "t", "999999"), "no logical stripe"),
        (("tss", "victimize", "t", "--best", "raid1"), None),  # nothing to victimize: not an error
        (("tss", "counts", "r"), "not tss"),
        (("tss", "policy", "r", "watermark"), "not tss"),
        (("tss", "policy", "t", "watermark", "--raid1", "60:50"), "lower <= upper"),
        (("tss", "policy", "t", "sometimes"), "Invalid value"),
        (("create", "x", "--arch", "tss", "--disks", "3", "--disk-size", "16M", "-o", "mode=raid6"), "mode"),
        (("create", "x", "--arch", "tss", "--disks", "3", "--disk-size", "16M", "-o", "cpu_cost=measured"),
         "virtual time only"),
        (("create", "x", "--arch", "tss", "--disks", "2", "--disk-size", "16M"), "at least 3 columns"),
        (("create", "x", "--arch", "tss", "--disks", "3", "--disk-size", "16M", "-o", "bogus=1"), "no option"),
    ]:
        proc = rl(*args, check=False)
        if message is None:
            assert proc.returncode == 0, proc.stderr
            assert json.loads(rl("tss", "counts", "t", "--json").stdout)["personalities"]["invalid"] > 0
            continue
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert message in proc.stderr and "Traceback" not in proc.stderr, (args, proc.stderr)
    assert not (rl.home / "labs" / "x").exists()
    rl("destroy", "t")
    rl("destroy", "r")


def test_the_labs_own_policy_needs_nothing_but_the_control_interface(rl):
    """labs/tss/hot_promote.py, a third policy written for the TSS lab against the ioctls
    only, brings hot compressed stripes back while a reader keeps them hot."""
    device = rl("create", "t", "--arch", "tss", "--disks", "4", "--disk-size", "64M", "--chunk", "16K",
                "-o", "logical_stripes=600").stdout.strip()
    stripe = 48 * 1024
    with open(device, "r+b", buffering=0) as fh:
        fh.write(bytes(300 * stripe))
        os.fsync(fh.fileno())
    # Nothing is read: the five-minute rule moves stripes down to cRAID5 (as many as its
    # turns reach in 3 s on a busy host).
    rl("tss", "policy", "t", "five-minute", "--raid1-raid5", "0.5", "--raid5-craid5", "1", "--duration", "3")
    assert json.loads(rl("tss", "counts", "t", "--json").stdout)["personalities"]["craid5"] > 0
    for s in range(100, 104):  # the ones to be read: compressed too, whatever the last turn did
        while json.loads(rl("tss", "get", "t", str(s), "--json").stdout)["personality"] != "craid5":
            rl("tss", "victimize", "t", str(s))
    lab_policy = Path(__file__).resolve().parents[2] / "labs" / "tss" / "hot_promote.py"
    policy = subprocess.Popen([sys.executable, str(lab_policy), "t", "--period", "0.5", "--hot", "3",
                               "--free", "0.8", "--duration", "6"], env=rl.env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 5
    with open(device, "rb", buffering=0) as fh:
        while time.monotonic() < deadline:  # stripes 100-103 stay hot
            fh.seek(100 * stripe)
            fh.read(4 * stripe)
            subprocess.run(["blockdev", "--flushbufs", device], check=False)
            time.sleep(0.05)
    out, err = policy.communicate(timeout=60)
    assert policy.returncode == 0, err
    assert "craid5->raid5" in out, out
    kinds = [json.loads(rl("tss", "get", "t", str(s), "--json").stdout)["personality"] for s in range(100, 104)]
    assert all(kind in ("raid5", "raid1") for kind in kinds), kinds
    rl("destroy", "t")


LIVE_POLICY = """
[scenario]
id = "tss-live-policy"
title = "live test: a policy beside a replay on TSS"
kind = "live"
runner = "native"

[[arch]]
label = "tss"
arch = "tss"
disks = 3
disk_size = "48M"
chunk = "16K"
options = { logical_stripes = 1200 }
policy = "five-minute"
policy_options = { raid1_raid5 = 1, raid5_craid5 = 2 }

[workload]
name = "replay"
params = { profile = "cello-var", duration = "3m", compact = 20.0, device_size = "36M" }
filesystem = "none"

[[case]]
name = "var"
"""


def test_a_live_run_runs_the_scenarios_policy_beside_the_workload(tmp_path, raidlab_cmd):
    """`raidlab run` starts the arch's policy once the array is cold and the workload starts,
    and stops it before umount: the run file says what it moved, and the array's own
    statistics agree."""
    scenario = tmp_path / "tss-live-policy.toml"
    scenario.write_text(LIVE_POLICY)
    home, results = tmp_path / "home", tmp_path / "results"
    proc = subprocess.run(raidlab_cmd + ["run", str(scenario), "--home", str(home), "--results", str(results)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = Path(proc.stdout.strip().splitlines()[-1])
    [run_file] = (out / "runs").glob("*.json")
    doc = json.loads(run_file.read_text())
    assert doc["status"] == "ok", doc.get("error")
    policy = doc["policy"]
    assert policy["name"] == "five-minute" and policy["error"] is None and policy["checks"] > 0
    assert policy["moves"].get("raid1->raid5", 0) > 0, policy
    before = doc["array_status_before"]["statistics"]
    after = doc["array_status"]["statistics"]
    moved = after.get("victimize_raid1_to_raid5", 0) - before.get("victimize_raid1_to_raid5", 0)
    assert moved == policy["moves"]["raid1->raid5"]
    assert not (home / "labs").exists() or not any((home / "labs").iterdir())
