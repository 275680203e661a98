"""`raidlab run` with the lab VM runner: SIGTERM in the middle of a guest workload, which must
stop the run at once instead of after the workload; and the SA-RAID live scenario on
partitions in the guest. (A whole run of md and VC-RAID in the guest, then its report, is
tests/vm/test_demo.py: `raidlab demo` is one.)

The first test: the guest agent takes one command at a time, so after SIGTERM neither the
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


@pytest.mark.long
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
