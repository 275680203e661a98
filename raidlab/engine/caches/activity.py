"""Request bookkeeping shared by the caching architectures' idle detectors.

Why: DCD (§2.3, "no request for a while: the system is idle, destage") and VC-RAID (§3,
level-2 destage "only when idle") decide idleness the same way — no request outstanding and
none for `idle_threshold` seconds — and both suspend a destage when a new request arrives
(the request counter moved). One mixin keeps that rule in one place.

A class using it sets `kind` (for messages), `_started`, and calls `_init_activity()` in
its constructor.
"""

from __future__ import annotations

import collections
from typing import Any

import trio

TIMELINE_EVENTS = 4096  # timed events kept for the virtual-clock tests and `status`


class RequestActivity:
    kind = "cache"

    def _init_activity(self) -> None:
        self._requests = 0
        self._outstanding = 0
        self._last_activity = float("-inf")
        self._started = False
        self.timeline: collections.deque[tuple[float, str, dict[str, Any]]] = collections.deque(
            maxlen=TIMELINE_EVENTS)

    def _begin(self) -> None:
        if not self._started:
            raise RuntimeError(f"{self.kind} {self.name} is not started (call start(nursery))")
        self._requests += 1
        self._outstanding += 1
        self._last_activity = trio.current_time()

    def _end(self) -> None:
        self._outstanding -= 1
        self._last_activity = trio.current_time()

    def _note(self, event: str, **detail: Any) -> None:
        self.timeline.append((trio.current_time(), event, detail))

    async def _idle_or_sleep(self, threshold: float) -> bool:
        """True when idle now (nothing outstanding, no request for `threshold` s);
        otherwise sleep until it could be and return False (the caller re-checks)."""
        now = trio.current_time()
        deadline = self._last_activity + threshold
        if self._outstanding or now < deadline:
            await trio.sleep_until(deadline if now < deadline else now + threshold)
            return False
        return True
