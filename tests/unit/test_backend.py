"""Backends keep bytes faithfully, image files stay sparse, and a real block device that
carries data is refused unless forced (raidlab.disks.backend, raidlab.tools.blkid).

The block-device tests build a real loop device over a scratch file (root) and put real
signatures on it: an ext4 filesystem (mkfs.ext4), a DOS partition table and an md v1.2
superblock. The last two are written byte by byte (a 512-byte MBR; struct
mdp_superblock_1 with its checksum) because this host has neither sfdisk nor the md
driver that `mdadm --create` needs; blkid and wipefs recognise them as they would the
real thing, which is what the refusal depends on.
"""

from __future__ import annotations

import os
import stat
import struct

import pytest

from raidlab.disks.backend import BlockDeviceBackend, ImageBackend, MemoryBackend
from raidlab.errors import DeviceRefusedError, UsageError
from raidlab.tools import blkid, losetup
from raidlab.tools.base import run

MiB = 1 << 20


@pytest.mark.parametrize("make", [lambda p: MemoryBackend(4 * MiB), lambda p: ImageBackend(p / "d.img", 4 * MiB)])
def test_round_trip_zero_fill_and_trim(tmp_path, make):
    b = make(tmp_path)
    assert b.pread(0, 4096) == bytes(4096)
    b.pwrite(65536 - 512, b"a" * 1024)  # across a memory chunk boundary
    b.pwrite(MiB, os.urandom(8192))
    assert b.pread(65536 - 512, 1024) == b"a" * 1024
    b.trim(65536 - 512, 1024)
    assert b.pread(65536 - 512, 1024) == bytes(1024)
    b.flush()
    with pytest.raises(ValueError):
        b.pread(4 * MiB, 512)
    with pytest.raises(ValueError):
        b.pwrite(1, b"x" * 512)
    b.close()


def test_image_is_sparse_and_trim_punches_holes(tmp_path):
    path = tmp_path / "big.img"
    b = ImageBackend(path, 1 << 30)
    assert path.stat().st_size == 1 << 30
    assert b.allocated_bytes < MiB
    b.pwrite(0, os.urandom(4 * MiB))
    assert b.allocated_bytes >= 4 * MiB
    b.trim(0, 4 * MiB)
    assert b.allocated_bytes < MiB
    assert b.pread(0, 4096) == bytes(4096)
    b.close()


def test_image_reopen_keeps_data(tmp_path):
    path = tmp_path / "d.img"
    with ImageBackend(path, 8 * MiB) as b:
        b.pwrite(4096, b"z" * 4096)
    with ImageBackend(path, 8 * MiB, create=False) as b:
        assert b.pread(4096, 4096) == b"z" * 4096


def test_image_refuses_bad_input(tmp_path):
    with pytest.raises(UsageError, match="multiple of 512"):
        ImageBackend(tmp_path / "a.img", 1000)
    with pytest.raises(UsageError, match="cannot open"):
        ImageBackend(tmp_path / "missing-dir" / "a.img", MiB)
    (tmp_path / "big.img").write_bytes(bytes(2 * MiB))
    with pytest.raises(UsageError, match="more than the disk size"):
        ImageBackend(tmp_path / "big.img", MiB)
    with pytest.raises(UsageError, match="cannot open|not a regular file"):
        ImageBackend(tmp_path, MiB)
    with pytest.raises(UsageError):
        MemoryBackend(0)


def test_image_refuses_unwritable_path():
    """/proc refuses file creation even to root: the one-line error, not a traceback."""
    with pytest.raises(UsageError, match="cannot open disk image"):
        ImageBackend("/proc/raidlab-test.img", MiB)


def test_block_device_backend_refuses_a_regular_file(tmp_path):
    f = tmp_path / "f.img"
    f.write_bytes(bytes(MiB))
    with pytest.raises(UsageError, match="not a block device"):
        BlockDeviceBackend(f)


# ------------------------------------------------------------------------ real devices


