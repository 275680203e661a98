"""A reference executor: runs layout plans synchronously on in-memory members.

Why: a plan is only correct if executing it gives the right bytes. This executor is the
simplest possible one (bytearrays, no concurrency, no clock), so it defines what the trio
engine must reproduce, and the property tests use it to check that every write plan keeps
mirrors and parity consistent and that every degraded read and rebuild returns the data
that was written. Reading a failed member raises, so a plan that touches a failed disk is
caught. It is for unit tests and teaching only (DESIGN: in-memory disks are for pure unit
tests and virtual time), never a storage backend.
"""

from __future__ import annotations

from collections.abc import Iterable

from raidlab.engine.layouts.base import DiskRange, Layout, ReadPlan, WritePlan


class FailedMemberRead(AssertionError):
    """A plan asked to read or write a member marked failed."""


class MemoryArray:
    """Members as bytearrays of `layout.disk_size`; `failed` members refuse I/O."""

    def __init__(self, layout: Layout):
        self.layout = layout
        self.disks = [bytearray(layout.disk_size) for _ in range(layout.n_disks)]
        self.failed: set[int] = set()
        self.reads = 0
        self.writes = 0

    def _read_range(self, rng: DiskRange) -> bytes:
        if rng.disk in self.failed:
            raise FailedMemberRead(f"plan reads failed member {rng.disk}")
        self.reads += 1
        return bytes(self.disks[rng.disk][rng.disk_offset : rng.end])

    def execute_write(self, plan: WritePlan, data: bytes) -> None:
        buffers = [self._read_range(r) for r in plan.reads]
        for ext, payload in zip(plan.writes, plan.payloads(data, buffers)):
            if ext.disk in self.failed:
                raise FailedMemberRead(f"plan writes failed member {ext.disk}")
            self.writes += 1
            self.disks[ext.disk][ext.disk_offset : ext.end] = payload

    def execute_read(self, plan: ReadPlan) -> bytes:
        return plan.assemble([self._read_range(r) for r in plan.reads])

    def write(self, offset: int, data: bytes) -> WritePlan:
        plan = self.layout.write_plan(offset, len(data), self.failed)
        self.execute_write(plan, data)
        return plan

    def read(self, offset: int, length: int) -> bytes:
        return self.execute_read(self.layout.degraded_read_plan(offset, length, self.failed))

    def fail(self, disks: Iterable[int], *, scribble: bool = True) -> None:
        """Mark members failed; by default overwrite their contents so stale reads show."""
        for disk in disks:
            self.failed.add(disk)
            if scribble:
                self.disks[disk][:] = b"\xa5" * len(self.disks[disk])

    def replace(self, disk: int, *, step: int | None = None) -> None:
        """Rebuild member `disk` onto a fresh (zeroed) member from the others, like `raidlab replace`."""
        layout = self.layout
        others_failed = self.failed - {disk}
        fresh = bytearray(layout.disk_size)
        step = step or layout.chunk_bytes
        start, end = layout.data_offset, layout.data_offset + layout.member_data_size
        for pos in range(start, end, step):
            n = min(step, end - pos)
            plan = layout.rebuild_plan(disk, pos, n, others_failed)
            fresh[pos : pos + n] = self.execute_read(plan)
        self.disks[disk] = fresh
        self.failed.discard(disk)
