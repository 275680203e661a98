"""For the unit tests: a body run in virtual time with its emulated disks started."""

from __future__ import annotations

from raidlab import sched
from raidlab.sched import run_virtual


def run_on(disks, body):
    """Start `disks`, await `body()`, stop them; its result."""
    async def main():
        out = {}
        async with sched.open_nursery() as nursery:
            for d in disks:
                d.start(nursery)
            out["result"] = await body()
            nursery.cancel_scope.cancel()
        return out["result"]

    return run_virtual(main)


def run_in_nursery(body, disks=()):
    """Start `disks`, await `body(nursery)` in virtual time, then cancel the nursery: every
    background task the body started (destagers, image writers) dies where it stands, as in
    a crash. The body's result."""
    async def main():
        async with sched.open_nursery() as nursery:
            for d in disks:
                d.start(nursery)
            result = await body(nursery)
            nursery.cancel_scope.cancel()
        return result

    return run_virtual(main)
