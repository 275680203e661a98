"""Time and synchronisation for the engine, under either clock.

The engine (raidlab.engine, raidlab.disks, raidlab.archs, the policies and the cluster's
twin) asks this module, never trio directly, for the time, for sleeps and checkpoints, for
Event, Lock, Condition, Semaphore, nurseries, cancel scopes and worker threads. Each call
is answered by whichever scheduler runs the code:

* trio, under the real clock (a live array, the FUSE export, the daemons);
* raidlab's discrete-event kernel (raidlab.sched.kernel) while `run_kernel` runs: virtual
  time, for every replay, scenario run, disk bench and engine test (`run_virtual`, from
  raidlab.sched.virtual, is `run_kernel` with stop signals deferred), at
  1-3 µs of scheduling per virtual instant (results/bench/sim-kernel/NOTES.md).

So the engine stays one code path for both clocks; what differs is only who keeps the
clock and the run queue. The constructors (`Event()`, `Lock()`, ...) return the running
scheduler's own object, so one made under trio is used under trio, one made in a kernel
run in that run. `to_thread_run_sync` runs a blocking call in trio's thread pool live and
inline in a kernel run (virtual time stands still while it runs, which is what a
simulation wants; virtual time's backends are memory anyway).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import trio

from raidlab.sched import kernel as _k

T = TypeVar("T")

running_kernel = _k.running  # the raidlab.sched.kernel.Kernel running the calling code, or None (trio)

Cancelled = (trio.Cancelled, _k.Cancelled)  # either scheduler's: for `except sched.Cancelled` and isinstance
TASK_STATUS_IGNORED = trio.TASK_STATUS_IGNORED


class Nursery(Protocol):
    """What both schedulers' nurseries offer (trio.Nursery, raidlab.sched.kernel.Nursery)."""

    cancel_scope: Any

    def start_soon(self, async_fn: Callable[..., Awaitable[Any]], *args: Any, name: Any = None) -> None: ...

    async def start(self, async_fn: Callable[..., Awaitable[Any]], *args: Any, name: Any = None) -> Any: ...


def current_time() -> float:
    k = running_kernel()
    return k.now if k is not None else trio.current_time()


def sleep(seconds: float) -> Awaitable[None]:
    return _k.sleep(seconds) if running_kernel() is not None else trio.sleep(seconds)


def sleep_until(deadline: float) -> Awaitable[None]:
    return _k.sleep_until(deadline) if running_kernel() is not None else trio.sleep_until(deadline)


def checkpoint() -> Awaitable[None]:
    return _k.checkpoint() if running_kernel() is not None else trio.lowlevel.checkpoint()


def checkpoint_if_cancelled() -> Awaitable[None]:
    return _k.checkpoint_if_cancelled() if running_kernel() is not None else trio.lowlevel.checkpoint_if_cancelled()


def cancel_shielded_checkpoint() -> Awaitable[None]:
    return _k.cancel_shielded_checkpoint() if running_kernel() is not None else trio.lowlevel.cancel_shielded_checkpoint()


def open_nursery() -> Any:
    return _k.open_nursery() if running_kernel() is not None else trio.open_nursery()


def move_on_after(seconds: float) -> Any:
    return _k.move_on_after(seconds) if running_kernel() is not None else trio.move_on_after(seconds)


def CancelScope(**kw: Any) -> Any:  # noqa: N802 - a constructor, named as trio's
    return _k.CancelScope(**kw) if running_kernel() is not None else trio.CancelScope(**kw)


def Event() -> Any:  # noqa: N802
    return _k.Event() if running_kernel() is not None else trio.Event()


def Lock() -> Any:  # noqa: N802
    return _k.Lock() if running_kernel() is not None else trio.Lock()


def Condition(lock: Any = None) -> Any:  # noqa: N802
    return _k.Condition(lock) if running_kernel() is not None else trio.Condition(lock)


def Semaphore(initial_value: int) -> Any:  # noqa: N802
    return _k.Semaphore(initial_value) if running_kernel() is not None else trio.Semaphore(initial_value)


def CapacityLimiter(total_tokens: int) -> Any:  # noqa: N802
    """A bound on trio's worker threads for `to_thread_run_sync(..., limiter=)`: threads
    exist only under trio (a kernel run does the call inline), so this is always trio's."""
    return trio.CapacityLimiter(total_tokens)


async def to_thread_run_sync(fn: Callable[..., T], *args: Any, **kw: Any) -> T:
    if running_kernel() is not None:
        return fn(*args)
    return await trio.to_thread.run_sync(fn, *args, **kw)


def in_kernel() -> bool:
    """True while raidlab's kernel runs this code (virtual time), False under trio (live)."""
    return running_kernel() is not None


def run_kernel(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """fn(*args) to its end on a fresh discrete-event kernel (virtual time from 0)."""
    return _k.Kernel().run(fn, *args)


from raidlab.sched.virtual import run_virtual  # noqa: E402  (the kernel with stop signals deferred)
