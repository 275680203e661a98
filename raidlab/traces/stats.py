"""`raidlab trace stats`: what a block trace looks like, computed in one streaming pass.

Why these numbers: they are the workload properties the DCD paper builds its argument on
(Hu & Yang, ISCA 96, §3.1, after Ruemmler & Wilkes 1993): request rate, read/write mix,
request sizes ("dominated by small random file read and write requests"), burstiness and
idle periods ("over 70% of time the disk stays in an idle state"), and the overwrite
fraction (§5: 25% hplajw, 47% snake, about 35% cello). raidlab's synthetic traces
(raidlab.traces.synth) are checked against them with this module.

Definitions (so that two traces can be compared honestly):

* duration: time of the last request minus time of the first; rate = requests / duration.
* write fraction: writes / (reads + writes); flushes and trims are counted apart.
* size distribution: data requests per size class (<= 512 B, <= 1 KiB, <= 2 KiB, ... , > 1 MiB).
* inter-arrival distribution: gaps between consecutive requests, per decade class
  (< 1 ms, 1-10 ms, ..., >= 100 s), with mean and max.
* idle periods: a trace has no completion times, so "no outstanding request" cannot be
  known from the trace alone; raidlab uses DCD's idle detector instead (§2.3: "if there is
  no incoming disk access for a certain period of time (50 ms in our simulation), we
  consider the disk as idle"). An idle period is a gap between consecutive arrivals longer
  than the threshold (default 50 ms); its idle time is the part after the threshold, i.e.
  the time DCD's detector would see as idle. idle_fraction = total idle time / duration,
  a lower bound on the disk's true idle time (which replay reports as 1 - utilization).
* overwrite fraction: of all sectors written, the fraction that had already been written
  earlier in the trace (Ruemmler & Wilkes' "overwrites" at sector grain). Kept as a bitmap
  of one bit per 512-byte sector up to the highest sector written (per device), so memory
  is the device span / 4096, independent of the trace length (335 MB drive: 80 KiB).
* burstiness: fraction of requests arriving within the idle threshold of the previous one.

Everything is a running sum, a fixed histogram or the sector bitmap: memory does not grow
with the number of requests.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from typing import Any

import numpy

from raidlab.traces.formats import FLUSH, READ, SECTOR, TRIM, WRITE, Request

DEFAULT_IDLE_THRESHOLD = 0.050  # DCD §2.3 idle detector
SIZE_CLASSES = [512 << k for k in range(12)]  # 512 B ... 1 MiB
GAP_CLASSES = [1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0]


def _size_label(limit: int) -> str:
    return f"<={limit // 1024}K" if limit >= 1024 else f"<={limit}B"


def _gap_labels() -> list[str]:
    names = ["<1ms", "1-10ms", "10-100ms", "0.1-1s", "1-10s", "10-100s", ">=100s"]
    assert len(names) == len(GAP_CLASSES) + 1
    return names


def _class_index(value: float, limits: list) -> int:
    for index, limit in enumerate(limits):
        if value <= limit if isinstance(limit, int) else value < limit:
            return index
    return len(limits)


class SectorBitmap:
    """One bit per sector, grown on demand; counts sectors seen before when marking."""

    def __init__(self) -> None:
        self.bits = bytearray()

    def mark(self, first: int, count: int) -> int:
        """Mark sectors [first, first+count); return how many were already marked."""
        end = first + count
        need = (end + 7) >> 3
        bits = self.bits
        if need > len(bits):
            bits.extend(bytes(max(need - len(bits), len(bits) // 2)))
        seen = 0
        sector = first
        # Whole bytes at a time where the range covers them (most of an 8 KiB request).
        while sector < end:
            if sector & 7 == 0 and sector + 8 <= end:
                byte = bits[sector >> 3]
                if byte:
                    seen += bin(byte).count("1")
                bits[sector >> 3] = 0xFF
                sector += 8
                continue
            mask = 1 << (sector & 7)
            byte = bits[sector >> 3]
            if byte & mask:
                seen += 1
            else:
                bits[sector >> 3] = byte | mask
            sector += 1
        return seen


class TraceStats:
    """Running statistics of a request stream (see the module doc for definitions)."""

    def __init__(self, idle_threshold: float = DEFAULT_IDLE_THRESHOLD) -> None:
        self.idle_threshold = idle_threshold
        self.count = 0
        self.ops = {READ: 0, WRITE: 0, FLUSH: 0, TRIM: 0}
        self.bytes = {READ: 0, WRITE: 0, TRIM: 0}
        self.sizes = [0] * (len(SIZE_CLASSES) + 1)
        self.max_size = 0
        self.gaps = [0] * (len(GAP_CLASSES) + 1)
        self.gap_sum = 0.0
        self.gap_max = 0.0
        self.first_time: float | None = None
        self.last_time: float | None = None
        self.idle_periods = 0
        self.idle_time = 0.0
        self.idle_max = 0.0
        self.idle_classes = [0] * (len(GAP_CLASSES) + 1)
        self.close_arrivals = 0
        self.sectors_written = 0
        self.sectors_overwritten = 0
        self.max_offset_end = 0
        self._bitmaps: dict[Any, SectorBitmap] = {}

    def add(self, request: Request) -> None:
        time, op, offset, length = request.time, request.op, request.offset, request.length
        self.count += 1
        self.ops[op] += 1
        if self.last_time is None:
            self.first_time = time
        else:
            gap = time - self.last_time
            self.gap_sum += gap
            if gap > self.gap_max:
                self.gap_max = gap
            self.gaps[_class_index(gap, GAP_CLASSES)] += 1
            if gap > self.idle_threshold:
                idle = gap - self.idle_threshold
                self.idle_periods += 1
                self.idle_time += idle
                if idle > self.idle_max:
                    self.idle_max = idle
                self.idle_classes[_class_index(idle, GAP_CLASSES)] += 1
            else:
                self.close_arrivals += 1
        self.last_time = time
        if op == FLUSH:
            return
        self.bytes[op] += length
        if offset + length > self.max_offset_end:
            self.max_offset_end = offset + length
        if op == TRIM:
            return
        self.sizes[_class_index(length, SIZE_CLASSES)] += 1
        if length > self.max_size:
            self.max_size = length
        if op == WRITE and length:
            first = offset // SECTOR
            count = -(-(offset + length) // SECTOR) - first
            bitmap = self._bitmaps.get(request.device)
            if bitmap is None:
                bitmap = self._bitmaps[request.device] = SectorBitmap()
            self.sectors_written += count
            self.sectors_overwritten += bitmap.mark(first, count)

    def update(self, requests: Iterable[Request]) -> "TraceStats":
        add = self.add
        for request in requests:
            add(request)
        return self

    @property
    def duration(self) -> float:
        if self.first_time is None or self.last_time is None:
            return 0.0
        return self.last_time - self.first_time

    def summary(self) -> dict[str, Any]:
        """JSON-serialisable results (what `raidlab trace stats --json` prints)."""
        data_requests = self.ops[READ] + self.ops[WRITE]
        duration = self.duration
        gaps = max(self.count - 1, 0)
        small = sum(self.sizes[i] for i, limit in enumerate(SIZE_CLASSES) if 1024 <= limit <= 8192)
        return {
            "requests": self.count,
            "reads": self.ops[READ],
            "writes": self.ops[WRITE],
            "flushes": self.ops[FLUSH],
            "trims": self.ops[TRIM],
            "bytes_read": self.bytes[READ],
            "bytes_written": self.bytes[WRITE],
            "write_fraction": self.ops[WRITE] / data_requests if data_requests else 0.0,
            "duration_s": duration,
            "rate_per_s": self.count / duration if duration > 0 else 0.0,
            "size": {
                "mean_bytes": (self.bytes[READ] + self.bytes[WRITE]) / data_requests if data_requests else 0.0,
                "max_bytes": self.max_size,
                "fraction_1k_to_8k": small / data_requests if data_requests else 0.0,
                "classes": {_size_label(limit): self.sizes[i] for i, limit in enumerate(SIZE_CLASSES)}
                | {">1024K": self.sizes[-1]},
            },
            "interarrival": {
                "mean_s": self.gap_sum / gaps if gaps else 0.0,
                "max_s": self.gap_max,
                "classes": dict(zip(_gap_labels(), self.gaps)),
            },
            "idle": {
                "definition": f"gap between arrivals > {self.idle_threshold * 1e3:g} ms (DCD §2.3 idle "
                              f"detector); idle time counted from the threshold on",
                "threshold_s": self.idle_threshold,
                "periods": self.idle_periods,
                "time_s": self.idle_time,
                "fraction": self.idle_time / duration if duration > 0 else 0.0,
                "mean_period_s": self.idle_time / self.idle_periods if self.idle_periods else 0.0,
                "max_period_s": self.idle_max,
                "classes": dict(zip(_gap_labels(), self.idle_classes)),
            },
            "burstiness": self.close_arrivals / gaps if gaps else 0.0,
            "overwrite_fraction": self.sectors_overwritten / self.sectors_written if self.sectors_written else 0.0,
            "sectors_written": self.sectors_written,
            "sectors_overwritten": self.sectors_overwritten,
            "highest_byte": self.max_offset_end,
        }


def trace_stats(requests: Iterable[Request], *, idle_threshold: float = DEFAULT_IDLE_THRESHOLD) -> dict[str, Any]:
    """Statistics of a request stream in one pass (see the module doc)."""
    return TraceStats(idle_threshold).update(requests).summary()


def response_summary(samples: array) -> dict[str, Any]:
    """Count, mean, max and percentiles (ms) of response times in seconds (an array of doubles)."""
    if not samples:
        return {"count": 0}
    values = numpy.frombuffer(samples, dtype=numpy.float64)
    p50, p95, p99 = numpy.percentile(values, [50, 95, 99])
    return {
        "count": len(values),
        "mean_ms": float(values.mean()) * 1e3,
        "max_ms": float(values.max()) * 1e3,
        "p50_ms": float(p50) * 1e3,
        "p95_ms": float(p95) * 1e3,
        "p99_ms": float(p99) * 1e3,
    }
