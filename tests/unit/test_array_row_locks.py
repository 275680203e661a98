"""The raid5 array's row locks (raidlab.engine.array._StripeLocks): FIFO per row, all
rows or none for try_acquire, and a waiter cancelled while it waits leaves nothing held."""

from __future__ import annotations

from raidlab import sched
from raidlab.engine.array import _StripeLocks
from raidlab.sched import run_virtual


def test_waiters_get_a_row_in_the_order_they_asked_and_a_cancelled_waiter_takes_none():
    async def body():
        locks, order = _StripeLocks(), []
        await locks.acquire([3, 1, 2])

        async def writer(name, rows, cancel_after=None):
            with sched.move_on_after(cancel_after if cancel_after is not None else 1e9):
                await locks.acquire(rows)
                order.append(name)
                await sched.sleep(1)
                locks.release(rows)

        async with sched.open_nursery() as nursery:
            nursery.start_soon(writer, "a", [2])
            await sched.sleep(0.1)
            nursery.start_soon(writer, "gone", [0, 2], 0.5)   # takes 0, waits for 2, is cancelled
            await sched.sleep(0.1)
            nursery.start_soon(writer, "b", [2, 4])
            await sched.sleep(0.1)
            assert locks.try_acquire([0]) is False               # "gone" holds 0 while it waits
            await sched.sleep(1)                                  # "gone" was cancelled: 0 is free again
            assert locks.try_acquire([0]) is True
            locks.release([0])
            locks.release([1, 2, 3])
        return order, locks.waits, locks._held

    order, waits, held = run_virtual(body)
    assert order == ["a", "b"]
    assert waits == 3 and held == {}


def test_try_acquire_takes_all_rows_or_none():
    async def body():
        locks = _StripeLocks()
        await locks.acquire([5])
        assert locks.try_acquire([4, 5, 6]) is False
        assert locks.try_acquire([4, 6]) is True
        locks.release([4, 5, 6])
        return locks._held

    assert run_virtual(body) == {}
