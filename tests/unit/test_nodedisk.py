"""A cluster member through a file (raidlab.disks.nodedisk) without a cluster: a plain file
stands for the FUSE or nbdfuse file, and a stalled or failing transport is played by
replacing os.preadv. No root; the live tests in tests/live/test_cluster_arrays.py cut real
links.
"""

from __future__ import annotations

import errno
import os
import threading
import time

import pytest
import trio

from raidlab.disks.nodedisk import NodeDisk
from raidlab.errors import LabError

MiB = 1 << 20


def disk_over(path, size=MiB, **kwargs) -> NodeDisk:
    if not path.exists():
        path.write_bytes(bytes(size))
    return NodeDisk("node2/d0", str(path), size, model="none", node=2, disk="d0", where="remote",
                    uri="nbd://10.77.0.3/d0", direct=False, **kwargs)


def test_reads_and_writes_reach_the_file_and_are_counted(tmp_path):
    disk = disk_over(tmp_path / "d0")

    async def main():
        await disk.write(4096, b"x" * 8192, fua=True)
        await disk.flush()
        await disk.trim(0, 4096)  # advisory: nothing happens
        return await disk.read(0, 16384)

    data = trio.run(main)
    assert data == bytes(4096) + b"x" * 8192 + bytes(4096)
    assert (tmp_path / "d0").read_bytes()[4096:12288] == b"x" * 8192
    stats = disk.statistics()
    assert (stats["reads"], stats["writes"], stats["bytes_read"], stats["bytes_written"]) == (1, 1, 16384, 8192)
    assert (stats["flushes"], stats["trims"], stats["errors"], stats["failed"]) == (1, 1, 0, False)
    assert (stats["node"], stats["export"], stats["where"], stats["uri"]) == (2, "d0", "remote", "nbd://10.77.0.3/d0")
    assert stats["max_queue_length"] == 1 and stats["queue_length"] == 0
    disk.close()


def test_a_file_of_another_size_or_none_at_all_is_refused(tmp_path):
    (tmp_path / "small").write_bytes(bytes(4096))
    with pytest.raises(LabError, match="holds 4096 bytes, not 1048576"):
        disk_over(tmp_path / "small")
    with pytest.raises(LabError, match="cannot open node2/d0"):
        NodeDisk("node2/d0", str(tmp_path / "missing"), MiB, model="none", node=2, disk="d0", where="remote",
                 uri="nbd://10.77.0.3/d0", direct=False)


def test_a_transport_error_is_an_eio_and_the_disk_stays_failed(tmp_path, monkeypatch):
    disk = disk_over(tmp_path / "d0")

    def broken(fd, buffers, offset):
        raise OSError(errno.ENOTCONN, "Transport endpoint is not connected")

    monkeypatch.setattr(os, "preadv", broken)

    async def main():
        with pytest.raises(OSError) as first:
            await disk.read(0, 4096)
        assert first.value.errno == errno.EIO and "not connected" in str(first.value)
        with pytest.raises(OSError) as later:  # failed: no request reaches the file any more
            await disk.write(0, bytes(4096))
        assert later.value.errno == errno.EIO

    trio.run(main)
    stats = disk.statistics()
    assert stats["failed"] and stats["errors"] == 2 and stats["writes"] == 0


def test_a_request_left_unanswered_fails_at_its_deadline(tmp_path, monkeypatch):
    """The reply that never comes: the deadline turns the wait into EIO; the abandoned
    thread returns later, and the file stays open until it has."""
    disk = disk_over(tmp_path / "d0", deadline=0.2)
    real_preadv = os.preadv
    release = threading.Event()

    def stalled(fd, buffers, offset):
        release.wait(10)
        return real_preadv(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", stalled)

    async def main():
        started = trio.current_time()
        with pytest.raises(OSError) as info:
            await disk.read(0, 4096)
        return trio.current_time() - started, info.value

    waited, error = trio.run(main)
    assert error.errno == errno.EIO and "no answer to a read within 0.2 s" in str(error)
    assert 0.2 <= waited < 2
    stats = disk.statistics()
    assert stats["timeouts"] == 1 and stats["failed"]
    disk.close()  # the stalled thread still holds the descriptor: it is closed when it returns
    fd = disk._fd._fd
    assert os.fstat(fd)  # still open
    release.set()
    for _ in range(100):
        try:
            os.fstat(fd)
        except OSError:
            break
        time.sleep(0.02)
    else:
        raise AssertionError("the descriptor stayed open after the last thread returned")


def test_requests_in_flight_are_counted_and_busy_time_is_wall_time(tmp_path, monkeypatch):
    disk = disk_over(tmp_path / "d0")
    real_preadv = os.preadv

    def slow(fd, buffers, offset):
        time.sleep(0.05)
        return real_preadv(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", slow)

    async def main():
        async with trio.open_nursery() as nursery:
            for k in range(4):
                nursery.start_soon(disk.read, k * 4096, 4096)

    trio.run(main)
    stats = disk.statistics()
    assert stats["max_queue_length"] == 4 and stats["reads"] == 4
    assert 0.04 < stats["busy_time"] < 0.5 and stats["mean_service_ms"] >= 40
    disk.close()
