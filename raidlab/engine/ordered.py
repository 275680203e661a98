"""Concurrent calls started in a given order.

trio runs the tasks of one batch in either order (it reverses a batch half of the time),
and an emulated drive queues requests in the order they reach it. Two requests for one
drive (a raid5 read on each side of a parity chunk, a TSS stripe's pieces) that reach a
FIFO drive in reverse make the second wait most of a revolution for sectors the head has
just passed (measured: the engine's raid5 read sequentially at 0.90 of md's speed at
iodepth 1 on VC-RAID Table 1's drives). `start_in_order` starts each call only after the
one before it has begun, which a drive queues before it first waits.
"""

from __future__ import annotations

from collections.abc import Sequence

from raidlab import sched


async def start_in_order(calls: Sequence[tuple], catch: tuple[type[BaseException], ...] = ()) -> list[BaseException]:
    """Run the calls `(fn, *args)` concurrently, each started after the previous one began.
    Exceptions of the types in `catch` are collected and returned, in the order they were
    raised, instead of cancelling the others; any other exception propagates (as trio's
    ExceptionGroup)."""
    caught: list[BaseException] = []
    if len(calls) == 1:
        fn, *args = calls[0]
        try:
            await fn(*args)
        except catch as exc:
            caught.append(exc)
        return caught

    async def started_after(previous: sched.Event | None, started: sched.Event, fn, *args) -> None:
        if previous is not None:
            await previous.wait()
        started.set()
        try:
            await fn(*args)
        except catch as exc:
            caught.append(exc)

    async with sched.open_nursery() as nursery:
        previous = None
        for fn, *args in calls:
            started = sched.Event()
            nursery.start_soon(started_after, previous, started, fn, *args)
            previous = started
    return caught
