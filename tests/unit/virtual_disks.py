"""For the unit tests: a body run in virtual time with its emulated disks started."""

from __future__ import annotations

import trio

from raidlab.engine.virtual import run_virtual


def run_on(disks, body):
    """Start `disks`, await `body()`, stop them; its result."""
    async def main():
        out = {}
        async with trio.open_nursery() as nursery:
            for d in disks:
                d.start(nursery)
            out["result"] = await body()
            nursery.cancel_scope.cancel()
        return out["result"]

    return run_virtual(main)
