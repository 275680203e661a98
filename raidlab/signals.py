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


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """While inside, SIGTERM and SIGHUP raise Signalled where the program is, like Ctrl-C.
    Signal handlers belong to the main thread: elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, _frame):
        raise Signalled(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


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
