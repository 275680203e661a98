"""What `raidlab status` says an array survives, in its state now: a degraded RAID 5 that
its next failure loses data, a mirror how many failures it has left, RAID 10 and chained
declustering which members hold a last copy; VC-RAID its raid5 and its cache disks, DCD
nothing, TSS one column, md its level minus the slots `mdadm --detail` shows missing. The
words are checked against each layout's own failure sets, for every layout."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from raidlab.baselines.mdadm import detail_fields
from raidlab.engine.layouts import create_layout, layout_names
from raidlab.service.hosts.status import (cache_survival, md_missing_slots, md_survival, survival,
                                          tss_survival)

K = 1024


def layout(name: str, n: int):
    if name == "saz":
        opts = {"bandwidth_curves": tuple((10 + d, 8 + d) for d in range(n)), "regions": 2}
    else:
        opts = {"bandwidths": tuple(range(10, 10 + n))} if name.startswith("sa") else {}
    return create_layout(name, n_disks=n, disk_size=200 * 4 * K, chunk_bytes=4 * K, **opts)


def now(lay, failed) -> str:
    return survival(lay.failure_groups(), failed, lay.n_disks, lay.redundancy.rule)


def test_a_degraded_raid5_survives_no_further_failure():
    raid5 = layout("raid5", 5)
    assert now(raid5, set()) == "survives any single failure"
    assert now(raid5, {2}) == "none: the next failure loses data (d2 failed)"
    assert now(raid5, {1, 2}) == ("none: data is lost (d1 and d2 failed; some data cannot be read or rebuilt "
                                  "without them)")


def test_a_mirror_says_how_many_failures_it_has_left():
    assert now(layout("raid1", 3), {0}) == "survives any one more failure (d0 failed)"
    assert now(layout("raid1", 4), {0}) == "survives any 2 more failures (d0 failed)"
    assert now(layout("raid1", 3), {0, 2}) == "none: the next failure loses data (d0 and d2 failed)"


def test_raid10_and_chained_name_the_members_that_hold_a_last_copy():
    assert now(layout("raid10", 4), {0}) == ("the next failure loses data if it is d1, not if it is d2 or d3 "
                                             "(d0 failed: d1 holds the last copy of some data)")
    assert now(layout("chained", 4), {1}) == ("the next failure loses data if it is d0 or d2, not if it is d3 "
                                              "(d1 failed: d0 and d2 hold the last copies of some data)")
    assert now(layout("raidx", 4), {1}) == "none: the next failure loses data (d1 failed)"
    assert now(layout("raid0", 4), {3}).startswith("none: data is lost (d3 failed")


@pytest.mark.parametrize("name", layout_names())
@pytest.mark.parametrize("n", [3, 4, 5])
def test_the_words_agree_with_the_layout_for_every_single_failure(name, n):
    """For every member that fails alone: the members the text says would lose data by
    failing next are exactly those whose failure the layout then does not survive."""
    lay = layout(name, n)
    assert now(lay, set()) == lay.redundancy.rule
    for gone in range(n):
        text = now(lay, {gone})
        if not lay.survives({gone}):
            assert text.startswith(f"none: data is lost (d{gone} failed"), text
            continue
        others = set(range(n)) - {gone}
        fatal = {d for d in others if not lay.survives({gone, d})}
        if text.startswith("none: the next failure loses data"):
            assert fatal == others, (text, fatal)
        elif text.startswith("survives any"):
            assert not fatal, (text, fatal)
        else:
            named = re.match(r"the next failure loses data if it is (.*), not if it is (.*) \(", text)
            assert named, text
            said = [{int(d) for d in re.findall(r"d(\d+)", part)} for part in named.groups()]
            assert said == [fatal, others - fatal], (text, fatal)


def test_tss_survives_one_column():
    assert tss_survival(4, set()).startswith("survives any single column failure")
    assert tss_survival(4, {1}) == "none: the next failure loses data (d1 failed)"
    assert tss_survival(4, {1, 3}).startswith("none: data is lost (d1 and d3 failed")


def _whole(*drives):
    return [{"drive": d, "whole_drive": True} for d in drives]


def test_vcraid_is_its_raid5_and_its_cache_disks():
    raid5 = SimpleNamespace(layout=create_layout("raid5", n_disks=4, disk_size=64 * 64 * K, chunk_bytes=64 * K),
                            failed=frozenset({2}))
    logged = {"cache_disk_used_bytes": 416 * K}
    assert cache_survival("vcraid", logged, _whole("d4"), raid5) == (
        "raid5 (d0-d3): none: the next failure loses data (d2 failed); cache disk d4: no copy, its failure "
        "loses the writes not yet home (416 KiB in the log now)")
    healthy = SimpleNamespace(layout=raid5.layout, failed=frozenset())
    assert cache_survival("vcraid", logged, _whole("d4", "d5"), healthy, mirror_failed=set()) == (
        "raid5 (d0-d3): survives any single failure; cache disk mirrored on d4 and d5: survives one side's failure")
    assert cache_survival("vcraid", logged, _whole("d4", "d5"), healthy, mirror_failed={1}).endswith(
        "cache disk: none left: d5 failed, a failure of d4 loses the writes not yet home (416 KiB in the log now)")
    partitions = [{"drive": "d0", "whole_drive": False}, {"drive": "d1", "whole_drive": False}]
    assert "cache partitions on d0, d1: no copy" in cache_survival("vcraid", logged, partitions, healthy)


def test_a_dcd_keeps_one_copy_of_everything():
    assert cache_survival("dcd", {"cache_disk_used_bytes": 0}, _whole("d1")) == (
        "none: the data disk and the cache-disk each hold the only copy of some data (0 KiB in the log now)")
    logical = [{"drive": "d0", "whole_drive": False}]
    assert cache_survival("dcd", {"cache_disk_used_bytes": 8 * K}, logical) == (
        "none: one drive holds the data and the cache-disk log (8 KiB in the log now)")


MD_DETAIL = """/dev/md0:
           Version : 1.2
        Raid Level : {level}
      Raid Devices : 4
     Total Devices : 3
             State : clean, degraded
            Layout : {layout}
        Chunk Size : 512K

    Number   Major   Minor   RaidDevice State
       0       7        0        0      active sync   /dev/loop0
{slot1}
       2       7        2        2      active sync   /dev/loop2
       4       7        3        3      active sync   /dev/loop3

       1       7        1        -      faulty   /dev/loop1
