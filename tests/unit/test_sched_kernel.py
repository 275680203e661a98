"""raidlab's kernel (raidlab.sched.run_kernel) keeps trio's rules: each scenario logs its
events with their virtual times, and the log is the one trio's semantics give (sleeps end at
their deadlines, FIFO locks handed to the first waiter, cancellation at checkpoints,
nurseries that gather their children's errors). The kernel has no randomness, so a program
logs the same events twice, wherever it runs (raidlab.sched.run_virtual too)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raidlab import sched
from raidlab.sched import run_virtual


def log_of(fn, *args):
    """fn(*args)'s log on a kernel; each entry carries the virtual time. The same program
    through run_virtual (a fresh kernel) logs the same."""
    log = sched.run_kernel(fn, *args)
    assert run_virtual(fn, *args) == log
    return log


def stamp(log, what):
    log.append((round(sched.current_time(), 9), what))


async def sleepers(delays):
    log = []

    async def sleeper(i, d):
        await sleep_then(log, i, d)

    async with sched.open_nursery() as n:
        for i, d in enumerate(delays):
            n.start_soon(sleeper, i, d)
    stamp(log, "done")
    return log


async def sleep_then(log, i, d):
    await sched.sleep(d)
    stamp(log, i)


@given(st.lists(st.integers(0, 50).map(lambda ms: ms / 1000 + 0.0001), min_size=1, max_size=12, unique=True))
@settings(max_examples=40, deadline=None)
def test_sleeps_end_at_their_deadlines_in_order(delays):
    kernel_log = log_of(sleepers, delays)
    assert [t for t, _ in kernel_log[:-1]] == sorted(round(d, 9) for d in delays)
    assert [i for _, i in kernel_log[:-1]] == sorted(range(len(delays)), key=lambda i: delays[i])
    assert kernel_log[-1] == (round(max(delays), 9), "done")


async def lock_queue():
    log = []
    lock = sched.Lock()

    async def worker(i):
        await sched.sleep(i * 0.001)  # arrive in order 0, 1, 2, ...
        async with lock:
            stamp(log, f"in {i}")
            await sched.sleep(0.01)
            stamp(log, f"out {i}")

    async with sched.open_nursery() as n:
        for i in range(5):
            n.start_soon(worker, i)
    return log


def test_lock_is_fifo_and_exclusive():
    kernel_log = log_of(lock_queue)
    assert [w for _, w in kernel_log] == [f"{x} {i}" for i in range(5) for x in ("in", "out")]
    assert kernel_log[-1][0] == pytest.approx(0.05)


async def handover():
    """A release hands the lock to the first waiter: the releaser cannot take it back."""
    log = []
    lock = sched.Lock()

    async def greedy():
        for _ in range(3):
            async with lock:
                stamp(log, "greedy")
                await sched.sleep(0.001)

    async def waiter():
        await sched.sleep(0.0005)
        async with lock:
            stamp(log, "waiter")

    async with sched.open_nursery() as n:
        n.start_soon(greedy)
        n.start_soon(waiter)
    return log


def test_lock_hands_over_to_the_waiter():
    kernel_log = log_of(handover)
    assert [w for _, w in kernel_log] == ["greedy", "waiter", "greedy", "greedy"]


async def event_and_cancel():
    log = []
    ev = sched.Event()

    async def waits():
        await ev.wait()
        stamp(log, "woken")

    async def forever():
        try:
            await sched.sleep(1000)
        except sched.Cancelled:
            stamp(log, "cancelled")
            raise

    async with sched.open_nursery() as n:
        n.start_soon(waits)
        n.start_soon(forever)
        await sched.sleep(0.5)
        ev.set()
        await sched.sleep(0.25)
        n.cancel_scope.cancel()
    stamp(log, "after")
    with sched.move_on_after(2) as scope:
        await sched.sleep(10)
    stamp(log, ("moved on", scope.cancelled_caught))
    return log


def test_event_wakes_and_cancel_ends_sleepers():
    kernel_log = log_of(event_and_cancel)
    assert kernel_log == [(0.5, "woken"), (0.75, "cancelled"), (0.75, "after"), (2.75, ("moved on", True))]


class Boom(Exception):
    pass


async def failing_child():
    log = []

    async def fails():
        await sched.sleep(0.1)
        raise Boom("member failed")

    async def victim():
        try:
            await sched.sleep(5)
        finally:
            stamp(log, "victim unwound")

    try:
        async with sched.open_nursery() as n:
            n.start_soon(fails)
            n.start_soon(victim)
    except* Boom as group:
        stamp(log, f"caught {group.exceptions[0]}")
    return log


def test_a_childs_error_cancels_its_siblings_and_comes_in_a_group():
    assert log_of(failing_child) == [(0.1, "victim unwound"), (0.1, "caught member failed")]


async def two_failures():
    async def fails(i):
        raise Boom(i)  # before any checkpoint: the nursery's cancellation cannot stop it

    async with sched.open_nursery() as n:
        n.start_soon(fails, 1)
        n.start_soon(fails, 2)


def test_two_errors_come_as_a_group():
    for runner in (sched.run_kernel, run_virtual):
        with pytest.raises(BaseExceptionGroup) as info:
            runner(two_failures)
        assert sorted(e.args[0] for e in info.value.exceptions) == [1, 2]


async def condition_and_semaphore():
    log = []
    cond = sched.Condition()
    sem = sched.Semaphore(2)
    state = {"free": 0}

    async def consumer(i):
        async with cond:
            while state["free"] == 0:
                await cond.wait()
            state["free"] -= 1
            stamp(log, f"consumed {i}")

    async def slot(i):
        async with sem:
            stamp(log, f"slot {i} value {sem.value}")
            await sched.sleep(0.1)

    async with sched.open_nursery() as n:
        for i in range(3):
            n.start_soon(consumer, i)
        await sched.sleep(0.2)
        for _ in range(3):
            async with cond:
                state["free"] += 1
                cond.notify_all()
            await sched.sleep(0.1)
    async with sched.open_nursery() as n:
        for i in range(4):
            n.start_soon(slot, i)
            await sched.sleep(0.001)
    return log


def test_condition_and_semaphore():
    kernel_log = log_of(condition_and_semaphore)
    # tasks started together run in the order they were started: the consumers wait, and
    # are notified, in that order
    assert [w for _, w in kernel_log if w.startswith("consumed")] == ["consumed 0", "consumed 1", "consumed 2"]
    assert [t for t, w in kernel_log if w.startswith("consumed")] == [0.2, 0.3, 0.4]
    slots = [(t, w) for t, w in kernel_log if w.startswith("slot")]
    assert [t for t, _ in slots] == pytest.approx([0.5, 0.501, 0.6, 0.601])


async def started_task():
    async def service(task_status=sched.TASK_STATUS_IGNORED):
        await sched.sleep(0.3)
        task_status.started("ready")
        await sched.sleep(100)

    async with sched.open_nursery() as n:
        value = await n.start(service)
        at = sched.current_time()
        n.cancel_scope.cancel()
    return value, at


def test_nursery_start_waits_for_started():
    assert log_of(started_task) == ("ready", 0.3)


def test_a_stuck_kernel_run_says_so():
    async def stuck():
        await sched.Event().wait()

    with pytest.raises(RuntimeError, match="stuck"):
        sched.run_kernel(stuck)


def test_to_thread_runs_inline_in_the_kernel():
    async def main():
        before = sched.current_time()
        value = await sched.to_thread_run_sync(lambda: 7)
        return value, sched.current_time() - before

    assert sched.run_kernel(main) == (7, 0.0)
    assert not sched.in_kernel()


async def cancelled_waiters():
    """A task that gives up waiting (for a lock, a condition, a semaphore) leaves the queue:
    the next one gets what it waited for, and a condition's waiter leaves owning the lock."""
    log = []
    lock, cond, sem = sched.Lock(), sched.Condition(), sched.Semaphore(0)

    async def holder():
        async with lock:
            await sched.sleep(1)

    async def impatient():
        await sched.sleep(0.1)
        with sched.move_on_after(0.2):
            await lock.acquire()
        stamp(log, ("gave up on the lock", lock.locked()))
        with sched.move_on_after(0.2):
            await sem.acquire()
        stamp(log, "gave up on the semaphore")
        async with cond:
            with sched.move_on_after(0.2):
                await cond.wait()
            stamp(log, ("left the condition holding its lock", cond.locked()))

    async def patient():
        await sched.sleep(0.2)
        async with lock:
            stamp(log, "patient got the lock")
        await sem.acquire()
        stamp(log, "patient got the unit")

    async with sched.open_nursery() as n:
        n.start_soon(holder)
        n.start_soon(impatient)
        n.start_soon(patient)
        await sched.sleep(1.5)
        sem.release()
    return log


