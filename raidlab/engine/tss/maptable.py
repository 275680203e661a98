"""TSS map table, compression table and free-space bitmap (Pallipadi & Gopinath §3.3, §3.6).

Every logical stripe the TSS device exports has one *personality* in the map table:

* invalid: not backed by any physical stripe (every stripe at creation);
  a stripe allocated by a read is marked unwritten: its physical stripes hold nothing of it
  yet (the device reads them, as the paper's did, and answers zeros);
* RAID1: two physical stripes of different polarity, each holding the logical stripe's
  data units (their parity units stay unused, §3.3: "this leads to a wastage of space ...
  But this makes for a simpler design");
* RAID5: one physical stripe, data units and parity;
* cRAID5: an entry of the compression table: the physical stripe, the first sub-stripe and
  the number of sub-stripes it occupies, and the compressed size. A stripe whose data do
  not compress into fewer sub-stripes than the whole stripe is stored whole, its size
  recorded as the full stripe (§3.5).

Free space is kept per sub-stripe (the bitmap table of §3.3). A physical stripe is free,
held whole (by a RAID1 copy or a RAID5 stripe), shared by compressed stripes at sub-stripe
granularity, or the *reserved* stripe that in-place victimization and promotion move
through (§3.6). Allocation is synchronous: it never awaits, so under trio two requests can
never be handed the same space.

Allocation order (§4, §5.4.2): whole stripes are taken lowest first, so logical stripes
first touched one after another get physical stripes one after another. A RAID1 mirror is
placed either in the next free stripe of another polarity ("successive") or half-way across
the columns ("halfway", the paper's better choice and its default for the later runs).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from raidlab.engine.tss.geometry import TSSGeometry
from raidlab.errors import UsageError

INVALID, RAID1, RAID5, CRAID5 = "invalid", "raid1", "raid5", "craid5"
PERSONALITIES = (INVALID, RAID1, RAID5, CRAID5)
PLACEMENTS = ("halfway", "successive")

# What a physical stripe holds.
FREE, WHOLE, SHARED, RESERVED = 0, 1, 2, 3


class NoSpace(Exception):
    """No physical space for an allocation; the device victimizes or uses the reserved stripe."""


@dataclasses.dataclass(frozen=True)
class Compressed:
    """A compression table entry: where a cRAID5 logical stripe's bytes are."""

    stripe: int   # physical stripe
    first: int    # first sub-stripe
    count: int    # sub-stripes occupied
    size: int     # compressed bytes, or the stripe's data size when stored uncompressed
    raw: bool = False  # did not compress into fewer sub-stripes: stored as it is (§3.5)


@dataclasses.dataclass(frozen=True)
class Mapping:
    """One map table entry."""

    kind: str = INVALID
    stripes: tuple[int, ...] = ()          # RAID1 (primary, mirror); RAID5 (stripe,)
    compressed: Compressed | None = None   # cRAID5
    unwritten: bool = False                # allocated by a read: its stripes hold no data of it yet


