"""A drive's volatile write cache, for power-loss crash tests: what a power cut would lose.

Why an undo log: a drive with its write cache on reports a write once the data is in its
buffer; until the buffer is written back (by the drive on its own, by a FLUSH, or because
the write was FUA) a power cut loses it, and a drive writes back in its own order, not the
host's. The emulated drive writes every write into its image at once, which is exactly what
the drive shows while it has power and what it keeps if only the host process dies (a
SIGKILL of the array's daemon: `raidlab crashtest --mode kill`). To also know what a power
cut would have left, each write the drive holds in its cache first appends the bytes it
overwrites (its pre-image) to an undo log beside the image; what makes data durable is
logged too. After the daemon is killed, `power_cut` rolls the image back to what the drive
would have had on its media, by one of the modes:

* ``all``: every write not made durable by a FLUSH or FUA is lost (the harshest drive: it
  wrote back nothing on its own);
* ``model``: the writes the drive's model had not written back by then are lost (a timed
  drive's write-back order and pace, raidlab.disks.mechanisms.hdd; the untimed drive writes
  back oldest first once its cache holds more than its capacity);
* ``random``: each write not made durable survives or is lost independently (p = 1/2, from
  a seed), on each disk apart: the reorderings CrashMonkey and dm-log-writes replays explore.

Rolling back is exact where writes overlap: going from the newest write to the oldest, a
sector is restored to a lost write's pre-image until a write that survived (or a durable
one) is met, which then holds the sector. A FLUSH empties the log: nothing before it can be
lost any more. Sector-granular tearing inside one write is not modelled.

The log is written with one write(2) per record (page cache; the host does not crash, only
the daemon dies), under a lock, before the image is written, so it never lags the image.
Record: kind (W: a cached write and its pre-image; D: a durable write's extent; E: cached
write `seq` written back by the drive), seq, offset, length, then (W) the pre-image.
"""

from __future__ import annotations

import collections
import os
import random
import struct
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from raidlab.blockdev import SECTOR
from raidlab.errors import UsageError

MODES = ("all", "model", "random")
SUFFIX = ".volatile"  # the undo log beside an image: d0.img -> d0.img.volatile
UNTIMED_CACHE_BYTES = 4 << 20  # the untimed drive's cache when it emulates one (a 2000s drive's 2-8 MiB)
_RECORD = struct.Struct("<cQQI")


def log_path(image: str | os.PathLike) -> Path:
    return Path(f"{image}{SUFFIX}")


