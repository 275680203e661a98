"""One FUSE mount per lab: every block target of the lab as a plain file.

Layout of the mount (docs/architecture.md, "Data path"):

    <mountpoint>/disks/d0 ... dN-1   the emulated member disks
    <mountpoint>/volume              an engine architecture

Why FUSE files and not ublk/nbd: the host has loop and FUSE but no nbd or ublk, and a regular
file is what `losetup`, mdadm (over loops) and QEMU (`cache=none`) all accept. Why pyfuse3:
its main loop is trio, the same event loop as the disks and the engine, so a FUSE request
handler simply awaits the target -- no thread hop, no queue between them, and the timing
models run on one clock.

Choices, measured on this machine (see tests/live/test_fuse_export.py, which asserts them):

* `losetup --direct-io=on`: the loop driver then issues O_DIRECT async kiocbs to the FUSE
  file; FUSE turns each into one or more *background* requests (FUSE_ASYNC_DIO), so the
  kernel keeps several requests in flight and the page cache is not used twice (loop + FUSE).
* open replies `direct_io` off (page-cache mode, `keep_cache` off). Both modes gave loop
  direct I/O here (loop's kiocbs carry IOCB_DIRECT either way) and the same 4 KiB QD32
  IOPS; with FOPEN_DIRECT_IO the kernel split 1 MiB loop writes into pieces of at most
  ~532 KiB, without it they arrived whole (1 MiB). Page-cache mode also lets a user `mmap`
  or `cat` a disk file. `BlockExportFS(direct_io_open=True)` keeps the other choice open.
* max_write: libfuse 3.14 negotiates 1 MiB (256 pages) with a kernel that has FUSE_MAX_PAGES,
  and pyfuse3 passes no max_write option, so loop's requests (its queue allows 1280 KiB)
  reach the handler whole: 1 MiB fio writes arrive as 1 MiB writes.
* max_background: the kernel's default is 12 outstanding background requests per connection
  -- fewer than one fio job at iodepth 32 (measured: at most 12 requests in the handlers at
  QD32 untuned, 32 tuned). pyfuse3 does not expose the INIT reply, so
  `tune_connection` raises it through the fuse control file system after mounting
  (mounting fusectl privately in the lab directory and unmounting it again when the host
  does not have it mounted).
* trim: not feasible through the file. The loop driver turns DISCARD into
  fallocate(PUNCH_HOLE | KEEP_SIZE) on its backing file, and FUSE forwards that as
  FUSE_FALLOCATE only to a server that implements it; pyfuse3 3.5 registers no fallocate
  in its fuse_lowlevel_ops (src/pyfuse3/internal.pxi, init_fuse_ops; upstream pyfuse3 has
  none either), so libfuse answers ENOSYS, the kernel marks the
  connection no_fallocate and returns EOPNOTSUPP: a DISCARD on the loop device fails inside
  the kernel (logged as "operation not supported error ... DISCARD"; BLKDISCARD still
  returns 0) and the data stay; WRITE_ZEROES falls back to writing zero pages, which
  arrive as ordinary writes. There is no ioctl handler either. `target.trim` is reachable
  through the engine's own request path only (tests/unit/test_array_trim.py).

Every handler converts errors into FUSEError: pyfuse3 lets any other exception escape its
main loop, which would leave the kernel waiting on a dead server.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyfuse3
import trio

from raidlab.blockdev import SECTOR, BlockTarget
from raidlab.errors import LabError, RaidlabError
from raidlab.lab.fuse_control import fuse_connection_id, fusectl

log = logging.getLogger(__name__)

# At most this many requests are handled concurrently by pyfuse3 worker tasks; above the
# loop queue depth (128) so the handler side is never the limit.
MAX_WORKER_TASKS = 256
# Outstanding background requests the kernel may have in flight (see module docstring).
MAX_BACKGROUND = 128
CONGESTION_THRESHOLD = 96


@dataclass
class _Node:
    inode: int
    name: str
    parent: int


@dataclass
class _Dir(_Node):
    children: dict[str, int] = field(default_factory=dict)


@dataclass
class _File(_Node):
    target: BlockTarget
    in_flight: int = 0
    in_flight_max: int = 0
    writes_in_flight: int = 0
    writes_in_flight_max: int = 0
    reads: int = 0
    writes: int = 0
    flushes: int = 0
    read_bytes: int = 0
    write_bytes: int = 0
    largest_read: int = 0
    largest_write: int = 0
    unaligned: int = 0
    errors: int = 0


@contextlib.contextmanager
def _as_fuse_errors(node: _File | None = None) -> Iterator[None]:
    """Turn every failure of a handler into a FUSEError the kernel can deliver."""
    try:
        yield
    except pyfuse3.FUSEError:
        if node is not None:
            node.errors += 1
        raise
    except OSError as exc:
        if node is not None:
            node.errors += 1
        raise pyfuse3.FUSEError(exc.errno or errno.EIO) from exc
    except ValueError as exc:
        if node is not None:
            node.errors += 1
        log.warning("rejected request: %s", exc)
        raise pyfuse3.FUSEError(errno.EINVAL) from exc
    except Exception as exc:  # a bug below: answer EIO, keep serving
        if node is not None:
            node.errors += 1
        log.exception("FUSE handler failed")
        raise pyfuse3.FUSEError(errno.EIO) from exc


@contextlib.contextmanager
def _in_flight(node: _File, *, write: bool = False) -> Iterator[None]:
    """A read or write of `node`: in flight (and its peak kept, of writes also on their own)
    while it runs, its failures as FUSE errors. The write peak shows whether the kernel
    lets writes of one file overlap (it serialises direct-I/O writes of a file under the
    inode lock unless they come as asynchronous kiocbs, as the loop driver sends them)."""
    node.in_flight += 1
    node.in_flight_max = max(node.in_flight_max, node.in_flight)
    if write:
        node.writes_in_flight += 1
        node.writes_in_flight_max = max(node.writes_in_flight_max, node.writes_in_flight)
    try:
        with _as_fuse_errors(node):
            yield
    finally:
        node.in_flight -= 1
        if write:
            node.writes_in_flight -= 1


class BlockExportFS(pyfuse3.Operations):
    """pyfuse3 operations serving BlockTargets as fixed-size regular files.

    Files can be added before or after mounting (`add`); names are paths like "disks/d0".
    """

    supports_dot_lookup = False
    enable_writeback_cache = False

    def __init__(self, *, direct_io_open: bool = False, uid: int | None = None,
                 gid: int | None = None):
        super().__init__()
        self.direct_io_open = direct_io_open
        self._uid = os.getuid() if uid is None else uid
        self._gid = os.getgid() if gid is None else gid
        root = _Dir(pyfuse3.ROOT_INODE, "", pyfuse3.ROOT_INODE)
        self._nodes: dict[int, _Node] = {root.inode: root}
        self._next_inode = pyfuse3.ROOT_INODE + 1
        self._handles: dict[int, _File] = {}
        self._next_handle = 1
        self._unaligned_lock = trio.Lock()
        self._direct_handles: set[int] = set()  # opened with O_DIRECT: whole sectors only

    # --- building the tree -------------------------------------------------------------
    def add(self, relpath: str, target: BlockTarget) -> int:
        """Expose `target` as the file `relpath` (parent directories are created)."""
        if target.size % SECTOR:
            raise ValueError(f"target {target.name} size {target.size} is not sector-aligned")
        *dirs, leaf = [p for p in relpath.split("/") if p]
        parent = self._nodes[pyfuse3.ROOT_INODE]
        for part in dirs:
            assert isinstance(parent, _Dir)
            ino = parent.children.get(part)
            if ino is None:
                node = _Dir(self._new_inode(), part, parent.inode)
                self._nodes[node.inode] = node
                parent.children[part] = node.inode
                parent = node
            else:
                parent = self._nodes[ino]
                if not isinstance(parent, _Dir):
                    raise ValueError(f"{part} in {relpath} is a file")
        assert isinstance(parent, _Dir)
        if leaf in parent.children:
            raise ValueError(f"{relpath} already exported")
        node = _File(self._new_inode(), leaf, parent.inode, target)
        self._nodes[node.inode] = node
        parent.children[leaf] = node.inode
        return node.inode

    def _new_inode(self) -> int:
        ino = self._next_inode
        self._next_inode += 1
        return ino

    def files(self) -> dict[str, _File]:
        """Exported files by relative path."""
        out: dict[str, _File] = {}
        for node in self._nodes.values():
            if isinstance(node, _File):
                out[self._path_of(node)] = node
        return out

    def _path_of(self, node: _Node) -> str:
        parts = [node.name]
        while node.parent != pyfuse3.ROOT_INODE:
            node = self._nodes[node.parent]
            parts.append(node.name)
        return "/".join(reversed(parts))

    def statistics(self) -> dict[str, Any]:
        """Per-file request counters (what the kernel actually sent us)."""
        return {
            path: {
                "reads": f.reads, "writes": f.writes, "flushes": f.flushes,
                "read_bytes": f.read_bytes, "write_bytes": f.write_bytes,
                "largest_read": f.largest_read, "largest_write": f.largest_write,
                "in_flight": f.in_flight, "in_flight_max": f.in_flight_max,
                "writes_in_flight_max": f.writes_in_flight_max,
                "unaligned": f.unaligned, "errors": f.errors,
            }
            for path, f in self.files().items()
        }

    # --- attributes and directories ----------------------------------------------------
    def _node(self, inode: int) -> _Node:
        try:
            return self._nodes[inode]
        except KeyError:
            raise pyfuse3.FUSEError(errno.ENOENT) from None

    def _attrs(self, node: _Node) -> pyfuse3.EntryAttributes:
        attr = pyfuse3.EntryAttributes()
        attr.st_ino = node.inode
        attr.generation = 0
        # Attributes never change (sizes are fixed), so let the kernel cache them.
        attr.entry_timeout = 60
        attr.attr_timeout = 60
        if isinstance(node, _Dir):
            attr.st_mode = stat.S_IFDIR | 0o755
            attr.st_nlink = 2 + sum(isinstance(self._nodes[c], _Dir)
                                    for c in node.children.values())
            attr.st_size = 0
        else:
            assert isinstance(node, _File)
            attr.st_mode = stat.S_IFREG | 0o600
            attr.st_nlink = 1
            attr.st_size = node.target.size
        attr.st_uid = self._uid
        attr.st_gid = self._gid
        attr.st_blksize = 4096
        attr.st_blocks = (attr.st_size + 511) // 512
        attr.st_atime_ns = attr.st_mtime_ns = attr.st_ctime_ns = 0
        return attr

    async def lookup(self, parent_inode, name, ctx=None):
        parent = self._node(parent_inode)
        if not isinstance(parent, _Dir):
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        ino = parent.children.get(name.decode(errors="surrogateescape"))
        if ino is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attrs(self._nodes[ino])

    async def getattr(self, inode, ctx=None):
        return self._attrs(self._node(inode))

    async def setattr(self, inode, attr, fields, fh, ctx):
        node = self._node(inode)
        if fields.update_size and (not isinstance(node, _File)
                                   or attr.st_size != node.target.size):
            raise pyfuse3.FUSEError(errno.EPERM)  # a disk does not change size
        if fields.update_mode or fields.update_uid or fields.update_gid:
            raise pyfuse3.FUSEError(errno.EPERM)
        return self._attrs(node)  # time updates are accepted and forgotten

    async def opendir(self, inode, ctx):
        if not isinstance(self._node(inode), _Dir):
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        return inode

    async def readdir(self, fh, start_id, token):
        node = self._node(fh)
        assert isinstance(node, _Dir)
        entries = sorted(node.children.items())
        for index, (name, ino) in enumerate(entries[start_id:], start=start_id + 1):
            if not pyfuse3.readdir_reply(token, name.encode(), self._attrs(self._nodes[ino]),
                                         index):
                break

    async def releasedir(self, fh):
        return None

    async def statfs(self, ctx):
        st = pyfuse3.StatvfsData()
        total = sum(f.target.size for f in self.files().values())
        st.f_bsize = st.f_frsize = 4096
        st.f_blocks = total // 4096
        st.f_bfree = st.f_bavail = 0
        st.f_files = st.f_favail = len(self._nodes)
        st.f_ffree = 0
        st.f_namemax = 255
        return st

    # --- files ---------------------------------------------------------------------------
    async def open(self, inode, flags, ctx):
        node = self._node(inode)
        if isinstance(node, _Dir):
            raise pyfuse3.FUSEError(errno.EISDIR)
        if flags & os.O_TRUNC:
            raise pyfuse3.FUSEError(errno.EPERM)
        fh = self._next_handle
        self._next_handle += 1
        assert isinstance(node, _File)
        self._handles[fh] = node
        if flags & os.O_DIRECT:
            self._direct_handles.add(fh)
        return pyfuse3.FileInfo(fh=fh, direct_io=self.direct_io_open, keep_cache=False)

    async def create(self, parent_inode, name, mode, flags, ctx):
        raise pyfuse3.FUSEError(errno.EPERM)

    def _file(self, fh: int) -> _File:
        try:
            return self._handles[fh]
        except KeyError:
            raise pyfuse3.FUSEError(errno.EBADF) from None

    def _check_direct(self, fh: int, off: int, size: int) -> None:
        """A descriptor opened with O_DIRECT gets what a block device gives it: EINVAL for
        I/O not in whole sectors. QEMU (cache=none) probes a file's alignment with 1-byte
        reads and, when every size works, assumes 4 KiB, which would turn each 1 KiB guest
        write into a 4 KiB read-modify-write; refusing makes it find the 512-byte sector."""
        if fh in self._direct_handles and (off % SECTOR or size % SECTOR):
            raise pyfuse3.FUSEError(errno.EINVAL)

    async def read(self, fh, off, size):
        node = self._file(fh)
        self._check_direct(fh, off, size)
        with _in_flight(node):
            data = await self._read(node, off, size)
        node.reads += 1
        node.read_bytes += len(data)
        node.largest_read = max(node.largest_read, len(data))
        return data

    async def _read(self, node: _File, off: int, size: int) -> bytes:
        end = min(off + size, node.target.size)
        if off >= end:
            return b""
        start_aligned = off - off % SECTOR
        end_aligned = -(-end // SECTOR) * SECTOR
        data = await node.target.read(start_aligned, end_aligned - start_aligned)
        if start_aligned == off and end_aligned == end:
            return data
        node.unaligned += 1
        return data[off - start_aligned:end - start_aligned]

    async def write(self, fh, off, buf):
        node = self._file(fh)
        self._check_direct(fh, off, len(buf))
        with _in_flight(node, write=True):
            await self._write(node, off, buf)
        node.writes += 1
        node.write_bytes += len(buf)
        node.largest_write = max(node.largest_write, len(buf))
        return len(buf)

    async def _write(self, node: _File, off: int, buf: bytes) -> None:
        if off + len(buf) > node.target.size:
            raise pyfuse3.FUSEError(errno.ENOSPC)
        if off % SECTOR == 0 and len(buf) % SECTOR == 0:
            await node.target.write(off, buf)
            return
        # A byte-granular write (e.g. `echo > disks/d0`): read-modify-write of the covering
        # sectors. Serialised among themselves; loop devices never take this path.
        node.unaligned += 1
        start_aligned = off - off % SECTOR
        end_aligned = -(-(off + len(buf)) // SECTOR) * SECTOR
        async with self._unaligned_lock:
            old = bytearray(await node.target.read(start_aligned, end_aligned - start_aligned))
            old[off - start_aligned:off - start_aligned + len(buf)] = buf
            await node.target.write(start_aligned, bytes(old))

    async def flush(self, fh):
        # close(2) of a descriptor: make what was written through it durable, so a detached
        # loop device has reached the target's stable storage.
        node = self._file(fh)
        with _as_fuse_errors(node):
            await node.target.flush()
        node.flushes += 1

    async def fsync(self, fh, datasync):
        node = self._file(fh)
        with _as_fuse_errors(node):
            await node.target.flush()
        node.flushes += 1

    async def release(self, fh):
        self._handles.pop(fh, None)
        self._direct_handles.discard(fh)


@dataclass
class ConnectionTuning:
    connection: int | None
    max_background: int | None
    congestion_threshold: int | None
    how: str


def _write_knobs(conn_dir: Path, max_background: int, congestion: int) -> tuple[int, int]:
    (conn_dir / "max_background").write_text(f"{max_background}\n")
    (conn_dir / "congestion_threshold").write_text(f"{congestion}\n")
    return (int((conn_dir / "max_background").read_text()),
            int((conn_dir / "congestion_threshold").read_text()))


def tune_connection(mountpoint: str | os.PathLike, scratch_dir: str | os.PathLike,
                    max_background: int = MAX_BACKGROUND,
                    congestion_threshold: int = CONGESTION_THRESHOLD) -> ConnectionTuning:
    """Raise the kernel's background-request limits of the mount's FUSE connection.
    Blocking (mount/umount of fusectl): call from a worker thread."""
    conn = fuse_connection_id(mountpoint)
    if conn is None:
        return ConnectionTuning(None, None, None, "connection not found")
    try:
        with fusectl(scratch_dir) as (ctl, how):
            mb, ct = _write_knobs(ctl / str(conn), max_background, congestion_threshold)
    except (RaidlabError, OSError) as exc:
        return ConnectionTuning(conn, None, None, f"fusectl unusable: {exc}")
    return ConnectionTuning(conn, mb, ct, how)


_mounted_in_this_process = False


class FuseExport:
    """The lab's FUSE mount: `await nursery.start(export.serve)` mounts and serves.

    pyfuse3 holds one session per process, so one FuseExport can serve at a time. `serve`
    returns (and the mount is gone) when `stop()` is called or its task is cancelled.
    """

    def __init__(self, fs: BlockExportFS, mountpoint: str | os.PathLike, *, fsname: str,
                 max_tasks: int = MAX_WORKER_TASKS):
        self.fs = fs
        self.mountpoint = Path(mountpoint)
        self.fsname = fsname
        self.max_tasks = max_tasks
        self.serving = False
        self.stopped = trio.Event()
        self.tuning: ConnectionTuning | None = None

    @property
    def options(self) -> set[str]:
        opts = set(pyfuse3.default_options)
        opts.add(f"fsname={self.fsname}")
        opts.add("subtype=raidlab")
        return opts

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        global _mounted_in_this_process
        if _mounted_in_this_process:
            raise LabError("this process already serves a FUSE mount (pyfuse3 allows one)")
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        try:
            pyfuse3.init(self.fs, str(self.mountpoint), self.options)
        except RuntimeError as exc:
            raise LabError(f"cannot mount FUSE at {self.mountpoint}: {exc}",
                           hint="check that /dev/fuse exists and fuse3 is installed") from exc
        _mounted_in_this_process = True
        self.serving = True
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._main)
                task_status.started(self)
        finally:
            self.serving = False
            # libfuse unmounts with umount2(MNT_DETACH) as root, then closes /dev/fuse.
            pyfuse3.close(unmount=True)
            _mounted_in_this_process = False
            self.stopped.set()

    async def _main(self) -> None:
        await pyfuse3.main(min_tasks=1, max_tasks=self.max_tasks)

    def stop(self) -> None:
        """Make the FUSE main loop return (call from the trio thread)."""
        if self.serving:
            pyfuse3.terminate()

    async def stop_and_wait(self, timeout: float = 10.0) -> bool:
        """Stop serving and wait until the mount is gone; False on timeout."""
        self.stop()
        with trio.move_on_after(timeout):
            await self.stopped.wait()
        return self.stopped.is_set()