def test_a_cancelled_waiter_leaves_its_queue():
    assert log_of(cancelled_waiters) == [
        (0.3, ("gave up on the lock", True)), (0.5, "gave up on the semaphore"),
        (0.7, ("left the condition holding its lock", True)), (1.0, "patient got the lock"),
        (1.5, "patient got the unit")]


async def random_program(seed: int, tasks: int, steps: int):
    """Tasks that sleep, hold one of two locks or a unit of a semaphore, for random real
    durations (so no two events share an instant). Each step logs (kind, task, step, when
    it asked, when it got the resource, when it ended)."""
    import random

    rng = random.Random(seed)
    plan = [[("sleep", rng.uniform(0.001, 0.01))]  # tasks start apart: none at the same instant
            + [(rng.choice(["sleep", "lock0", "lock1", "sem"]), rng.uniform(0.001, 0.01)) for _ in range(steps)]
            for _ in range(tasks)]
    locks, sem, log = [sched.Lock(), sched.Lock()], sched.Semaphore(2), []

    async def run(i, program):
        for j, (kind, seconds) in enumerate(program):
            asked = sched.current_time()
            if kind == "sleep":
                got = asked
                await sched.sleep(seconds)
            else:
                async with (sem if kind == "sem" else locks[int(kind[-1])]):
                    got = sched.current_time()
                    await sched.sleep(seconds)
            log.append((kind, i, j, asked, got, sched.current_time(), seconds))

    async with sched.open_nursery() as n:
        for i, program in enumerate(plan):
            n.start_soon(run, i, program)
    return log


