"""A member that is one of a cluster node's disks, reached through a file another process
serves: the node's own disk as the cluster daemon's FUSE file (local), or another node's
disk as an nbdfuse file over NBD (remote). Together they are what RAID-x's cooperative
disk drivers give a node (Hwang, Jin and Ho, §5): every disk of the cluster as a block
device of its own. raidlab.service.hosts.nodes attaches them; raidlab.cluster decides
which file or URI each member is.

Why a BlockTarget of its own rather than an EmulatedDisk:

* It is untimed. The disk's timing is modelled once, by the serving node's EmulatedDisk in
  the cluster daemon; what lies between (the network, shaped by tbf, and the NBD client and
  server) takes the time it really takes. A second model here would count the disk twice.
* A request may never be answered: a cut cable leaves NBD requests without replies. Each
  request has a deadline (DEADLINE, 30 s) after which it fails with EIO, so the array marks
  the member failed and serves degraded, as md kicks a member that stopped answering; the
  disk stays failed (later requests fail at once) until a replacement reaches it again. The
  node's TCP usually turns a dead peer into an error sooner (about 14 s, see
  raidlab.cluster.plan, "A dead peer"); the deadline bounds the case TCP does not see, a
  reply lost while the client had nothing of its own to retransmit. Any other OSError is
  an EIO too: a disk that stopped answering is a failed member, whatever the transport
  calls it (ENOTCONN, ECONNABORTED, ETIMEDOUT).
* The file is opened with O_DIRECT: nbdfuse's files go through the page cache otherwise,
  and a re-read would be answered from this host's memory instead of the node's disk (the
  cluster's own FUSE files are direct I/O on the server's side already). The data moves
  through page-aligned buffers: FUSE splits a direct request at page boundaries of the
  caller's buffer, so an unaligned buffer made pieces that are not whole sectors (which
  the cluster's FUSE files refuse under O_DIRECT, as a block device does).
* The I/O blocks in the kernel until the server answers, so it runs in worker threads, with
  a CapacityLimiter per disk (IN_FLIGHT): requests stuck on a dead node hold only that
  disk's threads. A request past its deadline abandons its thread, which returns once the
  connection is torn down (the NBD client exits or is killed, and the kernel fails the FUSE
  requests still waiting). The file descriptor is closed only when no thread uses it, so a
  late thread never reads a number the process has given to another file.

Trim is advisory and does nothing (BlockTarget: reads after a trim return zeros or old
data), as a real block device's backend here does.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
from typing import Any, Callable

from raidlab import sched
from raidlab.blockdev import check_aligned
from raidlab.errors import LabError

DEADLINE = 30.0   # seconds a request may take before the member counts as failed
IN_FLIGHT = 16    # worker threads one disk's requests may hold at once


class _SharedFd:
    """A file descriptor worker threads borrow; closed when closed *and* returned by all."""

    def __init__(self, fd: int):
        self._fd = fd
        self._users = 0
        self._closing = False
        self._lock = threading.Lock()

    def borrow(self) -> int:
        with self._lock:
            if self._closing:
                raise OSError(errno.EBADF, "the disk is closed")
            self._users += 1
            return self._fd

    def give_back(self) -> None:
        with self._lock:
            self._users -= 1
            last = self._closing and self._users == 0
        if last:
            os.close(self._fd)

    def close(self) -> None:
        with self._lock:
            if self._closing:
                return
            self._closing = True
            idle = self._users == 0
        if idle:
            os.close(self._fd)


class NodeDisk:
    """Disk `disk` of cluster node `node`, reached through the file `path` (module doc).

    where: "local" (the node running the array owns the disk) or "remote" (over NBD);
    uri: the disk's NBD address (also for a local disk: where other nodes reach it);
    model: the serving disk's catalog model, for status (the timing is the server's);
    direct: open with O_DIRECT (module doc; off only for tests on a file system without it)."""

    def __init__(self, name: str, path: str, size: int, *, model: str, node: int, disk: str, where: str,
                 uri: str, deadline: float = DEADLINE, direct: bool = True):
        self.name = name
        self.path = path
        self._size = size
        self.model_name = model
        self.node = node
        self.disk = disk
        self.where = where
        self.uri = uri
        self.deadline = deadline
        self.failed = False
        self.client_pid: int | None = None  # the NBD client serving `path`, if any (for status)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | (os.O_DIRECT if direct else 0))
        except OSError as exc:
            raise LabError(f"cannot open {name} ({path}): {exc.strerror}") from None
        try:
            found = os.fstat(fd).st_size
        except OSError as exc:
            os.close(fd)
            raise LabError(f"cannot open {name} ({path}): {exc.strerror}") from None
        if found != size:
            os.close(fd)
            raise LabError(f"{name} ({path}) holds {found} bytes, not {size}")
        self._fd = _SharedFd(fd)
        self._limiter = sched.CapacityLimiter(IN_FLIGHT)
        self._counts = {"reads": 0, "writes": 0, "bytes_read": 0, "bytes_written": 0, "flushes": 0,
                        "trims": 0, "errors": 0, "timeouts": 0}
        self._in_flight = 0
        self._max_in_flight = 0
        self._busy_since = 0.0
        self._busy = 0.0
        self._service_sum = 0.0
        self._service_max = 0.0
        self._services = 0

    @property
    def size(self) -> int:
        return self._size

    # -- BlockTarget ------------------------------------------------------------------

    async def read(self, offset: int, length: int) -> bytes:
        check_aligned(offset, length, self._size)

        def pread(fd: int) -> bytes:
            with mmap.mmap(-1, length) as buffer:  # page-aligned (module doc)
                got = os.preadv(fd, [buffer], offset)
                if got != length:
                    raise OSError(errno.EIO, f"short read ({got} of {length} bytes)")
                return buffer[:]

        data = await self._call("read", pread)
        self._counts["reads"] += 1
        self._counts["bytes_read"] += length
        return data

    async def write(self, offset: int, data: bytes, *, fua: bool = False) -> None:
        check_aligned(offset, len(data), self._size)

        def pwrite(fd: int) -> None:
            with mmap.mmap(-1, len(data)) as buffer:  # page-aligned (module doc)
                buffer[:] = data
                done = os.pwritev(fd, [buffer], offset)
                if done < len(data):  # the rest, from wherever the short write stopped
                    view = memoryview(buffer)
                    try:
                        while done < len(data):
                            done += os.pwrite(fd, view[done:], offset + done)
                    finally:
                        view.release()
            if fua:
                os.fdatasync(fd)

        await self._call("write", pwrite)
        self._counts["writes"] += 1
        self._counts["bytes_written"] += len(data)

    async def flush(self) -> None:
        await self._call("flush", os.fdatasync)
        self._counts["flushes"] += 1

    async def trim(self, offset: int, length: int) -> None:
        check_aligned(offset, length, self._size)
        if self.failed:
            self._counts["errors"] += 1
            raise OSError(errno.EIO, f"{self.name} has failed")
        await sched.checkpoint()
        self._counts["trims"] += 1

    def close(self) -> None:
        self._fd.close()

    # -- the request path ---------------------------------------------------------------

    async def _call(self, what: str, io: Callable[[int], Any]) -> Any:
        if self.failed:
            self._counts["errors"] += 1
            await sched.checkpoint()
            raise OSError(errno.EIO, f"{self.name} has failed")

        def borrowed() -> Any:
            fd = self._fd.borrow()
            try:
                return io(fd)
            finally:
                self._fd.give_back()

        started = sched.current_time()
        self._enter(started)
        try:
            with sched.move_on_after(self.deadline):
                try:
                    return await sched.to_thread_run_sync(borrowed, abandon_on_cancel=True,
                                                         limiter=self._limiter)
                except OSError as exc:
                    self._counts["errors"] += 1
                    self.failed = True
                    raise OSError(errno.EIO, f"{self.name} ({self.where}, {self.uri}): {what} failed: "
                                             f"{exc.strerror or exc}") from exc
            self._counts["errors"] += 1
            self._counts["timeouts"] += 1
            self.failed = True
            raise OSError(errno.EIO, f"{self.name} ({self.where}, {self.uri}): no answer to a {what} "
                                     f"within {self.deadline:g} s")
        finally:
            self._leave(started)

    def _enter(self, now: float) -> None:
        if self._in_flight == 0:
            self._busy_since = now
        self._in_flight += 1
        self._max_in_flight = max(self._max_in_flight, self._in_flight)

    def _leave(self, started: float) -> None:
        now = sched.current_time()
        self._in_flight -= 1
        if self._in_flight == 0:
            self._busy += now - self._busy_since
        self._services += 1
        self._service_sum += now - started
        self._service_max = max(self._service_max, now - started)

    # -- statistics -----------------------------------------------------------------------

    def statistics(self) -> dict[str, Any]:
        counts = self._counts
        return {
            "name": self.name, "model": self.model_name, "size": self._size, "node": self.node,
            "export": self.disk, "where": self.where, "uri": self.uri, "path": self.path,
            "failed": self.failed, **counts, "ios": counts["reads"] + counts["writes"],
            "busy_time": self._busy, "queue_length": self._in_flight, "max_queue_length": self._max_in_flight,
            "mean_service_ms": self._service_sum / self._services * 1e3 if self._services else 0.0,
            "max_service_ms": self._service_max * 1e3, "deadline_s": self.deadline,
            "client_pid": self.client_pid,
        }
