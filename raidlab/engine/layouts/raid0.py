"""RAID0: striping without redundancy, md's layout for equal-sized members.

Chunk c lives on disk c mod n at chunk row c div n (md raid0 with one zone: all members the
same size, which the engine enforces). This is also the "original RAID-0" the SA-RAID paper
compares against (its §2.1: "modulo of the block number by the number of disks ... integer
division between the logical block number and the number of disks").
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from raidlab.engine.layouts.base import ChunkMappedLayout


@dataclasses.dataclass(frozen=True, kw_only=True)
class Raid0Layout(ChunkMappedLayout):
    name: ClassVar[str] = "raid0"
    summary: ClassVar[str] = "striping, no redundancy"
    source: ClassVar[str] = 'md\'s RAID 0; the SA-RAID paper\'s "original" striping'
    min_disks: ClassVar[int] = 1
    failure_rule: ClassVar[str] = "no failure survives: every member holds data of its own"

    def _capacity(self) -> int:
        return self.n_disks * self.chunks_per_disk * self.chunk_bytes

    def _chunk_places(self, chunk: int) -> tuple[tuple[int, int, str], ...]:
        row, disk = divmod(chunk, self.n_disks)
        return ((disk, row, "data"),)

    def _chunk_at(self, disk: int, row: int) -> tuple[int, int] | None:
        if row >= self.chunks_per_disk:
            return None
        return row * self.n_disks + disk, 0
