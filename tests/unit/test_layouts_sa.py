"""SA-RAID (McCormick, §2.2): the 100-entry virtual device array and the §2.2.1 mapping."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raidlab.engine.layouts import create_layout, layout_from_geometry
from raidlab.engine.layouts.sa import (
    bandwidth_shares,
    build_sa1,
    build_sa2,
    build_sa3,
    build_virtual_device_array,
)
from raidlab.errors import UsageError

CHUNK = 4096

# At most five to one, so that with eight disks the slowest still has about 2.8% of the total
# bandwidth (a share of the 100 entries; below about 0.5% its share rounds to 0 and the layout
# refuses that disk: test_a_disk_too_slow_for_one_entry_is_refused).
bandwidth_lists = st.lists(st.floats(20.0, 100.0, allow_nan=False), min_size=1, max_size=8)


@settings(max_examples=200, deadline=None)
@given(bandwidth_lists)
def test_shares_are_proportional_to_bandwidth_with_largest_remainder_rounding(bandwidths):
    shares = bandwidth_shares(bandwidths)
    assert sum(shares) == 100
    total = sum(Fraction(b) for b in bandwidths)
    quotas = [100 * Fraction(b) / total for b in bandwidths]
    for share, quota in zip(shares, quotas):
        assert abs(share - quota) < 1  # never off by a whole entry
        assert share in (int(quota), int(quota) + 1)
    # the extra entries went to the largest remainders
    bumped = [d for d, (s, q) in enumerate(zip(shares, quotas)) if s > int(q)]
    kept = [d for d, (s, q) in enumerate(zip(shares, quotas)) if s == int(q) and q != int(q)]
    for up in bumped:
        for down in kept:
            assert quotas[up] - int(quotas[up]) >= quotas[down] - int(quotas[down])


def test_share_examples():
    assert bandwidth_shares([20, 20, 20, 20]) == (25, 25, 25, 25)
    assert bandwidth_shares([1, 1, 1]) == (34, 33, 33)
    # SA-RAID's b8-c1-d1-e1: partition 1 about 20% faster than partition 8 (§3.2)
    assert bandwidth_shares([16.7, 20.0, 20.0, 20.0]) == (22, 26, 26, 26)


def _runs(entries):
    runs = []
    for disk in entries:
        if runs and runs[-1][0] == disk:
            runs[-1][1] += 1
        else:
            runs.append([disk, 1])
    return [tuple(r) for r in runs]


@settings(max_examples=200, deadline=None)
@given(bandwidth_lists)
def test_sa1_is_consecutive(bandwidths):
    shares = bandwidth_shares(bandwidths)
    assert _runs(build_sa1(shares)) == [(d, s) for d, s in enumerate(shares)]


@settings(max_examples=200, deadline=None)
@given(bandwidth_lists)
def test_sa2_round_robin_until_each_share_is_used_up(bandwidths):
    shares = bandwidth_shares(bandwidths)
    entries = build_sa2(shares)
    # Cut the array into rounds: round r lists, in disk order, every disk with share > r.
    pos = 0
    for r in range(max(shares)):
        members = [d for d, s in enumerate(shares) if s > r]
        assert list(entries[pos : pos + len(members)]) == members
        pos += len(members)
    assert pos == 100
    # a disk dropped from the rotation never appears again
    for d, s in enumerate(shares):
        last = max(i for i, e in enumerate(entries) if e == d)
        assert entries.count(d) == s and last < 100


@settings(max_examples=200, deadline=None)
@given(bandwidth_lists)
def test_sa3_is_stride_scheduling(bandwidths):
    shares = bandwidth_shares(bandwidths)
    entries = build_sa3(shares)
    # Closed form of stride scheduling with pass starting at stride = 1/share: the picks are
    # the values k/share_d (k = 1..share_d) in increasing order, ties to the lower disk.
    expected = [d for _v, d in sorted((Fraction(k, s), d) for d, s in enumerate(shares) for k in range(1, s + 1))]
    assert list(entries) == expected
    assert [entries.count(d) for d in range(len(shares))] == list(shares)
    # Proportional throughout: if the last pick of a prefix of length p had pass t, disk d
    # has between t*s_d - 1 and t*s_d entries and t*100 - n <= p <= t*100, so its count
    # differs from p*s_d/100 by at least -1 and at most n*s_d/100 (SA2 breaks this: its
    # extra entries all sit at the end).
    n = len(shares)
    for prefix in range(1, 101):
        for d, s in enumerate(shares):
            error = entries[:prefix].count(d) - Fraction(prefix * s, 100)
            assert -1 <= error <= Fraction(n * s, 100)


def test_sa2_is_back_loaded_and_sa3_spreads_extra_entries():
    # §2.2.2: SA2 "is weighted towards the back end"; SA3 puts a faster disk's extra entries
    # "through-out the virtual device array".
    shares = (40, 20, 20, 20)
    sa2, sa3 = build_sa2(shares), build_sa3(shares)
    assert sa2[-20:] == (0,) * 20
    quarters = range(0, 100, 25)
    assert [sa2[q : q + 25].count(0) for q in quarters] == [7, 6, 6, 21]
    assert [sa3[q : q + 25].count(0) for q in quarters] == [10, 10, 10, 10]
    assert max(n for _d, n in _runs(sa3)) <= 2


@pytest.mark.parametrize("technique", ["sa1", "sa2", "sa3"])
def test_mapping_follows_section_2_2_1_literally(technique):
    bandwidths = (20.0, 17.0, 15.5, 19.0)
    layout = create_layout(technique, n_disks=4, disk_size=300 * CHUNK, chunk_bytes=CHUNK, bandwidths=bandwidths)
    vda = build_virtual_device_array(technique, bandwidths)
    assert layout.virtual_device_array == vda
    share = [vda.count(d) for d in range(4)]
    for block in range(layout.capacity // CHUNK):
        index = block % 100                       # "modulus the block number by ... 100"
        disk = vda[index]                         # "the real device where the block ... should be placed"
        cycles = block // 100                     # "how many complete cycles"
        same_before = sum(1 for e in vda[:index] if e == disk)  # "proceeding entries ... same device"
        row = cycles * share[disk] + same_before
        (ext,) = layout.map(block * CHUNK, CHUNK)
        assert (ext.disk, ext.disk_offset) == (disk, row * CHUNK)


@pytest.mark.parametrize("technique", ["sa1", "sa2", "sa3"])
def test_array_is_persisted_and_mapping_never_changes(technique):
    layout = create_layout(technique, n_disks=3, disk_size=120 * CHUNK, chunk_bytes=CHUNK,
                           bandwidths=(30e6, 20e6, 10e6))
    stored = json.loads(json.dumps(layout.geometry()))
    assert stored["virtual_device_array"] == list(layout.virtual_device_array)
    # A later probe measuring different numbers does not change the mapping: the stored
    # array wins over the stored bandwidths.
    stored["bandwidths"] = [1.0, 1.0, 1.0]
    again = layout_from_geometry(stored)
    assert again.virtual_device_array == layout.virtual_device_array
    assert again.copies(0, again.capacity) == layout.copies(0, layout.capacity)


def test_capacity_is_limited_by_the_fastest_disk():
    layout = create_layout("sa1", n_disks=2, disk_size=100 * CHUNK, chunk_bytes=CHUNK, bandwidths=(3.0, 1.0))
    assert layout.shares == (75, 25)
    # disk 0 holds 75 blocks per cycle: one full cycle (100 blocks), then 25 more of disk 0
    assert layout.complete_cycles == 1 and layout.partial_cycle_entries == 25
    assert layout.capacity == 125 * CHUNK
    assert layout.locate(1, 60 * CHUNK).role == "unused"


def test_bad_arrays_are_refused():
    with pytest.raises(UsageError, match="100"):
        create_layout("sa1", n_disks=2, disk_size=100 * CHUNK, chunk_bytes=CHUNK, virtual_device_array=(0, 1))
    with pytest.raises(UsageError, match="never appear"):
        create_layout("sa1", n_disks=2, disk_size=100 * CHUNK, chunk_bytes=CHUNK, virtual_device_array=(0,) * 100)
    with pytest.raises(UsageError, match="not a member"):
        create_layout("sa1", n_disks=2, disk_size=100 * CHUNK, chunk_bytes=CHUNK, virtual_device_array=(0, 2) * 50)


def test_a_disk_too_slow_for_one_entry_is_refused():
    with pytest.raises(UsageError, match="disk 0 has 0.14% of the total bandwidth; its share .* rounds to 0"):
        bandwidth_shares([1.0] + [99.0] * 7)



class _DisturbedMember:
    """A member that moves a MiB in `seconds`, its `disturbed_write`-th write `extra` later;
    `order` gets its name at the start of each 2 MiB probe."""

    def __init__(self, name, seconds, order, disturbed_write=None, extra=0.0):
        self.name, self.seconds, self.order = name, seconds, order
        self.disturbed_write, self.extra, self.writes = disturbed_write, extra, 0

    async def write(self, offset, data):
        from raidlab import sched
        self.writes += 1
        if self.writes % 2 == 1:
            self.order.append(self.name)
        await sched.sleep(self.seconds + (self.extra if self.writes == self.disturbed_write else 0.0))

    async def read(self, offset, n):
        from raidlab import sched
        await sched.sleep(self.seconds)

    async def flush(self):
        pass


def test_the_live_probe_keeps_each_member_s_least_disturbed_round():
    """Live, a moment of host load can only add time: the probe runs its rounds in alternating
    order and keeps each member's fastest, so a member slowed in one round is not read as slow;
    in virtual time one round is the measurement."""
    import trio
    import trio.testing

    from raidlab import sched
    from raidlab.engine.layouts.sa import LIVE_PROBE_ROUNDS, MiB, probe_members

    async def probe(order):
        # member 0's first write (in its first round) is held up by half a second
        ms = [_DisturbedMember(0, 0.05, order, disturbed_write=1, extra=0.5), _DisturbedMember(1, 0.05, order)]
        return await probe_members([(i, m, 0, 2 * MiB) for i, m in enumerate(ms)])

    order = []
    best = trio.run(probe, order, clock=trio.testing.MockClock(autojump_threshold=0))
    assert LIVE_PROBE_ROUNDS == 3
    assert order == [0, 1, 1, 0, 0, 1]
    assert best[0].bandwidth == pytest.approx(best[1].bandwidth) == pytest.approx(2 * 2 * MiB / 0.2)

    order = []
    best = sched.run_kernel(probe, order)
    assert order == [0, 1]
    assert best[0].bandwidth == pytest.approx(2 * 2 * MiB / 0.7)  # the one round, disturbance and all
    assert best[1].bandwidth == pytest.approx(2 * 2 * MiB / 0.2)
