"""VC-RAID's mirrored cache disk (He & Yang §3.4): a backup cache disk written in parallel.

"The cache disk may become a potential single point of failure. To address this problem, we
can mirror the cache disk by using another partition on different disk which acts as a
backup cache disk. In this case the Level 1 destage writes data from the RAM buffer to cache
disk and backup cache disk in parallel."

Why a BlockTarget wrapper: VC-RAID's cache disk is just the target its log lives on, so
mirroring the *target* mirrors everything on it — superblocks, log records, the blank
markers and tombstones of level 2 — with no change to the log or to VC-RAID: every write
goes to both sides in parallel (and is acknowledged when both have it), reads come from the
primary. When one side fails (an I/O error, or `raidlab fail`), the other carries on alone.

Which side is current must survive a restart: each side holds a small mirror header in the
cache disk's reserved area (after the superblock slots, before the log; see
raidlab.engine.caches.log.DEFAULT_LOG_START), naming its side and whether its peer has
failed. The survivor's header is rewritten (FUA) *before* the write that found the failure
is acknowledged, so `assemble` never trusts a side that missed an acknowledged write.

A failed side is put back by `raidlab replace` (`replace_side`: the new drive is written by
every write from then on and filled from the survivor segment by segment); the paper does
not say how a stale backup is brought back. `compare` (the array's check) reads both sides;
a side that fails a read there is dropped as one that fails a request is. Both work a
segment at a time with writes held off (`_WriteGate`): writes keep coming while they run
(VC-RAID destages in the background, a user may check under load), and a write that lands
between a segment's read on one side and its read or copy on the other would make the
sides differ in the copy, or look different to the comparison when they are not.
"""

from __future__ import annotations

import contextlib
import errno
import struct
import zlib
from collections.abc import Callable
from typing import Any

from raidlab import sched
from raidlab.blockdev import SECTOR
from raidlab.engine.metadata import MetadataError

MIRROR_MAGIC = b"RLMIRROR"
MIRROR_HEADER_OFFSET = 32 * 1024  # inside [8 KiB, 64 KiB): reserved by the cache-disk layout
_HEADER = struct.Struct("<8sBB2xI")  # magic, side, peer_failed, crc32 of the fields before


def encode_header(side: int, peer_failed: bool) -> bytes:
    body = struct.pack("<8sBB2x", MIRROR_MAGIC, side, int(peer_failed))
    return (body + struct.pack("<I", zlib.crc32(body))).ljust(SECTOR, b"\0")


def decode_header(raw: bytes) -> tuple[int, bool] | None:
    magic, side, peer_failed, crc = _HEADER.unpack_from(raw)
    if magic != MIRROR_MAGIC or zlib.crc32(raw[:12]) != crc or side not in (0, 1):
        return None
    return side, bool(peer_failed)


class _WriteGate:
    """Writes pass side by side; `closed()` waits until those in flight are done and holds
    new ones off while its block runs (module doc). Writes held off go first when it opens
    again, so a copy or comparison segment after segment does not starve them."""

    def __init__(self) -> None:
        self._in_flight = 0
        self._waiting = 0  # writes held off by a closed gate
        self._idle = sched.Event()
        self._idle.set()
        self._open = sched.Event()
        self._open.set()

    @contextlib.asynccontextmanager
    async def passing(self):
        if not self._open.is_set():
            self._waiting += 1
            try:
                while not self._open.is_set():
                    await self._open.wait()
            finally:
                self._waiting -= 1
        if self._in_flight == 0:
            self._idle = sched.Event()
        self._in_flight += 1
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    @contextlib.asynccontextmanager
    async def closed(self):
        while True:
            if not self._open.is_set():
                await self._open.wait()
            elif self._waiting:  # writes the last closing held off: they are runnable, let them in
                await sched.checkpoint()
            else:
                break
        self._open = sched.Event()
        try:
            await self._idle.wait()
            yield
        finally:
            self._open.set()


