"""The `bonnie` workload in virtual time: Bonnie's six tests from one node of the cluster's twin.

RAID-x §10 (Fig. 11) runs Bonnie with a 500 MB file on each ds-RAID and plots the rate of
each test against the number of disks. The live workload (raidlab.workloads.bonnie) runs
bonnie++ through a real file system; virtual time has none, so this module issues what
Bonnie's run sends to the array, against the same engine code, disk models and twin
(raidlab.cluster.twin), in Bonnie's own order (Bray's Bonnie, the program the paper names):

1. **per-character write**: putc() of every byte. The client's processor runs the putc loop
   at `putc_mb_s`; every `request_kb` of file the kernel's write-behind hands a write to
   the array, at most `write_depth` in flight (a full request table stalls the writer, as
   the buffer cache's dirty limit did once the file outgrew memory).
2. **rewrite**: each `request_kb` read (through the read-ahead window, `read_depth`
   requests in flight), copied to the program and back (`copy_mb_s`, twice), and written
   behind.
3. **block write**: write() of the file, each piece copied into the buffer cache at
   `copy_mb_s`, written behind.
4. **per-character read**: getc() at `getc_mb_s` over a read-ahead stream.
5. **block read**: read() (a copy at `copy_mb_s`) over a read-ahead stream.
6. **random seeks**: `seekers` processes share `seeks` tickets; each ticket reads
   `chunk_kb` at a random `fs_block_kb`-aligned place of the file; every `update_every`-th
   seek of a process (its first, then every tenth) writes the chunk back, behind. Rate =
   seeks / (the last seeker's end - the start).

A write phase ends when the program closes the file (Bonnie times the close, not an fsync);
what is still being written behind then (at most `write_depth` requests) is finished before
the next phase, untimed. Every read misses: the 500 MB file is many times the memory of the
paper's nodes (§10.1: "large enough to avoid the buffer caching effects"). The program's
processor time (the loops and copies, at the rates above) runs on the client node's
processor, the same one that does the node's driver work (raidlab.cluster.twin: every node
a machine of the scenario's [host]), so a putc loop and the driver compete as they did on
the paper's nodes.

Rates are MB/s (10^6 bytes per second) of the file's 2^20-byte megabytes (Bonnie's -s),
and seeks per second. Deterministic for a (spec, params) pair except `speed` (wall clock).
"""

from __future__ import annotations

import random
from typing import Any

from raidlab import sched
from raidlab.cluster.twin import CLIENT, Network, on_twin
from raidlab.errors import UsageError
from raidlab.runners.virtual import SimSpec, build_virtual, run_timed
from raidlab.workloads.bonnie import resolve_sim as resolve

KiB = 1024
MiB = 1024 * KiB
PHASES = ("char_write", "rewrite", "block_write", "char_read", "block_read", "random_seeks")




class _WriteBehind:
    """Writes handed to the array in the background, at most `depth` in flight."""

    def __init__(self, target: Any, depth: int, nursery: sched.Nursery) -> None:
        self.target, self.depth, self.nursery = target, depth, nursery
        self.slots = sched.Semaphore(depth)

    async def put(self, offset: int, data: bytes) -> None:
        await self.slots.acquire()
        self.nursery.start_soon(self._write, offset, data)

    async def _write(self, offset: int, data: bytes) -> None:
        try:
            await self.target.write(offset, data)
        finally:
            self.slots.release()

    async def drain(self) -> None:
        for _ in range(self.depth):
            await self.slots.acquire()
        for _ in range(self.depth):
            self.slots.release()


async def _read_stream(target: Any, offsets: range, length: int, depth: int, consume) -> None:
    """Read `offsets` in order through a window of `depth` requests; `consume(offset)` each
    piece in order, a slot freed once it is consumed."""
    window = sched.Semaphore(depth)
    done: dict[int, sched.Event] = {}

    async def read_one(offset: int) -> None:
        await target.read(offset, length)
        done.setdefault(offset, sched.Event()).set()

    async def consumer() -> None:
        for offset in offsets:
            await done.setdefault(offset, sched.Event()).wait()
            del done[offset]
            await consume(offset)
            window.release()

    async with sched.open_nursery() as readers:
        readers.start_soon(consumer)
        for offset in offsets:
            await window.acquire()
            readers.start_soon(read_one, offset)


