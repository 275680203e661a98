"""Request bookkeeping shared by the caching architectures' idle detectors.

Why: DCD (§2.3, "no request for a while: the system is idle, destage") and VC-RAID (§3,
level-2 destage "only when idle") decide idleness the same way — no request outstanding and
none for `idle_threshold` seconds — and both suspend a destage when a new request arrives
(the request counter moved). One mixin keeps that rule in one place.

Each request of the BlockTarget runs inside `_request(...)`, which counts it in `counters`
(the request counters both report, `_request_statistics()`) and keeps it outstanding for
the idle detector while it runs.

It also starts their background tasks (log writers, destage): a task that fails is logged
at once and fails the cache, so requests and flushes that wait on it get EIO instead of
waiting for ever (a stop's final flush among them). A drive's EIO (a cache disk, a DCD's
data disk, a raid5 the cache destages into that cannot serve) ends the task there: the
cache is failed, says why in `failure`, and every later request gets EIO, while its owner
keeps answering (status, destroy) as md does for an array that lost a member it needed; the
architecture records the failure in its superblocks where a healthy drive holds one
(`_record_failure`), and refuses to assemble from them after. Any other exception is a bug
and still reaches the nursery.
What waits on the background tasks (a full RAM buffer, a flush, a synchronous write, the
tasks themselves) waits on `_changed`, which `_notify()` pulses: a background task pulses it
when it made progress, and a failure pulses it so the waiters see the failure.

A class using it sets `kind` (for messages), calls `_init_activity()` in its constructor and
`_start_activity()` in its `start`.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from raidlab import sched
from raidlab.errors import leaf_exceptions

log = logging.getLogger(__name__)

# The superblock's arch_state key under which a failed cache records why (`_record_failure`).
FAILED_STATE = "failed"

TIMELINE_EVENTS = 4096  # timed events kept for the virtual-clock tests and `status`


class RequestActivity:
    kind = "cache"

    def _init_activity(self) -> None:
        self._requests = 0
        self._outstanding = 0
        self._last_activity = float("-inf")
        self._started = False
        self._failure: Exception | None = None
        self._changed = sched.Event()
        self.counters: collections.Counter[str] = collections.Counter()
        self.timeline: collections.deque[tuple[float, str, dict[str, Any]]] = collections.deque(
            maxlen=TIMELINE_EVENTS)

    def _start_activity(self) -> None:
        """Mark the cache started (once): requests are served from now on, and idleness is
        counted from now."""
        if self._started:
            raise RuntimeError(f"{self.kind} {self.name} already started")
        self._started = True
        self._last_activity = sched.current_time()

    @contextlib.contextmanager
    def _request(self, count: str, byte_count: str | None = None, nbytes: int = 0) -> Iterator[None]:
        """Around one request: it counts in `counters[count]` (and `nbytes` in
        `counters[byte_count]`) and is outstanding until the block ends."""
        self._begin()
        try:
            self.counters[count] += 1
            if byte_count is not None:
                self.counters[byte_count] += nbytes
            yield
        finally:
            self._end()

    def _request_statistics(self) -> dict[str, int]:
        c = self.counters
        return {"reads": c["reads"], "writes": c["writes"], "flushes": c["flushes"], "trims": c["trims"],
                "bytes_read": c["bytes_read"], "bytes_written": c["bytes_written"]}

    def _begin(self) -> None:
        if not self._started:
            raise RuntimeError(f"{self.kind} {self.name} is not started (call start(nursery))")
        self._check_alive()
        self._requests += 1
        self._outstanding += 1
        self._last_activity = sched.current_time()

    def _end(self) -> None:
        self._outstanding -= 1
        self._last_activity = sched.current_time()

    def _note(self, event: str, **detail: Any) -> None:
        self.timeline.append((sched.current_time(), event, detail))

    async def _idle_or_sleep(self, threshold: float) -> bool:
        """True when idle now (nothing outstanding, no request for `threshold` s);
        otherwise sleep until it could be and return False (the caller re-checks)."""
        now = sched.current_time()
        deadline = self._last_activity + threshold
        if self._outstanding or now < deadline:
            await sched.sleep_until(deadline if now < deadline else now + threshold)
            return False
        return True

    # background tasks
    def _start_background(self, nursery: sched.Nursery, fn: Callable[..., Awaitable[Any]],
                          *args: Any, name: str) -> None:
        nursery.start_soon(self._guarded, fn, args, name=name)

    async def _guarded(self, fn: Callable[..., Awaitable[Any]], args: tuple) -> None:
        try:
            await fn(*args)
        except Exception as exc:
            failed_drive = drive_failure(exc)
            if failed_drive is None:
                self._fail(fn, exc)
                raise
            if self._failure is None:  # a drive failed: the cache has failed, its owner lives on
                self._failure = failed_drive
                log.error("%s %s: background task %s met a failed drive: %s; the %s has failed",
                          self.kind, self.name, fn.__name__, failed_drive.strerror or failed_drive, self.kind)
                self._notify()
                try:
                    await self._record_failure(self.failure or "a drive failed")
                except OSError as exc:  # the drive that would keep the record is failing too
                    log.error("%s %s: the failure could not be recorded: %s", self.kind, self.name, exc)
            self._notify()

    def _fail(self, fn: Callable[..., Awaitable[Any]], exc: Exception) -> None:
        if self._failure is None:
            self._failure = exc
            log.exception("%s %s: background task %s failed", self.kind, self.name, fn.__name__)
        self._notify()

    async def _record_failure(self, what: str) -> None:
        """Keep the failure in the architecture's superblocks, so that an assembly after it
        is refused with the reason (override); called once, when the cache fails."""

    @property
    def failure(self) -> str | None:
        """Why the cache has failed (a background task's error), or None."""
        if self._failure is None:
            return None
        return getattr(self._failure, "strerror", None) or str(self._failure) or repr(self._failure)

    def _check_alive(self) -> None:
        """OSError(EIO) once a background task failed (the writes it was to make never will)."""
        if self._failure is not None:
            raise OSError(errno.EIO, f"{self.kind} {self.name} failed: {self._failure!r}")

    def _notify(self) -> None:
        """Wake every task waiting on `_changed` (it then looks again, and calls
        _check_alive)."""
        self._changed.set()
        self._changed = sched.Event()


def drive_failure(exc: BaseException) -> OSError | None:
    """The failed drive's EIO if that is all `exc` is: an OSError with errno EIO, or a group
    of them (a background task that waits on several drives at once, in a nursery, raises the
    failures of all that failed together); None for anything else, which is a bug."""
    leaves = leaf_exceptions(exc)
    if leaves and all(isinstance(e, OSError) and e.errno == errno.EIO for e in leaves):
        return leaves[0]  # type: ignore[return-value]
    return None
