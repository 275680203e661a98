"""The report's explanation tables: where a run's time went (wall, guest and engine CPU,
drive busy time, each the workload's own: after the run minus before it) and the caches'
counters (cache-disk reads per block hit, destages by what started them, the cold start)."""

from __future__ import annotations

from types import SimpleNamespace

from raidlab.report import timing


def status(vm_cpu, daemon_cpu, busy, stats=None):
    return {"cpu": {"vm": {"user_s": vm_cpu, "system_s": 0.0}, "daemon": {"user_s": daemon_cpu, "system_s": 1.0}},
            "tables": [{"title": "drives (m)", "columns": ["drive", "model", "busy s"],
                        "rows": [[name, "m", f"{s:.3f}"] for name, s in busy.items()]}],
            "statistics": stats or {}}


def vc_stats(hits, reads, idle, batches, forced, destages, destaged):
    return {"arch": "vcraid", "read_hits_cache_disk_blocks": hits, "cache_disk_reads": reads,
            "idle_periods_found": idle, "level2_watermark_batches": batches, "level2_forced": forced,
            "level2_destages": destages, "level2_bytes": destaged}


SCN = SimpleNamespace(cases=[SimpleNamespace(name="c")],
                      archs=[SimpleNamespace(label="raid5"), SimpleNamespace(label="scd")])


def run(label, seconds, before, after, **extra):
    return {"arch": label, "case": "c", "status": "ok", "seconds": seconds,
            "array_status_before": before, "array_status": after, **extra}


def test_time_rows_are_the_workloads_own_cost_averaged_over_repetitions():
    runs = [
        run("raid5", 100.0, status(5, 1, {"d0": 1.0, "d1": 2.0}), status(45, 11, {"d0": 31.0, "d1": 12.0})),
        run("raid5", 120.0, status(5, 1, {"d0": 1.0, "d1": 2.0}), status(65, 11, {"d0": 51.0, "d1": 12.0})),
        {"arch": "raid5", "case": "c", "status": "failed", "seconds": 9999.0},
    ]
    (row,) = timing.time_rows(runs, SCN)
    assert row[:3] == ["c", "raid5", "2"]
    assert row[3] == "110.0"      # wall: mean of the ok runs only
    assert row[4] == "50.0"       # guest CPU: (40 + 60) / 2
    assert row[5] == "10.0"       # engine CPU: user and system, after minus before
    assert row[6:] == ["d0", "40.0", "50.0", "", ""]  # no drive kept its busy time by part


def test_cache_rows_give_reads_per_hit_destages_by_cause_and_the_cold_start():
    before = status(0, 0, {"d0": 0.0}, vc_stats(100, 100, 0, 0, 0, 0, 0))
    after = status(1, 1, {"d0": 1.0}, vc_stats(1100, 350, 3, 40, 10, 53, 50 * 2**20))
    runs = [run("scd", 10.0, before, after, cold_start={"drained_bytes": 8 * 2**20, "seconds": 2.0}),
            run("raid5", 10.0, status(0, 0, {"d0": 0.0}), status(1, 1, {"d0": 1.0}))]
    (row,) = timing.cache_rows(runs, SCN)
    assert row[:4] == ["c", "scd", "1", "1,000"]
    assert row[4] == "0.250"                  # 250 reads for 1,000 block hits
    assert row[5] == "53"                     # destages, apart from what started them
    assert row[6] == "3 / 40 / 10"            # idle periods, watermark batches, forced destages
    assert row[7] == "0.189"                  # 10 of 53 destages forced
    assert row[8:] == ["50.0", "8.0"]


def test_runs_without_accounts_leave_no_row():
    runs = [{"arch": "raid5", "case": "c", "status": "ok", "seconds": 3.0}]
    assert timing.time_rows(runs, SCN) == [] and timing.cache_rows(runs, SCN) == []


def test_an_engine_array_s_drives_are_read_from_its_members():
    def engine(busy):
        return {"cpu": {"vm": {"user_s": 1.0}, "daemon": {"user_s": 2.0}},
                "statistics": {"arch": "raid5", "members": [{"name": f"d{i}", "busy_time": b} for i, b in enumerate(busy)]}}

    runs = [run("raid5", 5.0, engine([1.0, 1.0]), engine([4.0, 9.0]))]
    (row,) = timing.time_rows(runs, SCN)
    assert row[6:9] == ["d1", "8.0", "11.0"]


def test_seek_and_rotation_sum_every_drive_once_wherever_the_status_nests_it():
    def drive(name, busy, seek, rotation):
        return {"name": name, "busy_time": busy,
                "busy_split": {"seek": seek, "rotation": rotation, "transfer": busy - seek - rotation}}

    def cached(k):
        # a VC-RAID's status: its array's members and its cache disk, nested; a partition
        # (no busy_split of its own) is not counted again
        return {"cpu": {"vm": {"user_s": 0.0}, "daemon": {"user_s": 0.0}},
                "statistics": {"arch": "vcraid",
                               "array": {"members": [drive("d0", 10 * k, 2 * k, 5 * k), drive("d1", 10 * k, 3 * k, 4 * k)]},
                               "cache_disks": [drive("c0", 4 * k, 1 * k, 1 * k),
                                               {"name": "c0p1", "busy_time": 4 * k}]}}

    (row,) = timing.time_rows([run("scd", 5.0, cached(1), cached(3))], SCN)
    assert row[9:] == ["12.0", "20.0"]  # seek 2 * (2+3+1), rotation 2 * (5+4+1)


def _probed(started, runner_us, host_us=0.05, status="ok", boot=6.0, steal=0.01):
    return {"arch": "scd", "case": "c", "status": status, "started": started, "_file": f"/r/runs/scd--c--{started}.json",
            "speed": {"runner_us_per_loop": runner_us, "host_us_per_loop": host_us, "host_steal_share": steal},
            "vm": {"boot_seconds": boot}}


def test_speed_rows_list_each_ok_run_in_the_order_it_started():
    runs = [_probed("2026-01-02", 40.0), _probed("2026-01-01", 20.0), _probed("2026-01-03", 99.0, status="failed")]
    rows = timing.speed_rows(runs)
    assert [r[0] for r in rows] == ["scd--c--2026-01-01", "scd--c--2026-01-02"]
    assert rows[0][2:] == ["0.050", "20.00", "1.0", "6.0"]


def test_documents_without_a_speed_record_give_no_speed_table():
    assert timing.speed_rows([run("scd", 1.0, None, None, started="x")]) == []


def test_a_spread_above_the_flag_is_named_and_one_within_it_is_not():
    (flag,) = timing.speed_flags([_probed("a", 20.0), _probed("b", 40.0), _probed("c", 30.0)])
    assert "20 to 40 µs" in flag and "2.00x" in flag and "shell loop" in flag
    assert timing.speed_flags([_probed("a", 20.0), _probed("b", 24.0)]) == []
    # a failed run's probe does not count, nor does a missing one
    assert timing.speed_flags([_probed("a", 20.0), _probed("b", 80.0, status="failed"),
                               run("scd", 1.0, None, None)]) == []


def test_a_run_with_much_steal_is_named():
    (flag,) = timing.speed_flags([_probed("a", 20.0, steal=0.02), _probed("b", 21.0, steal=0.3)])
    assert "scd--c--b 30%" in flag and "scd--c--a" not in flag
