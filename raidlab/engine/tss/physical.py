"""Physical stripe I/O of a TSS device (Pallipadi & Gopinath, "Temperature Sensitive
Storage", §3.3-3.4, with §3.7's degraded reads and writes and §4's read balancing): the
bytes of one physical stripe's data area, as a RAID1 copy or as a stripe with parity.

* A RAID1 stripe is two physical stripes of different polarity holding the same data units
  (their parity units unused). A read takes each piece from the copy whose columns have
  served fewer reads when read balancing is on (§4), else from the primary; a piece whose
  column failed comes from the other copy (the polarities differ, so a piece is on a failed
  column in one copy at most, §3.3).
* A stripe with parity (RAID5, and the shared stripes of cRAID5 sub-stripes): a partial
  write is a read-modify-write or a reconstruct-write, whichever reads fewer bytes (a tie
  goes to reconstruct-write, as md decides); a whole stripe is written with its parity and
  no read. A piece on a failed column is the XOR of its other columns; a partial write with
  a failed column reads the stripe whole (rebuilding the lost unit), merges and writes it
  whole without the column.

Every parity computation is charged to the host (`cost`), as the paper's processor did it.
"""

from __future__ import annotations

import collections
import errno
from typing import Any

from raidlab.engine.layouts.xor import xor_blocks
from raidlab.engine.tss.columns import Columns, Missing, in_order
from raidlab.engine.tss.geometry import TSSGeometry