async def _run(spec: SimSpec, p: dict[str, Any]) -> dict[str, Any]:
    size = p["file_mb"] * MiB
    req = p["request_kb"] * KiB
    base = p["file_offset_kb"] * KiB
    me = p["client"]
    holder: dict[str, Any] = {}

    async with sched.open_nursery() as nursery:
        built = await build_virtual(spec, nursery, wrap_members=on_twin(p, p["client"] + 1, holder, spec.host))
        network: Network = holder["network"]
        target = built.target
        if base + size > target.size:
            raise UsageError(f"a {p['file_mb']} MiB file at {p['file_offset_kb']} KiB does not fit in "
                             f"{spec.arch}'s {target.size} bytes")
        members = built.members
        CLIENT.set(me)  # every request below, and the tasks started for it, is this node's
        payload = bytes(req)
        offsets = range(base, base + size, req)
        per_byte = {"putc": 1 / (p["putc_mb_s"] * 1e6), "getc": 1 / (p["getc_mb_s"] * 1e6),
                    "copy": 1 / (p["copy_mb_s"] * 1e6)}
        rng = random.Random(p["seed"])
        phases: dict[str, dict[str, Any]] = {}

        def snapshot() -> tuple:
            return (sched.current_time(), [m.statistics() for m in members], network.statistics()["nodes"])

        def record(name: str, before: tuple, amount: float, unit: str) -> None:
            t0, members0, nodes0 = before
            seconds = sched.current_time() - t0
            members1, nodes1 = [m.statistics() for m in members], network.statistics()["nodes"]
            node0, node1 = nodes0[me], nodes1[me]
            rate = amount / seconds if seconds > 0 else 0.0
            phases[name] = {
                "seconds": seconds, unit: rate / 1e6 if unit == "mb_s" else rate,
                "client_cpu_utilization": ((node1["cpu_busy_s"] - node0["cpu_busy_s"]) / (seconds * node1["processors"])
                                           if seconds else 0.0),
                "client_program_cpu_s": node1["program_cpu_s"] - node0["program_cpu_s"],
                "client_bytes_sent": node1["bytes_sent"] - node0["bytes_sent"],
                "client_bytes_received": node1["bytes_received"] - node0["bytes_received"],
                "members": [{"name": m.name, "reads": b["reads"] - a["reads"], "writes": b["writes"] - a["writes"],
                             "bytes_read": b["bytes_read"] - a["bytes_read"],
                             "bytes_written": b["bytes_written"] - a["bytes_written"],
                             "utilization": (b["busy_time"] - a["busy_time"]) / seconds if seconds else 0.0}
                            for m, a, b in zip(members, members0, members1)],
            }

        async with sched.open_nursery() as background:
            behind = _WriteBehind(target, p["write_depth"], background)

            async def write_phase(name: str, rate: float) -> None:
                before = snapshot()
                for offset in offsets:
                    await network.compute(me, req * rate)
                    await behind.put(offset, payload)
                record(name, before, size, "mb_s")
                await behind.drain()

            async def read_phase(name: str, rate: float, rewrite: bool = False) -> None:
                before = snapshot()

                async def consume(offset: int) -> None:
                    await network.compute(me, req * rate)
                    if rewrite:
                        await behind.put(offset, payload)

                await _read_stream(target, offsets, req, p["read_depth"], consume)
                record(name, before, size, "mb_s")
                await behind.drain()

            await write_phase("char_write", per_byte["putc"])
            await read_phase("rewrite", 2 * per_byte["copy"], rewrite=True)
            await write_phase("block_write", per_byte["copy"])
            await read_phase("char_read", per_byte["getc"])
            await read_phase("block_read", per_byte["copy"])

            # random seeks: tickets shared by the seekers, as Bonnie's pipe of tickets
            chunk = p["chunk_kb"] * KiB
            align = p["fs_block_kb"] * KiB
            places = (size - chunk) // align + 1
            tickets = [p["seeks"]]
            writes_back = [0]

            async def seeker() -> None:
                count = 0
                while tickets[0] > 0:
                    tickets[0] -= 1
                    offset = base + rng.randrange(places) * align
                    await target.read(offset, chunk)
                    await network.compute(me, chunk * per_byte["copy"])
                    if count % p["update_every"] == 0:
                        writes_back[0] += 1
                        await behind.put(offset, bytes(chunk))
                    count += 1

            before = snapshot()
            async with sched.open_nursery() as seekers:
                for _ in range(p["seekers"]):
                    seekers.start_soon(seeker)
            record("random_seeks", before, p["seeks"], "per_s")
            phases["random_seeks"]["writes_back"] = writes_back[0]
            await behind.drain()
        arch_stats = built.statistics()
        nursery.cancel_scope.cancel()

    return {"params": p, "file_bytes": size, "phases": phases, "volume_bytes": target.size,
            "architecture": arch_stats, "network": network.statistics()}


def run_bonnie(spec: SimSpec, params: dict[str, Any]) -> dict[str, Any]:
    """Bonnie's six tests from one node of the twin (module doc) on `spec`'s architecture."""
    p = resolve(params)
    return run_timed(_run, spec, p)
