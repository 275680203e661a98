"""Member superblocks: framing, torn slots, and the assembly checks."""

from __future__ import annotations

import dataclasses

import pytest

from raidlab.engine import metadata as md


def _array(n=3, generation=1):
    base = md.Superblock(
        array_uuid=md.new_array_uuid(), name="a", arch="raid5", n_members=n, member_index=0,
        member_size=1 << 30, data_offset=md.DEFAULT_DATA_OFFSET,
        geometry={"chunk": 65536}, generation=generation,
    )
    return [base.for_member(i) for i in range(n)]


def test_roundtrip_and_torn_slot():
    sb = _array()[1]
    raw = md.encode_slot(sb)
    assert len(raw) == md.SLOT_SIZE
    assert md.decode_slot(raw) == sb
    torn = bytearray(raw)
    torn[40] ^= 0xFF
    assert md.decode_slot(bytes(torn)) is None
    assert md.decode_slot(bytes(md.SLOT_SIZE)) is None


def test_newest_slot_wins_and_survives_a_torn_newer_slot():
    old = _array()[0]
    new = dataclasses.replace(old, generation=old.generation + 1, state="clean")
    a, b = md.encode_slot(old), md.encode_slot(new)
    assert md.newest(a, b) == new
    assert md.newest(b, a) == new
    assert md.slot_for_generation(old.generation) != md.slot_for_generation(new.generation)
    torn_b = b[:100] + bytes(len(b) - 100)
    assert md.newest(a, torn_b) == old


def test_assembly_accepts_members_in_order():
    members = _array(4)
    assert md.check_assembly(members).array_uuid == members[0].array_uuid


def test_assembly_refuses_out_of_order():
    members = _array(3)
    with pytest.raises(md.MetadataError, match="found in position 0"):
        md.check_assembly([members[1], members[0], members[2]])


def test_assembly_refuses_foreign_member():
    ours, theirs = _array(3), _array(3)
    with pytest.raises(md.MetadataError, match="another array"):
        md.check_assembly([ours[0], theirs[1], ours[2]])


def test_assembly_refuses_missing_and_blank():
    members = _array(3)
    with pytest.raises(md.MetadataError, match="has 3 members, 2 given"):
        md.check_assembly(members[:2])
    with pytest.raises(md.MetadataError, match="no valid raidlab superblock"):
        md.check_assembly([members[0], None, members[2]])


def test_stale_member_refused_unless_recorded_failed():
    members = _array(3)
    bumped = [dataclasses.replace(m, generation=2) for m in members]
    with pytest.raises(md.MetadataError, match="stale"):
        md.check_assembly([bumped[0], members[1], bumped[2]])
    failed = [dataclasses.replace(m, failed_members=[1]) for m in bumped]
    assert md.check_assembly([failed[0], members[1], failed[2]]).failed_members == [1]


def test_oversized_metadata_is_refused_clearly():
    sb = dataclasses.replace(_array()[0], arch_state={"blob": "x" * 5000})
    with pytest.raises(md.MetadataError, match="does not fit"):
        md.encode_slot(sb)
