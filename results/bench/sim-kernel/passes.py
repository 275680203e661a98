"""The scheduler's own cost per virtual instant, trio against raidlab's kernel, in one run.

The same two coroutines, written against raidlab.sched, run under each replay scheduler
(raidlab.runners.clock.run_replay): one task sleeping to a new instant M times, and the
same with an Event handed to a second task at each instant (a request's hand-back). The
wall time per instant is the scheduler's cost, with no disk model or layout in it.

Usage: python results/bench/sim-kernel/passes.py [M]   (one JSON line per case)
"""
import json
import sys
import time

from raidlab import sched
from raidlab.runners.clock import run_replay

M = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000


async def bare(m):
    for i in range(m):
        await sched.sleep_until(i * 1e-3 + 1e-3)


async def handoff(m):
    ev = sched.Event()

    async def waiter():
        for _ in range(m):
            await ev.wait()

    async with sched.open_nursery() as n:
        n.start_soon(waiter)
        for i in range(m):
            await sched.sleep_until(i * 1e-3 + 1e-3)
            old, ev = ev, sched.Event()
            old.set()


for name, fn in (("sleep_until", bare), ("sleep_plus_event_handoff", handoff)):
    row = {"case": name, "instants": M}
    for scheduler in ("trio", "kernel"):
        start = time.perf_counter()
        run_replay(fn, M, scheduler=scheduler)
        row[f"{scheduler}_us_per_instant"] = round((time.perf_counter() - start) / M * 1e6, 2)
    row["kernel_speedup"] = round(row["trio_us_per_instant"] / row["kernel_us_per_instant"], 1)
    print(json.dumps(row), flush=True)
