"""md's version-1.2 superblock, read from a member image, and the engine layout it describes.

Why: md is the engine's oracle. md writes a known pattern through a real array in
the lab VM; the engine then maps the *same member images* with its own layouts and must read
identical bytes. For that the engine needs what md decided: where the data starts on each
member (data_offset, chosen by mdadm from the device size), the chunk, level, layout, the
used size per member and each image's slot in the array. This module reads exactly that.

Format: struct mdp_superblock_1 in Linux include/uapi/linux/raid/md_p.h; version 1.2 puts it
4 KiB from the start of the member (super_offset = 8 sectors). Little-endian. The checksum is
md's calc_sb_1_csum (drivers/md/md.c): the 32-bit little-endian words of the first
256 + 2*max_dev bytes with sb_csum zeroed, summed in 64 bits, folded to 32. Pure functions;
the only I/O is read_superblock(path).

Departures: only what the oracle needs is decoded (no bitmap, bad-block log, reshape or
journal fields; a superblock in mid-reshape is refused). raid10's "use far sets" bit is
refused because the engine's raid10 always uses the whole array as one far set.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import uuid

from raidlab.engine.layouts.raid5 import ALGORITHMS as RAID5_ALGORITHMS
from raidlab.errors import UsageError

MD_MAGIC = 0xA92B4EFC
SUPERBLOCK_1_2_OFFSET = 4096
SECTOR = 512
ROLE_SPARE = 0xFFFF
ROLE_FAULTY = 0xFFFE
FEATURE_RESHAPE_ACTIVE = 4
RAID5_LEFT_SYMMETRIC = RAID5_ALGORITHMS["left-symmetric"]  # md's default
RAID10_OFFSET = 0x10000
RAID10_FAR_SETS = 0x20000


@dataclasses.dataclass(frozen=True)
class MdSuperblock:
    set_uuid: str
    set_name: str
    level: int
    layout: int
    size_sectors: int          # sectors of each member the array uses (after data_offset)
    chunk_sectors: int
    raid_disks: int
    data_offset_sectors: int
    data_size_sectors: int
    super_offset_sectors: int
    dev_number: int
    events: int
    feature_map: int
    role: int                  # this member's slot (0 .. raid_disks-1), or ROLE_SPARE/FAULTY

    @property
    def data_offset(self) -> int:
        return self.data_offset_sectors * SECTOR

    @property
    def chunk_bytes(self) -> int:
        return self.chunk_sectors * SECTOR


def sb1_checksum(raw: bytes, max_dev: int) -> int:
    """md's calc_sb_1_csum over `raw` (the superblock bytes), with sb_csum taken as zero."""
    size = 256 + 2 * max_dev
    data = bytearray(raw[:size])
    data[216:220] = b"\0\0\0\0"
    total = sum(struct.unpack_from(f"<{size // 4}I", data))
    if size % 4 == 2:
        total += struct.unpack_from("<H", data, size - 2)[0]
    return ((total & 0xFFFFFFFF) + (total >> 32)) & 0xFFFFFFFF


def parse_superblock(raw: bytes) -> MdSuperblock:
    """Decode a version-1 superblock (the bytes at its super_offset). UsageError if it is not one."""
    if len(raw) < 256:
        raise UsageError("md superblock: fewer than 256 bytes")
    magic, major, feature_map = struct.unpack_from("<III", raw, 0)
    if magic != MD_MAGIC:
        raise UsageError(f"no md superblock (magic {magic:#010x}, want {MD_MAGIC:#010x})")
    if major != 1:
        raise UsageError(f"md superblock version {major} is not 1.x")
    set_uuid = str(uuid.UUID(bytes=raw[16:32]))
    set_name = raw[32:64].split(b"\0", 1)[0].decode(errors="replace")
    level, layout, size = struct.unpack_from("<iIQ", raw, 72)
    chunk, raid_disks = struct.unpack_from("<II", raw, 88)
    data_offset, data_size, super_offset = struct.unpack_from("<QQQ", raw, 128)
    (dev_number,) = struct.unpack_from("<I", raw, 160)
    (events,) = struct.unpack_from("<Q", raw, 200)
    csum, max_dev = struct.unpack_from("<II", raw, 216)
    if len(raw) < 256 + 2 * max_dev:
        raise UsageError(f"md superblock: max_dev {max_dev} runs past the {len(raw)} bytes read")
    if sb1_checksum(raw, max_dev) != csum:
        raise UsageError("md superblock checksum mismatch (a damaged or half-written superblock)")
    if feature_map & FEATURE_RESHAPE_ACTIVE:
        raise UsageError("md superblock records a reshape in progress; raidlab cannot map it")
    role = struct.unpack_from("<H", raw, 256 + 2 * dev_number)[0] if dev_number < max_dev else ROLE_SPARE
    return MdSuperblock(set_uuid, set_name, level, layout, size, chunk, raid_disks, data_offset, data_size,
                        super_offset, dev_number, events, feature_map, role)


