"""VC-RAID (He & Yang §3.3.3) on the virtual clock: a scripted burst of small writes followed
by idle time shows the level-1 log writes, the idle detection and the level-2 destage at the
expected virtual times (the DCD's counterpart is in test_dcd_basic.py)."""

from __future__ import annotations

import pytest

from raidlab import sched
from raidlab.disks import EmulatedDisk, MemoryBackend
from raidlab.engine.caches import create_vcraid
from raidlab.sched import run_virtual

KiB, MiB = 1024, 1 << 20


def pattern(tag: int, length: int) -> bytes:
    return (f"<{tag:08d}>".encode() * (length // 10 + 1))[:length]


def test_burst_then_idle_shows_level1_idle_detection_and_level2_at_expected_times():
    array_disks = [EmulatedDisk(f"d{i}", "hp-c2200a", MemoryBackend(16 * MiB)) for i in range(4)]
    cache_disk = EmulatedDisk("cache", "hp-c2200a", MemoryBackend(4 * MiB))

    async def main():
        async with sched.open_nursery() as nursery:
            for d in [*array_disks, cache_disk]:
                d.start(nursery)
            vc = await create_vcraid("v", array_disks, [cache_disk], ram_buffer=256 * KiB, idle_threshold=0.05)
            vc.start(nursery)
            t0 = sched.current_time()
            for i in range(30):  # a burst: one 4 KiB write every 3 ms to scattered places
                await sched.sleep_until(t0 + i * 0.003)
                await vc.write((i * 53 % 900) * 16 * KiB, pattern(i, 4 * KiB))
                assert sched.current_time() == t0 + i * 0.003  # acknowledged from the RAM buffer
            last_request = sched.current_time()
            await sched.sleep(2.0)
            # Then one lone 1 KiB write: its level-1 write is done well within 50 ms.
            lone = sched.current_time()
            await vc.write(5 * MiB, pattern(99, 1 * KiB))
            await sched.sleep(2.0)
            timeline, stats = list(vc.timeline), vc.statistics()
            for i in range(30):
                assert await vc.array.read((i * 53 % 900) * 16 * KiB, 4 * KiB) == pattern(i, 4 * KiB)
            nursery.cancel_scope.cancel()
        return t0, last_request, lone, timeline, stats

    t0, last_request, lone, timeline, stats = run_virtual(main)
    starts = [(t, d) for t, ev, d in timeline if ev == "level1_start"]
    dones = [t for t, ev, _ in timeline if ev == "level1_done"]
    # Level 1 starts with the first write (the cache disk was idle), each later log write the
    # moment the previous one is done while dirty blocks wait; at most 64 KiB (64 blocks) each.
    assert starts[0][0] == t0
    burst = [(t, d) for t, d in starts if t < lone]
    for prev_done, (start, _) in zip(dones, burst[1:]):
        assert start == prev_done
    assert all(d["blocks"] <= 64 for _, d in starts)
    assert sum(d["blocks"] for _, d in burst) == 30 * 4
    assert len(burst) < 30  # log writes collect several requests
    # Idle: no request for 50 ms (level-1 writes are not requests) and level 1 finished (it
    # has priority over level 2): the burst's last log write on the slow C2200A ends later
    # than 50 ms after the last request, so that is when the idle period is found.
    burst_dones = [t for t in dones if t < lone]
    idle = [t for t, ev, _ in timeline if ev == "idle"]
    assert idle[0] == pytest.approx(max(last_request + 0.050, max(burst_dones)), abs=1e-9)
    level2 = [t for t, ev, _ in timeline if ev == "level2_start"]
    assert level2[0] == pytest.approx(idle[0], abs=1e-9)
    assert all(t >= idle[0] for t in level2)
    # The lone write: its level-1 write starts at once and ends within the threshold; the
    # idle period is found exactly 50 ms after it, and level 2 destages it then.
    lone_start = [t for t, d in starts if t >= lone]
    assert lone_start == [lone] and max(dones) < lone + 0.050
    assert idle[1] == pytest.approx(lone + 0.050, abs=1e-9)
    assert [t for t in level2 if t >= lone][0] == pytest.approx(idle[1], abs=1e-9)
    assert stats["cache_disk_used_bytes"] == 0 and stats["level2_bytes"] == 30 * 4 * KiB + 1 * KiB
    assert stats["idle_periods_found"] == 2 and stats["level2_suspended"] == 0
