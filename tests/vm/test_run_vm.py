"""`raidlab run` with the lab VM runner, as the VC-RAID scenarios use it: md and VC-RAID arrays
whose workload runs in the guest, then `raidlab report`; and SIGTERM in the middle of a guest
workload, which must stop the run at once instead of after the workload.

The second test: the guest agent takes one command at a time, so after SIGTERM neither the
run's cleanup (rm of the workload's directory, umount) nor the daemon's stop may queue behind
the running PostMark or Bonnie. Here PostMark is given a million transactions (much longer
than the test's bound); the run must end within two minutes of the signal, with the manifest
marked interrupted and no QEMU, loop device or mount of the run left
(tests/live/lab_leftovers.py). It runs for an engine array and for an md array: md's cleanup
(`mdadm --stop`, in the guest) comes before the VM's shutdown, so the stop must not ask a
guest whose channel a cut-short command holds.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from lab_leftovers import loops_of, mounts_of, processes_of

pytestmark = [pytest.mark.root, pytest.mark.vm, pytest.mark.md]

SCENARIO = """
[scenario]
id = "vm-run"
title = "vm test: PostMark in the lab VM"
kind = "live"
runner = "vm"
repeat = 1

{archs}

[workload]
name = "postmark"
params = {{ files = {files}, transactions = {transactions}, min_size = 500, max_size = 5000 }}
mkfs_options = ["-b", "1024"]

[[case]]
name = "tiny"

