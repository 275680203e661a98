"""Where an emulated disk keeps its bytes: memory, a sparse image file, or a real device.

Why synchronous: the design of the two clocks (docs/architecture.md) says that in virtual mode the data
backend must be synchronous (memory or direct pread/pwrite, never a worker thread, which would
let the virtual clock jump while the thread works). So backends are plain blocking objects; the disk
(raidlab.disks.disk) calls them directly in virtual mode and, in live mode, directly where
they cannot block for long and through trio.to_thread otherwise.

Live, a disk does small writes and page-cached reads inline (`pread_cached`: a read that
cannot block, or None), and the rest in a worker thread (raidlab.disks.disk, "Live I/O").

* MemoryBackend: sparse dict of 64 KiB chunks, for virtual-time runs and unit tests.
* ImageBackend: a sparse file (the default member disk), pread/pwrite,
  fdatasync on flush, hole punching on trim.
* BlockDeviceBackend: a real block device, only when asked for, and refused when it carries
  a filesystem, a partition table or a RAID superblock unless force=True (the probe is
  raidlab.tools.blkid: blkid -p and wipefs --no-act).

Every backend checks alignment and bounds (raidlab.blockdev.check_aligned) so a bug above
shows up as ValueError here rather than as a silently short image.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import stat
from pathlib import Path
from typing import Protocol

from raidlab.blockdev import SECTOR, check_aligned
from raidlab.errors import DeviceRefusedError, UsageError
from raidlab.tools import blkid


class Backend(Protocol):
    size: int

    def pread(self, offset: int, length: int) -> bytes: ...
    def pwrite(self, offset: int, data: bytes) -> None: ...
    def flush(self) -> None: ...
    def trim(self, offset: int, length: int) -> None: ...
    def close(self) -> None: ...


def check_size(size: int) -> int:
    """A disk size must be a positive multiple of the 512-byte sector."""
    if not isinstance(size, int) or size <= 0 or size % SECTOR:
        raise UsageError(
            f"disk size {size} is not a positive multiple of {SECTOR} bytes",
            hint=f"give a size like 256M or {SECTOR * 2048}",
            size=size,
        )
    return size


class MemoryBackend:
    """Zero-filled sparse memory. Chunks appear when first written; trim drops them."""

    CHUNK = 64 * 1024

    def __init__(self, size: int):
        self.size = check_size(size)
        self._chunks: dict[int, bytearray] = {}

    def pread(self, offset: int, length: int) -> bytes:
        check_aligned(offset, length, self.size)
        out = bytearray(length)
        pos = offset
        while pos < offset + length:
            idx, within = divmod(pos, self.CHUNK)
            n = min(self.CHUNK - within, offset + length - pos)
            chunk = self._chunks.get(idx)
            if chunk is not None:
                out[pos - offset:pos - offset + n] = chunk[within:within + n]
            pos += n
        return bytes(out)

    def pread_cached(self, offset: int, length: int) -> bytes:
        """Memory never blocks: the bytes (_FileBackend.pread_cached)."""
        return self.pread(offset, length)

    def pwrite(self, offset: int, data: bytes) -> None:
        check_aligned(offset, len(data), self.size)
        view = memoryview(data)
        pos = offset
        end = offset + len(data)
        while pos < end:
            idx, within = divmod(pos, self.CHUNK)
            n = min(self.CHUNK - within, end - pos)
            chunk = self._chunks.get(idx)
            if chunk is None:
                chunk = self._chunks[idx] = bytearray(self.CHUNK)
            chunk[within:within + n] = view[pos - offset:pos - offset + n]
            pos += n

    def flush(self) -> None:
        pass

    def trim(self, offset: int, length: int) -> None:
        check_aligned(offset, length, self.size)
        pos, end = offset, offset + length
        while pos < end:
            idx, within = divmod(pos, self.CHUNK)
            n = min(self.CHUNK - within, end - pos)
            if within == 0 and n == self.CHUNK:
                self._chunks.pop(idx, None)
            elif idx in self._chunks:
                self._chunks[idx][within:within + n] = bytes(n)
            pos += n

    def close(self) -> None:
        self._chunks.clear()

    @property
    def allocated_bytes(self) -> int:
        return len(self._chunks) * self.CHUNK


_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02
_libc = None


def _punch_hole(fd: int, offset: int, length: int) -> bool:
    """fallocate(PUNCH_HOLE|KEEP_SIZE); False where the filesystem cannot punch holes."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        _libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    rc = _libc.fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, offset, length)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EOPNOTSUPP, errno.ENOSYS):
        return False
    raise OSError(err, os.strerror(err))


_RWF_NOWAIT = getattr(os, "RWF_NOWAIT", 0x08)
# A live write up to this size without FUA is a copy into the page cache: done inline, in
# the trio thread, rather than handed to a worker thread (raidlab.disks.disk, "Live I/O").
INLINE_WRITE_BYTES = 256 * 1024


