"""The `seqfile` workload in virtual time: write one file, fsync, drop caches, read it back.

McCormick §3.1: "all of the read and write tests were done by invoking the read and write
system calls followed by an fsync system call", one file of 64 KB, 1 MB or 256 MB in 4 KB
blocks; the figures give the bandwidth of the write and of the read. The live workload
(raidlab.workloads.seqfile) runs exactly that through a real file system. Virtual time has
no file system, so this module issues what such a run sends to the array, against the same
engine code and drive models:

* write phase: the file's blocks, in file order, as `block_kb` requests with at most
  `write_depth` in flight (fsync hands every dirty buffer of the file to the block layer at
  once; the depth stands for the kernel's request table), then the file's inode block
  (`metadata`). The member drives merge queued contiguous requests, as a block layer does.
* read phase, caches cold (the page cache dropped; the drives keep their own buffers, as the
  paper's disks did, §3.2): the inode block, then the file's blocks in order with at most
  `read_depth` in flight (the kernel's read-ahead window).
* random reads (optional, `random_reads` > 0; the paper's future work, §3.2 and §4): after
  the read, that many reads of `random_kb` (the paper suggests twice the chunk) at random
  block-aligned places inside the file, `random_depth` in flight, seeded by `seed`; the
  drives' buffers then hold little of what is asked.
* host (the scenario's [host], raidlab.disks.host; none: nothing charged): the paper's
  explanation of its ceilings (§3.2) as a model. A write first copies the whole file into
  the buffer cache (a copy on the program's processor, 0), and the fsync starts after that
  ("the system first waits for the data to be copied to the OS buffers, then copies the data
  out to disk. There is no overlap"); a read copies each block to the user on the program's
  processor, overlapped with the reads still in flight, and a block's read-ahead slot frees
  once it is copied. Every request the volume is sent costs the host's per-request cost, on
  whichever processor is free first.

Bandwidth of a phase = file bytes / the phase's virtual seconds, in MB/s (10^6 bytes/s). The
file starts at `file_offset` of the volume and the inode block lies at `inode_offset`
(assumed places: ext2 puts a first file after its block group's bitmaps and inode table,
near the start of a fresh file system).
"""

from __future__ import annotations

import random
from typing import Any

from raidlab import sched
from raidlab.errors import UsageError
from raidlab.workloads.seqfile import resolve_sim as resolve
from raidlab.runners.virtual import SimSpec, build_virtual, layout_report, run_timed

KiB = 1024
PROGRAM_CPU = 0  # the processor the benchmark program (and its copies) runs on