"""
REMOVED = "       -       0        0        1      removed"
REBUILDING = "       5       7        4        1      spare rebuilding   /dev/loop4"
IN_SYNC = "       1       7        1        1      active sync   /dev/loop1"


def _md(level: str, slot1: str, layout_line: str = "left-symmetric") -> str:
    text = MD_DETAIL.format(level=level, slot1=slot1, layout=layout_line)
    return md_survival(detail_fields(text), text)


def test_md_says_what_its_level_survives_with_the_slots_it_misses():
    assert md_missing_slots(MD_DETAIL.format(level="raid5", slot1=REMOVED, layout="")) == {1}
    assert _md("raid5", REMOVED) == "none: the next failure loses data (d1 failed)"
    assert _md("raid5", REBUILDING) == "none: the next failure loses data (d1 failed)"  # not in sync yet
    assert _md("raid5", IN_SYNC) == "survives any single failure"
    assert _md("raid1", REMOVED) == "survives any 2 more failures (d1 failed)"
    assert _md("raid10", REMOVED, "near=2") == ("the next failure loses data if it is d0, not if it is d2 or d3 "
                                                "(d1 failed: d0 holds the last copy of some data)")
    assert _md("raid6", REMOVED) == "survives any one more failure (d1 failed)"
    assert _md("raid0", IN_SYNC).startswith("none: any member's failure loses data")
    assert _md("linear", IN_SYNC) == ""  # a level this does not know is not described