class VolatileCache:
    """The undo log of one drive (module doc). `capacity`: bytes the cache holds before it
    writes back its oldest write (the untimed drive); None: the drive's model says when
    (`retire_unless_dirty`)."""

    def __init__(self, path: str | os.PathLike | None, capacity: int | None):
        self.path = Path(path) if path is not None else None
        self.capacity = capacity
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o600) \
            if self.path is not None else None
        self._memory = bytearray() if self.path is None else None  # virtual time: the log in RAM
        self._lock = threading.Lock()
        self._seq = 0
        self.pending: collections.OrderedDict[int, tuple[int, int]] = collections.OrderedDict()  # seq -> extent
        self.pending_bytes = 0
        self.counters = {"cached_writes": 0, "written_back": 0, "flushes": 0, "durable_writes": 0}

    # -- the drive's writes -------------------------------------------------------------

    def write(self, backend: Any, offset: int, data: bytes, *, cached: bool) -> None:
        """Write `data` into the image; a cached write is logged with its pre-image first."""
        with self._lock:
            if not cached:
                if self.pending:
                    self._append(b"D", 0, offset, len(data))
                self.counters["durable_writes"] += 1
                backend.pwrite(offset, data)
                return
            self._seq += 1
            self._append(b"W", self._seq, offset, len(data), backend.pread(offset, len(data)))
            backend.pwrite(offset, data)
            self.pending[self._seq] = (offset, len(data))
            self.pending_bytes += len(data)
            self.counters["cached_writes"] += 1
            while self.capacity is not None and self.pending_bytes > self.capacity:
                self._retire(next(iter(self.pending)))

    def trim(self, backend: Any, offset: int, length: int) -> None:
        """A discard reaches the media as it is reported (a durable change of the extent)."""
        with self._lock:
            if self.pending:
                self._append(b"D", 0, offset, length)
            backend.trim(offset, length)

    def flushed(self) -> None:
        """A FLUSH has ended: nothing written before it can be lost; the log starts over."""
        with self._lock:
            self.pending.clear()
            self.pending_bytes = 0
            self.counters["flushes"] += 1
            if self._fd is not None:
                os.ftruncate(self._fd, 0)
            else:
                self._memory.clear()

    def retire_unless_dirty(self, dirty: Iterable[tuple[int, int, Any]]) -> None:
        """The drive model's write-back: a pending write none of whose bytes the model still
        holds dirty (`dirty`: its (offset, length, ...) extents) has reached the media."""
        with self._lock:
            if not self.pending:
                return
            extents = [(o, o + n) for o, n, *_ in dirty]
            for seq, (off, n) in list(self.pending.items()):
                if not any(o < off + n and off < e for o, e in extents):
                    self._retire(seq)

    def close(self, *, clean: bool) -> None:
        """Close the log; a clean stop (the drive kept power) removes it."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            if clean and self.path is not None:
                self.path.unlink(missing_ok=True)

    def log_bytes(self) -> bytes:
        """The log as it stands (virtual time's, or the file's)."""
        if self._memory is not None:
            return bytes(self._memory)
        return self.path.read_bytes()

    def statistics(self) -> dict[str, Any]:
        return {"capacity": self.capacity, "pending_writes": len(self.pending),
                "pending_bytes": self.pending_bytes, **self.counters}

    def _retire(self, seq: int) -> None:
        off, n = self.pending.pop(seq)
        self.pending_bytes -= n
        self.counters["written_back"] += 1
        self._append(b"E", seq, 0, 0)

    def _append(self, kind: bytes, seq: int, offset: int, length: int, pre_image: bytes = b"") -> None:
        record = _RECORD.pack(kind, seq, offset, length) + pre_image
        if self._fd is not None:
            os.write(self._fd, record)
        else:
            self._memory += record


# -- the power cut ------------------------------------------------------------------------

def parse(log: bytes) -> list[tuple[bytes, int, int, int, bytes]]:
    """The records of a log: (kind, seq, offset, length, pre-image). A record cut short at
    the end (the daemon died inside its write) is dropped: its image write never began."""
    out, at = [], 0
    while at + _RECORD.size <= len(log):
        kind, seq, offset, length = _RECORD.unpack_from(log, at)
        body = length if kind == b"W" else 0
        if kind not in (b"W", b"D", b"E") or at + _RECORD.size + body > len(log):
            break
        out.append((kind, seq, offset, length, log[at + _RECORD.size: at + _RECORD.size + body]))
        at += _RECORD.size + body
    return out


def power_cut(log: bytes, backend: Any, mode: str, rng: random.Random) -> dict[str, int]:
    """Roll `backend` back to what its drive's media would hold after a power cut (module
    doc); returns what was lost and kept."""
    if mode not in MODES:
        raise UsageError(f"unknown power-cut mode {mode!r}", hint=f"one of {', '.join(MODES)}")
    events: list[tuple[int, int, int, bytes | None]] = []  # (seq, offset, length, pre-image), oldest first
    written_back: set[int] = set()
    for kind, seq, offset, length, pre in parse(log):
        if kind == b"W":
            events.append((seq, offset, length, pre))
        elif kind == b"D":
            events.append((0, offset, length, None))
        else:
            written_back.add(seq)
    kept_writes = lost_writes = lost_bytes = 0
    decided = []
    for seq, offset, length, pre in events:
        if pre is None:  # a durable write: on the media
            decided.append((offset, length, pre, True))
            continue
        if mode == "model":
            kept = seq in written_back
        elif mode == "random":
            kept = rng.random() < 0.5
        else:
            kept = False
        decided.append((offset, length, pre, kept))
        if kept:
            kept_writes += 1
        else:
            lost_writes += 1
            lost_bytes += length
    settled: set[int] = set()
    restored = 0
    for offset, length, pre, kept in reversed(decided):
        sectors = range(offset // SECTOR, (offset + length) // SECTOR)
        if kept:
            settled.update(sectors)
            continue
        run_start = None
        for s in [*sectors, None]:
            if s is not None and s not in settled:
                if run_start is None:
                    run_start = s
                continue
            if run_start is not None:
                end = s if s is not None else sectors.stop
                a, b = (run_start - offset // SECTOR) * SECTOR, (end - offset // SECTOR) * SECTOR
                backend.pwrite(run_start * SECTOR, pre[a:b])
                restored += b - a
                run_start = None
    return {"writes_kept": kept_writes, "writes_lost": lost_writes, "bytes_lost": lost_bytes,
            "bytes_restored": restored}


def power_cut_images(images: Iterable[Path], mode: str, seed: int) -> dict[str, dict[str, int]]:
    """Apply a power cut to each image that has an undo log (each disk its own random
    stream, from `seed` and the image's name), then remove the logs. Images without a log
    lost nothing (their drive held no cached write)."""
    from raidlab.disks.backend import ImageBackend

    out = {}
    for image in images:
        path = log_path(image)
        if not path.exists():
            continue
        backend = ImageBackend(image, os.path.getsize(image), create=False)
        try:
            out[image.name] = power_cut(path.read_bytes(), backend, mode, random.Random(f"{seed}/{image.name}"))
            backend.flush()
        finally:
            backend.close()
        path.unlink()
    return out


__all__ = ["MODES", "SUFFIX", "UNTIMED_CACHE_BYTES", "VolatileCache", "log_path", "parse", "power_cut",
           "power_cut_images"]
