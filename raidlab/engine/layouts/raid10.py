"""RAID10 exactly as md places it: near (default n2), far (f2) and offset (o2) copies.

Follows Linux drivers/md/raid10.c, `__raid10_find_phys` (mapping) and `raid10_find_virt`
(reverse), with `calc_sectors` for the capacity and the far stride (read from
torvalds/linux at commit 0021b7bc045e4b0b85d8c53614342aaf84ca96a5). md's own comment:

    Chunks are laid out in raid0 style with near_copies copies of the first chunk,
    followed by near_copies copies of the next chunk and so on. If far_copies > 1, then
    after 1/far_copies of the array has been assigned as described above, we start again
    with a device offset of near_copies.

So with near=2 on 4 disks chunk c sits on disks (2c mod 4, 2c+1 mod 4), row 2c div 4: the
mirror pairs are (0,1) and (2,3). With an odd number of disks (md allows n2 on 3 disks) the
pairs rotate: (0,1), (2,0), (1,2), ... so any two failed disks lose something.

The RAID-x paper's Fig. 2b draws RAID-10 as mirrored pairs; md's n2 on an even number of
disks is exactly that, so raidlab uses md's layout (an md array's members can then be read
by the engine and vice versa).

Departure from md: md's `far_set_size` (the "use far sets" layout bit) is always the whole
array here, which is mdadm's default.
"""

from __future__ import annotations

import dataclasses
import re
from functools import cached_property
from typing import ClassVar

from raidlab.engine.layouts.base import ChunkMappedLayout
from raidlab.errors import UsageError

_LAYOUT_RE = re.compile(r"^([nfo])([1-9][0-9]*)$")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Raid10Layout(ChunkMappedLayout):
    """layout: md's spelling, "n2" (near, default), "f2" (far) or "o2" (offset)."""

    layout: str = "n2"

    name: ClassVar[str] = "raid10"
    md_read_policy: ClassVar[str] = ("md's read_balance would take the copy whose disk is idle or whose head is "
                                     "nearest, and keep a sequential read on one disk")
    summary: ClassVar[str] = "striped mirrors (near, far or offset copies)"
    source: ClassVar[str] = "md's RAID 10"
    option_help: ClassVar[dict[str, str]] = {"layout": "md's raid10 layout: n2, f2, o2 (copies near, far, offset)"}
    min_disks: ClassVar[int] = 2

    @property
    def failure_rule(self) -> str:  # type: ignore[override]
        if self.near_copies == 2 and self.far_copies == 1 and self.n_disks % 2 == 0:
            return "survives any failures that do not hit both disks of a mirror pair (0,1), (2,3), ..."
        return "survives any failures that leave one copy of every chunk (see failure_groups)"

    @cached_property
    def _parsed(self) -> tuple[int, int, bool]:
        match = _LAYOUT_RE.match(str(self.layout))
        if not match:
            raise UsageError(
                f"raid10 layout {self.layout!r} is not understood",
                hint='use md\'s spelling: "n2" (near), "f2" (far) or "o2" (offset)',
            )
        kind, copies = match.group(1), int(match.group(2))
        if kind == "n":
            return copies, 1, False
        return 1, copies, kind == "o"

    @property
    def near_copies(self) -> int:
        return self._parsed[0]

    @property
    def far_copies(self) -> int:
        return self._parsed[1]

    @property
    def far_offset(self) -> bool:
        return self._parsed[2]

    @property
    def total_copies(self) -> int:
        return self.near_copies * self.far_copies

    def _validate_options(self) -> None:
        copies = self.total_copies
        if copies < 2:
            raise UsageError(f"raid10 layout {self.layout!r} keeps one copy", hint="use n2, f2 or o2")
        if copies > self.n_disks:
            raise UsageError(
                f"raid10 layout {self.layout!r} needs at least {copies} disks, got {self.n_disks}",
                hint=f"use --disks {copies} or more",
            )

    @cached_property
    def _array_chunks(self) -> int:
        # calc_sectors(): size = dev_chunks / far_copies * raid_disks / near_copies
        return (self.chunks_per_disk // self.far_copies) * self.n_disks // self.near_copies

    @cached_property
    def stride_chunks(self) -> int:
        """md's geo->stride in chunks: the distance between far copies on one device."""
        if self.far_offset:
            return 1
        used_per_device = -(-self._array_chunks * self.total_copies // self.n_disks)
        return used_per_device // self.far_copies

    def _capacity(self) -> int:
        return self._array_chunks * self.chunk_bytes

    def _chunk_places(self, chunk: int) -> tuple[tuple[int, int, str], ...]:
        n, near, far = self.n_disks, self.near_copies, self.far_copies
        stripe, dev = divmod(chunk * near, n)
        if self.far_offset:
            stripe *= far
        places: list[tuple[int, int, str]] = []
        for _ in range(near):
            disk, row = dev, stripe
            places.append((disk, row, "data" if not places else "mirror"))
            for _f in range(1, far):
                disk = (disk + near) % n
                row += self.stride_chunks
                places.append((disk, row, "mirror"))
            dev += 1
            if dev >= n:
                dev = 0
                stripe += 1
        return tuple(places)

    def _chunk_at(self, disk: int, row: int) -> tuple[int, int] | None:
        # raid10_find_virt(), then a check that the chunk really has a copy here (rows past
        # the used part of the device, or md's rounding, map to nothing).
        n, near, far = self.n_disks, self.near_copies, self.far_copies
        dev = disk
        if self.far_offset:
            chunk_row, fc = divmod(row, far)
            dev -= fc * near
            if dev < 0:
                dev += n
        else:
            chunk_row = row
            while chunk_row >= self.stride_chunks:
                chunk_row -= self.stride_chunks
                dev = dev + n - near if dev < near else dev - near
        chunk = (chunk_row * n + dev) // near
        if chunk >= self._array_chunks:
            return None
        for copy, (pdisk, prow, _role) in enumerate(self._chunk_places(chunk)):
            if pdisk == disk and prow == row:
                return chunk, copy
        return None
