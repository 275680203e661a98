"""RAID1: every member holds a full copy, at the same offset (md raid1).

The chunk plays no part in placement; it only bounds the pieces `copies()` reports (so read
balancing can spread a large read over mirrors) and need not divide the member size.
Disk 0 holds the primary ("data"), the others "mirror" copies.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from raidlab.engine.layouts.base import ChunkMappedLayout


@dataclasses.dataclass(frozen=True, kw_only=True)
class Raid1Layout(ChunkMappedLayout):
    name: ClassVar[str] = "raid1"
    summary: ClassVar[str] = "mirroring over every member"
    source: ClassVar[str] = "md's RAID 1"
    min_disks: ClassVar[int] = 2
    uses_chunks: ClassVar[bool] = False
    failure_rule: ClassVar[str] = "survives any failures that leave one member"
    md_read_policy: ClassVar[str] = ("md's read_balance would take the copy whose disk is idle or whose head is "
                                     "nearest, and keep a sequential read on one disk")

    def _placement_period(self) -> int:
        return 1

    def _capacity(self) -> int:
        return self.member_data_size

    def _chunk_places(self, chunk: int) -> tuple[tuple[int, int, str], ...]:
        return tuple((disk, chunk, "data" if disk == 0 else "mirror") for disk in range(self.n_disks))

    def _chunk_at(self, disk: int, row: int) -> tuple[int, int] | None:
        if row * self.chunk_bytes >= self.member_data_size:
            return None
        return row, disk
