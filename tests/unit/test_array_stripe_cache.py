"""md's stripe cache and stripe gathering in the engine's raid5 (raidlab.engine.stripecache,
Array._gather), under the virtual clock: fewer pre-reads, never different data."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raidlab import sched
from raidlab.disks import EmulatedDisk, MemoryBackend
from raidlab.sched import virtual
from raidlab.engine.array import Array
from raidlab.engine.layouts.raid5 import Raid5Layout
from raidlab.engine.stripecache import PAGE, StripeCache

KiB, MiB = 1024, 1024 * 1024
DISK = 4 * MiB
CHUNK = 16 * KiB
STRIPE = 3 * CHUNK  # four members: three data chunks per stripe


def _layout():
    return Raid5Layout(n_disks=4, disk_size=DISK, chunk_bytes=CHUNK, data_offset=64 * KiB)


def _run(body, *, rows=256, model="none"):
    async def main():
        async with sched.open_nursery() as nursery:
            disks = [EmulatedDisk(f"d{i}", model, MemoryBackend(DISK)) for i in range(4)]
            for disk in disks:
                disk.start(nursery)
            array = Array("t", _layout(), disks, stripe_cache_rows=rows)
            result = await body(array, disks)
            nursery.cancel_scope.cancel()
        return result

    return virtual.run_virtual(main)


def _member_reads(disks):
    return sum(d.statistics()["reads"] for d in disks)


def test_cache_keeps_whole_pages_and_updates_cached_ones_in_part():
    cache = StripeCache(rows=2)
    cache.put(0, 4096, b"a" * 4096 + b"b" * 100)  # one whole page; a part of an uncached one
    assert cache.holds(0, 4096, 4096) and not cache.holds(0, 8192, 100)
    cache.put(0, 4096 + 10, b"c" * 5)             # a part of a cached page updates it
    assert cache.get(0, 4096, 20) == b"a" * 10 + b"c" * 5 + b"a" * 5
    assert cache.get(1, 4096, 10) is None          # other disk, same row: not held
    cache.put(0, 3 * PAGE, bytes(PAGE))
    cache.put(0, 5 * PAGE, bytes(PAGE))            # a third row evicts the least recently used
    assert not cache.holds(0, 4096, 4096) and cache.holds(0, 5 * PAGE, PAGE)
    assert cache.statistics()["evictions"] == 1


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 63), st.integers(1, 40)), min_size=1, max_size=30),
       st.integers(2, 64))
def test_every_cached_page_is_what_the_member_holds_and_whole_pages_are_cached(puts, rows):
    """Any sequence of sector-aligned writes: a cached page is always the member's bytes
    there, and the whole pages the last write covered are cached when the cache has room."""
    cache = StripeCache(rows=rows)
    members = [bytearray(64 * KiB) for _ in range(2)]
    rng = random.Random(len(puts))
    for disk, sector, sectors in puts:
        offset, length = sector * 512, min(sectors * 512, 64 * KiB - sector * 512)
        data = rng.randbytes(length)
        members[disk][offset:offset + length] = data
        cache.put(disk, offset, data)
        for page in range(64 * KiB // PAGE):
            for d in (0, 1):
                if cache.holds(d, page * PAGE, PAGE):
                    assert cache.get(d, page * PAGE, PAGE) == bytes(members[d][page * PAGE:(page + 1) * PAGE])
        whole = range(-(-offset // PAGE), (offset + length) // PAGE)
        if len(whole) <= rows:
            assert all(cache.holds(disk, page * PAGE, PAGE) for page in whole)


def _views_alive(cache: StripeCache) -> int:
    """Bytes of the distinct buffers the cache's views keep alive, counted from its pages."""
    buffers = {id(page.obj): page.obj for row in cache._rows.values() for page in row.values()
               if type(page) is memoryview}
    return sum(len(b) for b in buffers.values())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 63), st.integers(1, 40),
                          st.sampled_from(["bytes", "view", "bytearray"])), min_size=1, max_size=30),
       st.integers(2, 16), st.sampled_from([0, 3 * PAGE, 1 << 30]))
