"""Does the disk model do what it says? (ublk-disksim's first question)

All on the virtual clock (raidlab's kernel), through EmulatedDisk and a
sparse MemoryBackend, so every time is exact model time and the suite is fast.

* QD1 random reads cost mean seek + half a revolution + transfer + read controller overhead
  (within 4%), and the rotational wait really depends on the platter's angle;
* sequential reads cost bytes / zone rate;
* SSTF and SCAN beat FIFO at queue depth 32;
* one request in service per disk (partitions included);
* a partition in the inner zones is slower than one in the outer zones;
* write cache, flush, trim, fault injection, the `none` model, data integrity.
"""

from __future__ import annotations

import errno
import math
import random
import statistics

import pytest

from raidlab import sched
from raidlab.disks import EmulatedDisk, MemoryBackend, catalog
from raidlab.disks.bench import random_qd, random_qd1, sequential_rate, zone_ranges
from raidlab.disks.geometry import MS, Geometry, zone_sequential_rate
from raidlab.disks.mechanisms import expected_random_read_s
from raidlab.disks.mechanisms import make_mechanism as DiskMechanism
from raidlab.disks.seek import fit_seek_curve, manufacturer_average_seek_ms
from raidlab.sched import virtual
from raidlab.errors import UnknownModelError, UsageError

GiB = 1 << 30
MiB = 1 << 20


def run_virtual(fn, model="ibm-ultrastar-9lzx", size=GiB, **disk_kw):
    """Run `fn(disk)` on a started EmulatedDisk in virtual time; return its result."""
    spec = catalog.get(model) if isinstance(model, str) else model

    async def main():
        disk = EmulatedDisk("d0", spec, MemoryBackend(size), **disk_kw)
        async with sched.open_nursery() as nursery:
            disk.start(nursery)
            result = await fn(disk)
            nursery.cancel_scope.cancel()
        return result

    return virtual.run_virtual(main)


async def all_other_tasks_blocked():
    """Checkpoints until no other task of the running kernel can run (what
    trio.testing.wait_all_tasks_blocked waits for)."""
    kernel = sched.running_kernel()
    await sched.checkpoint()
    while kernel.runq:
        await sched.checkpoint()


# ------------------------------------------------------------------------ random reads


@pytest.mark.parametrize("model", ["ibm-ultrastar-9lzx", "ibm-dnes-318350", "hdd-7200"])
@pytest.mark.parametrize("nbytes", [4096, 65536])
def test_qd1_random_read_is_seek_plus_half_revolution_plus_transfer(model, nbytes):
    """Mean of isolated random reads = mean seek (over the image's cylinders, byte
    weighted) + rev/2 + transfer at the zones' rates + *read controller overhead*."""
    spec = catalog.get(model)
    size = 4 * GiB

    async def measure(disk):
        return await random_qd1(disk, "read", nbytes, 3000, random.Random(11))

    times = run_virtual(measure, spec, size)
    expected = expected_random_read_s(spec, size, nbytes)
    mean = statistics.fmean(times)
    assert mean == pytest.approx(expected["total"], rel=0.04), (mean, expected)


def test_rotational_wait_follows_platter_angle():
    """The wait for a sector is (sector angle - platter angle at arrival) mod 1 revolution:
    zero for a sector arriving under the head, almost a revolution for one just missed."""
    spec = catalog.get("ibm-ultrastar-9lzx")
    rev = spec.revolution_s
    mech = DiskMechanism(spec, GiB)
    g = mech.geometry
    target = g.locate(0)  # cylinder 0, head 0: no seek, no head switch from the start state
    # choose `now` so that the platter is exactly at the sector's angle on arrival
    angle_now = (g.byte_angle(target) - spec.controller_read_ms * MS / rev) % 1.0
    now = 10.0 - (10.0 / rev) % 1.0 * rev + angle_now * rev
    on_time = mech.plan_read(now, 0, 4096)
    assert on_time.rotation == pytest.approx(0.0, abs=1e-6)
    mech2 = DiskMechanism(spec, GiB)
    late = mech2.plan_read(now + 1e-4, 0, 4096)  # 0.1 ms later: the sector has just passed
    assert late.rotation == pytest.approx(rev - 1e-4, abs=1e-6)


