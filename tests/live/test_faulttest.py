"""`raidlab faulttest` and `raidlab reliability`: a member that vanishes, fails its reads or
its writes, or turns 100x slow while fio writes and verifies. A redundant layout keeps every
byte fio wrote, loses the member (found by its own requests, or by a scrub when fio's reads
went to the other copy), rebuilds under load and scrubs clean; raid0 hands fio an EIO, never
wrong data; nothing is left behind. And the document `raidlab reliability` writes holds the
runs it reports, the interrupt campaign's among them.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from lab_leftovers import leftovers

pytestmark = [pytest.mark.root, pytest.mark.live]


def run(raidlab_cmd, home, *args: str, timeout: float = 1200) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAIDLAB_HOME": str(home), "COLUMNS": "200"}
    return subprocess.run([*raidlab_cmd, *args], capture_output=True, text=True, env=env, timeout=timeout)


@pytest.mark.long
@pytest.mark.parametrize("arch, disks", [("raid5", 4), ("raid1", 2), pytest.param("raidx", 4, marks=pytest.mark.slow),
                                         pytest.param("raid10", 4, marks=pytest.mark.slow),
                                         pytest.param("chained", 4, marks=pytest.mark.slow)])
def test_a_redundant_layout_keeps_the_data_and_rebuilds_under_load(raidlab_cmd, tmp_path, arch, disks):
    proc = run(raidlab_cmd, tmp_path / "home", "faulttest", arch, "--disks", str(disks), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    by_mode = {r["mode"]: r for r in summary["results"]}
    assert set(by_mode) == {"vanish", "read-eio", "write-eio", "slow"} and summary["passed"] == 4
    for mode in ("vanish", "read-eio", "write-eio"):
        r = by_mode[mode]
        assert r["during_ok"] and r["member_failed"] and r["rebuilt"] and r["rebuild_load_ok"] and r["reread_ok"], r
        assert r["mismatches"] == 0 and r["leaks"] == [] and r["error"] is None, r
    slow = by_mode["slow"]
    assert slow["during_ok"] and not slow["member_failed"] and slow["mismatches"] == 0, slow
    assert leftovers(tmp_path / "home" / "labs" / f"faulttest-{arch}", f"faulttest-{arch}") == {}


@pytest.mark.parametrize("mode", ["read-eio", pytest.param("write-eio", marks=pytest.mark.slow),
                                  pytest.param("vanish", marks=pytest.mark.slow)])
def test_vcraid_loses_a_raid5_member_behind_its_cache_and_rebuilds_it(raidlab_cmd, tmp_path, mode):
    proc = run(raidlab_cmd, tmp_path / "home", "faulttest", "vcraid", "--disks", "4", "--mode", mode,
               "-o", "config=scd", "-o", "cache_size=8M", "-o", "ram_buffer=1M", "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (r,) = json.loads(proc.stdout)["results"]
    assert r["during_ok"] and r["member_failed"] and r["rebuilt"] and r["reread_ok"] and r["mismatches"] == 0, r


@pytest.mark.parametrize("mode", ["read-eio", pytest.param("write-eio", marks=pytest.mark.slow),
                                  pytest.param("vanish", marks=pytest.mark.slow)])
def test_tss_loses_a_column_and_rebuilds_it(raidlab_cmd, tmp_path, mode):
    proc = run(raidlab_cmd, tmp_path / "home", "faulttest", "tss", "--disks", "4", "--mode", mode, "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (r,) = json.loads(proc.stdout)["results"]
    assert r["during_ok"] and r["member_failed"] and r["rebuilt"] and r["reread_ok"] and r["mismatches"] == 0, r
    assert r["state"] == "active" and r["leaks"] == []


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["read-eio", "write-eio"])
def test_vcraid_loses_a_side_of_its_mirrored_cache_disk_and_refills_it(raidlab_cmd, tmp_path, mode):
    proc = run(raidlab_cmd, tmp_path / "home", "faulttest", "vcraid", "--disks", "4", "--disk", "4", "--mode", mode,
               "-o", "config=scd", "-o", "cache_size=8M", "-o", "ram_buffer=1M", "-o", "mirrored_cache=on", "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    (r,) = summary["results"]
    assert summary["redundant"] and summary["role"] == "cache disk (mirrored)"
    assert r["during_ok"] and r["member_failed"] and r["rebuilt"] and r["reread_ok"] and r["mismatches"] == 0, r


@pytest.mark.parametrize("arch, disks, disk, mode, options", [
    ("dcd", 1, 0, "read-eio", []),      # behind the log: the read-back or the whole volume meets it
    ("dcd", 1, 1, "write-eio", []),     # immediate report: acknowledged from RAM, then the log fails
    pytest.param("vcraid", 4, 4, "write-eio", ["-o", "config=scd", "-o", "cache_size=8M", "-o", "ram_buffer=1M"],
                 marks=pytest.mark.slow),
])
def test_a_cache_drive_without_a_copy_fails_the_array_cleanly(raidlab_cmd, tmp_path, arch, disks, disk, mode, options):
    """No wrong data ever: what fio reads verifies or fails with EIO; the fault reaches fio as
    EIO somewhere; the daemon survives the failed drive, says so in its state, and is destroyed
    without leaks."""
    proc = run(raidlab_cmd, tmp_path / "home", "faulttest", arch, "--disks", str(disks), "--disk", str(disk),
               "--mode", mode, *options, "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    (r,) = summary["results"]
    assert not summary["redundant"] and r["error"] is None and r["leaks"] == [], r
    assert r["during_errno"] in (0, 5) and r["reread_errno"] in (0, 5), r
    assert 5 in (r["during_errno"], r["reread_errno"], r["read_errno"]), r
    if mode == "write-eio":  # the cache's own writes met it: the cache has failed and says so
        assert r["state"] == f"failed: emulated disk d{disk} has failed", r
    assert leftovers(tmp_path / "home" / "labs" / f"faulttest-{arch}", f"faulttest-{arch}") == {}


def test_without_redundancy_the_fault_reaches_fio_as_eio(raidlab_cmd, tmp_path):
    proc = run(raidlab_cmd, tmp_path / "home", "faulttest", "raid0", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = {r["mode"]: r for r in json.loads(proc.stdout)["results"]}
    for mode in ("vanish", "read-eio", "write-eio"):
        assert not results[mode]["during_ok"] and results[mode]["during_errno"] == 5, results[mode]
    assert results["slow"]["during_ok"]
    assert all(r["leaks"] == [] for r in results.values())


@pytest.mark.long
def test_the_document_written_is_the_runs_it_reports(raidlab_cmd, tmp_path):
    doc, store = tmp_path / "reliability.md", tmp_path / "cells"
    params = ["--points", "2", "--write-hole-trials", "1", "--damage-trials", "2", "--interrupt-points", "1",
              "--cells", str(store)]
    proc = run(raidlab_cmd, tmp_path / "home", "reliability", *params, "--crash", "raid5",
               "--crash-mode", "kill", "--crash-mode", "power",
               "--write-hole-case", "raid5", "--write-hole-case", "raid5-journal",
               "--fault", "raid0", "--damage", "raid5", "--interrupt", "create", "--interrupt", "crashtest",
               "--interrupt", "report", "--write", str(doc))
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = doc.read_text()
    for mode in ("kill", "power"):
        row = next(line for line in text.splitlines() if line.startswith(f"| raid5 | {mode} | flush | raid5 |"))
        # target | mode | promise | arch | options | disks | points | passed | checked | lost | lost, allowed |
        # writes cut | in-destage cuts | fsck unclean | fsck unclean, allowed | errors | leaks | seed | seconds
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[:8] == ["raid5", mode, "flush", "raid5", "-", "4", "2", "2"] and cells[9:11] == ["0", "0"], cells
        assert cells[13] == "0" and cells[15:17] == ["0", "0"], cells
    # case | runner | options | trials | written | cut | refused | stripes wrong | garbled | replayed | errors | leaks
    hole = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")]
            for line in text.splitlines() if line.startswith(("| raid5 | native |", "| raid5-journal |"))}
    assert hole["raid5"][6] == "1", hole  # the dirty degraded array not started without --force
    assert hole["raid5-journal"][6] == "0" and hole["raid5-journal"][7] == "0", hole  # closed: started, replayed
    assert int(hole["raid5-journal"][9]) > 0, hole
    for case in ("raid5", "raid5-journal"):
        assert hole[case][4] == "16" and hole[case][8] == hole[case][10] == hole[case][11] == "0", hole
    fault_rows = [line for line in text.splitlines() if line.startswith("| raid0 | raid0 | 4 | d1 (member) |")]
    assert len(fault_rows) == 4 and all("| passed |" in line for line in fault_rows)
    assert "4 of 4 points passed." in text and "4 of 4 fault runs passed." in text
    # target | arch | options | trials | passed | refused | recovered | wrong | errors | leaks | seed | seconds
    damage = next(line for line in text.splitlines() if line.startswith("| raid5 | raid5 | - | 2 |"))
    cells = [c.strip() for c in damage.strip("|").split("|")]
    assert cells[4] == "2" and int(cells[5]) + int(cells[6]) == 2 and cells[7:10] == ["0", "0", "0"], cells
    assert "2 of 2 trials passed, 0 read back wrong." in text
    rows = [line for line in text.splitlines() if line.startswith(("| create | SIG", "| crashtest | SIG",
                                                                    "| report | SIG"))]
    assert len(rows) == 9 and "9 of 9 points passed" in text
    assert not (tmp_path / "home" / "labs").exists() or not any((tmp_path / "home" / "labs").iterdir())
    # written again over its own earlier self, from a part of the same campaign: every cell
    # it names is taken from the store the first run filled, none is run again
    before = {p.name: p.stat().st_mtime_ns for p in store.iterdir()}
    proc = run(raidlab_cmd, tmp_path / "home", "reliability", *params, "--crash", "raid5", "--crash-mode", "kill",
               "--write-hole-case", "raid5", "--fault", "raid0", "--damage", "raid5", "--interrupt", "create",
               "--interrupt", "crashtest", "--interrupt", "report", "--write", str(doc), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    again = doc.read_text()
    assert "2 of 2 points passed." in again and "| raid5 | power |" not in again
    assert "| raid5-journal |" not in again and "9 of 9 points passed" in again
    assert {p.name: p.stat().st_mtime_ns for p in store.iterdir()} == before
