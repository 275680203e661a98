"""Stripe temperatures (Pallipadi & Gopinath §3.9).

"The TSS driver maintains temperature and access fields for each stripe. Temperature field
accumulates the accesses over a period of time. Access field indicates whether the stripe
has been accessed in the recent past. The aging is the process of increasing the
temperature of all recently accessed stripes, depending on its access field. Uptodate field
also indicates whether the stripe has been accessed in recent past and is used by degrade
process which reduces the stripe temperature using exponential degradation. We need
separate access and uptodate field, as the aging and degradation can happen at different
frequencies. Temperature of a stripe is reset during the migration of that stripe."

Reading taken here, stated because the paper gives no formula:
* `access` counts the accesses since the last aging (so "depending on its access field" is
  how much the temperature rises); aging adds it to the temperature and clears it.
* `uptodate` is set by every access; degradation multiplies the temperature of every stripe
  *not* accessed since the last degradation by `factor` (default 1/2), then clears
  `uptodate` for all.
Aging and degradation run when a policy asks (the control API), at the policy's own
frequencies, as in the paper; the device itself never ages or degrades.
"""

from __future__ import annotations

from raidlab.errors import UsageError

DEFAULT_DEGRADE_FACTOR = 0.5


class Temperatures:
    """temperature, access and uptodate fields of every logical stripe."""

    def __init__(self, stripes: int) -> None:
        self.temperature = [0.0] * stripes
        self.access = [0] * stripes
        self.uptodate = bytearray(stripes)
        self.agings = 0
        self.degradations = 0

    def touch(self, stripe: int) -> None:
        """One access of `stripe` (a read or write request that touches it)."""
        self.access[stripe] += 1
        self.uptodate[stripe] = 1

    def age(self) -> int:
        """Add each stripe's recent accesses to its temperature; return how many rose."""
        risen = 0
        for stripe, count in enumerate(self.access):
            if count:
                self.temperature[stripe] += count
                self.access[stripe] = 0
                risen += 1
        self.agings += 1
        return risen

    def degrade(self, factor: float = DEFAULT_DEGRADE_FACTOR) -> int:
        """Exponential degradation of the stripes not accessed since the last one; return
        how many cooled."""
        if not 0.0 <= factor < 1.0:
            raise UsageError(f"degradation factor {factor} outside 0 <= f < 1")
        cooled = 0
        for stripe, recent in enumerate(self.uptodate):
            if not recent and self.temperature[stripe]:
                self.temperature[stripe] *= factor
                cooled += 1
        self.uptodate = bytearray(len(self.uptodate))
        self.degradations += 1
        return cooled

    def reset(self, stripe: int | None = None) -> None:
        """Reset one stripe (on its migration) or all of them."""
        if stripe is None:
            n = len(self.temperature)
            self.temperature, self.access, self.uptodate = [0.0] * n, [0] * n, bytearray(n)
        else:
            self.temperature[stripe] = 0.0
            self.access[stripe] = 0
            self.uptodate[stripe] = 0

    def get(self, stripe: int) -> float:
        return self.temperature[stripe]

    def set(self, stripe: int, value: float) -> None:
        if value < 0:
            raise UsageError(f"temperature {value} is negative")
        self.temperature[stripe] = float(value)
