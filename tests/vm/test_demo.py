"""`raidlab demo`: what `make demo` runs once its set-up is done (scripts/demo.sh). First DCD
Table 2 in virtual time, one trace seed at the paper's trace length, its claims judged; then
PostMark "small" at the quick size, md-raid5 against VC-RAID scd, both in the lab VM, its
claims not judged; each part ends in a report, and the reports' paths are printed one a line.
About three minutes alone here (six replays, two VM boots under TCG, two PostMark runs of
5,000 transactions), so it is the one test of the demo as a whole: it checks what a user of
`make demo` is promised -- verdicts that mean what they say (judged at the paper's size, not
judged at a quick one), both live runs measured, a report naming both with the paper's
numbers beside them, and nothing of the runs left behind -- and, on the same two live runs,
what every VM run of `raidlab run` records: the paper's ext2 made and mounted in the guest,
the cold start, the arrays' own accounts before and after the workload, the CPU of the
engine daemon and of QEMU, and the machine's speed.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from lab_leftovers import loops_of, mounts_of, processes_of

pytestmark = [pytest.mark.root, pytest.mark.vm, pytest.mark.md, pytest.mark.long]


def test_demo_measures_md_raid5_and_scd_and_ends_with_the_report_path(tmp_path, raidlab_cmd):
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 not installed (apt-get install qemu-system-x86)")
    home, results = tmp_path / "home", tmp_path / "results"
    proc = subprocess.run([*raidlab_cmd, "demo", "--results", str(results), "--home", str(home)],
                          capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "6 runs ok, 0 failed" in proc.stderr and "2 runs ok, 0 failed" in proc.stderr

    virtual, report = (Path(line) for line in proc.stdout.strip().splitlines()[-2:])
    assert virtual.name == report.name == "report.md" and virtual.is_file() and report.is_file(), proc.stdout
    # DCD Table 2 at the paper's trace length, one seed: every claim judged
    assert virtual.parent.parent.parent == results / "dcd-table2"
    dcd = json.loads((virtual.parent.parent / "manifest.json").read_text())
    assert dcd["quick"] is False and sorted(dcd["planned_runs"]) == sorted(
        f"{arch}--{case}--r1" for arch in ("disk", "dcd-logical") for case in ("hplajw", "cello", "snake"))
    banner = next(line for line in virtual.read_text().splitlines() if line.startswith("> **Verdicts on 3 claims:**"))
    judged = [int(n) for n in re.findall(r"(\d+) (?:holds|does not hold)", banner)]
    assert sum(judged) == 3 and "0 not judged (quick size)" in banner and "0 not measured" in banner
    assert "**1 of the scenario's 3 repetitions**" in virtual.read_text()

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
    scd = runs["scd"]["metrics"]["tps"]["value"]
    assert f"| small | scd | {scd:,.0f} (n=1) | 941 |" in text  # the paper's Table 2 beside ours
    # a quick size: every claim shown with what was measured, none judged
    assert "> **Verdicts on 6 claims:** ✓ 0 holds · ✗ 0 does not hold · – 6 not judged (quick size)" in text
    scd_over_raid5 = next(line for line in text.splitlines() if line.startswith("| scd-over-raid5 |"))
    ratio = scd / runs["raid5"]["metrics"]["tps"]["value"]
    assert scd_over_raid5.split(" | ")[1] == "– not judged (quick size)"
    assert f"small: scd/raid5 = {ratio:.2f}" in scd_over_raid5
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