@pytest.fixture
def loop_device(tmp_path):
    """A 64 MiB loop device over a scratch file; detached afterwards whatever happens."""
    image = tmp_path / "dev.img"
    with open(image, "wb") as f:
        f.truncate(64 * MiB)
    dev = losetup.attach(image, direct_io=False)
    try:
        yield dev.device, image
    finally:
        losetup.detach_and_wait(dev.device, backing=str(image))


def _write_md_superblock(path):
    """An md v1.2 superblock 4 KiB into the device, laid out as struct mdp_superblock_1
    (linux/raid/md_p.h) with a valid sb_csum: what `mdadm --create --metadata=1.2` writes.
    Written by hand because this host has no md driver for mdadm to create an array with."""
    max_dev = 4
    sb = bytearray(256 + 2 * max_dev)
    struct.pack_into("<IIII", sb, 0, 0xA92B4EFC, 1, 0, 0)   # magic, major_version, feature_map
    sb[16:32] = bytes(range(16))                            # set_uuid
    sb[32:44] = b"raidlab:test"                             # set_name
    struct.pack_into("<IIQII", sb, 72, 5, 2, 100000, 128, 3)  # level 5, layout, size, chunk, disks
    struct.pack_into("<QQQ", sb, 128, 2048, 100000, 8)      # data_offset, data_size, super_offset
    struct.pack_into("<I", sb, 220, max_dev)                # max_dev
    for i in range(max_dev):
        struct.pack_into("<H", sb, 256 + 2 * i, i if i < 3 else 0xFFFF)
    total = sum(struct.unpack_from("<%dI" % (len(sb) // 4), sb))
    struct.pack_into("<I", sb, 216, ((total & 0xFFFFFFFF) + (total >> 32)) & 0xFFFFFFFF)
    with open(path, "r+b") as f:
        f.seek(4096)
        f.write(sb)


def _write_mbr(path):
    """A DOS partition table (MBR): one Linux partition from sector 2048, 0x55AA signature."""
    mbr = bytearray(512)
    struct.pack_into("<B3sB3sII", mbr, 446, 0, b"\x00\x02\x00", 0x83, b"\xff\xff\xff", 2048, 32768)
    mbr[510:512] = b"\x55\xaa"
    with open(path, "r+b") as f:
        f.write(mbr)


@pytest.mark.root
def test_blank_device_is_accepted_and_works(loop_device):
    device, _ = loop_device
    assert blkid.signatures(device) == []
    b = BlockDeviceBackend(device)
    try:
        assert b.size == 64 * MiB
        b.pwrite(MiB, b"q" * 4096)
        b.flush()
        assert b.pread(MiB, 4096) == b"q" * 4096
    finally:
        b.close()


@pytest.mark.root
def test_device_with_filesystem_is_refused_unless_forced(loop_device):
    device, _ = loop_device
    run(["mkfs.ext4", "-q", "-F", device])
    with pytest.raises(DeviceRefusedError) as info:
        BlockDeviceBackend(device)
    assert "ext4" in str(info.value)
    assert info.value.fields["signature"] == ["ext4"]
    forced = BlockDeviceBackend(device, force=True)
    forced.close()


@pytest.mark.root
def test_device_with_partition_table_is_refused(loop_device):
    device, _ = loop_device
    _write_mbr(device)
    with pytest.raises(DeviceRefusedError) as info:
        BlockDeviceBackend(device)
    kinds = {s.kind for s in blkid.signatures(device)}
    assert "partition-table" in kinds
    assert "dos" in str(info.value).lower()


@pytest.mark.root
def test_device_with_raid_signature_is_refused(loop_device):
    device, image = loop_device
    _write_md_superblock(device)
    found = blkid.signatures(device)
    assert any(s.kind == "raid" for s in found), found
    with pytest.raises(DeviceRefusedError, match="linux_raid_member"):
        BlockDeviceBackend(device)


@pytest.mark.root
def test_device_refusal_leaves_device_untouched(loop_device):
    device, _ = loop_device
    run(["mkfs.ext4", "-q", "-F", device])
    before = open(device, "rb").read(MiB)
    with pytest.raises(DeviceRefusedError):
        BlockDeviceBackend(device)
    assert open(device, "rb").read(MiB) == before
    assert stat.S_ISBLK(os.stat(device).st_mode)
