"""`raidlab disk bench`: what a user can ask of a disk model, measured through EmulatedDisk.

Why through the real disk object and not the model's closed forms: the bench must show what
an architecture built on the disk will see, queue, read-ahead, write cache and all. The
closed forms (raidlab.disks.mechanisms.expected_random_read_s,
raidlab.disks.geometry.zone_sequential_rate) are printed next to the measurements so a
user can see where the two differ and why.

Two clocks (docs/architecture.md, "Two clocks"):
* virtual: MemoryBackend (sparse), raidlab's discrete-event kernel (raidlab.sched); every
  figure is exact model time, the run takes seconds of CPU whatever the drive's speed.
* live: a sparse image file in a temporary directory (no root, no loop device), trio's real
  clock, I/O in worker threads. Adds lateness (actual completion - model completion) at
  QD1 and at QD16, the measure of whether this host delivers the model's timing.

The measurements ask raidlab.sched for time and nurseries, so the same code runs under
either scheduler (raidlab.cluster.peaks runs them on the kernel too).

Measurements: QD1 random reads of 4 KiB and 8 KiB (mean, p99 ms), QD1 random 4 KiB writes,
sequential 64 KiB reads and writes at QD1 in the outermost and the innermost zone of the
image (MB/s = 10^6 bytes/s). Offsets are 4 KiB aligned and uniform over the image.
"""

from __future__ import annotations

import contextlib
import random
import tempfile
from pathlib import Path
from typing import Any

import trio

from raidlab import sched
from raidlab.blockdev import SECTOR
from raidlab.disks import catalog
from raidlab.disks.backend import ImageBackend, MemoryBackend, check_size
from raidlab.disks.disk import EmulatedDisk, percentile
from raidlab.disks.geometry import DriveSpec, zone_sequential_rate
from raidlab.disks.mechanisms import expected_random_read_s
from raidlab.errors import UsageError
from raidlab.outputs import new_file, output_dir

SEQ_REQUEST = 64 * 1024
ALIGN = 4096


def default_size(spec: DriveSpec) -> int:
    """The drive's own capacity (sparse: nothing is allocated until written); 1 GiB for
    models without a capacity (ssd, none)."""
    if spec.kind == "hdd":
        return spec.media_capacity_bytes // SECTOR * SECTOR
    return 1 << 30


def zone_ranges(disk: EmulatedDisk) -> tuple[tuple[int, int], tuple[int, int]]:
    """(start, end) byte ranges of the outermost and innermost zone the image uses."""
    g = disk.mechanism.geometry
    if g is None:
        return (0, disk.size), (0, disk.size)
    used = g.used_zones
    outer = (used[0].byte_start, min(used[0].byte_end, disk.size))
    inner = (used[-1].byte_start, min(used[-1].byte_end, disk.size))
    return outer, inner


async def _timed(coro) -> float:
    t0 = sched.current_time()
    await coro
    return sched.current_time() - t0


async def random_qd1(disk: EmulatedDisk, op: str, nbytes: int, count: int, rng: random.Random,
                     span: tuple[int, int] | None = None) -> list[float]:
    """Response times (s) of `count` isolated random requests, one at a time."""
    lo, hi = span or (0, disk.size)
    slots = (hi - lo - nbytes) // ALIGN
    data = bytes(nbytes) if op == "write" else b""
    times = []
    for _ in range(count):
        off = lo + rng.randrange(0, slots + 1) * ALIGN
        if op == "read":
            times.append(await _timed(disk.read(off, nbytes)))
        else:
            times.append(await _timed(disk.write(off, data)))
    return times


async def sequential_rate(disk: EmulatedDisk, op: str, start: int, nbytes: int,
                          request: int = SEQ_REQUEST) -> float | None:
    """Bytes per second of a QD1 stream of `request`-sized requests from `start` (writes
    end with a flush, so a write cache's contents are counted). None if no time passed
    (the `none` model on the virtual clock)."""
    nbytes -= nbytes % request
    data = bytes(request) if op == "write" else b""
    # The first request positions the arm (a random seek and rotation); the stream's
    # rate is measured from its completion on.
    if op == "read":
        await disk.read(start, request)
    else:
        await disk.write(start, data)
    t0 = sched.current_time()
    nbytes -= request
    for off in range(start + request, start + request + nbytes, request):
        if op == "read":
            await disk.read(off, request)
        else:
            await disk.write(off, data)
    if op == "write":
        await disk.flush()
    elapsed = sched.current_time() - t0
    return nbytes / elapsed if elapsed > 0 else None


async def random_qd(disk: EmulatedDisk, depth: int, nbytes: int, count: int, rng: random.Random) -> float:
    """Run `count` random reads with `depth` outstanding; return the elapsed time (s)."""
    slots = (disk.size - nbytes) // ALIGN
    offsets = [rng.randrange(0, slots + 1) * ALIGN for _ in range(count)]
    t0 = sched.current_time()

    async def worker(mine: list[int]) -> None:
        for off in mine:
            await disk.read(off, nbytes)

    async with sched.open_nursery() as nursery:
        for w in range(depth):
            nursery.start_soon(worker, offsets[w::depth])
    return sched.current_time() - t0


