"""Members from partitions (raidlab.disks.partitions): the SA-RAID paper's notation, the zone of
every partition of the paper's drive pinned, and partitions of one drive sharing its arm in
virtual time, where partition 1 is faster than partition 8 as the zones say."""

from __future__ import annotations

import pytest

from raidlab.disks import catalog, partitions
from raidlab.disks.geometry import Geometry
from raidlab.errors import UsageError
from raidlab.runners.stream import run_stream
from raidlab.runners.virtual import SimSpec

MODEL = "ibm-ultrastar-9lzx"
MiB = 1 << 20


def test_the_zone_of_every_paper_partition_is_pinned():
    """Partition k of 1..8 lies at the start of zone 1 + round((k - 1) x 15 / 7) (the catalog's
    stated assumption), whole, on a MiB boundary; the model's own geometry agrees."""
    table = partitions.table(MODEL)
    assert [zone for _start, _size, zone in table] == [1, 3, 5, 7, 10, 12, 14, 16]
    assert [1 + round((k - 1) * 15 / 7) for k in range(1, 9)] == [1, 3, 5, 7, 10, 12, 14, 16]
    spec = catalog.get(MODEL)
    geometry = Geometry(spec, spec.media_capacity_bytes)
    starts = partitions.zone_starts(spec)
    for number, (start, size, zone) in enumerate(table, start=1):
        assert size == 128 * MiB and start % MiB == 0
        assert start == max(MiB, -(-starts[zone - 1] // MiB) * MiB), number
        first, last = geometry.zone_of_byte(start), geometry.zone_of_byte(start + size - 1)
        assert first is last, f"partition {number} crosses a zone boundary"
        assert geometry.zones.index(first) == zone - 1, number


def test_the_papers_notation():
    where = partitions.layout("b8-c1-d1-e1", MODEL)
    assert where.drive_labels == ("b", "c", "d", "e")
    assert [(m.drive, m.number, m.zone) for m in where.members] == [(0, 8, 16), (1, 1, 1), (2, 1, 1), (3, 1, 1)]
    assert where.member_bytes == 128 * MiB and where.drive_bytes == catalog.get(MODEL).media_capacity_bytes
    same_drive = partitions.layout("b1-b8", MODEL)
    assert same_drive.drive_labels == ("b",) and [m.drive for m in same_drive.members] == [0, 0]
    unlettered = partitions.layout("8,1,1,1", MODEL)
    assert len(unlettered.drive_labels) == 4 and [m.number for m in unlettered.members] == [8, 1, 1, 1]
    assert partitions.layout("B1-C3-D6-E8", MODEL).describe()[2] == {
        "member": 2, "partition": "d6", "drive": "d", "zone": 12, "start": partitions.table(MODEL)[5][0],
        "size": 128 * MiB}


@pytest.mark.parametrize("text,words", [
    ("", "empty"),
    ("b1-c", "not a partition"),
    ("b1-1", "mixes"),
    ("b9-c1", "partitions 1..8"),
    ("b0", "partitions 1..8"),
    ("b1-b1", "twice"),
])
def test_bad_partition_lists_are_refused_in_one_line(text, words):
    with pytest.raises(UsageError) as info:
        partitions.layout(text, MODEL)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_a_model_without_a_table_and_a_wrong_member_count_are_refused():
    with pytest.raises(UsageError, match="no partition table"):
        partitions.layout("1-1", "hp-c2200a")
    with pytest.raises(UsageError, match="names 2 members"):
        partitions.layout("1-1", MODEL, disks=4)
    with pytest.raises(UsageError, match="one drive model"):
        partitions.layout("1-1", f"{MODEL},{MODEL}")


def _raw(partition: str, **params) -> dict:
    return run_stream(SimSpec(arch="disk", disk_model=MODEL, partitions=partition),
                      {"file_kb": 8192, "file_offset_kb": 0, "metadata": False, **params})


def test_partition_1_is_faster_than_partition_8_by_about_the_zone_rates():
    """Sequential write then read of each partition alone: the outer partition is faster by
    about the ratio of its zone's sustained rate to the inner zone's (20.2 vs 15.0 MB/s)."""
    fast, slow = _raw("1"), _raw("8")
    for phase in ("write_mb_s", "read_mb_s"):
        assert 1.2 < fast[phase] / slow[phase] < 1.45, phase
    assert 18 < fast["read_mb_s"] < 20.3 and 13.5 < slow["read_mb_s"] < 15.1


def test_partitions_of_one_drive_share_its_arm():
    """raid0 over b1-b8 (two partitions of drive b) against b1-c8 (two drives): the shared
    arm seeks between the partitions, so the same file takes far longer."""
    one = run_stream(SimSpec(arch="raid0", disk_model=MODEL, chunk=4096, partitions="b1-b8"), {"file_kb": 4096})
    two = run_stream(SimSpec(arch="raid0", disk_model=MODEL, chunk=4096, partitions="b1-c8"), {"file_kb": 4096})
    assert one["layout"]["drives"] == 1 and two["layout"]["drives"] == 2
    assert one["read_seconds"] > 2 * two["read_seconds"]


def test_an_architecture_with_more_drives_than_partitions_is_refused_up_front():
    from raidlab import archs

    archs.validate("raid0", 4, 128 << 20, 4096, {}, "native", disk_model=MODEL, partitions="b8-c1-d1-e1")
    with pytest.raises(UsageError, match=r"vcraid uses 5 drives .* names 4"):
        archs.validate("vcraid", 4, 128 << 20, 65536, {}, "native", disk_model=MODEL, partitions="1-1-1-1")
