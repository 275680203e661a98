"""EmulatedDisk under trio's real clock with real I/O on a sparse image (live mode).

Behaviour only, no wall-clock speed assertions (timings are `raidlab disk bench --clock
live`): a request never completes before the model says the mechanical disk would; the
real I/O happens (the image holds the data); one request is in service at a time;
fault injection works the same as on the virtual clock.
"""

from __future__ import annotations

import errno
import os
import random

import pytest
import trio

from raidlab.disks import EmulatedDisk, ImageBackend

pytestmark = pytest.mark.live
MiB = 1 << 20


def run_live(fn, tmp_path, model="hdd-7200", size=256 * MiB, **kw):
    async def main():
        backend = ImageBackend(tmp_path / "d0.img", size)
        disk = EmulatedDisk("d0", model, backend, io_in_thread=True, **kw)
        try:
            async with trio.open_nursery() as nursery:
                disk.start(nursery)
                result = await fn(disk)
                nursery.cancel_scope.cancel()
        finally:
            disk.close()
        return result

    return trio.run(main)


def test_completion_never_precedes_the_model_and_data_reaches_the_image(tmp_path):
    payload = os.urandom(65536)
    plans = []

    async def scenario(disk):
        mech = disk.mechanism
        orig = mech.plan_read

        def rec(now, off, n):
            plan = orig(now, off, n)
            plans.append(plan)
            return plan

        mech.plan_read = rec
        await disk.write(8 * MiB, payload, fua=True)
        done = []
        for i in range(10):
            t0 = trio.current_time()
            data = await disk.read(8 * MiB + (i % 4) * 4096, 4096)
            done.append((trio.current_time() - t0, plans[-1].service))
            assert data == payload[(i % 4) * 4096:(i % 4) * 4096 + 4096]
        return done, disk.lateness_samples(), disk.statistics()

    done, lateness, stats = run_live(scenario, tmp_path, write_cache=False)
    assert all(elapsed >= service - 1e-6 for elapsed, service in done)
    assert lateness and min(lateness) >= -1e-6
    assert stats["mode"] == "live" and stats["reads"] == 10 and stats["writes"] == 1
    with open(tmp_path / "d0.img", "rb") as f:
        f.seek(8 * MiB)
        assert f.read(65536) == payload


def test_one_request_in_service_under_the_real_clock(tmp_path):
    intervals = []

    async def scenario(disk):
        mech = disk.mechanism
        orig = mech.plan_read

        def rec(now, off, n):
            plan = orig(now, off, n)
            intervals.append((plan.start, plan.end))
            return plan

        mech.plan_read = rec
        rng = random.Random(4)

        async def reader():
            for _ in range(4):
                await disk.read(rng.randrange(0, disk.size // 4096) * 4096, 4096)

        async with trio.open_nursery() as nursery:
            for _ in range(8):
                nursery.start_soon(reader)
        return disk.statistics()

    stats = run_live(scenario, tmp_path, model="ssd", discipline="sstf")
    assert len(intervals) == 32
    for (_, e0), (s1, _) in zip(intervals, intervals[1:]):
        assert s1 >= e0 - 1e-9
    assert stats["max_queue_length"] >= 4


def test_failed_disk_in_live_mode(tmp_path):
    async def scenario(disk):
        await disk.write(0, b"x" * 4096)
        disk.failed = True
        with pytest.raises(OSError) as info:
            await disk.read(0, 4096)
        return info.value.errno

    assert run_live(scenario, tmp_path, model="none") == errno.EIO