[[claim]]
id = "both-measured"
text = "VC-RAID scd / md RAID 5 is some finite ratio"
kind = "ratio"
metric = "tps"
case = "tiny"
num = "scd"
den = "raid5"
min = 0.001
max = 1000
"""

MD_RAID5 = """
[[arch]]
label = "raid5"
arch = "md-raid5"
disks = 3
disk_model = "none"
disk_size = "48M"
chunk = "64K"
options = { assume_clean = true }
"""

SCD = """
[[arch]]
label = "scd"
arch = "vcraid"
disks = 3
disk_model = "none"
disk_size = "48M"
chunk = "64K"
options = { config = "scd", cache_model = "none", cache_size = "32M", ram_buffer = "1M", block_size = "1K" }
"""

RAID0 = """
[[arch]]
label = "raid0"
arch = "raid0"
disks = 2
disk_model = "none"
disk_size = "64M"
chunk = "64K"
"""

MD_RAID0 = RAID0.replace('arch = "raid0"', 'arch = "md-raid0"')


@pytest.fixture
def vm_run(tmp_path, raidlab_cmd):
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 not installed (apt-get install qemu-system-x86)")
    home, results = tmp_path / "home", tmp_path / "results"

    def scenario(archs: str, files: int, transactions: int) -> Path:
        text = SCENARIO.format(archs=archs, files=files, transactions=transactions)
        if "scd" not in archs:
            text = text[:text.index("[[claim]]")]
        path = tmp_path / "vm-run.toml"
        path.write_text(text)
        return path

    def argv(path: Path) -> list[str]:
        return [*raidlab_cmd, "run", str(path), "--home", str(home), "--results", str(results)]

    yield scenario, argv, home
    assert not processes_of(home), "a process (QEMU?) of the run survived"
    assert loops_of(home) == [] and mounts_of(home) == []
    labs = home / "labs"
    assert not labs.exists() or not any(labs.iterdir()), f"labs left: {list(labs.iterdir())}"


def test_md_and_vcraid_scenario_runs_in_the_vm_and_reports(vm_run, raidlab_cmd):
    scenario, argv, _ = vm_run
    proc = subprocess.run(argv(scenario(MD_RAID5 + SCD, 100, 500)), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = Path(proc.stdout.strip())
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["runner"] == "vm"
    for label in ("raid5", "scd"):
        doc = json.loads((out / "runs" / f"{label}--tiny--r1.json").read_text())
        assert doc["status"] == "ok" and doc["runner"] == "vm", doc.get("error")
        assert doc["metrics"]["tps"]["value"] > 0
        assert doc["array"]["guest_device"] == ("/dev/md0" if label == "raid5" else "/dev/vda")
        assert doc["vm"]["guest_memory_kib"]["MemTotal"] > 0
        umount = [c for c in doc["setup_commands"] if c["argv"][0] == "umount"]
        assert umount and umount[0]["rc"] == 0
        # the cold start: the array settled, the guest's page cache dropped (md: nothing to drain)
        assert doc["cold_start"]["seconds"] >= 0 and (label != "raid5" or doc["cold_start"]["drained_bytes"] == 0)
        drop = [c for c in doc["setup_commands"] if c["argv"][:2] == ["sh", "-c"]]
        assert drop and drop[0]["rc"] == 0 and "drop_caches" in drop[0]["argv"][2]
        # the machine's speed, timed in the guest's own shell and on the host before the workload
        assert doc["speed"]["runner"] == "vm" and doc["speed"]["runner_us_per_loop"] > 0
        assert doc["speed"]["host_us_per_loop"] > 0 and 0 <= doc["speed"]["host_steal_share"] <= 1
    # the arrays' own accounts: md's state from the guest, VC-RAID's log from the engine
    md_status = json.loads((out / "runs" / "raid5--tiny--r1.json").read_text())["array_status"]
    scd_status = json.loads((out / "runs" / "scd--tiny--r1.json").read_text())["array_status"]
    assert "error" not in md_status and "error" not in scd_status
    assert md_status["spec"]["arch"] == "md-raid5" and scd_status["spec"]["arch"] == "vcraid"
    # the accounts before the workload: the member writes of mkfs (and md's resync) only
    for label, after in (("raid5", md_status), ("scd", scd_status)):
        before = json.loads((out / "runs" / f"{label}--tiny--r1.json").read_text())["array_status_before"]
        assert "error" not in before, before
        w0 = sum(m["writes"] for m in _members(before))
        w1 = sum(m["writes"] for m in _members(after))
        assert 0 < w0 < w1, (label, w0, w1)
    # the CPU the engine daemon and the VM's QEMU used (they share this host's cores)
    for status in (md_status, scd_status):
        assert status["cpu"]["daemon"]["user_s"] > 0 and status["cpu"]["vm"]["user_s"] > 0
    # step lines go to stderr when it is not a terminal
    assert "scd [vcraid]" in proc.stderr and "postmark: 100 files, 500 transactions" in proc.stderr
    rep = subprocess.run([*raidlab_cmd, "report", str(out)], capture_output=True, text=True, timeout=300)
    assert rep.returncode == 0, rep.stderr
    report = (out / "report" / "report.md").read_text()
    assert "both-measured" in report and "holds" in report
    assert "## Machine speed" in report and "raid5--tiny--r1" in report


def _members(status: dict) -> list[dict]:
    """The emulated drives of an array status: md's members, or VC-RAID's raid5 members and
    cache disks."""
    stats = status["statistics"]
    if "members" in stats:
        return stats["members"]
    return stats["array"]["members"] + stats["cache_disks"]


@pytest.mark.parametrize("arch", [RAID0, MD_RAID0], ids=["engine raid0", "md-raid0"])
def test_sigterm_during_a_guest_workload_stops_the_run_promptly(vm_run, raidlab_cmd, arch):
    scenario, argv, home = vm_run
    proc = subprocess.Popen(argv(scenario(arch, 2000, 1_000_000)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    running = threading.Event()

    def read():
        for line in proc.stderr:
            lines.append(line)
            if "postmark: 2000 files" in line:
                running.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert running.wait(600), "".join(lines)[-3000:]
        threading.Event().wait(5)  # PostMark is creating its files in the guest
        assert proc.poll() is None, "".join(lines)[-3000:]
        proc.send_signal(signal.SIGTERM)
        # A million transactions take far longer here: only a stop that cuts the guest
        # command short ends the run within two minutes.
        proc.wait(timeout=120)
        stdout = proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            for lab in (home / "labs").glob("*"):
                subprocess.run([*raidlab_cmd, "destroy", lab.name],
                               env={**os.environ, "RAIDLAB_HOME": str(home)}, capture_output=True)
    reader.join(10)
    text = "".join(lines)
    assert proc.returncode == 128 + signal.SIGTERM, text[-3000:]
    assert "interrupted by SIGTERM" in text
    out = Path(stdout.strip())
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    assert not list((out / "runs").glob("*.json"))  # the cut-short run is not a result


def test_the_sa_raid_live_scenario_runs_quick_on_partitions_in_the_vm(vm_run, raidlab_cmd):
    """scenarios/sa-raid-live.toml at quick size: engine raid0 and SA3 and md's RAID0 over the
    same partitions of whole drives on one bus (b8-c1-d1-e1), the seqfile program on ext2 in
    the guest, then the report with its claims."""
    _scenario, argv, _home = vm_run
    scenario = Path(__file__).resolve().parents[2] / "scenarios" / "sa-raid-live.toml"
    proc = subprocess.run([*argv(scenario), "--quick"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = Path(proc.stdout.strip())
    for label in ("raid0-b8c1d1e1", "sa3-b8c1d1e1", "md-raid0-b8c1d1e1"):
        doc = json.loads((out / "runs" / f"{label}--256m--r1.json").read_text())
        assert doc["status"] == "ok", doc.get("error")
        assert doc["metrics"]["write_mb_s"]["value"] > 0 and doc["metrics"]["read_mb_s"]["value"] > 0
        mkfs = [c for c in doc["setup_commands"] if c["argv"][0].startswith("mkfs")]
        assert mkfs[0]["argv"][0] == "mkfs.ext2" and "4096" in mkfs[0]["argv"]
        status = doc["array_status"]
        assert status["spec"]["partitions"] == "b8-c1-d1-e1" and status["spec"]["bus"] == "shared"
        members = status["statistics"]["members"]
        assert [m["disk"] for m in members] == ["drive-b", "drive-c", "drive-d", "drive-e"]
        assert sum(m["bytes_written"] for m in members) >= 16 << 20   # the file reached the partitions
    rep = subprocess.run([*raidlab_cmd, "report", str(out)], capture_output=True, text=True, timeout=300)
    assert rep.returncode == 0, rep.stderr
    report = (out / "report" / "report.md").read_text()
    assert "sa3-over-raid0-write" in report and "partitions b8-c1-d1-e1" in report