def pread_cached(fd: int, offset: int, length: int) -> bytes | None:
    """`length` bytes at `offset` if the page cache holds all of them (preadv with
    RWF_NOWAIT, which never waits for the device), else None: the caller then reads them
    with pread where blocking is allowed (a worker thread)."""
    buf = bytearray(length)
    try:
        n = os.preadv(fd, [buf], offset, _RWF_NOWAIT)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EOPNOTSUPP, errno.EINVAL):
            return None
        raise
    return bytes(buf) if n == length else None


class _FileBackend:
    """pread/pwrite on an open file descriptor (image file or block device)."""

    path: Path
    size: int
    _fd: int

    def pread(self, offset: int, length: int) -> bytes:
        check_aligned(offset, length, self.size)
        data = os.pread(self._fd, length, offset)
        if len(data) < length:  # a file shorter than the disk reads as zeros past its end
            data += bytes(length - len(data))
        return data

    def pread_cached(self, offset: int, length: int) -> bytes | None:
        """The bytes if the page cache holds all of them, else None (`pread_cached`)."""
        check_aligned(offset, length, self.size)
        return pread_cached(self._fd, offset, length)

    def pwrite(self, offset: int, data: bytes) -> None:
        check_aligned(offset, len(data), self.size)
        view = memoryview(data)
        done = 0
        while done < len(data):
            done += os.pwrite(self._fd, view[done:], offset + done)

    def flush(self) -> None:
        os.fdatasync(self._fd)

    def _open(self, flags: int, what: str, hint: str, mode: int = 0o777) -> None:
        """Open self.path into self._fd; a refusal by the OS becomes a UsageError that
        names `what` and says what to do (`hint`)."""
        try:
            self._fd = os.open(self.path, flags, mode)
        except OSError as exc:
            raise UsageError(f"cannot open {what}: {exc.strerror}", hint=hint, path=str(self.path)) from None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class ImageBackend(_FileBackend):
    """A sparse image file of exactly `size` bytes (created or extended as needed).

    An existing image larger than `size` is refused rather than truncated: that would
    destroy data the user may want.
    """

    def __init__(self, path: str | os.PathLike, size: int, *, create: bool = True):
        self.path = Path(path)
        self.size = check_size(size)
        self._fd = -1
        flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0)
        # 0600: an image holds the bytes of every file written to the array it serves.
        self._open(flags, f"disk image {self.path}", "choose a path in a directory you can write to",
                   0o600)
        try:
            st = os.fstat(self._fd)
            if not stat.S_ISREG(st.st_mode):
                raise UsageError(
                    f"{self.path} is not a regular file",
                    hint="image backends take a file; use BlockDeviceBackend for a device",
                    path=str(self.path),
                )
            if st.st_size > self.size:
                raise UsageError(
                    f"image {self.path} holds {st.st_size} bytes, more than the disk size {self.size}",
                    hint="give the image's own size or a new path",
                    path=str(self.path),
                )
            if st.st_size < self.size:
                os.ftruncate(self._fd, self.size)
        except BaseException:
            self.close()
            raise

    def trim(self, offset: int, length: int) -> None:
        check_aligned(offset, length, self.size)
        if length and not _punch_hole(self._fd, offset, length):
            self.pwrite(offset, bytes(length))

    @property
    def allocated_bytes(self) -> int:
        return os.fstat(self._fd).st_blocks * 512


def _device_size(fd: int) -> int:
    return os.lseek(fd, 0, os.SEEK_END)


class BlockDeviceBackend(_FileBackend):
    """A real block device as a member disk's backing store.

    Refuses (DeviceRefusedError) a device on which blkid -p or wipefs finds a filesystem,
    partition table or RAID signature, unless force=True. size: use the first `size` bytes
    (default: the whole device).
    """

    def __init__(self, path: str | os.PathLike, size: int | None = None, *, force: bool = False):
        self.path = Path(path)
        self._fd = -1
        try:
            st = os.stat(self.path)
        except OSError as exc:
            raise UsageError(f"cannot use {self.path}: {exc.strerror}", path=str(self.path)) from None
        if not stat.S_ISBLK(st.st_mode):
            raise UsageError(
                f"{self.path} is not a block device",
                hint="use an image file (the default) or give a /dev/... block device",
                path=str(self.path),
            )
        if not force:
            found = blkid.signatures(self.path)
            if found:
                what = ", ".join(s.describe() for s in found)
                raise DeviceRefusedError(
                    f"refusing {self.path}: it carries {what}",
                    hint="wipe it yourself (wipefs -a) if the data is not needed, or pass force",
                    device=str(self.path),
                    signature=[s.type for s in found],
                )
        self._open(os.O_RDWR | os.O_CLOEXEC | os.O_EXCL, str(self.path),
                   "is it mounted or in use? (needs root)")
        try:
            dev_size = _device_size(self._fd)
            self.size = check_size(size if size is not None else dev_size - dev_size % SECTOR)
            if self.size > dev_size:
                raise UsageError(
                    f"{self.path} has {dev_size} bytes, fewer than the disk size {self.size}",
                    path=str(self.path),
                )
        except BaseException:
            self.close()
            raise

    def trim(self, offset: int, length: int) -> None:
        """BLKDISCARD would be the device's trim; we only zero nothing: a member disk's trim
        is advisory (BlockTarget: reads after trim return zeros *or old data*)."""
        check_aligned(offset, length, self.size)
