"""A third TSS policy, written for the TSS lab against the control interface only: "keep the
hot stripes fast, squeeze the cold ones while space is short".

Every PERIOD seconds it ages the temperatures, then
  1. while fewer than FREE_TARGET of the physical stripes are free, victimizes the coldest
     RAID1 stripe (RAID1 -> RAID5 frees one whole physical stripe), else the coldest RAID5
     one (RAID5 -> cRAID5 frees most of one);
  2. promotes, hottest first, every RAID5 or cRAID5 stripe whose temperature reaches HOT;
and every DEGRADE_EVERY-th period degrades the temperatures.

It uses only what the paper's ioctls offer (raidlab.engine.tss.control: counts, age, degrade,
promote/victimize the best stripe of a personality), so it runs unchanged against a live
array (over its control socket, as below) or beside a replay (`TSSControl`).

    python3 labs/tss/hot_promote.py NAME [--period 1] [--hot 3] [--free 0.2] [--duration 30]
"""

from __future__ import annotations

import argparse
import os
import dataclasses

import trio


@dataclasses.dataclass
class HotPromotePolicy:
    period: float = 1.0
    hot: float = 3.0           # temperature at which a stripe is promoted
    free_target: float = 0.2   # share of physical stripes to keep free
    degrade_every: int = 5
    moves: dict = dataclasses.field(default_factory=dict)

    async def run(self, control) -> None:
        turn = 0
        while True:
            await trio.sleep(self.period)
            turn += 1
            await self.turn(control)
            if turn % self.degrade_every == 0:
                await control.degrade(0.5)

    async def turn(self, control) -> None:
        await control.age()
        counts = await control.counts()
        free = counts["free_stripes"]
        target = self.free_target * counts["physical_stripes"]
        while free < target:
            result = await control.victimize(kind="raid1")
            if not result["moved"]:
                result = await control.victimize(kind="raid5")
            if not result["moved"]:
                break
            self._count(result)
            free = (await control.counts())["free_stripes"]
        for kind in ("raid5", "craid5"):
            while True:
                result = await control.promote(kind=kind, above=self.hot)
                if not result["moved"]:
                    break
                self._count(result)

    def _count(self, result: dict) -> None:
        key = f"{result['from']}->{result['to']}"
        self.moves[key] = self.moves.get(key, 0) + 1


def main() -> None:
    from raidlab.lab import Lab
    from raidlab.service.tss_control import SocketControl

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name")
    parser.add_argument("--period", type=float, default=1.0)
    parser.add_argument("--hot", type=float, default=3.0)
    parser.add_argument("--free", type=float, default=0.2)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--home", default=os.environ.get("RAIDLAB_HOME"))
    args = parser.parse_args()
    policy = HotPromotePolicy(period=args.period, hot=args.hot, free_target=args.free)
    control = SocketControl(Lab(args.name, home=args.home))

    async def run() -> None:
        with trio.move_on_after(args.duration):
            await policy.run(control)

    trio.run(run)
    print("migrations:", ", ".join(f"{k} {v}" for k, v in sorted(policy.moves.items())) or "none")


if __name__ == "__main__":
    main()
