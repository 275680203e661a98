"""Pure tests: md 1.2 superblock decoding (built here byte by byte from struct mdp_superblock_1),
md's checksum, md layout numbers -> engine layouts, slot ordering; mdadm command lines and
/proc/mdstat progress parsing."""

from __future__ import annotations

import struct
import uuid

import pytest

from raidlab.baselines import mdadm
from raidlab.baselines.md_superblock import (MD_MAGIC, engine_arch, engine_layout_params, order_members,
                                             parse_superblock, sb1_checksum)
from raidlab.errors import UsageError

SET_UUID = uuid.UUID("383c2166-4820-3067-c7b9-74c0d53d93c1")


def make_sb(*, level=5, layout=2, size=126976, chunk=1024, raid_disks=3, data_offset=2048, dev_number=0,
            roles=(0, 1, 2), set_uuid=SET_UUID, feature_map=0, corrupt=False) -> bytes:
    max_dev = len(roles)
    raw = bytearray(256 + 2 * max_dev)
    struct.pack_into("<III", raw, 0, MD_MAGIC, 1, feature_map)
    raw[16:32] = set_uuid.bytes
    raw[32:42] = b"raidlab:0\0"
    struct.pack_into("<iIQ", raw, 72, level, layout, size)
    struct.pack_into("<II", raw, 88, chunk, raid_disks)
    struct.pack_into("<QQQ", raw, 128, data_offset, size + 4096, 8)
    struct.pack_into("<I", raw, 160, dev_number)
    struct.pack_into("<Q", raw, 200, 18)
    struct.pack_into("<I", raw, 220, max_dev)
    for i, role in enumerate(roles):
        struct.pack_into("<H", raw, 256 + 2 * i, role)
    struct.pack_into("<I", raw, 216, sb1_checksum(bytes(raw), max_dev) ^ (1 if corrupt else 0))
    return bytes(raw)


def test_checksum_is_md_calc_sb_1_csum():
    # 64-bit sum of the 32-bit words folded once: a hand-made case with a carry.
    raw = bytearray(258)
    struct.pack_into("<II", raw, 0, 0xFFFFFFFF, 0x00000002)
    struct.pack_into("<H", raw, 256, 7)  # odd tail (max_dev = 1): added as 16 bits
    assert sb1_checksum(bytes(raw), 1) == ((0x100000001 + 7) & 0xFFFFFFFF) + 1


def test_parse_the_fields_the_engine_needs():
    sb = parse_superblock(make_sb(dev_number=2, roles=(0, 1, 0xFFFF, 2), raid_disks=3))
    assert sb.set_uuid == str(SET_UUID) and sb.set_name == "raidlab:0"
    assert (sb.level, sb.layout, sb.raid_disks, sb.chunk_bytes) == (5, 2, 3, 512 * 1024)
    assert sb.data_offset == 2048 * 512 and sb.size_sectors == 126976
    assert sb.role == 0xFFFF  # device 2's entry in dev_roles
    assert sb.events == 18


@pytest.mark.parametrize("mutation,words", [
    (dict(corrupt=True), "checksum"),
    (dict(feature_map=4), "reshape"),
])
def test_refuses_damaged_or_reshaping(mutation, words):
    with pytest.raises(UsageError, match=words):
        parse_superblock(make_sb(**mutation))


def test_refuses_a_non_md_block():
    with pytest.raises(UsageError, match="no md superblock"):
        parse_superblock(bytes(512))


