"""A shared I/O bus: the drives of one SCSI chain move their data over it one at a time.

Why a bus of its own: a drive's model (raidlab.disks.mechanisms) charges its own host
transfer, as if every drive had a private channel. On the papers' machines the drives share
one bus (TSS §5.3: three drives on one 10 MB/s SCSI bus; SA-RAID §3.2: four drives on one
80 MB/s Ultra2 bus, whose ceiling is that paper's headline), so when several drives finish
at once their transfers queue for the bus. Drives that take a `Bus` (EmulatedDisk's `bus`)
book `length / rate` seconds of it for every read or write they serve.

When the transfer happens (`overlap`):

* overlap (default): SCSI's disconnect/reconnect lets a drive move data while its neighbours
  seek, and a drive moves a request's data while its own media work runs. The booking is
  the last `length / rate` seconds before the drive's own end time; if the bus is taken
  then, the transfer moves to the first free gap after that, and the request ends when its
  transfer does. One drive alone on an idle bus is slowed only where its own work is
  shorter than its transfer over the bus (a drive faster than the bus).
* serial: the transfer starts only when the drive's work is done (store and forward), so
  every request pays `length / rate` more even on an idle bus.

The drive's arm is free at its own end time either way: the data waits in the drive's
buffer for the bus, and the drive may start its next request.

Bookings are intervals kept in time order; a drive may book an interval that ends before
one booked earlier by another drive (it started later but finished sooner), so a booking
takes the first gap that fits, not the end of the queue. Intervals that ended before the
earliest start still to come are dropped.
"""

from __future__ import annotations

import bisect
from typing import Any

from raidlab.disks import catalog
from raidlab.errors import UsageError

OVERLAP, SERIAL = "overlap", "serial"
MODES = (OVERLAP, SERIAL)


class Timeline:
    """Intervals of one resource booked in time order, each taking the first gap that fits
    (a later request may fit before an earlier long one; see the module doc). A bus is one;
    so are the ports of the cluster's virtual twin (raidlab.cluster.twin) and the processors
    of a host (raidlab.disks.host)."""

    def __init__(self) -> None:
        self._starts: list[float] = []  # booked intervals, sorted by start, disjoint
        self._ends: list[float] = []

    def reserve(self, now: float, earliest: float, duration: float) -> float:
        """Book `duration` seconds starting no earlier than `earliest` (nor `now`); the start."""
        self._forget_before(now)
        start = self._first_gap(max(earliest, now), duration)
        index = bisect.bisect_left(self._starts, start)
        self._starts.insert(index, start)
        self._ends.insert(index, start + duration)
        return start

    def earliest_start(self, now: float, earliest: float, duration: float) -> float:
        """Where `reserve` would book `duration` seconds, without booking them."""
        self._forget_before(now)
        return self._first_gap(max(earliest, now), duration)

    def _first_gap(self, earliest: float, duration: float) -> float:
        start = earliest
        index = max(bisect.bisect_right(self._starts, start) - 1, 0)
        for s, e in zip(self._starts[index:], self._ends[index:]):
            if e <= start:
                continue
            if s >= start + duration:
                break
            start = e
        return start

    def _forget_before(self, now: float) -> None:
        """Drop intervals that ended before any booking can start: an overlap booking starts
        no earlier than `now` minus its own duration, which is bounded by the longest request;
        keep a generous second of history."""
        cut = bisect.bisect_left(self._ends, now - 1.0)
        if cut > 64:
            del self._starts[:cut]
            del self._ends[:cut]


class Bus(Timeline):
    """One shared bus of `rate_mb_s` MB/s (10^6 bytes) in mode overlap or serial."""

    def __init__(self, rate_mb_s: float, mode: str = OVERLAP, name: str = "bus") -> None:
        if not rate_mb_s > 0:
            raise UsageError(f"bus rate {rate_mb_s} MB/s must be positive")
        if mode not in MODES:
            raise UsageError(f"unknown bus mode {mode!r}", hint=f"use one of: {', '.join(MODES)}")
        self.name = name
        self.rate = rate_mb_s * 1e6
        self.mode = mode
        super().__init__()
        self.transfers = 0
        self.bytes = 0
        self.busy_s = 0.0
        self.wait_s = 0.0   # sum over transfers of (end - the end without a shared bus)
        self.waited = 0     # transfers that ended later because the bus was taken

    def transfer_s(self, nbytes: int) -> float:
        return nbytes / self.rate

    def book(self, now: float, ready: float, nbytes: int) -> float:
        """Book the transfer of `nbytes` for a request whose drive is done at `ready`; the
        time the request ends. `now` is the current time (no later booking starts before it)."""
        duration = self.transfer_s(nbytes)
        earliest = ready - duration if self.mode == OVERLAP else ready
        start = self.reserve(now, earliest, duration)
        end = start + duration  # never before `natural`: start >= earliest
        natural = ready + (duration if self.mode == SERIAL else 0.0)
        self.transfers += 1
        self.bytes += nbytes
        self.busy_s += duration
        if end > natural + 1e-12:
            self.waited += 1
            self.wait_s += end - natural
        return end

    def statistics(self) -> dict[str, Any]:
        return {"name": self.name, "rate_mb_s": self.rate / 1e6, "mode": self.mode,
                "transfers": self.transfers, "bytes": self.bytes, "busy_s": self.busy_s,
                "waited_transfers": self.waited, "wait_s": self.wait_s}


def parse_bus(text: str | float | None, models: list[str]) -> tuple[float, str] | None:
    """(rate MB/s, mode) from a --bus value: None or "none", "shared" (the first member's
    catalog bus_mb_s, shared), or "RATE[,MODE]" ("10", "10,serial"); MODE defaults to overlap."""
    if text is None:
        return None
    raw = str(text).strip().lower()
    if raw in ("", "none", "off"):
        return None
    rate_text, _, mode = raw.partition(",")
    mode = mode.strip() or OVERLAP
    if mode not in MODES:
        raise UsageError(f"bus {text}: unknown mode {mode!r}", hint=f"use one of: {', '.join(MODES)}")
    if rate_text == "shared":
        rate = catalog.get(models[0]).bus_mb_s if models else 0.0
        if not rate:
            raise UsageError(f"bus {text}: drive model {models[0] if models else '?'} gives no bus rate",
                             hint="give the rate in MB/s, like --bus 10")
        return float(rate), mode
    try:
        rate = float(rate_text.removesuffix("mb/s"))
    except ValueError:
        raise UsageError(f"bus {text} is not none, shared or a rate in MB/s",
                         hint="write it like --bus 10 or --bus shared,serial") from None
    if not rate > 0:
        raise UsageError(f"bus {text}: the rate must be positive")
    return rate, mode