class MirroredCacheDisk:
    """Two equal BlockTargets as one cache disk: writes to both in parallel, reads from the
    primary (side 0) unless it failed. Build with `create` or `assemble`."""

    def __init__(self, name: str, primary: Any, backup: Any, failed: set[int] | None = None):
        if primary.size != backup.size:
            raise ValueError(f"mirror sides differ in size: {primary.size} != {backup.size}")
        self.name = name
        self.sides = [primary, backup]
        self.failed: set[int] = set(failed or ())
        self.counters = {"mirrored_writes": 0, "side_failures": 0, "reads_from_backup": 0, "sides_replaced": 0}
        self._gate = _WriteGate()  # a segment copied or compared holds writes off
        self._filling: int | None = None  # the side being filled: written to, not read from

    @classmethod
    async def create(cls, name: str, primary: Any, backup: Any) -> "MirroredCacheDisk":
        mirror = cls(name, primary, backup)
        for side, target in enumerate(mirror.sides):
            await target.write(MIRROR_HEADER_OFFSET, encode_header(side, False), fua=True)
        return mirror

    @classmethod
    async def assemble(cls, name: str, primary: Any, backup: Any) -> "MirroredCacheDisk":
        """Read both headers; a side whose peer is recorded as failed is the only one used."""
        headers = []
        for target in (primary, backup):
            try:
                headers.append(decode_header(await target.read(MIRROR_HEADER_OFFSET, SECTOR)))
            except OSError:
                headers.append(None)
        for side, header in enumerate(headers):
            if header is None or header[0] != side:
                if headers[1 - side] is not None and headers[1 - side][1]:
                    continue  # the peer says this side failed: its header does not matter
                raise MetadataError(f"{name}: cache disk {'primary' if side == 0 else 'backup'} has no mirror "
                                    f"header for side {side}", hint="give the cache disk and its backup, in order")
        failed = {1 - side for side, header in enumerate(headers) if header is not None and header[1]}
        if len(failed) == 2:
            raise MetadataError(f"{name}: both sides of the mirrored cache disk record the other as failed")
        return cls(name, primary, backup, failed)

    # -- BlockTarget -------------------------------------------------------------------

    @property
    def size(self) -> int:
        return self.sides[0].size

    def _alive(self) -> list[int]:
        alive = [i for i in (0, 1) if i not in self.failed]
        if not alive:
            raise OSError(errno.EIO, f"{self.name}: both sides of the mirrored cache disk failed")
        return alive

    async def replace_side(self, side: int, target: Any, *, segment: int = 1 << 20,
                           progress: Callable[[int, int], None] | None = None) -> None:
        """Put `target` (blank, the side's size) in place of failed `side`: from now on every
        write goes to it too, the survivor's bytes are copied onto it segment by segment
        (writes wait while a segment is copied), then both headers say both sides are
        good (FUA) and reads may use it again."""
        if side not in self.failed:
            raise OSError(errno.EINVAL, f"{self.name}: side {side} has not failed")
        if target.size != self.size:
            raise ValueError(f"replacement of {target.size} bytes for a side of {self.size}")
        survivor = 1 - side
        self.sides[side] = target
        self._filling = side
        try:
            for offset in range(0, self.size, segment):
                n = min(segment, self.size - offset)
                async with self._gate.closed():
                    await target.write(offset, await self.sides[survivor].read(offset, n))
                if progress is not None:
                    progress(offset + n, self.size)
            await target.flush()
            for which in (side, survivor):
                await self.sides[which].write(MIRROR_HEADER_OFFSET, encode_header(which, False), fua=True)
            self.failed.discard(side)
            self.counters["sides_replaced"] += 1
        finally:
            self._filling = None

    async def compare(self, *, segment: int = 1 << 20,
                      progress: Callable[[int, int], None] | None = None) -> list[dict[str, int]]:
        """Segments where the two sides differ (each side's own mirror header aside); both
        sides must be good."""
        if self.failed:
            raise OSError(errno.EIO, f"{self.name}: side {sorted(self.failed)} has failed: nothing to compare")
        out: list[dict[str, int]] = []
        header = slice(MIRROR_HEADER_OFFSET, MIRROR_HEADER_OFFSET + SECTOR)
        for offset in range(0, self.size, segment):
            n = min(segment, self.size - offset)
            async with self._gate.closed():
                a, b = bytearray(await self._compared(0, offset, n)), bytearray(await self._compared(1, offset, n))
            if offset <= MIRROR_HEADER_OFFSET < offset + n:
                at = slice(header.start - offset, header.stop - offset)
                a[at] = b[at] = bytes(SECTOR)
            if a != b:
                out.append({"disk": 1, "offset": offset, "length": n})
            if progress is not None:
                progress(offset + n, self.size)
        return out

    async def _compared(self, side: int, offset: int, length: int) -> bytes:
        """A side's bytes for `compare`; a side that fails the read is dropped (the other
        carries on) and the comparison ends there, said as an EIO naming the side."""
        try:
            return await self.sides[side].read(offset, length)
        except OSError as exc:
            if exc.errno != errno.EIO:
                raise
            await self.fail_side(side)
            raise OSError(errno.EIO, f"{self.name}: side {side} failed under the check") from None

    async def fail_side(self, side: int) -> None:
        """Drop `side`: record it on the survivor first (FUA), then stop using it."""
        if side in self.failed:
            return
        survivor = 1 - side
        if survivor in self.failed:
            raise OSError(errno.EIO, f"{self.name}: both sides of the mirrored cache disk failed")
        await self.sides[survivor].write(MIRROR_HEADER_OFFSET, encode_header(survivor, True), fua=True)
        if side not in self.failed:  # another request may have dropped it meanwhile
            self.failed.add(side)
            self.counters["side_failures"] += 1

    async def _on_all(self, op: str, *args: Any, **kwargs: Any) -> None:
        errors: dict[int, OSError] = {}

        async def one(side: int) -> None:
            try:
                await getattr(self.sides[side], op)(*args, **kwargs)
            except OSError as exc:
                errors[side] = exc

        async with self._gate.passing():
            sides = self._alive() + ([self._filling] if self._filling is not None else [])
            async with sched.open_nursery() as nursery:
                for side in sides:
                    nursery.start_soon(one, side)
        for side in sorted(errors):
            await self._side_failed(side, errors[side])

    async def write(self, offset: int, data: bytes, *, fua: bool = False) -> None:
        await self._on_all("write", offset, data, fua=fua)
        self.counters["mirrored_writes"] += 1

    async def _side_failed(self, side: int, error: OSError) -> None:
        """A request met `error` on `side`: drop the side, or raise `error` if it is the last
        one. A side another request dropped while this one was in flight is dropped already
        (a side that vanishes fails every request it had in flight), not the last one."""
        if side in self.failed:
            return
        if self._alive() == [side]:
            raise error
        await self.fail_side(side)

    async def read(self, offset: int, length: int) -> bytes:
        while True:
            side = self._alive()[0]
            try:
                data = await self.sides[side].read(offset, length)
            except OSError as exc:
                await self._side_failed(side, exc)
                continue
            if side == 1:
                self.counters["reads_from_backup"] += 1
            return data

    async def flush(self) -> None:
        await self._on_all("flush")

    async def trim(self, offset: int, length: int) -> None:
        await self._on_all("trim", offset, length)

    def statistics(self) -> dict[str, Any]:
        return {"name": self.name, "mirror": True, "failed_sides": sorted(self.failed), **self.counters,
                "sides": [s.statistics() for s in self.sides]}
