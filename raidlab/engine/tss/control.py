"""The TSS control interface (Pallipadi & Gopinath §3.9, the driver's ioctl() calls), once.

"Following are the different mechanisms provided by the TSS driver that can be used by
policy routines": get/set a stripe's temperature, reset all temperatures, aging,
degradation, the number of stripes of each personality, the maximum temperature of each,
promote/victimize a given stripe or the best one of a personality. `TSSControl` is that
interface over a device in this process: the array daemon answers its control socket's
`tss_*` operations with it (raidlab.service.hosts.tss), and a virtual-time replay hands it
to a policy directly. A policy process reaches the same operations through the socket
(raidlab.service.tss_control), so a policy is written once against these methods.

The best-stripe calls take two refinements the paper's policies need and its list implies:
`below`/`above` (move the best stripe only if its temperature is below/at least a value)
and `recent` (only stripes whose access or uptodate field is set, or clear: "accessed since
the last aging / degradation", the reason the paper keeps both fields). Nothing is locked
across calls (§3.9): what one call reports may have changed by the next.
"""

from __future__ import annotations

from typing import Any

from raidlab.engine.tss.device import TSSDevice
from raidlab.engine.tss.maptable import CRAID5, RAID1, RAID5
from raidlab.engine.tss.migration import PROMOTE, VICTIMIZE, MigrationRefused
from raidlab.engine.tss.temperature import DEFAULT_DEGRADE_FACTOR
from raidlab.errors import UsageError


def _number(what: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"{what} {value!r} is not a number")
    return float(value)


class TSSControl:
    """The control interface of one TSS device (module doc). Every method is async and
    returns a JSON-serialisable dict, as the socket carries it."""

    def __init__(self, device: TSSDevice) -> None:
        self.device = device

    def _stripe(self, stripe: Any) -> int:
        table = self.device.table
        if isinstance(stripe, bool) or not isinstance(stripe, int):
            raise UsageError(f"stripe {stripe!r} is not a logical stripe number")
        if not 0 <= stripe < table.logical_stripes:
            raise UsageError(f"no logical stripe {stripe}: {self.device.name} has 0..{table.logical_stripes - 1}")
        return stripe

    def _fields(self, stripe: int) -> dict[str, Any]:
        t = self.device.temperatures
        return {"stripe": stripe, "personality": self.device.table[stripe].kind,
                "temperature": t.temperature[stripe], "access": t.access[stripe],
                "uptodate": bool(t.uptodate[stripe])}

    async def get(self, stripe: int) -> dict[str, Any]:
        return self._fields(self._stripe(stripe))

    async def set(self, stripe: int, value: float) -> dict[str, Any]:
        stripe = self._stripe(stripe)
        self.device.temperatures.set(stripe, _number("temperature", value))
        return self._fields(stripe)

    async def reset(self) -> dict[str, Any]:
        self.device.temperatures.reset()
        return {"reset": self.device.table.logical_stripes}

    async def age(self) -> dict[str, Any]:
        return {"risen": self.device.temperatures.age()}

    async def degrade(self, factor: float = DEFAULT_DEGRADE_FACTOR) -> dict[str, Any]:
        return {"cooled": self.device.temperatures.degrade(_number("degradation factor", factor))}

    async def counts(self) -> dict[str, Any]:
        device = self.device
        return {
            "personalities": dict(device.table.counts),
            "max_temperature": {kind: device.max_temperature(kind) for kind in (RAID1, RAID5, CRAID5)},
            "free_stripes": device.table.free_stripes(),
            "physical_stripes": device.geometry.physical_stripes,
            "logical_stripes": device.table.logical_stripes,
            "space": device.table.space(),
        }

    async def promote(self, stripe: int | None = None, kind: str | None = None, *, above: float | None = None,
                      recent: tuple[str, bool] | list | None = None) -> dict[str, Any]:
        """Promote `stripe`, or the hottest stripe of `kind` (at least `above` hot)."""
        return await self._migrate(True, stripe, kind, above, recent)

    async def victimize(self, stripe: int | None = None, kind: str | None = None, *, below: float | None = None,
                        recent: tuple[str, bool] | list | None = None) -> dict[str, Any]:
        """Victimize `stripe`, or the coldest stripe of `kind` (colder than `below`)."""
        return await self._migrate(False, stripe, kind, below, recent)

    async def _migrate(self, up: bool, stripe, kind, bound, recent) -> dict[str, Any]:
        device = self.device
        moves = PROMOTE if up else VICTIMIZE
        verb = "promote" if up else "victimize"
        if stripe is not None:
            stripe = self._stripe(stripe)
        else:
            if kind not in moves:
                raise UsageError(f"cannot {verb} the best stripe of {kind!r}",
                                 hint=f"{verb} takes a stripe or one of: {', '.join(moves)}")
            if recent is not None:
                recent = (str(recent[0]), bool(recent[1]))
            stripe = device.best(kind, hottest=up, recent=recent)
            if stripe is None:
                return {"stripe": None, "moved": False, "reason": f"no {kind} stripe"}
            if bound is not None:
                t = device.temperatures.temperature[stripe]
                if (t < _number("above", bound)) if up else (t >= _number("below", bound)):
                    return {"stripe": stripe, "moved": False,
                            "reason": f"the {'hottest' if up else 'coldest'} {kind} stripe is at {t:g}"}
        before = device.table[stripe].kind
        try:
            after = await (device.promote(stripe) if up else device.victimize(stripe))
        except MigrationRefused as exc:
            if kind is None:
                raise
            return {"stripe": stripe, "moved": False, "reason": exc.message}
        return {"stripe": stripe, "moved": True, "from": before, "to": after}