def read_superblock(path: str | os.PathLike) -> MdSuperblock:
    """The md 1.2 superblock of a member image (or device)."""
    with open(path, "rb") as f:
        f.seek(SUPERBLOCK_1_2_OFFSET)
        raw = f.read(4096)
    sb = parse_superblock(raw)
    if sb.super_offset_sectors * SECTOR != SUPERBLOCK_1_2_OFFSET:
        raise UsageError(f"{path}: md superblock says it lives at sector {sb.super_offset_sectors}, not 8 (1.2)")
    return sb


def engine_arch(sb: MdSuperblock) -> tuple[str, dict]:
    """(engine layout name, its options) for md's level and layout number."""
    if sb.level == 0:
        return "raid0", {}
    if sb.level == 1:
        return "raid1", {}
    if sb.level == 4:  # md's RAID 4: the parity on the last member (ALGORITHM_PARITY_N)
        return "raid5", {"algorithm": "parity-last"}
    if sb.level == 5:
        names = {number: name for name, number in RAID5_ALGORITHMS.items()}
        if sb.layout not in names:
            raise UsageError(f"md raid5 layout {sb.layout} is none of md's RAID 5 layouts the engine lays out",
                             hint=", ".join(f"{number} {name}" for number, name in sorted(names.items())))
        return "raid5", {"algorithm": names[sb.layout]}
    if sb.level == 10:
        if sb.layout & RAID10_FAR_SETS:
            raise UsageError("md raid10 with 'far sets' is not what the engine's raid10 lays out")
        near, far = sb.layout & 0xFF, (sb.layout >> 8) & 0xFF
        if sb.layout & RAID10_OFFSET:
            return "raid10", {"layout": f"o{far}"}
        if far > 1:
            return "raid10", {"layout": f"f{far}"}
        return "raid10", {"layout": f"n{near}"}
    raise UsageError(f"md level {sb.level} has no engine layout")


def order_members(supers: list[MdSuperblock]) -> list[int]:
    """Indices into `supers` by array slot (role). Refuses mixed arrays, missing or doubled slots."""
    if not supers:
        raise UsageError("no md members given")
    if len({sb.set_uuid for sb in supers}) != 1:
        raise UsageError("the images belong to different md arrays (set UUIDs differ)")
    by_role: dict[int, int] = {}
    for i, sb in enumerate(supers):
        if sb.role >= sb.raid_disks:
            raise UsageError(f"member {i} is a spare or faulty (role {sb.role:#x}), not an active slot")
        if sb.role in by_role:
            raise UsageError(f"two images claim slot {sb.role} of the md array")
        by_role[sb.role] = i
    return [by_role[r] for r in sorted(by_role)]


def engine_layout_params(sb: MdSuperblock, disk_size: int) -> tuple[str, dict]:
    """(arch, create_layout params) mapping md's members with the engine: the data starts at
    md's data_offset and each member contributes md's used size (rounded to whole chunks,
    as md's personalities do)."""
    arch, options = engine_arch(sb)
    chunk = sb.chunk_bytes if sb.level != 1 else 64 * 1024
    used = sb.size_sectors * SECTOR if sb.size_sectors else sb.data_size_sectors * SECTOR
    if sb.level != 1:
        used -= used % chunk
    return arch, dict(n_disks=sb.raid_disks, disk_size=disk_size, chunk_bytes=chunk,
                      data_offset=sb.data_offset, member_data_size=used, **options)
