"""A bare pass-through block target: one image file, no timing model.

Why it exists: (1) the FUSE export is built and tested against a target whose behaviour is
plain POSIX I/O, so a failure in an export test is the export's fault, not a timing model's;
(2) the engine benchmark (raidlab.service.bench) compares an architecture's `volume` against "a bare
pass-through FUSE file over one image in the same run" -- this is that file's target.

System calls that can wait on the host disk (a read the page cache does not hold, a large
or FUA write, fsync, fallocate) run in trio worker threads so the trio loop that also serves
FUSE keeps answering the kernel; a page-cached read and a small write run inline, as an
emulated disk's do live (raidlab.disks.disk, "Live I/O"), so the benchmark's baseline and the
engine pay for I/O alike. That is the live-clock data path only; virtual-clock code must not
use this class (trio.to_thread lets the mock clock jump while a thread works).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from pathlib import Path
from typing import Any

import trio

from raidlab.blockdev import SECTOR, check_aligned
from raidlab.disks.backend import INLINE_WRITE_BYTES, pread_cached
from raidlab.errors import UsageError

_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
_libc.fallocate.restype = ctypes.c_int


def punch_hole(fd: int, offset: int, length: int) -> None:
    """Deallocate [offset, offset+length) of an open file, keeping its size (reads give zeros)."""
    if _libc.fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, offset, length) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def create_sparse_image(path: str | os.PathLike, size: int) -> Path:
    """Create (or extend to) a sparse image of `size` bytes; refuse a size off the sector grid."""
    if size <= 0 or size % SECTOR:
        raise UsageError(
            f"image size {size} is not a positive multiple of {SECTOR} bytes",
            hint="use a size like 64M or 1G",
        )
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise UsageError(
            f"cannot create image {path}: {exc.strerror}",
            hint="choose a writable directory (RAIDLAB_HOME)",
        ) from exc
    try:
        if os.fstat(fd).st_size < size:
            os.ftruncate(fd, size)
    finally:
        os.close(fd)
    return path


class ImageFileTarget:
    """BlockTarget over one image file; blocking calls in worker threads (module doc).

    Must find: the image exists (create it first with `create_sparse_image`).
    """

    def __init__(self, name: str, path: str | os.PathLike, size: int | None = None):
        self.name = name
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        actual = os.fstat(self._fd).st_size
        self._size = actual if size is None else size
        if self._size % SECTOR or self._size > actual:
            os.close(self._fd)
            raise UsageError(
                f"image {self.path} has {actual} bytes, cannot serve {self._size}",
                hint=f"sizes must be multiples of {SECTOR} and fit the image",
            )
        self._stats = {"reads": 0, "writes": 0, "flushes": 0, "trims": 0,
                       "bytes_read": 0, "bytes_written": 0, "in_flight_max": 0}
        self._in_flight = 0
        self._trim_supported = True

    @property
    def size(self) -> int:
        return self._size

    def _enter(self) -> None:
        self._in_flight += 1
        if self._in_flight > self._stats["in_flight_max"]:
            self._stats["in_flight_max"] = self._in_flight

    async def read(self, offset: int, length: int) -> bytes:
        check_aligned(offset, length, self._size)
        self._enter()
        try:
            data = pread_cached(self._fd, offset, length)
            if data is None:
                data = await trio.to_thread.run_sync(os.pread, self._fd, length, offset)
            else:
                await trio.lowlevel.checkpoint()
        finally:
            self._in_flight -= 1
        if len(data) < length:  # a sparse tail the file system reports short: zeros
            data += bytes(length - len(data))
        self._stats["reads"] += 1
        self._stats["bytes_read"] += length
        return data

    async def write(self, offset: int, data: bytes, *, fua: bool = False) -> None:
        check_aligned(offset, len(data), self._size)
        self._enter()
        try:
            if fua or len(data) > INLINE_WRITE_BYTES:
                await trio.to_thread.run_sync(self._pwrite_all, data, offset, fua)
            else:
                self._pwrite_all(data, offset, fua)
                await trio.lowlevel.checkpoint()
        finally:
            self._in_flight -= 1
        self._stats["writes"] += 1
        self._stats["bytes_written"] += len(data)

    def _pwrite_all(self, data: bytes, offset: int, fua: bool) -> None:
        view = memoryview(data)
        while view:
            done = os.pwrite(self._fd, view, offset)
            view = view[done:]
            offset += done
        if fua:
            os.fdatasync(self._fd)

    async def flush(self) -> None:
        await trio.to_thread.run_sync(os.fdatasync, self._fd)
        self._stats["flushes"] += 1

    async def trim(self, offset: int, length: int) -> None:
        check_aligned(offset, length, self._size)
        if not self._trim_supported or length == 0:
            return
        try:
            await trio.to_thread.run_sync(punch_hole, self._fd, offset, length)
        except OSError as exc:
            if exc.errno != errno.EOPNOTSUPP:
                raise
            self._trim_supported = False  # the host file system cannot punch holes: no-op
            return
        self._stats["trims"] += 1

    def statistics(self) -> dict[str, Any]:
        return {"name": self.name, "path": str(self.path), "size": self._size,
                "in_flight": self._in_flight, **self._stats}

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __repr__(self) -> str:
        return f"ImageFileTarget({self.name!r}, {str(self.path)!r}, size={self._size})"