def _summary(times: list[float]) -> dict[str, float]:
    return {
        "mean_ms": sum(times) / len(times) * 1e3,
        "p99_ms": percentile(times, 99) * 1e3,
        "samples": len(times),
    }


def _lateness(samples: list[float]) -> dict[str, float]:
    return {
        "p50_ms": percentile(samples, 50) * 1e3,
        "p99_ms": percentile(samples, 99) * 1e3,
        "max_ms": max(samples) * 1e3,
        "samples": len(samples),
    }


async def _bench(disk: EmulatedDisk, samples: int, seq_bytes: int, seed: int, live: bool) -> dict[str, Any]:
    rng = random.Random(seed)
    out: dict[str, Any] = {}
    async with sched.open_nursery() as nursery:
        disk.start(nursery)
        qd1_lateness: list[float] = []
        mark = len(disk.lateness_samples())
        out["random_read_4k"] = _summary(await random_qd1(disk, "read", 4096, samples, rng))
        out["random_read_8k"] = _summary(await random_qd1(disk, "read", 8192, samples, rng))
        out["random_write_4k"] = _summary(await random_qd1(disk, "write", 4096, samples, rng))
        qd1_lateness = disk.lateness_samples()[mark:]  # reads and writes, not the flush
        await disk.flush()
        outer, inner = zone_ranges(disk)
        seq_mark = len(disk.lateness_samples())
        seq: dict[str, float | None] = {}
        for label, (lo, hi) in (("outer", outer), ("inner", inner)):
            n = min(seq_bytes, hi - lo) // SEQ_REQUEST * SEQ_REQUEST
            start = lo if label == "outer" else (hi - n) // ALIGN * ALIGN
            for op in ("read", "write"):
                rate = await sequential_rate(disk, op, start, n)
                seq[f"{op}_{label}_mb_s"] = rate / 1e6 if rate is not None else None
        out["sequential"] = seq
        seq_lateness = disk.lateness_samples()[seq_mark:]
        if live:
            out["lateness_qd1"] = _lateness(qd1_lateness)
            out["lateness_sequential"] = _lateness(seq_lateness)
            before = len(disk.lateness_samples())
            elapsed = await random_qd(disk, 16, 4096, max(16, samples), rng)
            qd16 = disk.lateness_samples()[before:]
            out["lateness_qd16"] = _lateness(qd16)
            out["qd16_random_read_4k_iops"] = max(16, samples) / elapsed
            if "flush_lateness" in disk.statistics():
                out["flush_lateness"] = disk.statistics()["flush_lateness"]
        nursery.cancel_scope.cancel()
    return out


def run_bench(
    model: str,
    *,
    clock: str = "virtual",
    size: int | None = None,
    samples: int | None = None,
    seq_bytes: int | None = None,
    image_dir: str | Path | None = None,
    seed: int = 1,
    discipline: str = "fifo",
) -> dict[str, Any]:
    """Measure `model` (see module doc). Returns one JSON-serialisable dict."""
    spec = catalog.get(model)
    if clock not in ("virtual", "live"):
        raise UsageError(f"unknown clock {clock!r}", hint="use --clock virtual or --clock live")
    size = check_size(size) if size is not None else default_size(spec)
    if size < 4 * SEQ_REQUEST:
        raise UsageError(f"disk size {size} is too small for the bench", hint="give at least 1M")
    live = clock == "live"
    samples = samples or (200 if live else 2000)
    seq_bytes = seq_bytes or ((4 << 20) if live else (32 << 20))
    with contextlib.ExitStack() as stack:
        if live:
            if image_dir is None:
                image_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="raidlab-bench-"))
            path = new_file(Path(output_dir(image_dir, "--image-dir")) / f"{model}.img", "the scratch image")
            backend = ImageBackend(path, size)
            stack.callback(path.unlink, missing_ok=True)
        else:
            backend = MemoryBackend(size)
        stack.callback(backend.close)
        disk = EmulatedDisk("bench", spec, backend, discipline=discipline, io_in_thread=live)
        if live:
            result = trio.run(_bench, disk, samples, seq_bytes, seed, True)
        else:
            result = sched.run_virtual(_bench, disk, samples, seq_bytes, seed, False)
    model_view: dict[str, Any] = {}
    if spec.kind != "none":
        model_view["random_read_4k_ms"] = expected_random_read_s(spec, size, 4096)["total"] * 1e3
        model_view["random_read_8k_ms"] = expected_random_read_s(spec, size, 8192)["total"] * 1e3
    if spec.kind == "hdd":
        model_view["zone_rate_outer_mb_s"] = zone_sequential_rate(spec, disk.mechanism.geometry.used_zones[0].index) / 1e6
        model_view["zone_rate_inner_mb_s"] = zone_sequential_rate(spec, disk.mechanism.geometry.used_zones[-1].index) / 1e6
    return {
        "model": model,
        "clock": clock,
        "size": size,
        "discipline": discipline,
        "samples": samples,
        "sequential_bytes": seq_bytes,
        **result,
        "closed_form": model_view,
    }
