"""The engine reading an md array's member images, read-only: md as the engine's oracle.

Why: the engine's raid0, raid5 (left-symmetric) and raid10 (near/far/offset) claim md's exact
placement (their module headers cite drivers/md). The strongest check of that claim is
md itself: md in the lab VM writes a pattern, then this module opens the same images
*read-only*, takes data offset / chunk / level / layout / slot order from md's 1.2
superblocks (md_superblock.py), builds the engine layout with create_layout and serves reads
through the engine's own Array (raidlab.engine.array), including degraded reads with a
member missing (the engine reconstructs from parity or the other copy).

Members are opened O_RDONLY and read with os.pread; a missing member (None) is passed to the
Array as failed, never read.
"""

from __future__ import annotations

import os
from pathlib import Path

from raidlab.baselines.md_superblock import engine_layout_params, order_members, read_superblock
from raidlab.engine.array import Array
from raidlab.engine.layouts import create_layout


class ReadOnlyImage:
    """A member image the engine may read and must never write."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        self.size = os.fstat(self.fd).st_size

    async def read(self, offset: int, length: int) -> bytes:
        data = os.pread(self.fd, length, offset)
        if len(data) != length:
            raise OSError(f"{self.path}: short read at {offset}")
        return data

    async def write(self, offset: int, data: bytes, *, fua: bool = False) -> None:
        raise PermissionError(f"{self.path} is opened read-only (md oracle)")

    async def flush(self) -> None:
        return None

    def statistics(self) -> dict:
        return {}

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class _Missing:
    """Stands for a removed member: any access is a bug (the Array knows it is failed)."""

    def __init__(self, size: int):
        self.size = size

    async def read(self, offset: int, length: int) -> bytes:
        raise AssertionError("the engine read a member that was removed")

    async def write(self, offset: int, data: bytes, *, fua: bool = False) -> None:
        raise AssertionError("the engine wrote a member that was removed")

    async def flush(self) -> None:
        return None

    def statistics(self) -> dict:
        return {}


def _md_layout(paths: list[str | os.PathLike]):
    """md's superblocks of the member images `paths`, their slot order, the members' size and
    the engine layout those superblocks describe."""
    supers = [read_superblock(p) for p in paths]
    order = order_members(supers)
    disk_size = min(os.path.getsize(p) for p in paths)
    arch, params = engine_layout_params(supers[order[0]], disk_size)
    return supers, order, disk_size, create_layout(arch, **params)


def open_md_members(paths: list[str | os.PathLike], missing: set[int] = frozenset()):
    """Engine Array over md member images `paths` (any order); images whose index (in
    `paths`) is in `missing` are treated as removed. Returns (array, superblocks by slot,
    images to close). Their superblocks are still read, to know the slot they leave empty."""
    supers, order, disk_size, layout = _md_layout(paths)
    members, opened, failed = [], [], []
    for slot, index in enumerate(order):
        if index in missing:
            members.append(_Missing(disk_size))
            failed.append(slot)
        else:
            image = ReadOnlyImage(paths[index])
            opened.append(image)
            members.append(image)
    array = Array(f"md-{layout.name}", layout, members, failed=failed)
    return array, [supers[i] for i in order], opened


def read_pages(paths: list[str | os.PathLike], offsets: list[int], length: int = 4096) -> list[bytes]:
    """`length` bytes at each array byte offset in `offsets`, as md's member images `paths`
    hold them (no member missing), read synchronously through the engine layout's map of
    md's placement: for callers outside an event loop that want a few pages, not an Array."""
    _, order, _, layout = _md_layout(paths)
    fds = [os.open(paths[index], os.O_RDONLY | os.O_CLOEXEC) for index in order]
    try:
        return [b"".join(os.pread(fds[extent.disk], extent.length, extent.disk_offset)
                         for extent in layout.map(offset, length)) for offset in offsets]
    finally:
        for fd in fds:
            os.close(fd)
