"""The suite's start order (tests/start_order.py): xdist's worksteal hands worker k the k-th
contiguous block of the collection, so the arranged collection, cut as xdist cuts it, must
give every worker about the same work, each block longest first, groups whole."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from start_order import arrange, xdist_block_sizes


def cut(items, workers):
    blocks, start = [], 0
    for size in xdist_block_sizes(len(items), workers):
        blocks.append(items[start:start + size])
        start += size
    return blocks


def test_block_sizes_are_what_worksteal_sends():
    assert xdist_block_sizes(10, 4) == [2, 2, 3, 3]
    assert xdist_block_sizes(2300, 4) == [575, 575, 575, 575]
    assert sum(xdist_block_sizes(2301, 4)) == 2301


def test_a_suite_like_ours_ends_together():
    rng = random.Random(1)
    # (name, seconds, group): a few minutes-long labs and VM tests, one VM module of five
    # tests sharing a booted guest, some hundreds of live tests, two thousand unit tests
    items = [(f"lab{i}", s, None) for i, s in enumerate((380, 280, 200, 160, 120, 120))]
    items += [(f"vm-oracle{i}", 30.0, "oracle") for i in range(5)]
    items += [(f"live{i}", rng.uniform(2, 60), None) for i in range(300)]
    items += [(f"unit{i}", rng.uniform(0.01, 2), None) for i in range(2000)]
    rng.shuffle(items)
    ordered = arrange(items, 4, seconds=lambda it: it[1], group=lambda it: it[2])
    assert sorted(ordered) == sorted(items)
    blocks = cut(ordered, 4)
    loads = [sum(it[1] for it in block) for block in blocks]
    total = sum(loads)
    assert max(loads) - min(loads) < 0.02 * total, loads
    for block in blocks:  # the longest of each block first
        assert block[0][1] >= max(it[1] for it in block if it[2] is None) - 1e-9
    holders = [k for k, block in enumerate(blocks) if any(it[2] == "oracle" for it in block)]
    assert len(holders) == 1
    # collected in its own order, the same suite cut the same way would not balance
    naive = [sum(it[1] for it in block) for block in cut(sorted(items, key=lambda it: -it[1]), 4)]
    assert max(naive) - min(naive) > 0.5 * total


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 500), st.sampled_from([None, None, None, "a", "b"])), min_size=1,
                max_size=200),
       st.integers(1, 8))
def test_every_item_once_and_groups_whole(raw, workers):
    items = [(i, s, g) for i, (s, g) in enumerate(raw)]
    ordered = arrange(items, workers, seconds=lambda it: it[1], group=lambda it: it[2])
    assert sorted(ordered) == sorted(items)
    if workers > 1 and len(items) > workers:
        for name in ("a", "b"):
            members = [k for k, it in enumerate(ordered) if it[2] == name]
            assert members == list(range(members[0], members[0] + len(members))) if members else True


def test_a_run_without_workers_keeps_the_collection_order():
    # sorted by duration, one process would tear a module's VM fixture down and boot it again
    items = [("vm-a1", 1.0, "a"), ("live", 90.0, None), ("vm-a2", 60.0, "a")]
    assert arrange(items, 1, seconds=lambda it: it[1], group=lambda it: it[2]) == items