def _held_at(intervals, t):
    return sum(1 for got, end in intervals if got <= t < end)


@given(st.integers(0, 2**32), st.integers(1, 6), st.integers(1, 8))
@settings(max_examples=60, deadline=None)
def test_random_programs_keep_the_locks_and_the_semaphore(seed, tasks, steps):
    """Every step runs, in its task's order, for its own duration once it holds what it
    needs; a lock has one holder and the semaphore two at most; and no one waits for a
    resource that is free (a waiter gets it the instant a holder lets it go)."""
    log = log_of(random_program, seed, tasks, steps)
    assert sorted((i, j) for _, i, j, *_ in log) == [(i, j) for i in range(tasks) for j in range(steps + 1)]
    for kind, i, j, asked, got, end, seconds in log:
        assert asked <= got and end == pytest.approx(got + seconds)
    by_task = {}
    for kind, i, j, asked, got, end, seconds in sorted(log, key=lambda e: (e[1], e[2])):
        assert asked >= by_task.get(i, 0.0)
        by_task[i] = end
    for resource, most in (("lock0", 1), ("lock1", 1), ("sem", 2)):
        held = [(got, end) for kind, _, _, _, got, end, _ in log if kind == resource]
        for got, _ in held:
            assert _held_at(held, got) <= most
        for kind, _, _, asked, got, _, _ in log:
            if kind == resource and got > asked:  # it waited: full when it asked, got it as a holder left
                assert _held_at(held, asked) == most
                assert any(end == got for _, end in held)
