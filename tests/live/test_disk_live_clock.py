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
import subprocess
import tempfile
from pathlib import Path

import pytest
import trio

from raidlab.disks import EmulatedDisk, ImageBackend, MemoryBackend

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


@pytest.fixture
def handed(monkeypatch) -> list[str]:
    """The callables handed to a worker thread (trio.to_thread.run_sync) from now on."""
    calls: list[str] = []
    real = trio.to_thread.run_sync

    async def counting(fn, *args, **kw):
        calls.append(getattr(fn, "__name__", repr(fn)))
        return await real(fn, *args, **kw)

    monkeypatch.setattr(trio.to_thread, "run_sync", counting)
    return calls


# File systems without a backing device keep every page in memory: POSIX_FADV_DONTNEED is a
# no-op there, so no read on them ever waits for a device.
MEMORY_FILE_SYSTEMS = {"tmpfs", "ramfs"}


def file_system_type(path) -> str:
    return subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.fixture
def disk_backed_dir(tmp_path):
    """A directory on a file system whose page cache can be dropped: tmp_path, or one under
    /var/tmp where /tmp is a tmpfs."""
    if file_system_type(tmp_path) not in MEMORY_FILE_SYSTEMS:
        yield tmp_path
        return
    if file_system_type("/var/tmp") in MEMORY_FILE_SYSTEMS:
        pytest.skip("no disk-backed directory (/tmp and /var/tmp are in memory): no read can be cold")
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="raidlab-test-") as d:
        yield Path(d)


@pytest.mark.parametrize("model", ["none", "hdd-7200"])
def test_small_writes_and_cached_reads_run_inline_the_rest_in_a_worker_thread(disk_backed_dir, handed, model):
    """Live I/O (raidlab.disks.disk): a small write and a read the page cache holds are done
    in the trio thread; a read that would wait for the device, a large write, a FUA write
    and a flush go to a worker thread. The image holds every write either way."""
    from raidlab.disks.backend import INLINE_WRITE_BYTES

    small, large = os.urandom(4096), os.urandom(INLINE_WRITE_BYTES + 4096)

    async def scenario(disk):
        await disk.write(0, small)
        assert await disk.read(0, 4096) == small
        inline = len(handed)
        await disk.write(MiB, large)
        after_large = len(handed)
        await disk.write(4 * MiB, small, fua=True)
        after_fua = len(handed)
        await disk.flush()
        after_flush = len(handed)
        os.posix_fadvise(disk.backend._fd, 0, 0, os.POSIX_FADV_DONTNEED)  # clean now: dropped
        assert await disk.read(MiB, len(large)) == large
        return inline, after_large, after_fua, after_flush, len(handed)

    inline, after_large, after_fua, after_flush, after_cold_read = run_live(scenario, disk_backed_dir,
                                                                            model=model)
    assert inline == 0, handed
    assert after_large == 1 and after_fua == 2 and after_flush == 3 and after_cold_read == 4, handed
    with open(disk_backed_dir / "d0.img", "rb") as image:
        assert image.read(4096) == small
        image.seek(MiB)
        assert image.read(len(large)) == large


def test_a_live_disk_over_memory_does_all_its_io_inline(handed):
    """A memory backend never blocks: live, its reads and small writes stay in the trio
    thread as well."""
    data = os.urandom(8192)

    async def main():
        disk = EmulatedDisk("m", "none", MemoryBackend(MiB), io_in_thread=True)
        async with trio.open_nursery() as nursery:
            disk.start(nursery)
            await disk.write(4096, data)
            got = await disk.read(4096, 8192)
            nursery.cancel_scope.cancel()
        return got

    assert trio.run(main) == data and handed == []