class PhysicalStripes:
    """Reads and writes of physical stripes over `columns` (module doc)."""

    def __init__(self, name: str, geometry: TSSGeometry, columns: Columns, counters: collections.Counter[str], *,
                 cost: Any = None, read_balance: bool = True) -> None:
        self.name = name
        self.geometry = geometry
        self.columns = columns
        self.counters = counters
        self.cost = cost
        self.read_balance = read_balance

    # -- reading -----------------------------------------------------------------------
    def pick_copy(self, stripes: tuple[int, ...], start: int, n: int) -> int:
        """The RAID1 copy to read: the one whose columns have served fewer reads (§4's read
        balancing), or the primary with balancing off."""
        if not self.read_balance:
            return stripes[0]
        reads = self.columns.reads
        best, best_load = stripes[0], None
        for ps in stripes:
            load = sum(reads[column] for _i, column, _o, _n in self.geometry.pieces(ps, start, n))
            if best_load is None or load < best_load:
                best, best_load = ps, load
        return best

    async def read_range(self, ps: int, start: int, n: int) -> bytes:
        """Bytes of `ps`'s data area; a piece on a failed column is rebuilt from the other
        columns and the parity (§3.7), so `ps` must hold valid parity (not a RAID1 copy)."""
        pieces = self.geometry.pieces(ps, start, n)
        parts: list[bytes] = [b""] * len(pieces)

        async def one(i: int, column: int, offset: int, length: int) -> None:
            try:
                parts[i] = await self.columns.read(column, offset, length)
            except Missing:
                parts[i] = await self.reconstruct(ps, column, offset, length)

        await in_order([(one, i, column, offset, length)
                        for i, (_u, column, offset, length) in enumerate(pieces)])
        return b"".join(parts)

    async def reconstruct(self, ps: int, column: int, offset: int, length: int) -> bytes:
        """The bytes of a failed column in parity stripe `ps`: the XOR of the same bytes of
        every other column (data units and parity)."""
        others = [c for c in range(self.geometry.columns) if c != column]
        parts: list[bytes] = [b""] * len(others)

        async def one(i: int, other: int) -> None:
            try:
                parts[i] = await self.columns.read(other, offset, length)
            except Missing:
                raise OSError(errno.EIO, f"{self.name}: columns {column} and {other} failed") from None

        await in_order([(one, i, other) for i, other in enumerate(others)])
        self.counters["degraded_reads"] += 1
        return xor_blocks(parts)

    async def read_mirrored(self, stripes: tuple[int, ...], start: int, n: int) -> bytes:
        """A RAID1 stripe's bytes: each piece from the copy read balancing picks, or from
        the other when that copy's column failed (module doc)."""
        first = self.pick_copy(stripes, start, n)
        order = (first,) + tuple(ps for ps in stripes if ps != first)
        pieces = [self.geometry.pieces(ps, start, n) for ps in order]
        parts: list[bytes] = [b""] * len(pieces[0])

        async def one(i: int) -> None:
            for copy in pieces:
                _u, column, offset, length = copy[i]
                try:
                    parts[i] = await self.columns.read(column, offset, length)
                    return
                except Missing:
                    self.counters["degraded_reads"] += 1
            raise OSError(errno.EIO, f"{self.name}: both copies of a RAID1 stripe lost a column")

        await in_order([(one, i) for i in range(len(parts))])
        return b"".join(parts)

    # -- writing -----------------------------------------------------------------------
    def zero_filled(self, start: int, data: bytes | memoryview) -> bytes:
        """A whole stripe's data area: `data` at `start`, zeros around it."""
        size = self.geometry.data_bytes
        return b"".join((bytes(start), data, bytes(size - start - len(data))))

    async def write_copies(self, stripes: tuple[int, ...], start: int, data: bytes | memoryview) -> None:
        """The same bytes to every copy of a RAID1 stripe, at once."""
        await in_order([(self.write_plain, ps, start, data) for ps in stripes])

    async def write_plain(self, ps: int, start: int, data: bytes | memoryview) -> None:
        """Data units only, no parity (a RAID1 copy)."""
        view = memoryview(data)
        calls, pos = [], 0
        for _u, column, offset, length in self.geometry.pieces(ps, start, len(view)):
            calls.append((self.write_piece, column, offset, bytes(view[pos:pos + length])))
            pos += length
        await in_order(calls)

    async def write_piece(self, column: int, offset: int, data: bytes) -> None:
        await self.columns.write(column, offset, data, whole_unit=len(data) == self.geometry.unit)

    async def write_parity_unit(self, ps: int, data: bytes) -> None:
        """Write the parity unit of `ps` for its data area `data` (already on its columns)."""
        g = self.geometry
        units = [data[i * g.unit:(i + 1) * g.unit] for i in range(g.data_units)]
        await self.columns.write(g.polarity(ps), g.unit_offset(ps), xor_blocks(units), whole_unit=True)

    async def write_parity(self, ps: int, start: int, data: bytes | memoryview, *, fresh: bool = False,
                           reconstruct: bool = False) -> None:
        """Bytes [start, start+len) of `ps`'s data area with its parity kept right: a whole
        stripe (or a fresh one, zero-filled around the data) without reads, else RMW or RCW."""
        g = self.geometry
        view = memoryview(data)
        if fresh or (start == 0 and len(view) == g.data_bytes):
            whole = bytes(view) if len(view) == g.data_bytes else self.zero_filled(start, view)
            await self.write_whole(ps, whole)
            return
        if self.columns.failed:
            await self.write_degraded(ps, start, view)
            return
        try:
            await self.write_partial(ps, start, view, reconstruct)
        except Missing:  # a column failed under this write: do it again as a degraded one
            await self.write_degraded(ps, start, view)

    async def write_whole(self, ps: int, whole: bytes) -> None:
        g = self.geometry
        units = [whole[i * g.unit:(i + 1) * g.unit] for i in range(g.data_units)]
        base = g.unit_offset(ps)
        calls = [(self.write_piece, g.data_column(ps, i), base, unit) for i, unit in enumerate(units)]
        calls.append((self.write_piece, g.polarity(ps), base, xor_blocks(units)))
        if self.cost is not None:
            await self.cost.xor(len(whole))
        self.counters["full_stripe_writes"] += 1
        await in_order(calls)

    async def write_degraded(self, ps: int, start: int, view: memoryview) -> None:
        """A partial write with a failed column: the whole stripe read (its lost unit
        rebuilt from the others), the new bytes merged, written whole without the column."""
        whole = bytearray(await self.read_range(ps, 0, self.geometry.data_bytes))
        whole[start:start + len(view)] = view
        self.counters["degraded_writes"] += 1
        await self.write_whole(ps, bytes(whole))

    async def write_partial(self, ps: int, start: int, view: memoryview, reconstruct: bool) -> None:
        g = self.geometry
        pieces = g.pieces(ps, start, len(view))
        lo = min(offset for _u, _c, offset, _n in pieces)
        hi = max(offset + n for _u, _c, offset, n in pieces)
        # bytes read by each way, as md weighs them (ties to reconstruct-write)
        written = sum(n for *_rest, n in pieces)
        rmw_reads = written + (hi - lo)
        rcw_reads = g.data_units * (hi - lo) - written
        parity_column = g.polarity(ps)
        if rmw_reads < rcw_reads and not reconstruct:
            self.counters["rmw_writes"] += 1
            olds: list[bytes] = [b""] * (len(pieces) + 1)

            async def read_old(i: int, column: int, offset: int, n: int) -> None:
                olds[i] = await self.columns.read(column, offset, n)

            reads = [(read_old, i, column, offset, n) for i, (_u, column, offset, n) in enumerate(pieces)]
            reads.append((read_old, len(pieces), parity_column, lo, hi - lo))
            await in_order(reads)
            delta = [olds[-1]]
            pos = 0
            for i, (_u, _c, offset, n) in enumerate(pieces):
                new = bytes(view[pos:pos + n])
                pos += n
                pad_before, pad_after = offset - lo, hi - offset - n
                delta.append(bytes(pad_before) + olds[i] + bytes(pad_after))
                delta.append(bytes(pad_before) + new + bytes(pad_after))
            parity = xor_blocks(delta)
            if self.cost is not None:
                await self.cost.xor(sum(len(d) for d in delta))
        else:
            self.counters["rcw_writes"] += 1
            units: list[bytearray] = [bytearray(hi - lo) for _ in range(g.data_units)]
            covered: dict[int, tuple[int, int]] = {}
            pos = 0
            for index, _c, offset, n in pieces:
                units[index][offset - lo:offset - lo + n] = view[pos:pos + n]
                covered[index] = (offset, n)
                pos += n
            reads = []

            async def read_into(index: int, column: int, offset: int, n: int) -> None:
                units[index][offset - lo:offset - lo + n] = await self.columns.read(column, offset, n)

            for index in range(g.data_units):
                column = g.data_column(ps, index)
                have = covered.get(index)
                spans = ([(lo, hi - lo)] if have is None
                         else [(lo, have[0] - lo), (have[0] + have[1], hi - have[0] - have[1])])
                reads += [(read_into, index, column, offset, n) for offset, n in spans if n > 0]
            await in_order(reads)
            parity = xor_blocks(units)
            if self.cost is not None:
                await self.cost.xor(sum(len(u) for u in units))
        calls, pos = [], 0
        for _u, column, offset, n in pieces:
            calls.append((self.write_piece, column, offset, bytes(view[pos:pos + n])))
            pos += n
        calls.append((self.write_piece, parity_column, lo, parity))
        await in_order(calls)
