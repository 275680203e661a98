"""`raidlab report DIR --flushes`: per run and drive, the workload's flushes (the status after
the workload minus the one before), from the three shapes a run file's array status takes: md
in the guest (drive files disks/dK, no volume), the engine's raid5 (a FUSE volume, members
in-process) and VC-RAID (a volume, its data array's members and its cache disks)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from raidlab.report import flushes
from raidlab.report.results import load_results

REPO = Path(__file__).resolve().parents[2]
FIG7 = REPO / "scenarios" / "vcraid-fig7-untar.toml"


def _drive(name: str, flushes_: int, writes: int, model: str = "m") -> dict:
    return {"name": name, "model": model, "flushes": flushes_, "writes": writes, "reads": 0,
            "flush_lateness": {"samples": 1, "p50_ms": 0.1, "p99_ms": 0.1, "max_ms": 0.1}}


def _file(flushes_: int, writes: int = 0) -> dict:
    return {"reads": 0, "writes": writes, "flushes": flushes_}


def _md(members: list[tuple[int, int]], files: list[int]) -> dict:
    """md's status: (flushes, writes) per member drive, the guest's flushes per drive file."""
    return {"kind": "md", "export": {f"disks/d{i}": _file(f, 1) for i, f in enumerate(files)},
            "block_stat": {f"vd{chr(97 + i)}": {"reads": 0, "read_bytes": 0, "writes": 1, "write_bytes": 512}
                           for i in range(len(files))},
            "statistics": {"members": [_drive(f"d{i}", f, w) for i, (f, w) in enumerate(members)]}}


def _engine(volume: int, members: list[tuple[int, int]]) -> dict:
    return {"kind": "engine",
            "export": {"volume": _file(volume), **{f"disks/d{i}": _file(0) for i in range(len(members))}},
            "statistics": {"members": [_drive(f"d{i}", f, w) for i, (f, w) in enumerate(members)]}}


def _vcraid(volume: int, members: list[tuple[int, int]], caches: list[tuple[int, int]],
            log_writes: int, tombstones: int, durability: str = "paper") -> dict:
    n = len(members)
    return {"kind": "cache", "options": {"durability": durability},
            "export": {"volume": _file(volume), **{f"disks/d{i}": _file(0) for i in range(n + len(caches))}},
            "statistics": {"level1_destages": log_writes, "tombstones": tombstones,
                           "array": {"members": [_drive(f"d{i}", f, w) for i, (f, w) in enumerate(members)]},
                           "cache_disks": [_drive(f"d{n + i}", f, w) for i, (f, w) in enumerate(caches)]}}


def _run(arch: str, arch_id: str, before: dict, after: dict, rep: int = 1, case: str = "sync",
         seconds: float = 100.0) -> dict:
    metrics = {m: {"value": seconds, "unit": "s"} for m in ("untar_seconds", "copy_seconds", "remove_seconds")}
    return {"arch": arch, "arch_id": arch_id, "case": case, "repetition": rep, "status": "ok",
            "metrics": metrics, "array_status_before": before, "array_status": after}


def _results_dir(root: Path, runs: list[dict]) -> Path:
    out = root / "r"
    (out / "runs").mkdir(parents=True)
    (out / "scenario.toml").write_text(FIG7.read_text())
    (out / "manifest.json").write_text(json.dumps({
        "scenario": "vcraid-fig7-untar", "runner": "vm", "quick": False, "status": "complete",
        "planned_runs": [f"{r['arch']}--{r['case']}--r{r['repetition']}" for r in runs]}))
    for r in runs:
        (out / "runs" / f"{r['arch']}--{r['case']}--r{r['repetition']}.json").write_text(json.dumps(r))
    return out


MD_RAID5 = _run("raid5", "md-raid5",
                _md([(9, 100), (4, 50), (4, 50), (4, 50)], [8, 4, 4, 4]),
                _md([(25_050, 120_100), (21_700, 120_050), (21_650, 121_050), (21_470, 104_050)],
                    [25_049, 21_700, 21_650, 21_470]))
ENGINE_RAID5 = _run("raid5e", "raid5",
                    _engine(1, [(1, 10)] * 4),
                    _engine(25_017, [(25_017, 112_010), (25_017, 128_010), (25_017, 100_010), (25_017, 104_010)]))
MCD = _run("mcd", "vcraid",
           _vcraid(2, [(3, 40)] * 4, [(0, 500), (0, 600)], 400, 1),
           _vcraid(25_022, [(240, 7_540)] * 4, [(0, 88_321), (0, 88_501)], 175_600, 372))


def test_md_drive_counts_are_after_minus_before_and_its_volume_is_not_recorded():
    row = flushes.run_flushes(MD_RAID5)
    assert [(d.name, d.role, d.flushes, d.writes) for d in row.drives] == [
        ("d0", "member", 25_041, 120_000), ("d1", "member", 21_696, 120_000),
        ("d2", "member", 21_646, 121_000), ("d3", "member", 21_466, 104_000)]
    assert row.volume_flushes is None                        # no FUSE volume: md is in the guest
    assert [d.file_flushes for d in row.drives] == [25_041, 21_696, 21_646, 21_466]
    assert row.member_flushes == row.drive_flushes == 89_849 and row.cache_flushes == 0
    assert row.file_flushes == 89_849 and not row.has_cache_disks
    assert row.log_writes is None and row.tombstones is None and row.missing == ()


def test_engine_raid5_has_a_volume_and_unused_drive_files():
    row = flushes.run_flushes(ENGINE_RAID5)
    assert row.volume_flushes == 25_016
    assert [d.flushes for d in row.drives] == [25_016] * 4
    assert [d.writes for d in row.drives] == [112_000, 128_000, 100_000, 104_000]
    assert row.file_flushes is None and all(d.file_flushes is None for d in row.drives)


def test_vcraid_members_and_cache_disks_are_counted_apart():
    row = flushes.run_flushes(MCD)
    assert row.durability == "paper" and row.volume_flushes == 25_020
    assert [(d.name, d.role) for d in row.drives] == [("d0", "member"), ("d1", "member"), ("d2", "member"),
                                                      ("d3", "member"), ("d4", "cache disk"), ("d5", "cache disk")]
    assert row.member_flushes == 4 * 237 and row.cache_flushes == 0
    assert row.member_writes == 4 * 7_500 and row.cache_writes == 87_821 + 87_901
    assert row.log_writes == 175_200 and row.tombstones == 371


def test_a_counter_missing_or_falling_is_named_not_guessed():
    broken = _run("raid5", "md-raid5", _md([(9, 100), (4, 50)], [8, 4]),
                  _md([(5, 120), (10, 60), (3, 3)], [8, 10, 3]))
    row = flushes.run_flushes(broken)
    assert [d.name for d in row.drives] == ["d1"]            # d0 fell, d2 was not there before
    assert row.drives[0].flushes == 6
    assert any("d0: `flushes` fell from 9 to 5" in m for m in row.missing)
    assert any("d2: not in the status before" in m for m in row.missing)
    failed = dict(MCD, array_status={"error": "status after the run failed: timeout"})
    row = flushes.run_flushes(failed)
    assert row.drives == () and row.volume_flushes is None
    assert any("timeout" in m for m in row.missing)
    [group] = flushes.by_arch([row])
    assert group.stat("drive_flushes") is None               # not a sum of no drives


def test_a_results_directory_gives_rows_grouped_with_mean_and_range(tmp_path):
    second = _run("raid5", "md-raid5", MD_RAID5["array_status_before"],
                  _md([(25_009, 100), (21_004, 50), (21_004, 50), (21_004, 50)],
                      [25_008, 21_004, 21_004, 21_004]), rep=2)
    res = load_results(_results_dir(tmp_path, [MD_RAID5, second, ENGINE_RAID5, MCD]))
    rows = flushes.flush_rows(res)
    assert [(r.arch, r.repetition) for r in rows] == [("raid5", 1), ("raid5", 2), ("mcd", 1), ("raid5e", 1)]
    [raid5, mcd, raid5e] = flushes.by_arch(rows)
    stat = raid5.stat("member_flushes")
    assert (stat.n, stat.mean, stat.min, stat.max) == (2, (89_849 + 88_000) / 2, 88_000, 89_849)
    assert all(r.missing == () for r in rows)
    assert raid5.stat("volume_flushes") is None
    assert [(n, s.mean) for n, _, s in raid5.drive_stats()] == [("d0", 25_020.5), ("d1", 21_348.0),
                                                              ("d2", 21_323.0), ("d3", 21_233.0)]
    assert mcd.durability == "paper" and raid5e.stat("volume_flushes").mean == 25_016


def test_claims_compare_the_flushes_their_columns_drives_served(tmp_path):
    res = load_results(_results_dir(tmp_path, [MD_RAID5, ENGINE_RAID5, MCD]))
    by_claim = {c.claim_id: c for c in flushes.claim_rows(res, flushes.flush_rows(res))}
    untar = by_claim["mcd-untar-sync"]                      # raid5 / mcd on untar
    assert [col.arch for col in untar.columns] == ["raid5", "mcd"]
    assert untar.paid == [89_849, 948]
    word, text = untar.comparison()
    assert word == flushes.DIFFER and "raid5 89,849, mcd 948 (94.8x)" in text
    assert untar.verdict == "does not hold"                 # 100 s against 100 s: ratio 1
    assert by_claim["remove-beats-raid0"].comparison() is None  # raid0 has no run here


@pytest.mark.parametrize("paid, word", [
    ([1_000.0, 600.0], flushes.ALIKE),      # within 2x
    ([90.0, 20.0], flushes.FEW),            # over 2x, but 70 a run apart
    ([2_000.0, 5.0], flushes.DIFFER),
    ([0.0, 0.0], flushes.ALIKE),
    ([150.0, 0.0], flushes.DIFFER),
])
def test_differ_needs_both_the_factor_and_the_floor(paid, word):
    columns = []
    for i, p in enumerate(paid):
        run = flushes.RunFlushes("f", f"a{i}", "x", "c", 1, None, None,
                                 (flushes.DriveCounts("d0", flushes.MEMBER, "m", int(p), 0, None),))
        columns.append(flushes.ClaimColumn(f"a{i}", "c", flushes.ArchFlushes("c", f"a{i}", None, (run,))))
    assert flushes.ClaimFlushes("k", "c", "holds", "", tuple(columns)).comparison()[0] == word


def test_the_markdown_names_what_the_files_do_not_hold(tmp_path):
    res = load_results(_results_dir(tmp_path, [MD_RAID5, ENGINE_RAID5, MCD]))
    text = flushes.to_markdown(res, flushes.flush_rows(res), title="Fig. 7 sync")
    assert text.startswith("## Fig. 7 sync\n")
    assert "not recorded for raid5 (no FUSE volume file" in text
    assert "(`block_stat`) hold read_bytes, reads, write_bytes, writes: no flushes" in text
    assert "FUA writes per drive: no drive statistic counts them" in text
    assert "flush latency per drive: not recorded (`flush_lateness`" in text
    assert ("| raid5 | - | 1 | not recorded | 89,849 | 89,849 | - "
            "| d0 25,041, d1 21,696, d2 21,646, d3 21,466 |") in text
    assert ("| mcd | paper | 1 | 25,020 | - (in-process) | 948 | 0 "
            "| d0 237, d1 237, d2 237, d3 237; cache d4 0, d5 0 |") in text


def test_cli_prints_the_tables(tmp_path, raidlab_cmd):
    out = _results_dir(tmp_path, [MD_RAID5, ENGINE_RAID5, MCD])
    proc = subprocess.run([*raidlab_cmd, "report", str(out), "--flushes", "--title", "T"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("## T\n") and "| raid5e | - | 1 | 25,016 |" in proc.stdout
    assert not (out / "report").exists()                    # prints; writes no report
    proc = subprocess.run([*raidlab_cmd, "report", str(out), "--title", "T"], capture_output=True, text=True)
    assert proc.returncode == 2 and "--title goes with --flushes" in proc.stderr
