"""TSS data layout (Pallipadi & Gopinath, "Temperature Sensitive Storage", §3.3): columns,
stripe units, physical stripes and their polarity, and sub-stripes. Pure functions.

The storage is organised as RAID5 (Fig. 2): N columns (drives or partitions), each cut
into stripe units of `unit` bytes; physical stripe `ps` is stripe unit `ps` of every
column. Its *polarity* is the column that holds its parity; it rotates, `ps % N`, so that
physical stripes next to each other have different polarity (a RAID1 logical stripe needs
two physical stripes of different polarity, §3.3). The N-1 other columns hold the stripe's
data units in column order after the parity column (left-symmetric, as md's raid5), so a
logical stripe's bytes run through data units 0..N-2.

A physical stripe's data area, (N-1) x unit bytes, is also cut into `substripes` equal
sub-stripes, the allocation unit of compressed RAID5 (§3.3: "if the full physical stripe is
allocated in terms of equal sub-parts (say, a maximum of 4) for the cRAID5 storage, then a
bit in the bitmap table corresponds to 1/4th of a stripe"). A sub-stripe may span two data
units; `pieces` splits any byte range of the data area at unit boundaries.
"""

from __future__ import annotations

import dataclasses

from raidlab.blockdev import SECTOR
from raidlab.errors import UsageError

DEFAULT_SUBSTRIPES = 4  # §3.3's example
MIN_COLUMNS = 3


@dataclasses.dataclass(frozen=True)
class TSSGeometry:
    """N columns of `column_size` usable bytes from `data_offset` on each member, cut into
    stripe units of `unit` bytes; `substripes` allocation units per physical stripe."""

    columns: int
    unit: int
    column_size: int            # bytes of each member after data_offset that stripes may use
    data_offset: int = 0
    substripes: int = DEFAULT_SUBSTRIPES

    def __post_init__(self) -> None:
        if self.columns < MIN_COLUMNS:
            raise UsageError(f"tss needs at least {MIN_COLUMNS} columns, not {self.columns}",
                             hint="a TSS stripe is RAID5: give --disks 3 or more")
        if self.unit <= 0 or self.unit % SECTOR:
            raise UsageError(f"stripe unit {self.unit} is not a positive multiple of {SECTOR}")
        if self.substripes < 1 or self.data_bytes % self.substripes or self.substripe_bytes % SECTOR:
            raise UsageError(f"{self.substripes} sub-stripes do not cut a {self.data_bytes}-byte stripe "
                             f"into whole sectors", hint="choose a stripe unit or sub-stripe count that divides")
        if self.physical_stripes < 2:
            raise UsageError(f"columns of {self.column_size} bytes hold {self.physical_stripes} stripe(s) of "
                             f"{self.unit}-byte units; tss needs at least 2", hint="give a larger --disk-size")

    # -- sizes -------------------------------------------------------------------------
    @property
    def data_units(self) -> int:
        return self.columns - 1

    @property
    def data_bytes(self) -> int:
        """Bytes of data in one physical stripe (= one logical stripe)."""
        return self.data_units * self.unit

    @property
    def substripe_bytes(self) -> int:
        return self.data_bytes // self.substripes

    @property
    def physical_stripes(self) -> int:
        return self.column_size // self.unit

    # -- placement ---------------------------------------------------------------------
    def polarity(self, ps: int) -> int:
        """The parity column of physical stripe `ps`."""
        return ps % self.columns

    def data_column(self, ps: int, unit_index: int) -> int:
        """The column of data unit `unit_index` (0..N-2) of physical stripe `ps`."""
        if not 0 <= unit_index < self.data_units:
            raise ValueError(f"data unit {unit_index} outside 0..{self.data_units - 1}")
        return (self.polarity(ps) + 1 + unit_index) % self.columns

    def unit_offset(self, ps: int) -> int:
        """Byte offset on every member of physical stripe `ps`'s units."""
        if not 0 <= ps < self.physical_stripes:
            raise ValueError(f"physical stripe {ps} outside 0..{self.physical_stripes - 1}")
        return self.data_offset + ps * self.unit

    def pieces(self, ps: int, start: int, length: int) -> list[tuple[int, int, int, int]]:
        """Bytes [start, start+length) of `ps`'s data area as (unit_index, column,
        member_offset, length) pieces, one per data unit touched, in order."""
        if start < 0 or length < 0 or start + length > self.data_bytes:
            raise ValueError(f"range {start}+{length} outside a {self.data_bytes}-byte stripe")
        out = []
        base = self.unit_offset(ps)
        pos, end = start, start + length
        while pos < end:
            index, within = divmod(pos, self.unit)
            n = min(self.unit - within, end - pos)
            out.append((index, self.data_column(ps, index), base + within, n))
            pos += n
        return out

    def substripe_range(self, first: int, count: int) -> tuple[int, int]:
        """(start, length) in the data area of `count` sub-stripes from `first`."""
        if first < 0 or count < 1 or first + count > self.substripes:
            raise ValueError(f"sub-stripes {first}+{count} outside 0..{self.substripes - 1}")
        return first * self.substripe_bytes, count * self.substripe_bytes

    def describe(self) -> dict:
        return {"columns": self.columns, "unit": self.unit, "column_size": self.column_size,
                "data_offset": self.data_offset, "substripes": self.substripes,
                "physical_stripes": self.physical_stripes, "stripe_data_bytes": self.data_bytes}