async def _run(spec: SimSpec, p: dict[str, Any]) -> dict[str, Any]:
    block = p["block_kb"] * KiB
    size = p["file_kb"] * KiB
    start = p["file_offset_kb"] * KiB
    inode = p["inode_offset_kb"] * KiB
    async with sched.open_nursery() as nursery:
        built = await build_virtual(spec, nursery)
        target = built.target
        if start + size > target.size or inode + block > target.size:
            raise UsageError(f"a {p['file_kb']} KiB file at {p['file_offset_kb']} KiB does not fit in "
                             f"{spec.arch}'s {target.size} bytes")
        if p["metadata"] and start < inode + block and inode < start + size:
            raise UsageError("the inode block lies inside the file", hint="move inode_offset_kb or file_offset_kb")
        if hasattr(target, "merge_queued_requests"):
            # A drive used as the volume itself (`disk`) sits behind the kernel's block layer,
            # which merges queued contiguous requests; arrays merge at their members.
            target.merge_queued_requests()
        members = built.members
        before = [m.statistics() for m in members]
        bus = built.parts.get("bus")
        bus_before = bus.statistics() if bus is not None else None
        host = built.parts.get("host")
        payload = bytes(block)

        async def request() -> None:
            if host is not None:
                await host.charge("request")

        # -- write: copy into the buffer cache, then fsync (every block, then the inode)
        t0 = sched.current_time()
        if host is not None:
            await host.charge("copy", size, cpu=PROGRAM_CPU)
        copied_at = sched.current_time()
        limit = sched.Semaphore(p["write_depth"])

        async def write_one(offset: int) -> None:
            try:
                await request()
                await target.write(offset, payload)
            finally:
                limit.release()

        async with sched.open_nursery() as writers:
            for offset in range(start, start + size, block):
                await limit.acquire()
                writers.start_soon(write_one, offset)
        if p["metadata"]:
            await request()
            await target.write(inode, payload)
        await target.flush()
        write_s = sched.current_time() - t0
        after_write = [m.statistics() for m in members]

        # -- read, caches cold: the inode, then the blocks through the read-ahead window
        t1 = sched.current_time()
        if p["metadata"]:
            await request()
            await target.read(inode, block)
        window = sched.Semaphore(p["read_depth"])
        done: dict[int, sched.Event] = {}

        async def read_one(offset: int) -> None:
            await request()
            await target.read(offset, block)
            done.setdefault(offset, sched.Event()).set()

        async def consumer() -> None:
            for offset in range(start, start + size, block):
                await done.setdefault(offset, sched.Event()).wait()
                if host is not None:
                    await host.charge("copy", block, cpu=PROGRAM_CPU)
                del done[offset]
                window.release()

        async with sched.open_nursery() as readers:
            readers.start_soon(consumer)
            for offset in range(start, start + size, block):
                await window.acquire()
                readers.start_soon(read_one, offset)
        read_s = sched.current_time() - t1
        after_read = [m.statistics() for m in members]

        # -- random reads inside the file (the paper's future work, §3.2 and §4)
        t2 = sched.current_time()
        rng = random.Random(p["seed"])
        piece = p["random_kb"] * KiB
        slots = (size - piece) // block + 1
        responses: list[float] = []
        pending = sched.Semaphore(p["random_depth"])

        async def random_one(offset: int) -> None:
            began = sched.current_time()
            try:
                await request()
                await target.read(offset, piece)
                if host is not None:
                    await host.charge("copy", piece, cpu=PROGRAM_CPU)
            finally:
                responses.append(sched.current_time() - began)
                pending.release()

        async with sched.open_nursery() as randoms:
            for _ in range(p["random_reads"]):
                await pending.acquire()
                randoms.start_soon(random_one, start + rng.randrange(slots) * block)
        random_s = sched.current_time() - t2
        after_random = [m.statistics() for m in members]
        bus_after = bus.statistics() if bus is not None else None
        arch_stats = built.statistics()
        keeper = built.parts.get("keeper")
        arch_state = keeper.superblock.arch_state if keeper is not None else None
        nursery.cancel_scope.cancel()

    def phase(a: list[dict], b: list[dict], seconds: float) -> list[dict]:
        out = []
        for m, x, y in zip(members, a, b):
            busy = y["busy_time"] - x["busy_time"]
            out.append({"name": m.name, "reads": y["reads"] - x["reads"], "writes": y["writes"] - x["writes"],
                        "bytes_read": y["bytes_read"] - x["bytes_read"],
                        "bytes_written": y["bytes_written"] - x["bytes_written"],
                        "busy_s": busy, "utilization": busy / seconds if seconds > 0 else 0.0})
        return out

    report: dict[str, Any] = {
        "params": p,
        "file_bytes": size,
        "write_seconds": write_s,
        "write_copy_seconds": copied_at - t0,
        "host": host.statistics(elapsed=write_s + read_s + random_s) if host is not None else None,
        "read_seconds": read_s,
        "write_mb_s": size / write_s / 1e6,
        "read_mb_s": size / read_s / 1e6,
        "volume_bytes": target.size,
        "members_write": phase(before, after_write, write_s),
        "members_read": phase(after_write, after_read, read_s),
        "architecture": arch_stats,
        "arch_state": arch_state,
        "layout": layout_report(spec, members) if (spec.partitions or spec.drives) else None,
    }
    if p["random_reads"]:
        report.update({
            "random_seconds": random_s,
            "random_mb_s": p["random_reads"] * piece / random_s / 1e6,
            "random_mean_ms": sum(responses) / len(responses) * 1e3,
            "members_random": phase(after_read, after_random, random_s),
        })
    if bus is not None:
        report["bus"] = {k: bus_after[k] - bus_before[k] for k in ("transfers", "bytes", "busy_s", "wait_s")} | {
            "rate_mb_s": bus_after["rate_mb_s"], "mode": bus_after["mode"],
            "utilization": (bus_after["busy_s"] - bus_before["busy_s"]) / (write_s + read_s + random_s)}
    return report


def run_stream(spec: SimSpec, params: dict[str, Any]) -> dict[str, Any]:
    """Write then read one file on `spec`'s architecture in virtual time (module doc); the
    report is deterministic except `speed` (wall clock)."""
    p = resolve(params)
    return run_timed(_run, spec, p)