def test_pages_kept_as_views_stay_the_members_bytes_within_the_pin_limit(puts, rows, pin_limit):
    """Writes handed over as bytes, as views of bytes, or as a bytearray that the caller
    changes afterwards: every cached page stays the member's bytes, the buffers kept alive
    are counted and never pass the limit, and a cache emptied keeps none."""
    cache = StripeCache(rows=rows, pin_limit=pin_limit)
    members = [bytearray(64 * KiB) for _ in range(2)]
    rng = random.Random(len(puts))
    for disk, sector, sectors, kind in puts:
        offset, length = sector * 512, min(sectors * 512, 64 * KiB - sector * 512)
        data = rng.randbytes(length + 1024)
        members[disk][offset:offset + length] = data[512:512 + length]
        if kind == "bytes":
            cache.put(disk, offset, data[512:512 + length])
        elif kind == "view":
            cache.put(disk, offset, memoryview(data)[512:512 + length])
        else:
            scratch = bytearray(data[512:512 + length])
            cache.put(disk, offset, scratch)
            scratch[:] = bytes(len(scratch))   # the caller reuses its buffer
        for page in range(64 * KiB // PAGE):
            for d in (0, 1):
                if cache.holds(d, page * PAGE, PAGE):
                    got = cache.get(d, page * PAGE, PAGE)
                    assert type(got) is bytes and got == bytes(members[d][page * PAGE:(page + 1) * PAGE])
        assert _views_alive(cache) <= cache.pinned_bytes <= pin_limit
    cache.clear()
    assert cache.pinned_bytes == 0 and not cache._pins


def test_second_write_of_a_stripe_reads_nothing_the_first_read_or_wrote():
    async def body(array, disks):
        await array.write(0, b"x" * 4096)           # RCW: reads the other two data chunks
        first = _member_reads(disks)
        await array.write(CHUNK, b"y" * 4096)       # same rows: all it needs is cached
        return first, _member_reads(disks), await array.read(0, 2 * CHUNK)

    first, after, data = _run(body)
    assert first == 2 and after == 2
    assert data[:4096] == b"x" * 4096 and data[CHUNK:CHUNK + 4096] == b"y" * 4096


def _member_io(disks):
    stats = [d.statistics() for d in disks]
    return [(s["reads"], s["bytes_read"], s["writes"], s["bytes_written"]) for s in stats]


def test_a_write_of_part_of_a_page_reads_and_writes_whole_pages_as_md_does():
    """md's stripe_head holds a page of each member: a 1 KiB write leaves its page not
    R5_OVERWRITE, which md counts as a read for reconstruct-write too (RMW 2 pages against
    RCW 3 on four members), so it reads the old data and parity pages and writes both pages
    whole; the next 1 KiB of the same page finds them up to date and reads nothing."""
    async def body(array, disks):
        await array.write(1024, b"a" * 1024)
        first = _member_io(disks)
        await array.write(2048, b"b" * 1024)
        second = _member_io(disks)
        return first, second, array.statistics(), await array.read(0, 4096)

    first, second, stats, data = _run(body)
    # stripe 0 of left-symmetric on 4: parity on member 3, data chunk 0 on member 0
    assert first == [(1, 4096, 1, 4096), (0, 0, 0, 0), (0, 0, 0, 0), (1, 4096, 1, 4096)]
    assert [(r, w) for r, _, w, _ in second] == [(1, 2), (0, 0), (0, 0), (1, 2)]
    assert stats["rmw_stripes"] == 2 and stats["rcw_stripes"] == 0 and stats["partial_page_writes"] == 2
    assert data == bytes(1024) + b"a" * 1024 + b"b" * 1024 + bytes(1024)


def test_a_partial_page_rcw_reads_the_page_beside_the_other_data():
    """On three members RCW of a page reads one page (the other data) against RMW's two, and
    a write covering part of a page adds that page to RCW's count: a tie, which goes to RCW
    as md's default rmw_level does; the written page is read with the other data."""
    async def body(array, disks):
        await array.write(512, b"c" * 512)
        return _member_io(disks), array.statistics(), await array.read(0, 4096)

    async def main():
        async with sched.open_nursery() as nursery:
            disks = [EmulatedDisk(f"d{i}", "none", MemoryBackend(DISK)) for i in range(3)]
            for disk in disks:
                disk.start(nursery)
            layout = Raid5Layout(n_disks=3, disk_size=DISK, chunk_bytes=CHUNK, data_offset=64 * KiB)
            result = await body(Array("t", layout, disks), disks)
            nursery.cancel_scope.cancel()
        return result

    io, stats, data = virtual.run_virtual(main)
    # stripe 0 of left-symmetric on 3: parity on member 2, data 0 on member 0, data 1 on member 1
    assert io == [(1, 4096, 1, 4096), (1, 4096, 0, 0), (0, 0, 1, 4096)]
    assert stats["rcw_stripes"] == 1 and stats["rmw_stripes"] == 0
    assert data == bytes(512) + b"c" * 512 + bytes(3072)


def test_without_the_cache_the_second_write_reads_again():
    async def body(array, disks):
        await array.write(0, b"x" * 4096)
        await array.write(CHUNK, b"y" * 4096)
        return _member_reads(disks)

    assert _run(body, rows=0) == 4


def test_two_writes_that_share_a_stripe_are_gathered_and_read_nothing():
    """Two requests split at 1.5 stripes and sent together, as a guest's sequential
    stream arrives: the stripe they share is written whole once, with no pre-read."""
    first = random.Random(3).randbytes(STRIPE + STRIPE // 2)
    second = random.Random(4).randbytes(STRIPE + STRIPE // 2)

    async def body(array, disks):
        async with sched.open_nursery() as nursery:
            nursery.start_soon(array.write, 0, first)
            nursery.start_soon(array.write, len(first), second)
        return _member_reads(disks), array.statistics(), await array.read(0, 3 * STRIPE)

    reads, stats, data = _run(body, model="ibm-dnes-309170")
    assert data == first + second
    assert reads == 0
    assert stats["gathered_bytes"] == STRIPE // 2
    assert stats["full_stripe_writes"] == 3 and stats["rmw_stripes"] == stats["rcw_stripes"] == 0


@pytest.mark.parametrize("seed", range(4))
def test_concurrent_random_writes_keep_data_and_parity(seed):
    """Overlapping and neighbouring writes in flight together, in batches: after each batch
    every sector holds what one of the batch's writes of it wrote (any order of concurrent
    writes is allowed), or what it held before when none wrote it; parity stays consistent
    (a scrub finds nothing)."""
    rng = random.Random(seed)
    capacity = _layout().capacity
    writes = []
    for _ in range(60):
        length = rng.choice([512, 4 * KiB, CHUNK, STRIPE // 2, STRIPE + 4 * KiB])
        offset = rng.randrange(0, (capacity - length) // 512) * 512
        writes.append((offset, rng.randbytes(length)))
    batches = [writes[i:i + 6] for i in range(0, len(writes), 6)]

    async def body(array, disks):
        before = bytes(capacity)
        for group in batches:
            async with sched.open_nursery() as nursery:
                for offset, data in group:
                    nursery.start_soon(array.write, offset, data)
            after = await array.read(0, capacity)
            for sector in range(0, capacity, 512):
                got = after[sector:sector + 512]
                written = [d[sector - o:sector - o + 512] for o, d in group if o <= sector < o + len(d)]
                assert got in written if written else got == before[sector:sector + 512], sector
            before = after
        return await array.scrub(), array.statistics()

    mismatches, stats = _run(body, model="ibm-dnes-309170")
    assert mismatches == []
    assert stats["stripe_cache"]["hits"] > 0


def test_a_member_failure_empties_the_cache_and_degraded_writes_stay_correct():
    async def body(array, disks):
        await array.write(0, b"a" * STRIPE)
        assert len(array.stripe_cache) > 0
        await array.fail_member(1)
        assert len(array.stripe_cache) == 0
        await array.write(4096, b"b" * 4096)
        return await array.read(0, STRIPE), len(array.stripe_cache)

    data, cached = _run(body)
    assert data == b"a" * 4096 + b"b" * 4096 + b"a" * (STRIPE - 8192)
    assert cached == 0
