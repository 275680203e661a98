"""Compressed RAID5 stripes of a TSS device (Pallipadi & Gopinath, "Temperature Sensitive
Storage", §3.5).

A cRAID5 logical stripe is stored compressed in whole sub-stripes of a physical stripe that
other compressed stripes may share, with one parity for them all. It is read and
decompressed whole even for a small request; a write merges the new data, compresses the
stripe again and writes it to newly allocated sub-stripes, then the map entry changes and
the old sub-stripes are freed (§3.5: "the new compressed length is usually different ...
moving the physical stripe to some other suitable physical location, and then freeing the
current physical location"). A stripe that does not compress below a whole physical stripe
is stored as it is (raw).

Sub-stripe writes update the parity of a physical stripe other compressed stripes share, so
they hold that physical stripe's lock (`locks`, also taken by rebuild and scrub, §3.5). A
physical stripe newly taken for sub-stripes is written whole (zeros in its free sub-stripes)
so its parity is right from then on. Compression and decompression are charged to the host
(`cost`), as the paper's processor did them.
"""

from __future__ import annotations

import collections
from typing import Any

from raidlab import sched
from raidlab.engine.tss.compression import compress, decompress
from raidlab.engine.tss.geometry import TSSGeometry
from raidlab.engine.tss.maptable import CRAID5, Compressed, MapTable, Mapping, NoSpace
from raidlab.engine.tss.physical import PhysicalStripes
from raidlab.engine.tss.space import Space


class CompressedStripes:
    """cRAID5 stripes read, compressed and stored (module doc)."""

    def __init__(self, geometry: TSSGeometry, table: MapTable, physical: PhysicalStripes, space: Space,
                 counters: collections.Counter[str], *, cost: Any = None) -> None:
        self.geometry = geometry
        self.table = table
        self.physical = physical
        self.space = space
        self.counters = counters
        self.cost = cost
        self.locks: dict[int, sched.Lock] = collections.defaultdict(sched.Lock)  # shared physical stripes

    async def read(self, c: Compressed) -> bytes:
        """The whole logical stripe `c` holds, decompressed."""
        g = self.geometry
        start, length = g.substripe_range(c.first, c.count)
        blob = await self.physical.read_range(c.stripe, start, length)
        if c.raw:
            return blob
        if self.cost is not None:
            await self.cost.decompressing(g.data_bytes)
        self.counters["decompressions"] += 1
        return decompress(blob[:c.size], g.data_bytes)

    async def compress(self, data: bytes) -> tuple[bytes, int, int, bool]:
        """(blob padded to whole sub-stripes, sub-stripes, size, raw) for a whole stripe."""
        g = self.geometry
        if self.cost is not None:
            await self.cost.compressing(g.data_bytes)
        self.counters["compressions"] += 1
        blob = compress(data)
        count = -(-len(blob) // g.substripe_bytes)
        if count >= g.substripes:
            self.counters["stored_uncompressed"] += 1
            return bytes(data), g.substripes, g.data_bytes, True
        return blob + bytes(count * g.substripe_bytes - len(blob)), count, len(blob), False

    async def store(self, ls: int, data: bytes, old: Mapping) -> None:
        """Compress `data` (the whole logical stripe), write it to new sub-stripes, point the
        map at them and free `old`'s space (module doc); through the reserved stripe when
        nothing else is free and `old` vacates a whole stripe. NoSpace when neither can be."""
        blob, count, size, raw = await self.compress(data)
        try:
            ps, first, fresh = self.table.take_substripes(count)
        except NoSpace:
            if self.space.vacates_whole_stripe(old) is None:
                raise
            await self.space.move_through_reserved(ls, old, blob, Compressed(0, 0, count, size, raw))
            return
        entry = Mapping(CRAID5, (ps,), Compressed(ps, first, count, size, raw))
        try:
            await self.write_substripes(ps, first, blob, fresh)
            previous = await self.space.commit(ls, entry)
        except BaseException:
            if self.table[ls] is not entry:  # not recorded: the sub-stripes go back
                self.table.release_substripes(ps, first, count)
            raise
        self.space.release(previous)

    async def write_substripes(self, ps: int, first: int, blob: bytes, fresh: bool) -> None:
        """Write sub-stripes of physical stripe `ps` under its lock: other compressed
        stripes share its parity (§3.5). A fresh stripe is written whole."""
        lock = self.locks[ps]
        if fresh:
            lock.acquire_nowait()  # nobody else knows this stripe yet: held before any wait
        else:
            await lock.acquire()
        try:
            start, _length = self.geometry.substripe_range(first, len(blob) // self.geometry.substripe_bytes)
            await self.physical.write_parity(ps, start, blob, fresh=fresh)
        finally:
            lock.release()
