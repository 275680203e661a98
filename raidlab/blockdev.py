"""The one interface every block target in raidlab speaks.

Why a Protocol: the FUSE export serves files `disks/dK` (emulated member disks) and `volume`
(an engine architecture) through the same code, and an architecture's members may be
emulated disks, partitions of them, or other architectures. All of them are byte-addressed,
512-byte aligned, async (trio) block targets with this shape.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

SECTOR = 512


@runtime_checkable
class BlockTarget(Protocol):
    """A trio block device: offsets and lengths are bytes, multiples of SECTOR."""

    name: str

    @property
    def size(self) -> int:
        """Capacity in bytes (a multiple of SECTOR)."""

    async def read(self, offset: int, length: int) -> bytes:
        """Return exactly `length` bytes at `offset`. Raises OSError(EIO) on a failed disk."""

    async def write(self, offset: int, data: bytes, *, fua: bool = False) -> None:
        """Write `data` at `offset`; with fua, return only when it is durable."""

    async def flush(self) -> None:
        """Return when every write completed before this call is durable."""

    async def trim(self, offset: int, length: int) -> None:
        """Discard the range (reads of it afterwards return zeros or old data)."""

    def statistics(self) -> dict[str, Any]:
        """Counters for `raidlab status` and benchmarks (JSON-serialisable)."""


class TargetProxy:
    """A block target in front of another (`inner`): name, size, failure state, statistics
    and request merging are the inner target's; a subclass adds what it stands for around
    read, write, flush and trim (a meter, a network between a client and a disk)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name

    @property
    def size(self) -> int:
        return self.inner.size

    @property
    def failed(self) -> bool:
        return getattr(self.inner, "failed", False)

    def merge_queued_requests(self) -> None:
        self.inner.merge_queued_requests()

    def statistics(self) -> dict[str, Any]:
        return self.inner.statistics()


def check_aligned(offset: int, length: int, size: int) -> None:
    """Raise ValueError unless [offset, offset+length) is sector-aligned and inside size."""
    if offset % SECTOR or length % SECTOR:
        raise ValueError(f"unaligned request offset={offset} length={length} (sector {SECTOR})")
    if offset < 0 or length < 0 or offset + length > size:
        raise ValueError(f"request offset={offset} length={length} outside device of {size} bytes")
