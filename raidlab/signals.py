"""Signals for the `raidlab` command: SIGTERM and SIGHUP unwind like Ctrl-C, and cleanup
holds them off.

Why: a command that is told to stop must still release what it started (a `create` stops
the daemon it is waiting for, a run unmounts and destroys the array it is using), and a
second Ctrl-C during that cleanup must not leave the array behind. So SIGTERM/SIGHUP become a
KeyboardInterrupt (Signalled, with the signal's number) for the whole command
(raidlab.cli.main), and `deferred_signals` records any signal received while cleaning up and
re-raises the first one afterwards. Code that runs a trio loop installs its own handlers for
that time and puts these back after.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

from raidlab.errors import Signalled  # defined there so the engine's virtual clock can raise it


# The stop signal last handed to a running trio loop as a Ctrl-C (terminate_as_interrupt).
_forwarded: int | None = None


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """While inside, SIGTERM and SIGHUP raise Signalled where the program is, like Ctrl-C.
    Signal handlers belong to the main thread: elsewhere this does nothing.

    While a trio loop runs and owns Ctrl-C (its handler is SIGINT's), an exception raised
    from a signal handler could land inside trio's own scheduler; the signal is handed to
    trio as a Ctrl-C instead, which trio delivers where a KeyboardInterrupt is safe, and
    `stop_signal` still names the signal that came."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, _frame):
        global _forwarded
        if getattr(signal.getsignal(signal.SIGINT), "__module__", "").startswith("trio."):
            _forwarded = signum
            signal.raise_signal(signal.SIGINT)
            return
        raise Signalled(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def stop_signal(exc: BaseException | None) -> int:
    """The signal that stopped the program with `exc` (a KeyboardInterrupt): SIGINT for a
    Ctrl-C, else the SIGTERM or SIGHUP that terminate_as_interrupt turned into it."""
    if isinstance(exc, Signalled):
        return exc.signum
    return _forwarded if _forwarded is not None else signal.SIGINT


@contextlib.contextmanager
def deferred_signals() -> Iterator[list[int]]:
    """Hold SIGINT/SIGTERM/SIGHUP while cleaning up (a second Ctrl-C must not leave an array
    behind); the first one received is re-raised afterwards."""
    received: list[int] = []

    def hold(signum, _frame):
        received.append(signum)

    old = {s: signal.signal(s, hold) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield received
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if received:
        if received[0] == signal.SIGINT:
            raise KeyboardInterrupt
        raise Signalled(received[0])
