"""The five-minute rule policy (Pallipadi & Gopinath §3.9, §5.4.3; Gray & Reuter's rule).

Gray's five-minute rule keeps an object in the dearer, faster level while it is referenced
more often than once per break-even interval. The paper adapts it to two TSS tiers A
(faster) and B, as the frequency

    ((RAIDA_cost/byte - RAIDB_cost/byte) * Obj_bytes) / (RAIDA_acc/s_cost - RAIDB_acc/s_cost)

whose inverse is the interval. `break_even_interval` computes it from figures a user can
measure: each tier's space per logical byte (its space overhead: Table 3's 250%, 125%,
87.5%) and its time per block access (Table 3's I/O times). An object in A occupies
(space_A - space_B) x object bytes more, worth (space_A - space_B) x object / disk_bytes of
a disk; each access in A saves (t_B - t_A) of a disk arm's time, so an object accessed once
every T seconds saves (t_B - t_A) / T of an arm, worth that share of a disk. Break-even:

    T = (t_B - t_A) x disk_bytes / ((space_A - space_B) x object_bytes)

(the disk's price cancels). `raidlab tss five-minute` prints it.

The policy: "the trace run with the five minute rule was done with RAID1-RAID5 transition
frequency as 20 seconds and RAID5-cRAID5 transition frequency as 350 seconds" (the formula's
values were "reduced by a large factor" because the trace ran compacted in time). Every
`raid1_raid5` seconds: RAID1 stripes not accessed since the last such turn (their access
field clear) are victimized to RAID5, coldest first, and RAID5 stripes accessed since then
promoted, hottest first; then aging clears the access fields. Every `raid5_craid5` seconds,
the same between RAID5 and cRAID5 with the uptodate field, then degradation clears it. That
is why the device keeps both fields (§3.9: "aging and degradation can happen at different
frequencies"). At most `max_moves` migrations per turn and tier pair (default: no limit);
a promotion that finds no free space ends its turn.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from raidlab import sched
from raidlab.engine.tss.maptable import CRAID5, RAID1, RAID5
from raidlab.errors import UsageError


def break_even_interval(space_a: float, space_b: float, time_a: float, time_b: float, object_bytes: int,
                        disk_bytes: int) -> float:
    """Seconds between accesses below which an object belongs in the faster tier A (module
    doc). space_*: bytes occupied per logical byte; time_*: seconds per access."""
    if not space_a > space_b:
        raise UsageError(f"tier A must use more space per byte than tier B ({space_a} <= {space_b})")
    if not time_b > time_a:
        raise UsageError(f"tier A must be faster than tier B ({time_a} s >= {time_b} s per access)")
    if object_bytes <= 0 or disk_bytes <= 0:
        raise UsageError("object and disk sizes must be positive")
    return (time_b - time_a) * disk_bytes / ((space_a - space_b) * object_bytes)


@dataclasses.dataclass
class FiveMinutePolicy:
    raid1_raid5: float = 20.0
    raid5_craid5: float = 350.0
    degrade_factor: float = 0.5
    max_moves: int | None = None
    name: str = "five-minute"

    def __post_init__(self) -> None:
        for what, value in (("RAID1-RAID5 interval", self.raid1_raid5), ("RAID5-cRAID5 interval", self.raid5_craid5)):
            if not value > 0:
                raise UsageError(f"{what} {value} must be positive")
        self.moves: dict[str, int] = {}
        self.turns = {"raid1_raid5": 0, "raid5_craid5": 0}

    def describe(self) -> dict[str, Any]:
        return {"policy": self.name, "raid1_raid5_s": self.raid1_raid5, "raid5_craid5_s": self.raid5_craid5,
                "degrade_factor": self.degrade_factor, "max_moves": self.max_moves}

    async def run(self, control, on_check=None) -> None:
        async with sched.open_nursery() as nursery:
            nursery.start_soon(self._every, control, self.raid1_raid5, self.upper_turn, on_check)
            nursery.start_soon(self._every, control, self.raid5_craid5, self.lower_turn, on_check)

    async def _every(self, control, interval: float, turn, on_check) -> None:
        while True:
            await sched.sleep(interval)
            moved = await turn(control)
            if on_check is not None:
                on_check(moved)

    async def upper_turn(self, control) -> dict[str, int]:
        """RAID1 <-> RAID5 by the access field, then aging."""
        self.turns["raid1_raid5"] += 1
        made = await self._pair(control, RAID1, RAID5, "access")
        await control.age()
        return made

    async def lower_turn(self, control) -> dict[str, int]:
        """RAID5 <-> cRAID5 by the uptodate field, then degradation."""
        self.turns["raid5_craid5"] += 1
        made = await self._pair(control, RAID5, CRAID5, "uptodate")
        await control.degrade(self.degrade_factor)
        return made

    async def _pair(self, control, faster: str, slower: str, field: str) -> dict[str, int]:
        made: dict[str, int] = {}
        for verb, kind, recent in (("victimize", faster, (field, False)), ("promote", slower, (field, True))):
            count = 0
            while self.max_moves is None or count < self.max_moves:
                call = control.victimize if verb == "victimize" else control.promote
                result = await call(kind=kind, recent=recent)
                if not result.get("moved"):
                    break
                key = f"{result['from']}->{result['to']}"
                made[key] = made.get(key, 0) + 1
                self.moves[key] = self.moves.get(key, 0) + 1
                count += 1
        return made