@pytest.mark.parametrize("level,layout,expect", [
    (0, 0, ("raid0", {})), (1, 0, ("raid1", {})), (5, 2, ("raid5", {"algorithm": "left-symmetric"})),
    (5, 0, ("raid5", {"algorithm": "left-asymmetric"})), (5, 1, ("raid5", {"algorithm": "right-asymmetric"})),
    (5, 3, ("raid5", {"algorithm": "right-symmetric"})), (5, 4, ("raid5", {"algorithm": "parity-first"})),
    (5, 5, ("raid5", {"algorithm": "parity-last"})), (4, 0, ("raid5", {"algorithm": "parity-last"})),
    (10, 0x102, ("raid10", {"layout": "n2"})), (10, 0x201, ("raid10", {"layout": "f2"})),
    (10, 0x10201, ("raid10", {"layout": "o2"})),
])
def test_md_layout_numbers_to_engine_layouts(level, layout, expect):
    assert engine_arch(parse_superblock(make_sb(level=level, layout=layout))) == expect


@pytest.mark.parametrize("level,layout", [(5, 16), (6, 2), (10, 0x20102)])
def test_layouts_the_engine_cannot_map_are_refused(level, layout):
    with pytest.raises(UsageError):
        engine_arch(parse_superblock(make_sb(level=level, layout=layout)))


def test_layout_params_take_md_offset_and_used_size():
    arch, params = engine_layout_params(parse_superblock(make_sb(size=126976 + 100)), 64 << 20)
    assert arch == "raid5" and params["data_offset"] == 1 << 20
    assert params["member_data_size"] == 126976 * 512  # rounded down to whole 512K chunks
    assert params["chunk_bytes"] == 512 << 10


def test_members_ordered_by_slot_and_mixtures_refused():
    supers = [parse_superblock(make_sb(dev_number=d, roles=(0, 1, 2, 1))) for d in (3, 0, 2)]
    # device 3 has role 1, device 0 role 0, device 2 role 2
    assert order_members(supers) == [1, 0, 2]
    other = parse_superblock(make_sb(set_uuid=uuid.uuid4()))
    with pytest.raises(UsageError, match="different md arrays"):
        order_members([supers[0], other])
    with pytest.raises(UsageError, match="slot"):
        order_members([supers[1], supers[1]])


# ---- mdadm command lines and /proc/mdstat ----

def test_create_argv_leaves_defaults_to_mdadm():
    members = ["/dev/vda", "/dev/vdb", "/dev/vdc"]
    assert mdadm.create_argv("md-raid5", "/dev/md0", members, 512 * 1024, {}) == [
        "mdadm", "--create", "/dev/md0", "--run", "--level=5", "--raid-devices=3", *members]
    argv = mdadm.create_argv("md-raid10", "/dev/md0", members[:2], 64 * 1024, {"layout": "f2", "assume_clean": True})
    assert "--chunk=64K" in argv and "--layout=f2" in argv and "--assume-clean" in argv
    assert not any(a.startswith("--chunk") for a in mdadm.create_argv("md-raid1", "/dev/md0", members[:2], 4096, {}))


MDSTAT = """Personalities : [raid6] [raid5] [raid4] [raid10]
md1 : active raid10 vdd[1] vdc[0]
      32768 blocks super 1.2 2 near-copies [2/2] [UU]
      [=====>...............]  resync = 27.6% (9088/32768) finish=0.3min speed=9088K/sec

md0 : active raid5 vdc[3] vdb[1] vda[0]
      126976 blocks super 1.2 level 5, 512k chunk, algorithm 2 [3/2] [UU_]
        resync=DELAYED

md2 : active raid0 vdf[1] vde[0]
      65536 blocks super 1.2 512k chunks

unused devices: <none>
"""


def test_mdstat_progress():
    assert mdadm.mdstat_progress(MDSTAT, "md1") == {"action": "resync", "percent": 27.6, "finish": "0.3min",
                                                    "speed": "9088K/sec"}
    assert mdadm.mdstat_progress(MDSTAT, "md0")["action"] == "resync"
    assert mdadm.mdstat_progress(MDSTAT, "md2") is None
    assert mdadm.mdstat_progress(MDSTAT, "md9") is None


def test_detail_fields():
    text = "/dev/md0:\n        Raid Level : raid5\n             State : clean \n"
    assert mdadm.detail_fields(text) == {"Raid Level": "raid5", "State": "clean"}
