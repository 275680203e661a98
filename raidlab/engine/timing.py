"""One logical request timed on a drive model: what `raidlab explain --timing` prints.

Why: a layout's plan says which member reads and writes a request costs; how long they take
depends on the drives. OSTEP's RAID simulator times each request with a seek and transfer
model; raidlab has the drive catalog's models (raidlab.disks.catalog), so the same plan is
run on them: the layout's members become emulated drives of one model (each starting with
its arm at cylinder 0 and an empty cache), the engine's Array serves the request in virtual
time on raidlab's kernel, and every member operation the drives serve is recorded with what
its time went on (the model's Plan: controller overhead, seek, rotational wait, transfer,
track switches) and how long it queued behind another.

The Array is the engine's own (raidlab.engine.array), so the timing includes what the
engine does beyond the plan explain prints: reads before writes, a member's contiguous
writes joined into one request. The members hold the layout's disk size in memory (zeros);
the model gives each member request its place on the platter by its offset, so a small
layout sits on the drive's outer cylinders.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from raidlab import sched
from raidlab.disks import EmulatedDisk, MemoryBackend
from raidlab.disks.mechanisms import SERVICE_PARTS
from raidlab.engine.array import Array
from raidlab.engine.layouts.base import Layout
from raidlab.sched import run_virtual


@dataclasses.dataclass(frozen=True)
class MemberOp:
    """One request a member drive served: when it arrived and started, what it cost."""

    disk: int
    op: str
    offset: int          # member byte offset
    length: int
    arrived: float       # seconds from the logical request's start
    started: float
    ended: float
    parts: dict[str, float]  # SERVICE_PARTS -> seconds
    cache_hit: bool

    @property
    def queued(self) -> float:
        return self.started - self.arrived


@dataclasses.dataclass(frozen=True)
class Timing:
    """A logical request's response time and the member operations it took."""

    model: str
    seconds: float
    ops: tuple[MemberOp, ...]
    responses: tuple[float, ...] = ()

    def per_disk(self, n_disks: int) -> list[dict[str, float]]:
        """Per member: operations, busy seconds and each part's seconds, queued seconds."""
        out = []
        for disk in range(n_disks):
            mine = [o for o in self.ops if o.disk == disk]
            row = {"ops": float(len(mine)), "busy": sum(o.ended - o.started for o in mine),
                   "queued": sum(o.queued for o in mine)}
            for part in SERVICE_PARTS:
                row[part] = sum(o.parts[part] for o in mine)
            out.append(row)
        return out


def time_request(layout: Layout, model: str, offset: int, length: int, *, write: bool,
                 failed: frozenset[int] = frozenset()) -> Timing:
    """Serve one request on `layout` over members of drive `model` in virtual time."""
    return time_requests(layout, model, [(offset, length, write)], failed=failed)


def time_requests(layout: Layout, model: str, requests: list[tuple[int, int, bool]], *,
                  failed: frozenset[int] = frozenset()) -> Timing:
    """Serve `requests` ((offset, length, write) each) one after another, each issued when
    the one before it completed (one outstanding, as OSTEP's simulator times a workload), on
    `layout` over members of drive `model` in virtual time. `seconds` is the whole run's,
    `responses` each request's."""
    ops: list[MemberOp] = []
    responses: list[float] = []

    async def main() -> float:
        async with sched.open_nursery() as nursery:
            disks = [EmulatedDisk(f"d{i}", model, MemoryBackend(layout.disk_size)) for i in range(layout.n_disks)]
            t0 = sched.current_time()
            for index, disk in enumerate(disks):
                disk.observer = _recorder(ops, index, t0)
                disk.start(nursery)
            array = Array("explain", layout, disks)
            for index in sorted(failed):
                disks[index].failed = True
                await array.fail_member(index)
            for offset, length, write in requests:
                issued = sched.current_time()
                if write:
                    await array.write(offset, bytes(length))
                else:
                    await array.read(offset, length)
                responses.append(sched.current_time() - issued)
            elapsed = sched.current_time() - t0
            nursery.cancel_scope.cancel()
        return elapsed

    seconds = run_virtual(main)
    return Timing(model, seconds, tuple(sorted(ops, key=lambda o: (o.started, o.disk))), tuple(responses))


def _recorder(ops: list[MemberOp], disk: int, t0: float):
    def observe(op: str, offset: int, length: int, arrival: float, plan: Any) -> None:
        ops.append(MemberOp(disk, op, offset, length, arrival - t0, plan.start - t0, plan.end - t0,
                            {part: getattr(plan, part) for part in SERVICE_PARTS}, bool(plan.cache_hit)))
    return observe


def workload_lines(timing: Timing, layout: Layout) -> list[str]:
    """A workload's timing: the whole run, the responses, and a line per disk, in ms."""
    ms = lambda s: f"{s * 1000:.2f}"  # noqa: E731
    n = len(timing.responses)
    lines = [f"TIMING on {timing.model} (one request outstanding; the members start idle, arms at cylinder 0): "
             f"{n} requests in {ms(timing.seconds)} ms, response mean {ms(sum(timing.responses) / n)} ms, "
             f"max {ms(max(timing.responses))} ms"]
    lines += _per_disk_lines(timing, layout)
    return lines


def _per_disk_lines(timing: Timing, layout: Layout) -> list[str]:
    ms = lambda s: f"{s * 1000:.2f}"  # noqa: E731
    lines = [f"  {'disk':>4s} {'ops':>5s} {'busy':>9s} {'util':>5s} {'seek':>9s} {'rotation':>9s} {'transfer':>9s} "
             f"{'queued':>9s}  (ms)"]
    for disk, row in enumerate(timing.per_disk(layout.n_disks)):
        util = row["busy"] / timing.seconds if timing.seconds else 0.0
        lines.append(f"  {disk:>4d} {int(row['ops']):>5d} {ms(row['busy']):>9s} {util:>5.2f} {ms(row['seek']):>9s} "
                     f"{ms(row['rotation']):>9s} {ms(row['transfer']):>9s} {ms(row['queued']):>9s}")
    return lines


def timing_lines(timing: Timing, layout: Layout, block: int) -> list[str]:
    """The member operations in the order they started, then a line per disk, in ms."""
    ms = lambda s: f"{s * 1000:.2f}"  # noqa: E731
    lines = [f"TIMING on {timing.model} (each member starts idle, arm at cylinder 0): "
             f"the request took {ms(timing.seconds)} ms"]
    lines.append(f"  {'op':5s} {'disk':>4s} {'member blocks':>14s} {'arrived':>8s} {'queued':>7s} "
                 + " ".join(f"{p:>10s}" for p in SERVICE_PARTS) + f" {'ended':>8s}")
    for o in timing.ops:
        first = (o.offset - layout.data_offset) // block
        last = (o.offset - layout.data_offset + o.length - 1) // block
        where = f"{first}" if first == last else f"{first}..{last}"
        lines.append(f"  {o.op:5s} {o.disk:>4d} {where:>14s} {ms(o.arrived):>8s} {ms(o.queued):>7s} "
                     + " ".join(f"{ms(o.parts[p]):>10s}" for p in SERVICE_PARTS)
                     + f" {ms(o.ended):>8s}" + (" (cache hit)" if o.cache_hit else ""))
    lines += _per_disk_lines(timing, layout)
    return lines