def test_rotational_wait_is_uniform_not_a_constant():
    """Over random reads the rotational component is spread over [0, rev) like a uniform
    variable (mean rev/2, standard deviation rev/sqrt(12)), not a fixed average."""
    spec = catalog.get("ibm-ultrastar-9lzx")
    rev = spec.revolution_s
    mech = DiskMechanism(spec, GiB)
    rng = random.Random(3)
    t = 0.0
    waits = []
    for _ in range(4000):
        plan = mech.plan_read(t, rng.randrange(0, GiB // 4096) * 4096, 4096)
        waits.append(plan.rotation)
        t = plan.end + rng.random() * 0.01
    assert statistics.fmean(waits) == pytest.approx(rev / 2, rel=0.05)
    assert statistics.pstdev(waits) == pytest.approx(rev / math.sqrt(12), rel=0.08)
    assert min(waits) < 0.02 * rev and max(waits) > 0.98 * rev


def test_seek_grows_with_distance():
    spec = catalog.get("hp-c2200a")
    g = Geometry(spec, spec.media_capacity_bytes)
    seeks = [g.seek_s(0, c) for c in (0, 1, 2, 10, 100, 600, 1448)]
    assert seeks[0] == 0
    assert seeks == sorted(seeks)
    assert seeks[-1] == pytest.approx((10.8 + 0.012 * 1448) * MS)  # R&W long-seek regime


def test_seek_curve_fit_reproduces_the_three_spec_figures():
    curve = fit_seek_curve(10000, 0.8, 7.0, 15.0)
    assert curve.seek_ms(1) == pytest.approx(0.8)
    assert curve.seek_ms(9999) == pytest.approx(15.0)
    assert manufacturer_average_seek_ms(curve, 10000) == pytest.approx(7.0)


# ------------------------------------------------------------------------ sequential


@pytest.mark.parametrize("model", ["ibm-ultrastar-9lzx", "hdd-7200", "maxtor-91020d6"])
@pytest.mark.parametrize("zone", ["outer", "inner"])
def test_sequential_read_costs_bytes_over_zone_rate(model, zone):
    spec = catalog.get(model)
    size = spec.media_capacity_bytes // 512 * 512

    async def measure(disk):
        outer, inner = zone_ranges(disk)
        lo, hi = outer if zone == "outer" else inner
        n = min(16 * MiB, hi - lo) // 65536 * 65536
        start = lo if zone == "outer" else (hi - n) // 4096 * 4096
        zone_index = disk.mechanism.geometry.zone_of_byte(start).index
        return await sequential_rate(disk, "read", start, n), zone_index

    rate, zone_index = run_virtual(measure, spec, size)
    assert rate == pytest.approx(zone_sequential_rate(spec, zone_index), rel=0.03)


def test_one_large_read_transfers_at_the_media_rate():
    """A single request spanning whole tracks: its transfer component is exactly
    bytes / (track bytes per revolution); switches are the skewed head/cylinder switches."""
    spec = catalog.get("ibm-ultrastar-9lzx")
    mech = DiskMechanism(spec, GiB)
    z = mech.geometry.zones[0]
    cylinder = z.track_bytes * spec.heads
    plan = mech.plan_read(0.0, 0, 2 * cylinder)
    assert plan.transfer == pytest.approx(2 * spec.heads * spec.revolution_s)
    # 2*heads-1 switches, each hidden by a skew of whole sectors: at most one sector late
    sector_time = spec.revolution_s / z.track_bytes * 512
    expected_switches = (2 * spec.heads - 2) * spec.head_switch_ms * MS + spec.cylinder_switch_ms * MS
    assert plan.switches == pytest.approx(expected_switches)
    # with the skew sized to the switch, no track after the first waits more than a sector
    first_track = DiskMechanism(spec, GiB).plan_read(0.0, 0, 512).rotation
    assert plan.rotation - first_track <= (2 * spec.heads - 1) * sector_time


# ------------------------------------------------------------------------ queueing


def _depth32_elapsed(discipline: str) -> float:
    async def measure(disk):
        return await random_qd(disk, 32, 4096, 640, random.Random(5))

    return run_virtual(measure, "ibm-ultrastar-9lzx", GiB, discipline=discipline)


def test_sstf_and_scan_beat_fifo_at_depth_32():
    fifo, sstf, scan = (_depth32_elapsed(d) for d in ("fifo", "sstf", "scan"))
    assert sstf < 0.85 * fifo, (fifo, sstf)
    assert scan < 0.85 * fifo, (fifo, scan)


def test_one_request_in_service_per_disk():
    """Model service intervals never overlap, with 64 concurrent requesters on the disk
    and on two of its partitions; the queue is seen at its full depth."""
    intervals = []

    async def measure(disk):
        mech = disk.mechanism
        orig_read, orig_write = mech.plan_read, mech.plan_write

        def rec_read(now, off, n):
            plan = orig_read(now, off, n)
            intervals.append((plan.start, plan.end))
            return plan

        def rec_write(now, off, n, fua=False):
            plan = orig_write(now, off, n, fua=fua)
            intervals.append((plan.start, plan.end))
            return plan

        mech.plan_read, mech.plan_write = rec_read, rec_write
        parts = [disk, disk.partition(0, 64 * MiB), disk.partition(disk.size - 64 * MiB, 64 * MiB)]
        rng = random.Random(9)

        async def worker(target):
            for _ in range(10):
                off = rng.randrange(0, (target.size - 8192) // 4096) * 4096
                if rng.random() < 0.5:
                    await target.read(off, 8192)
                else:
                    await target.write(off, bytes(8192))

        async with sched.open_nursery() as nursery:
            for i in range(64):
                nursery.start_soon(worker, parts[i % 3])
        return disk.statistics()

    stats = run_virtual(measure)
    assert len(intervals) == 640
    for (s0, e0), (s1, e1) in zip(intervals, intervals[1:]):
        assert s1 >= e0 - 1e-12, "two requests in service at once"
    assert stats["max_queue_length"] >= 32
    assert stats["ios"] == 640


# ------------------------------------------------------------------------ partitions


def test_partition_in_inner_zone_is_slower_than_outer():
    async def measure(disk):
        eighth = disk.size // 8
        b1 = disk.partition(0, eighth, name="b1")
        b8 = disk.partition(7 * eighth, eighth, name="b8")
        fast = await sequential_rate(b1, "read", 0, 8 * MiB)
        slow = await sequential_rate(b8, "read", 0, 8 * MiB)
        return fast, slow, b1.statistics(), b8.statistics()

    fast, slow, s1, s8 = run_virtual(measure, "ibm-ultrastar-9lzx", 2 * GiB)
    assert fast > 1.2 * slow
    assert s1["bytes_read"] == s8["bytes_read"] == 8 * MiB
    assert s1["name"] == "b1" and s1["disk"] == "d0"


def test_partitions_share_the_arm():
    """Alternating between an outer and an inner partition makes every request seek."""
    async def measure(disk):
        eighth = disk.size // 8
        b1, b8 = disk.partition(0, eighth), disk.partition(7 * eighth, eighth)
        t0 = sched.current_time()
        for i in range(50):
            await b1.read(i * 65536, 65536)
        alone = sched.current_time() - t0
        t0 = sched.current_time()
        for i in range(50):
            await (b1 if i % 2 else b8).read(i * 65536, 65536)
        alternating = sched.current_time() - t0
        return alone, alternating

    alone, alternating = run_virtual(measure, "ibm-ultrastar-9lzx", 2 * GiB)
    assert alternating > 3 * alone


def test_span_full_keeps_the_drive_stroke_span_start_does_not():
    spec = catalog.get("ibm-ultrastar-9lzx")
    full = Geometry(spec, 256 * MiB, "full").mean_random_seek_s()
    start = Geometry(spec, 256 * MiB, "start").mean_random_seek_s()
    assert full == pytest.approx(manufacturer_average_seek_ms(spec.seek, spec.cylinders) * MS, rel=0.03)
    assert start < 0.5 * full


def test_image_larger_than_the_drive_keeps_its_seek_and_rotation():
    """A 1 GiB image of the 335 MB HP C2200A: more mapped cylinders than the drive has,
    same stroke, so the same average seek."""
    spec = catalog.get("hp-c2200a")
    g = Geometry(spec, GiB)
    assert g.cylinders > spec.cylinders
    assert g.mean_random_seek_s() == pytest.approx(
        manufacturer_average_seek_ms(spec.seek, spec.cylinders) * MS, rel=0.02)


def test_image_maps_proportionally_onto_zones():
    spec = catalog.get("ibm-ultrastar-9lzx")
    g = Geometry(spec, 256 * MiB)
    assert len(g.used_zones) == 16
    assert g.zones[-1].byte_end >= 256 * MiB
    cylinders = [g.cylinder_of(off) for off in range(0, 256 * MiB, MiB)]
    assert cylinders == sorted(cylinders)
    positions = [g.physical_position(c) for c in range(g.cylinders)]
    assert positions == sorted(positions)
    assert positions[-1] < spec.cylinders


# ------------------------------------------------------------------------ cache, flush, faults


def test_write_cache_reports_immediately_and_flush_drains_it():
    async def measure(disk):
        t0 = sched.current_time()
        for i in range(16):
            await disk.write(i * 1 * MiB + 4096 * i, bytes(65536))
        accept = sched.current_time() - t0
        dirty = disk.statistics()["dirty_bytes"]
        t0 = sched.current_time()
        await disk.flush()
        flush = sched.current_time() - t0
        return accept, dirty, flush, disk.statistics()

    accept, dirty, flush, stats = run_virtual(measure, "hdd-7200", 4 * GiB)
    assert accept < 16 * 0.5e-3  # bus transfer + command overhead, no media
    assert dirty > 0
    assert flush > 5e-3  # the media writes
    assert stats["dirty_bytes"] == 0 and stats["destaged_bytes"] == 16 * 65536


def test_busy_and_destage_time_split_into_their_parts():
    async def measure(disk):
        for i in range(16):
            await disk.write(i * 7 * MiB + 4096 * i, bytes(65536))
        await disk.flush()
        for i in range(16):
            await disk.read(i * 5 * MiB + 512 * i, 4096)
        return disk.statistics()

    stats = run_virtual(measure, "hdd-7200", 4 * GiB)
    busy, destage = stats["busy_split"], stats["destage_split"]
    assert set(busy) == {"controller", "seek", "rotation", "transfer", "switches", "waiting"}
    assert abs(sum(busy.values()) - stats["busy_time"]) < 1e-9
    assert busy["seek"] > 0 and busy["rotation"] > 0 and busy["controller"] > 0
    assert busy["waiting"] > 0  # the flush waited for the write-back
    assert abs(sum(destage.values()) - stats["destage_time"]) < 1e-9
    assert destage["seek"] > 0 and destage["rotation"] > 0 and destage["transfer"] > 0


@pytest.mark.parametrize("gaps", [(0.0, 0.0031), (0.0011, 0.0047)])
def test_the_same_requests_at_other_gaps_seek_alike_and_wait_other_rotations(gaps):
    """The platter turns with the clock: one request at a time, the same offsets in the same
    order cost the same seeks whatever the pause between them, but each meets its sector at
    another angle, so the rotational waits (and with them the busy time) differ. A guest
    that runs faster or slower issues its requests with other pauses."""
    offsets = [(i * 7919 % 1000) * MiB + (i * 13 % 64) * 4096 for i in range(200)]

    def with_gap(gap):
        async def measure(disk):
            for off in offsets:
                await disk.read(off, 4096)
                await sched.sleep(gap)
            return disk.statistics()["busy_split"]

        return run_virtual(measure, "ibm-dnes-318350", 2 * GiB)

    a, b = (with_gap(g) for g in gaps)
    # Read-ahead after each read moves the heads a little further the longer the pause, so
    # the seeks agree to within a thousandth, not exactly.
    assert a["seek"] == pytest.approx(b["seek"], rel=1e-3)
    assert a["transfer"] == pytest.approx(b["transfer"], rel=1e-9)
    assert abs(a["rotation"] - b["rotation"]) > 0.03 * min(a["rotation"], b["rotation"])


def test_write_without_cache_waits_for_the_media():
    async def measure(disk):
        t0 = sched.current_time()
        await disk.write(123 * MiB, bytes(4096))
        return sched.current_time() - t0

    assert run_virtual(measure, "hdd-7200", 4 * GiB, write_cache=False) > 1e-3


def test_failed_disk_raises_eio_for_new_and_queued_requests():
    async def measure(disk):
        errors = []

        async def reader(off):
            try:
                await disk.read(off, 4096)
            except OSError as exc:
                errors.append(exc.errno)

        async with sched.open_nursery() as nursery:
            for i in range(8):
                nursery.start_soon(reader, i * 100 * MiB)
            await sched.sleep(0.001)  # first request in service, the rest queued
            disk.failed = True
        with pytest.raises(OSError) as info:
            await disk.write(0, bytes(512))
        return errors, info.value.errno, disk.statistics()["errors"]

    errors, new_errno, counted = run_virtual(measure)
    assert errors and all(e == errno.EIO for e in errors)
    assert len(errors) >= 7  # everything but the request already in service
    assert new_errno == errno.EIO
    assert counted == len(errors) + 1


def test_data_round_trip_through_disk_and_partition():
    async def measure(disk):
        part = disk.partition(8 * MiB, 8 * MiB)
        await part.write(4096, b"p" * 4096)
        await disk.write(0, b"d" * 8192, fua=True)
        await disk.trim(MiB, 65536)
        return (await disk.read(8 * MiB + 4096, 4096), await part.read(4096, 4096),
                await disk.read(0, 8192), await disk.read(MiB, 512))

    via_disk, via_part, head, trimmed = run_virtual(measure)
    assert via_disk == via_part == b"p" * 4096
    assert head == b"d" * 8192
    assert trimmed == bytes(512)


def test_none_model_adds_no_delay():
    async def measure(disk):
        t0 = sched.current_time()
        for i in range(200):
            await disk.write(i * 4096, bytes(4096))
            await disk.read(i * 4096, 4096)
        await disk.flush()
        return sched.current_time() - t0, disk.statistics()

    elapsed, stats = run_virtual(measure, "none", 64 * MiB)
    assert elapsed == 0.0
    assert stats["ios"] == 400


def test_ssd_qd1_latency_is_fixed_plus_transfer():
    async def measure(disk):
        t0 = sched.current_time()
        await disk.read(0, 4096)
        return sched.current_time() - t0

    spec = catalog.get("ssd")
    assert run_virtual(measure, "ssd", GiB) == pytest.approx(
        spec.read_latency_ms * MS + 4096 / (spec.read_mb_s * 1e6))


# ------------------------------------------------------------------------ bad input


def test_unknown_model_lists_known_names():
    with pytest.raises(UnknownModelError) as info:
        catalog.get("hp-c2201x")
    assert "hp-c2200a" in str(info.value) and "ssd" in str(info.value)


def test_misaligned_requests_are_refused():
    async def measure(disk):
        with pytest.raises(ValueError):
            await disk.read(100, 512)
        with pytest.raises(ValueError):
            await disk.write(0, b"x" * 100)
        with pytest.raises(ValueError):
            await disk.read(disk.size, 512)
        return True

    assert run_virtual(measure)


def test_bad_discipline_and_span_are_user_errors():
    with pytest.raises(UsageError):
        EmulatedDisk("d", "hp-c2200a", MemoryBackend(MiB), discipline="lifo")
    with pytest.raises(UsageError):
        EmulatedDisk("d", "hp-c2200a", MemoryBackend(MiB), span="middle")
    with pytest.raises(UsageError):
        EmulatedDisk("d", "hp-c2200a", MemoryBackend(GiB), span="start")  # larger than the drive


def test_queued_requests_that_continue_each_other_are_served_as_one():
    """With merging on, the queue serves contiguous waiting requests of one kind as one (the
    block layer's elevator): fewer services, every requester gets its own bytes back."""
    import random

    from raidlab.disks import EmulatedDisk, MemoryBackend

    payloads = [random.Random(i).randbytes(4096) for i in range(6)]

    async def main():
        disk = EmulatedDisk("d", "ibm-dnes-309170", MemoryBackend(16 << 20))
        disk.merge_queued_requests()  # as an engine Array turns it on for its members
        got: dict[int, bytes] = {}
        async with sched.open_nursery() as nursery:
            disk.start(nursery)
            async with sched.open_nursery() as requests:
                requests.start_soon(disk.write, 8 << 20, bytes(4096))  # keeps the arm busy
                # in service before the others arrive
                await all_other_tasks_blocked()
                for i in (3, 1, 0, 2, 5, 4):  # out of order; all queued behind the first
                    requests.start_soon(disk.write, i * 4096, payloads[i])

            async def read(i):
                got[i] = await disk.read(i * 4096, 4096)

            async with sched.open_nursery() as requests:
                requests.start_soon(disk.read, 8 << 20, 4096)
                await all_other_tasks_blocked()
                for i in range(6):
                    requests.start_soon(read, i)
            nursery.cancel_scope.cancel()
        return disk.statistics(), got

    stats, got = virtual.run_virtual(main)
    assert [got[i] for i in range(6)] == payloads
    assert stats["writes"] == 2 and stats["reads"] == 2
    assert stats["merged_requests"] == 10
