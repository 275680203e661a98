"""The FUSE export under real loop devices: what the kernel sends and what reaches the disk.

Checks the choices raidlab.export.fuse documents: loop's direct I/O is on, requests arrive
in parallel (more than the kernel's default 12 background requests once the connection is
tuned), large writes arrive whole, fsync on the block device reaches target.flush(), data
written through the loop device is at the same offset in the disk image, and byte-granular
writes to the file are read-modify-written correctly.
"""

from __future__ import annotations

import errno
import mmap
import os
import subprocess

import pytest

from raidlab.export import BlockExportFS, ImageFileTarget, attach_loop, create_sparse_image
from raidlab.export import mount_export
from raidlab.export.background import lab_in_background, serve_in_background
from raidlab.export.serve import ServeRequest
from raidlab.tools import fio, losetup

from lab_leftovers import leftovers

pytestmark = [pytest.mark.root, pytest.mark.live]

MiB = 1 << 20


def _odirect_pwrite(device: str, offset: int, data: bytes) -> None:
    buf = mmap.mmap(-1, len(data))  # page-aligned buffer, as O_DIRECT wants
    buf.write(data)
    fd = os.open(device, os.O_RDWR | os.O_DIRECT)
    try:
        assert os.pwritev(fd, [buf], offset) == len(data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _odirect_pread(device: str, offset: int, length: int) -> bytes:
    buf = mmap.mmap(-1, length)
    fd = os.open(device, os.O_RDONLY | os.O_DIRECT)
    try:
        assert os.preadv(fd, [buf], offset) == length
    finally:
        os.close(fd)
    return bytes(buf)


def test_emulated_disks_as_loop_devices(tmp_path):
    req = ServeRequest(disks=2, model="none", size=32 * MiB, name="exp", home=str(tmp_path))
    with serve_in_background(req) as lab:
        d0, d1 = lab.disks
        for d in lab.disks:
            state = losetup.sysfs_state(d.device)
            assert state["dio"] == "1", "loop direct I/O must be on"
            assert state["backing_file"] == d.file
            assert losetup.device_size(d.device) == 32 * MiB
        # O_DIRECT write through the loop device lands at the same offset of the image
        payload = os.urandom(64 * 1024)
        _odirect_pwrite(d1.device, 5 * MiB, payload)
        with open(d1.image, "rb") as img:
            img.seek(5 * MiB)
            assert img.read(len(payload)) == payload
        assert _odirect_pread(d1.device, 5 * MiB, len(payload)) == payload
        # ... and not on the other disk
        with open(d0.image, "rb") as img:
            img.seek(5 * MiB)
            assert img.read(len(payload)) == bytes(len(payload))
        stats = lab.fuse_statistics()
        assert stats["disks/d1"]["write_bytes"] >= len(payload)
        assert stats["disks/d1"]["flushes"] >= 1  # fsync on /dev/loopN -> target.flush()
        disk_stats = lab.call(d1.target.statistics)
        assert disk_stats["flushes"] >= 1 and disk_stats["bytes_written"] >= len(payload)
        lab_dir = lab.session.lab.path
    assert leftovers(lab_dir, "exp") == {}


def test_parallel_requests_queue_at_a_slow_modelled_disk(tmp_path):
    """32 requests in flight from fio reach the FUSE handlers together and queue at the
    disk (HP C2200A, ~30 ms each, one in service): the kernel's default max_background
    of 12 would cap this at 12."""
    req = ServeRequest(disks=1, model="hp-c2200a", size=16 * MiB, name="par",
                       home=str(tmp_path))
    with serve_in_background(req) as lab:
        [d0] = lab.disks
        assert lab.session.fuse_export.tuning.max_background == 128
        run = fio.run_job(fio.FioJob(name="qd32", filename=d0.device, rw="randread",
                                     bs="4k", size="16m", iodepth=32, runtime=1.0))
        stats = lab.fuse_statistics()["disks/d0"]
        assert stats["in_flight_max"] == 32
        disk = lab.call(d0.target.statistics)
        # every read was served, alone or merged into a contiguous one queued with it
        assert disk["reads"] + disk["merged_requests"] >= run.jobs[0].read.ios > 0
        assert stats["errors"] == 0


def test_large_writes_arrive_whole(tmp_path):
    req = ServeRequest(disks=1, model="none", size=64 * MiB, name="big", home=str(tmp_path))
    with serve_in_background(req) as lab:
        [d0] = lab.disks
        fio.run_job(fio.FioJob(name="seq", filename=d0.device, rw="write", bs="1m",
                               size="16m", iodepth=4))
        stats = lab.fuse_statistics()["disks/d0"]
        assert stats["largest_write"] >= 128 * 1024
        assert stats["write_bytes"] >= 16 * MiB
        assert stats["errors"] == 0 and stats["unaligned"] == 0


def test_byte_granular_access_to_a_disk_file(tmp_path):
    req = ServeRequest(disks=1, model="none", size=4 * MiB, name="bytes", home=str(tmp_path))
    with serve_in_background(req) as lab:
        [d0] = lab.disks
        with open(d0.file, "r+b", buffering=0) as fh:
            fh.seek(1000)
            fh.write(b"hello, disk")
            fh.seek(4 * MiB - 3)
            fh.write(b"end")
            with pytest.raises(OSError):  # a disk does not grow
                fh.write(b"!")
        with open(d0.image, "rb") as img:
            img.seek(1000)
            assert img.read(11) == b"hello, disk"
            img.seek(4 * MiB - 3)
            assert img.read(3) == b"end"
        with open(d0.file, "rb") as fh:
            fh.seek(998)
            assert fh.read(15) == b"\0\0hello, disk\0\0"
        assert os.stat(d0.file).st_size == 4 * MiB
        with pytest.raises(OSError):
            os.truncate(d0.file, MiB)
        assert lab.fuse_statistics()["disks/d0"]["unaligned"] >= 2


def test_direct_opens_get_whole_sectors_only(tmp_path):
    """A descriptor opened with O_DIRECT is refused I/O that is not in whole sectors, as a
    block device refuses it (QEMU's alignment probe relies on that); whole sectors pass,
    and a buffered descriptor still gets byte-granular access."""
    req = ServeRequest(disks=1, model="none", size=4 * MiB, name="dio", home=str(tmp_path))
    with serve_in_background(req) as lab:
        [d0] = lab.disks
        fd = os.open(d0.file, os.O_RDWR | os.O_DIRECT)
        buf = mmap.mmap(-1, 4096)
        try:
            for length, offset in ((1, 0), (4096, 100), (700, 512)):
                with pytest.raises(OSError) as err:
                    os.preadv(fd, [memoryview(buf)[:length]], offset)
                assert err.value.errno == errno.EINVAL
            with pytest.raises(OSError) as err:
                os.pwritev(fd, [memoryview(buf)[:1000]], 0)
            assert err.value.errno == errno.EINVAL
            buf[:512] = b"s" * 512
            assert os.pwritev(fd, [memoryview(buf)[:512]], 1024) == 512
            assert os.preadv(fd, [memoryview(buf)[:1024]], 512) == 1024
            assert buf[512:1024] == b"s" * 512
        finally:
            os.close(fd)
            buf.close()
        with open(d0.file, "rb") as fh:
            fh.seek(1020)
            assert fh.read(8) == b"\0\0\0\0ssss"


def test_bare_passthrough_file_as_loop_device(tmp_path):
    """ImageFileTarget (the benchmark's pass-through baseline) served through the same
    export, with a loop device over it; its trim punches holes in the image."""
    image = create_sparse_image(tmp_path / "pass.img", 16 * MiB)

    async def setup(session):
        fs = BlockExportFS()
        target = ImageFileTarget("pass", image)
        session.push_sync("passthrough target", target.close)
        fs.add("passthrough", target)
        export = await mount_export(session, fs)
        dev = await attach_loop(session, export, "passthrough")
        return dev, target

    with lab_in_background("pt", setup, home=str(tmp_path)) as lab:
        dev, target = lab.value
        assert dev.direct_io
        payload = os.urandom(128 * 1024)
        _odirect_pwrite(dev.device, 3 * MiB, payload)
        assert image.read_bytes()[3 * MiB:3 * MiB + len(payload)] == payload
        allocated = os.stat(image).st_blocks
        lab.run(target.trim, 3 * MiB, len(payload))
        assert os.stat(image).st_blocks < allocated
        assert _odirect_pread(dev.device, 3 * MiB, len(payload)) == bytes(len(payload))
        assert lab.call(target.statistics)["in_flight_max"] >= 1
        lab_dir = lab.session.lab.path
    assert leftovers(lab_dir, "pt") == {}


def test_discard_on_the_loop_device_keeps_data_and_zeroout_writes_zeros(tmp_path):
    """pyfuse3 has no fallocate handler: the loop device's DISCARD fails inside the kernel
    (EOPNOTSUPP; BLKDISCARD still returns 0), so the data stay; WRITE_ZEROES falls back to
    writing zero pages, which reach the disk as ordinary writes."""
    req = ServeRequest(disks=1, model="none", size=4 * MiB, name="disc", home=str(tmp_path))
    with serve_in_background(req) as lab:
        [d0] = lab.disks
        payload = os.urandom(4096)
        _odirect_pwrite(d0.device, 0, payload)
        written = lab.fuse_statistics()["disks/d0"]["write_bytes"]
        subprocess.run(["blkdiscard", "-o", "0", "-l", "65536", d0.device],
                       capture_output=True, text=True)
        assert _odirect_pread(d0.device, 0, 4096) == payload
        assert lab.fuse_statistics()["disks/d0"]["write_bytes"] == written
        subprocess.run(["blkdiscard", "-z", "-o", "0", "-l", "65536", d0.device], check=True)
        assert _odirect_pread(d0.device, 0, 4096) == bytes(4096)
        assert lab.fuse_statistics()["disks/d0"]["write_bytes"] >= written + 65536


def test_a_failed_disk_answers_eio_and_the_export_keeps_serving(tmp_path):
    """EmulatedDisk.failed (fault injection) -> OSError(EIO) in the handler -> EIO on the
    loop device; the FUSE server stays up for the other disk and for the repaired one."""
    req = ServeRequest(disks=2, model="none", size=4 * MiB, name="eio", home=str(tmp_path))
    with serve_in_background(req) as lab:
        d0, d1 = lab.disks
        payload = os.urandom(4096)
        _odirect_pwrite(d1.device, 0, payload)
        lab.call(setattr, d0.target, "failed", True)
        with pytest.raises(OSError) as info:
            _odirect_pread(d0.device, 0, 4096)
        assert info.value.errno == 5  # EIO
        assert _odirect_pread(d1.device, 0, 4096) == payload
        lab.call(setattr, d0.target, "failed", False)
        assert _odirect_pread(d0.device, 0, 4096) == bytes(4096)
        assert lab.fuse_statistics()["disks/d0"]["errors"] >= 1