class MapTable:
    """The map table, compression table and bitmap of one TSS device (module doc)."""

    def __init__(self, geometry: TSSGeometry, logical_stripes: int | None = None, *,
                 placement: str = "halfway") -> None:
        if placement not in PLACEMENTS:
            raise UsageError(f"unknown RAID1 placement {placement!r}", hint=f"use one of: {', '.join(PLACEMENTS)}")
        self.geometry = geometry
        self.placement = placement
        total = geometry.physical_stripes
        most = total - 1  # every logical stripe must fit as RAID5 beside the reserved stripe
        self.logical_stripes = most if logical_stripes is None else logical_stripes
        if not 1 <= self.logical_stripes <= most:
            raise UsageError(f"{self.logical_stripes} logical stripes do not fit: {total} physical stripes "
                             f"hold at most {most} beside the reserved one")
        self.entries: list[Mapping] = [Mapping()] * self.logical_stripes
        self.holder = bytearray(total)          # FREE / WHOLE / SHARED / RESERVED per physical stripe
        self._free = bytearray(b"\x01" * total)  # 1 where holder == FREE (bytearray.find is C-fast)
        self.sub_used: dict[int, int] = {}      # SHARED stripe -> bitmask of used sub-stripes
        self._with_room: set[int] = set()       # SHARED stripes with a free sub-stripe
        self.reserved = total - 1
        self._take(self.reserved, RESERVED)
        self.counts = {kind: 0 for kind in PERSONALITIES}
        self.counts[INVALID] = self.logical_stripes
        self._by_kind: dict[str, set[int]] = {kind: set() for kind in (RAID1, RAID5, CRAID5)}

    # -- queries -----------------------------------------------------------------------
    def __getitem__(self, logical: int) -> Mapping:
        return self.entries[logical]

    def free_stripes(self) -> int:
        return self._free.count(1)

    def space(self) -> dict[str, int]:
        """Physical bytes each personality occupies (parity and unused RAID1 parity units
        included), the free bytes, and the logical bytes it backs."""
        g = self.geometry
        stripe = g.columns * g.unit
        sub = stripe // g.substripes
        used = {RAID1: 2 * stripe * len(self._by_kind[RAID1]), RAID5: stripe * len(self._by_kind[RAID5]),
                CRAID5: sum(self.entries[ls].compressed.count for ls in self._by_kind[CRAID5]) * sub}
        backed = {kind: g.data_bytes * len(members) for kind, members in self._by_kind.items()}
        return {"physical_" + k: v for k, v in used.items()} | {"logical_" + k: v for k, v in backed.items()} | {
            "free_bytes": self.free_stripes() * stripe,
            "shared_stripes": len(self.sub_used)}

    # -- whole stripes -----------------------------------------------------------------
    def _take(self, ps: int, what: int) -> None:
        assert self.holder[ps] == FREE, (ps, self.holder[ps])
        self.holder[ps] = what
        self._free[ps] = 0

    def release(self, ps: int) -> None:
        """Give physical stripe `ps` back (whole, or a shared one whose last sub-stripe went)."""
        assert self.holder[ps] in (WHOLE, SHARED), (ps, self.holder[ps])
        self.holder[ps] = FREE
        self._free[ps] = 1
        self.sub_used.pop(ps, None)
        self._with_room.discard(ps)

    def _first_free(self, start: int = 0, *, avoid_polarity: int | None = None) -> int | None:
        total = self.geometry.physical_stripes
        for begin, end in ((start, total), (0, start)):
            pos = begin
            while True:
                ps = self._free.find(1, pos, end)
                if ps < 0:
                    break
                if avoid_polarity is None or self.geometry.polarity(ps) != avoid_polarity:
                    return ps
                pos = ps + 1
        return None

    def take_whole(self) -> int:
        """The lowest free physical stripe, now held whole."""
        ps = self._first_free()
        if ps is None:
            raise NoSpace("no free physical stripe")
        self._take(ps, WHOLE)
        return ps

    def take_mirror_pair(self) -> tuple[int, int]:
        """Two free physical stripes of different polarity for a RAID1 logical stripe,
        placed by `placement` (module doc)."""
        primary = self._first_free()
        if primary is None:
            raise NoSpace("no free physical stripe")
        polarity = self.geometry.polarity(primary)
        if self.placement == "successive":
            mirror = self._first_free(primary + 1, avoid_polarity=polarity)
        else:
            half = (primary + self.geometry.physical_stripes // 2) % self.geometry.physical_stripes
            mirror = self._first_free(half, avoid_polarity=polarity)
        if mirror is None:
            raise NoSpace("no free physical stripe of another polarity")
        self._take(primary, WHOLE)
        self._take(mirror, WHOLE)
        return primary, mirror

    def take_of_other_polarity(self, polarity: int, near: int) -> int:
        """A free stripe whose polarity is not `polarity` (a RAID5 stripe's new mirror),
        placed as take_mirror_pair places a mirror relative to stripe `near`."""
        if self.placement == "successive":
            start = near + 1
        else:
            start = (near + self.geometry.physical_stripes // 2) % self.geometry.physical_stripes
        ps = self._first_free(start % self.geometry.physical_stripes, avoid_polarity=polarity)
        if ps is None:
            raise NoSpace("no free physical stripe of another polarity")
        self._take(ps, WHOLE)
        return ps

    def swap_reserved(self, ps: int) -> int:
        """Physical stripe `ps` (held whole or free: its contents just moved away) becomes
        the reserved stripe; the old reserved stripe is returned, held whole, for the data
        moved into it (§3.6: move to the reserved stripe, then reclaim the old one as the
        new reserved stripe)."""
        assert self.holder[ps] in (WHOLE, FREE), (ps, self.holder[ps])
        old = self.reserved
        self.holder[old] = WHOLE
        self.holder[ps] = RESERVED
        self._free[ps] = 0
        self.reserved = ps
        return old

    # -- sub-stripes (cRAID5) ----------------------------------------------------------
    def take_substripes(self, count: int) -> tuple[int, int, bool]:
        """`count` consecutive free sub-stripes: (stripe, first, fresh). In a shared stripe
        that has room (lowest first), else in a newly taken free stripe (fresh: its other
        sub-stripes and its parity hold whatever an earlier owner left)."""
        g = self.geometry
        if not 1 <= count <= g.substripes:
            raise ValueError(f"{count} sub-stripes outside 1..{g.substripes}")
        want = (1 << count) - 1
        for ps in sorted(self._with_room):  # few: most shared stripes fill up
            used = self.sub_used[ps]
            for first in range(g.substripes - count + 1):
                if not used & (want << first):
                    self._set_used(ps, used | (want << first))
                    return ps, first, False
        ps = self._first_free()
        if ps is None:
            raise NoSpace("no free sub-stripes")
        self._take(ps, SHARED)
        self._set_used(ps, want)
        return ps, 0, True

    def adopt_shared(self, ps: int, first: int, count: int) -> None:
        """Mark sub-stripes of `ps` (held whole: the reserved stripe just handed out) used
        by a compressed stripe; the stripe becomes a shared one."""
        assert self.holder[ps] == WHOLE, (ps, self.holder[ps])
        self.holder[ps] = SHARED
        self._set_used(ps, ((1 << count) - 1) << first)

    def _set_used(self, ps: int, used: int) -> None:
        self.sub_used[ps] = used
        if used == (1 << self.geometry.substripes) - 1:
            self._with_room.discard(ps)
        else:
            self._with_room.add(ps)

    def release_substripes(self, ps: int, first: int, count: int) -> None:
        mask = ((1 << count) - 1) << first
        used = self.sub_used[ps]
        assert used & mask == mask, (ps, bin(used), bin(mask))
        used &= ~mask
        if used:
            self._set_used(ps, used)
        else:
            self.release(ps)

    # -- map ---------------------------------------------------------------------------
    def set(self, logical: int, mapping: Mapping) -> Mapping:
        """Change the entry of `logical` (mapping and type together); return the old one.
        Space is taken and released by the caller, in the order §3.6 gives."""
        old = self.entries[logical]
        self.entries[logical] = mapping
        self.counts[old.kind] -= 1
        self.counts[mapping.kind] += 1
        if old.kind != INVALID:
            self._by_kind[old.kind].discard(logical)
        if mapping.kind != INVALID:
            self._by_kind[mapping.kind].add(logical)
        return old

    def logical_of(self, kind: str) -> list[int]:
        """The logical stripes of personality `kind` (not invalid), in order."""
        return sorted(self._by_kind[kind])

    # -- persistence and checks --------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The persistent form: geometry, placement, reserved stripe and the non-invalid
        entries (the bitmap follows from them and is rebuilt, then checked, on load)."""
        entries = {}
        for ls, e in enumerate(self.entries):
            if e.kind == INVALID:
                continue
            entries[str(ls)] = [e.kind, list(e.stripes),
                                list(dataclasses.astuple(e.compressed)) if e.compressed else None]
            if e.unwritten:
                entries[str(ls)].append(True)
        return {"geometry": self.geometry.describe(), "logical_stripes": self.logical_stripes,
                "placement": self.placement, "reserved": self.reserved, "entries": entries}

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_dict(), separators=(",", ":")).encode()

    @classmethod
    def from_dict(cls, geometry: TSSGeometry, data: dict[str, Any]) -> "MapTable":
        table = cls(geometry, data["logical_stripes"], placement=data["placement"])
        # Move the reserved stripe to where it was recorded.
        table.holder[table.reserved] = FREE
        table._free[table.reserved] = 1
        table.reserved = data["reserved"]
        table._take(table.reserved, RESERVED)
        for key, (kind, stripes, comp, *flags) in data["entries"].items():
            ls = int(key)
            if kind in (RAID1, RAID5):
                for ps in stripes:
                    table._take(ps, WHOLE)
                table.set(ls, Mapping(kind, tuple(stripes), unwritten=bool(flags and flags[0])))
            elif kind == CRAID5:
                c = Compressed(*comp)
                if table.holder[c.stripe] == FREE:
                    table._take(c.stripe, SHARED)
                    table.sub_used[c.stripe] = 0
                mask = ((1 << c.count) - 1) << c.first
                if table.sub_used[c.stripe] & mask:
                    raise ValueError(f"compressed stripes overlap in physical stripe {c.stripe}")
                table._set_used(c.stripe, table.sub_used[c.stripe] | mask)
                table.set(ls, Mapping(CRAID5, (c.stripe,), c))
            else:
                raise ValueError(f"unknown personality {kind!r} in the map table")
        table.check()
        return table

    @classmethod
    def from_bytes(cls, geometry: TSSGeometry, raw: bytes) -> "MapTable":
        return cls.from_dict(geometry, json.loads(raw))

    def check(self) -> None:
        """Raise AssertionError unless the map, the bitmap and the counts agree: every
        physical stripe has one holder, RAID1 copies differ in polarity, no two compressed
        stripes share a sub-stripe, and the free set is what no one holds."""
        g = self.geometry
        seen: dict[int, str] = {}
        subs: dict[int, int] = {}
        counts = {kind: 0 for kind in PERSONALITIES}
        for ls, e in enumerate(self.entries):
            counts[e.kind] += 1
            if e.kind in (RAID1, RAID5):
                assert len(e.stripes) == (2 if e.kind == RAID1 else 1), (ls, e)
                for ps in e.stripes:
                    assert ps not in seen, f"physical stripe {ps} held by {seen[ps]} and logical {ls}"
                    assert self.holder[ps] == WHOLE, (ps, self.holder[ps])
                    seen[ps] = f"logical {ls}"
                if e.kind == RAID1:
                    assert g.polarity(e.stripes[0]) != g.polarity(e.stripes[1]), f"RAID1 {ls} copies share polarity"
            elif e.kind == CRAID5:
                c = e.compressed
                assert c is not None and e.stripes == (c.stripe,), (ls, e)
                assert self.holder[c.stripe] == SHARED, (c.stripe, self.holder[c.stripe])
                mask = ((1 << c.count) - 1) << c.first
                assert not subs.get(c.stripe, 0) & mask, f"sub-stripes of {c.stripe} shared"
                subs[c.stripe] = subs.get(c.stripe, 0) | mask
        assert counts == self.counts, (counts, self.counts)
        for kind, members in self._by_kind.items():
            assert members == {ls for ls, e in enumerate(self.entries) if e.kind == kind}, kind
        assert subs == self.sub_used, (subs, self.sub_used)
        full = (1 << g.substripes) - 1
        assert self._with_room == {ps for ps, used in subs.items() if used != full}, self._with_room
        assert self.holder[self.reserved] == RESERVED
        for ps in range(g.physical_stripes):
            holder = self.holder[ps]
            assert self._free[ps] == (holder == FREE), ps
            if holder == WHOLE:
                assert ps in seen, f"physical stripe {ps} held whole by no one"
            elif holder == SHARED:
                assert ps in subs, f"shared stripe {ps} holds nothing"
