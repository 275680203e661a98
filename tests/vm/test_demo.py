"""`raidlab demo`: what `make demo` runs once its set-up is done (scripts/demo.sh). PostMark
"small" at the quick size, md-raid5 against VC-RAID scd, both in the lab VM, then the report;
the last line printed is the report's path. About 1.5 minutes alone here (two VM boots under
TCG, two PostMark runs of 5,000 transactions), so it is the one test of the demo as a whole:
it checks what a user of `make demo` is promised -- both runs measured, a report naming both
with the paper's numbers beside them, a claim verdict, and nothing of the runs left behind --
and, on the same two runs, what every VM run of `raidlab run` records: the paper's ext2 made
and mounted in the guest, the cold start, the arrays' own accounts before and after the
workload, the CPU of the engine daemon and of QEMU, and the machine's speed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from lab_leftovers import loops_of, mounts_of, processes_of

pytestmark = [pytest.mark.root, pytest.mark.vm, pytest.mark.md]


def test_demo_measures_md_raid5_and_scd_and_ends_with_the_report_path(tmp_path, raidlab_cmd):
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 not installed (apt-get install qemu-system-x86)")
    home, results = tmp_path / "home", tmp_path / "results"
    proc = subprocess.run([*raidlab_cmd, "demo", "--results", str(results), "--home", str(home)],
                          capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "2 runs ok, 0 failed" in proc.stderr

    report = Path(proc.stdout.strip().splitlines()[-1])
    assert report.name == "report.md" and report.is_file(), proc.stdout
    out = report.parent.parent
    assert out.parent == results / "vcraid-table2-postmark"

    runs = {doc["arch"]: doc for doc in
            (json.loads(p.read_text()) for p in sorted((out / "runs").glob("*.json")))}
    assert sorted(runs) == ["raid5", "scd"]
    assert runs["raid5"]["arch_id"] == "md-raid5" and runs["scd"]["arch_id"] == "vcraid"
    for label, doc in runs.items():
        assert doc["status"] == "ok" and doc["runner"] == "vm" and doc["case"] == "small"
        assert doc["metrics"]["tps"]["value"] > 0
        postmark = [c for c in doc["commands"] if c["argv"] == ["postmark"]]
        assert len(postmark) == 1 and postmark[0]["rc"] == 0 and postmark[0]["where"] == "runner"
        assert doc["array"]["guest_device"] == ("/dev/md0" if label == "raid5" else "/dev/vda")
        assert doc["vm"]["guest_memory_kib"]["MemTotal"] > 0
        # the paper's ext2 (in the guest the ext4 driver mounts it: Debian's kernel has no ext2)
        assert doc["filesystem"] == "ext2"
        assert doc["setup_commands"][0]["argv"][0] == "mkfs.ext2"
        umount = [c for c in doc["setup_commands"] if c["argv"][0] == "umount"]
        assert umount and umount[0]["rc"] == 0
        # the cold start: the array settled, the guest's page cache dropped (md: nothing to drain)
        assert doc["cold_start"]["seconds"] >= 0 and (label != "raid5" or doc["cold_start"]["drained_bytes"] == 0)
        drop = [c for c in doc["setup_commands"] if c["argv"][:2] == ["sh", "-c"]]
        assert drop and drop[0]["rc"] == 0 and "drop_caches" in drop[0]["argv"][2]
        # the machine's speed, timed in the guest's own shell and on the host before the workload
        assert doc["speed"]["runner"] == "vm" and doc["speed"]["runner_us_per_loop"] > 0
        assert doc["speed"]["host_us_per_loop"] > 0 and 0 <= doc["speed"]["host_steal_share"] <= 1
        # the arrays' own accounts (md's state from the guest, VC-RAID's log from the engine):
        # before the workload, the member writes of mkfs only
        before, after = doc["array_status_before"], doc["array_status"]
        assert "error" not in before and "error" not in after, (before, after)
        assert 0 < sum(m["writes"] for m in _members(before)) < sum(m["writes"] for m in _members(after))
        # the CPU the engine daemon and the VM's QEMU used (they share this host's cores)
        assert after["cpu"]["daemon"]["user_s"] > 0 and after["cpu"]["vm"]["user_s"] > 0
    assert runs["raid5"]["array_status"]["spec"]["arch"] == "md-raid5"
    assert runs["scd"]["array_status"]["spec"]["arch"] == "vcraid"

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["quick"] is True
    assert manifest["command_line"][:2] == ["raidlab", "demo"]

    text = report.read_text()
    for doc in runs.values():  # both measured values, as the report prints them
        assert f"{doc['metrics']['tps']['value']:,.0f} (n=1)" in text
    assert "| tps | small | scd |" in text and "| 941 |" in text  # the paper's Table 2 beside ours
    assert "| scd-over-raid5 |" in text  # scd/raid5 is measured, so its claim has a verdict
    scd_over_raid5 = next(line for line in text.splitlines() if line.startswith("| scd-over-raid5 |"))
    assert "not measured" not in scd_over_raid5
    assert (report.parent / "report.html").is_file() and (report.parent / "figures" / "tps.png").is_file()
    assert "## Machine speed" in text and "raid5--small--r1" in text

    assert not processes_of(home), "a process (QEMU?) of the demo survived"
    assert loops_of(home) == [] and mounts_of(home) == []
    labs = home / "labs"
    assert not labs.exists() or not any(labs.iterdir()), f"labs left: {list(labs.iterdir())}"


def _members(status: dict) -> list[dict]:
    """The emulated drives of an array status: md's members, or VC-RAID's raid5 members and
    cache disks."""
    stats = status["statistics"]
    if "members" in stats:
        return stats["members"]
    return stats["array"]["members"] + stats["cache_disks"]
