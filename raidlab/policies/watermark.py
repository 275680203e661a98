"""The watermark policy (Pallipadi & Gopinath §3.9, §5.4.3).

"In this policy, there are lower and upper watermarks fixed on the three kinds of stripe
personalities. Periodic checks are done to check whether the number of stripes of all the
personalities conform to the corresponding watermarks. If not, migrations of the stripes
are performed, so as to conform to the watermarks. ... It does the migrations of the
stripes based on temperature." The paper's runs used RAID1 20-30% / 50-60%, RAID5 25-35% /
55-65%, cRAID5 5-10% / 20-25% (lower / upper); the defaults here are the middles of those
ranges.

Readings, stated because the paper does not give them:
* a watermark is a share of the valid (non-invalid) logical stripes;
* each check ages the temperatures first (accesses since the last check count), and every
  `degrade_every`-th check degrades them by `degrade_factor`;
* a personality above its upper watermark gives stripes to a neighbour with room (RAID1 to
  RAID5, RAID5 to cRAID5 or else to RAID1, cRAID5 to RAID5); one below its lower watermark
  takes them from a neighbour that stays within its own (`_moves`); a promotion moves the
  hottest stripe, a victimization the coldest;
* at most `max_moves` migrations per check (default 256), so a check ends;
* period 1 s, degradation every 10 checks by 1/2: assumptions.
A personality within its watermarks is left alone, whatever its temperatures: the static
nature the paper blames for the policy's slowness.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from raidlab import sched
from raidlab.engine.tss.maptable import CRAID5, INVALID, RAID1, RAID5
from raidlab.errors import UsageError

DEFAULT_WATERMARKS = {RAID1: (0.25, 0.55), RAID5: (0.30, 0.60), CRAID5: (0.075, 0.225)}


def check_watermarks(marks: dict[str, tuple[float, float]]) -> None:
    """UsageError unless each pair is 0 <= lower <= upper <= 1 and the three can hold at
    once (the lowers sum to at most 100%, the uppers to at least 100%)."""
    for kind, (lower, upper) in marks.items():
        if not 0.0 <= lower <= upper <= 1.0:
            raise UsageError(f"{kind} watermarks {lower:.0%}:{upper:.0%} must satisfy 0 <= lower <= upper <= 100%")
    if sum(lower for lower, _ in marks.values()) > 1.0:
        raise UsageError("the lower watermarks add up to more than 100%", hint="lower some of them")
    if sum(upper for _, upper in marks.values()) < 1.0:
        raise UsageError("the upper watermarks add up to less than 100%", hint="raise some of them")


@dataclasses.dataclass
class WatermarkPolicy:
    watermarks: dict[str, tuple[float, float]] = dataclasses.field(default_factory=lambda: dict(DEFAULT_WATERMARKS))
    period: float = 1.0
    degrade_every: int = 10
    degrade_factor: float = 0.5
    max_moves: int = 256
    name: str = "watermark"

    def __post_init__(self) -> None:
        check_watermarks(self.watermarks)
        if not self.period > 0:
            raise UsageError(f"policy period {self.period} must be positive")
        self.checks = 0
        self.moves: dict[str, int] = {}

    def describe(self) -> dict[str, Any]:
        return {"policy": self.name, "watermarks": {k: list(v) for k, v in self.watermarks.items()},
                "period_s": self.period, "degrade_every": self.degrade_every,
                "degrade_factor": self.degrade_factor, "max_moves": self.max_moves}

    async def run(self, control, on_check=None) -> None:
        while True:
            await sched.sleep(self.period)
            moved = await self.check(control)
            if on_check is not None:
                on_check(moved)

    async def check(self, control) -> dict[str, int]:
        """One periodic check: age (and degrade), then migrate until every personality is
        within its watermarks or `max_moves` is reached. Returns the moves made."""
        self.checks += 1
        await control.age()
        if self.degrade_every and self.checks % self.degrade_every == 0:
            await control.degrade(self.degrade_factor)
        counts = dict((await control.counts())["personalities"])
        valid = sum(n for kind, n in counts.items() if kind != INVALID)
        made: dict[str, int] = {}
        if not valid:
            return made
        lower = {k: v[0] * valid for k, v in self.watermarks.items()}
        upper = {k: v[1] * valid for k, v in self.watermarks.items()}
        stuck: set[tuple[str, str]] = set()
        total = 0
        while total < self.max_moves:
            action = next((move for move in _moves(counts, lower, upper) if move not in stuck), None)
            if action is None:
                break
            verb, kind = action
            result = await (control.promote(kind=kind) if verb == "promote" else control.victimize(kind=kind))
            if not result.get("moved"):
                stuck.add(action)  # no stripe or no space: try the other rules
                continue
            counts[result["from"]] -= 1
            counts[result["to"]] += 1
            key = f"{result['from']}->{result['to']}"
            made[key] = made.get(key, 0) + 1
            self.moves[key] = self.moves.get(key, 0) + 1
            total += 1
        return made


# Each personality's neighbours, in the order a move out of it is tried: (verb, to).
_OUT = {RAID1: [("victimize", RAID5)], RAID5: [("victimize", CRAID5), ("promote", RAID1)],
        CRAID5: [("promote", RAID5)]}
# Each personality's sources, in the order a move into it is tried: (verb, from).
_IN = {RAID1: [("promote", RAID5)], RAID5: [("victimize", RAID1), ("promote", CRAID5)],
       CRAID5: [("victimize", RAID5)]}


def _moves(counts: dict[str, int], lower: dict[str, float], upper: dict[str, float]):
    """The moves (verb, kind moved from) that reduce a watermark violation without making
    another: out of a personality above its upper mark into one with room below its upper
    mark, or into one below its lower mark from one that stays at or above its own. Each
    such move lowers the total violation, so a check always ends."""
    for kind in (RAID1, RAID5, CRAID5):
        if counts[kind] > upper[kind]:
            for verb, to in _OUT[kind]:
                if counts[to] + 1 <= upper[to]:
                    yield verb, kind
    for kind in (RAID1, RAID5, CRAID5):
        if counts[kind] < lower[kind]:
            for verb, source in _IN[kind]:
                if counts[source] - 1 >= lower[source]:
                    yield verb, source
