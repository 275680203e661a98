"""Run engine code under the virtual clock, deterministically.

Why: the virtual clock (docs/architecture.md, "Two clocks") is `trio.testing.MockClock(autojump_threshold=0)`, which makes
time jump straight to the next deadline, so a trace replays as a discrete-event simulation.
That alone does not make a replay reproducible: trio deliberately randomises the order in
which tasks that became runnable together are resumed (its scheduler RNG, `_r` in
trio._core._run), and the order in which concurrent member requests reach a disk's queue
decides seek distances and so the times. The same trace, seed and options must give
identical results byte for byte, so `run_virtual` seeds that RNG before each run.
It is a private trio attribute — the one trio's own Hypothesis plugin seeds for the same
purpose — so we check it exists and fail loudly if a trio release removes it.

Seeding alone is not enough: timers that expire at the same virtual instant (common on a
virtual clock) are ordered by `id()` of their cancel scopes, i.e. by memory address, which
depends on what the process did before; a replay could then differ from the same replay run
first in a fresh process. trio's deterministic-scheduling switch (also set by its Hypothesis
plugin) sorts every batch of runnable tasks by creation order before the seeded shuffle,
which removes that dependence; `run_virtual` turns it on for the duration of the run.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio
import trio.testing

from raidlab.errors import Signalled

T = TypeVar("T")


def _scheduler_rng() -> random.Random:
    from trio._core import _run

    rng = getattr(_run, "_r", None)
    if not isinstance(rng, random.Random):  # pragma: no cover - depends on the trio release
        raise RuntimeError(
            "this trio release has no scheduler RNG at trio._core._run._r; "
            "virtual-time replays would not be reproducible"
        )
    return rng


def run_virtual(fn: Callable[..., Awaitable[T]], *args: Any, seed: int = 0, clock: trio.abc.Clock | None = None) -> T:
    """trio.run(fn, *args) on a virtual clock (default: a MockClock that jumps to the next
    deadline), with trio's scheduling order seeded by `seed`. Returns fn's result.

    SIGTERM and SIGHUP during the run (in the main thread) cancel it and are raised as
    raidlab.errors.Signalled once trio has returned: a handler that raised where the
    program happened to be could land inside trio's own scheduler. Ctrl-C is trio's own
    KeyboardInterrupt delivery. Neither adds a task, so the seeded schedule is unchanged."""
    from trio._core import _run

    _scheduler_rng().seed(seed)
    previous = getattr(_run, "_ALLOW_DETERMINISTIC_SCHEDULING", None)
    if previous is None:  # pragma: no cover - depends on the trio release
        raise RuntimeError("this trio release has no deterministic-scheduling switch")
    received: list[int] = []
    box: dict[str, Any] = {}

    async def guarded() -> Any:
        token = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as scope:
            def handler(signum: int, _frame: Any) -> None:
                received.append(signum)
                token.run_sync_soon(scope.cancel)  # signal-safe: wakes trio's loop

            old = _install(handler)
            try:
                box["result"] = await fn(*args)
            finally:
                _restore(old)

    _run._ALLOW_DETERMINISTIC_SCHEDULING = True
    try:
        trio.run(guarded, clock=clock or trio.testing.MockClock(autojump_threshold=0))
    finally:
        _run._ALLOW_DETERMINISTIC_SCHEDULING = previous
    if received:
        raise Signalled(received[0])
    return box["result"]


_STOP_SIGNALS = ("SIGTERM", "SIGHUP")


def _install(handler: Callable[[int, Any], None], extra: tuple[str, ...] = ()) -> dict[int, Any]:
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}
    # a signal the process was started ignoring (nohup, a background job's SIGINT) stays ignored
    return {int(sig): signal.signal(sig, handler) for sig in (getattr(signal, name) for name in (*_STOP_SIGNALS, *extra))
            if signal.getsignal(sig) is not signal.SIG_IGN}


def _restore(old: dict[int, Any]) -> None:
    import signal

    for signum, handler in old.items():
        signal.signal(signum, handler)
