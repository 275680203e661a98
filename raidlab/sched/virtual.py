"""Run code in virtual time: raidlab's discrete-event kernel, and stop signals.

Why: the virtual clock (docs/architecture.md, "Two clocks") is raidlab.sched.kernel, a heap
of timers and a run queue of coroutines whose time jumps to the next deadline when nothing
is runnable, so engine code (which asks raidlab.sched for time and synchronisation) runs as
a discrete-event simulation: a trace replay, a scenario's workload, a disk bench, a unit
test. The kernel has no randomness: tasks woken at one instant run in the order they woke
and timers due at one instant fire in the order they were armed, so a run gives the same
bytes in any process, whatever the process did before. Seeds of a run (its trace, its data)
belong to the code being run, not to the clock.

Stop signals: while `run_virtual` runs in the main thread, Ctrl-C, SIGTERM and SIGHUP are
only noted; the kernel then cancels every task at its next pass, the tasks unwind through
their own cleanup, and the signal is then raised again for the handler that was in place
before the run: Python's own Ctrl-C handler raises KeyboardInterrupt, raidlab.signals'
raises raidlab.errors.Signalled for SIGTERM and SIGHUP (so this bottom layer needs no
error type of its own). A KeyboardInterrupt raised wherever Python happened to be could
land in the kernel's own loop and leave tasks half-run, or inside a task and come out
wrapped in its nurseries' exception groups.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from raidlab.sched import kernel as _k

T = TypeVar("T")

_STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


def run_virtual(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """fn(*args) to its end on a fresh kernel (virtual time from 0); returns fn's result.
    Ctrl-C, SIGTERM and SIGHUP stop it as the module doc says."""
    import signal

    received: list[int] = []

    def handler(signum: int, _frame: Any) -> None:
        received.append(signum)
        kernel = _k.running()
        if kernel is not None:
            kernel.stop_requested.append(signum)

    old = _install(handler)
    try:
        result = _k.Kernel().run(fn, *args)
    except BaseException:
        if not received:
            raise
        result = None
    finally:
        _restore(old)
    if received:
        signal.raise_signal(received[0])  # now the handler in place before the run answers it
        raise KeyboardInterrupt  # that handler returned: the run was stopped all the same
    return result


def _install(handler: Callable[[int, Any], None]) -> dict[int, Any]:
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}
    # a signal the process was started ignoring (nohup, a background job's SIGINT) stays ignored
    return {int(sig): signal.signal(sig, handler) for sig in (getattr(signal, name) for name in _STOP_SIGNALS)
            if signal.getsignal(sig) is not signal.SIG_IGN}


def _restore(old: dict[int, Any]) -> None:
    import signal

    for signum, handler in old.items():
        signal.signal(signum, handler)
