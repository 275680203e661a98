"""Pure parts of the engine's hot path and of `raidlab bench engine` (no timing asserted)."""

from __future__ import annotations

from raidlab.engine.array import coalesce_writes
from raidlab.service.bench import aim_for, parse_options, ratio_rows
from raidlab.engine.layouts.raid0 import Raid0Layout

KiB = 1024


def test_a_raid0_megabyte_becomes_one_request_per_member_with_the_right_bytes():
    layout = Raid0Layout(n_disks=4, disk_size=64 * 1024 * KiB, chunk_bytes=64 * KiB, data_offset=64 * KiB)
    data = bytes(i % 251 for i in range(1024 * KiB))
    plan = layout.write_plan(0, len(data))
    assert len(plan.writes) == 16
    payloads = [data[w.logical_offset : w.logical_offset + w.length] for w in plan.writes]
    requests = coalesce_writes(plan.writes, payloads)
    assert [(disk, offset, len(p)) for disk, offset, p in requests] == [
        (disk, 64 * KiB, 256 * KiB) for disk in range(4)]
    for disk, offset, payload in requests:  # member bytes = the layout's mapping of each chunk
        for k in range(4):
            chunk = k * 4 + disk
            assert payload[k * 64 * KiB : (k + 1) * 64 * KiB] == data[chunk * 64 * KiB : (chunk + 1) * 64 * KiB]


def test_writes_that_do_not_continue_each_other_stay_apart_in_plan_order():
    from raidlab.engine.layouts.base import Extent

    writes = [Extent(1, 4096, 512, 0), Extent(0, 0, 512, 512), Extent(1, 8192, 512, 1024),
              Extent(1, 4608, 512, 1536)]
    requests = coalesce_writes(writes, [b"a" * 512, b"b" * 512, b"c" * 512, b"d" * 512])
    assert requests == [(1, 4096, b"a" * 512 + b"d" * 512), (0, 0, b"b" * 512), (1, 8192, b"c" * 512)]


def test_bench_ratios_and_aims():
    results = {"volume": {"randwrite_4k": {"iops": 500.0}, "seqwrite_1m": {"mb_per_s": 90.0}},
               "passthrough": {"randwrite_4k": {"iops": 1000.0}, "seqwrite_1m": {"mb_per_s": 100.0}}}
    rows = {r["workload"]: r for r in ratio_rows(results, "raid5")}
    assert rows["randwrite_4k"]["ratio"] == 0.5 and rows["randwrite_4k"]["meets_aim"] is True
    assert rows["seqwrite_1m"]["aim"] == 0.5 and rows["seqwrite_1m"]["meets_aim"] is True
    assert aim_for("randwrite_4k", "raid0") == 0.8 and aim_for("randwrite_4k", "raidx") is None
    assert aim_for("seqwrite_1m", "raid0") == 0.8
    assert parse_options(("a=1", "b=x", "c=0.5")) == {"a": 1, "b": "x", "c": 0.5}
    assert rows["randwrite_4k"]["raw"] is None and rows["randwrite_4k"]["of_raw"] is None
    results["raw"] = {"randwrite_4k": {"iops": 2000.0}, "seqwrite_1m": {"mb_per_s": 300.0}}
    rows = {r["workload"]: r for r in ratio_rows(results, "raid5")}
    assert rows["randwrite_4k"]["of_raw"] == 0.25 and rows["seqwrite_1m"]["of_raw"] == 0.3
    assert rows["randwrite_4k"]["ratio"] == 0.5  # the aim stays against the pass-through
