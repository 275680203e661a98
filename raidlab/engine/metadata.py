"""Persistent array metadata on every member ("superblock"), and assembly checks.

Why: `raidlab destroy NAME --keep-images` followed by `raidlab assemble NAME` must bring an
array back from its member images alone, and must refuse a member that is out of order,
belongs to another array, or is stale (it missed writes while failed). This mirrors what md's
1.2 superblock does (array UUID, device role, event count), in a format a student can read:
a JSON document in a checksummed frame.

Layout on each member (bytes):

    [0, 4096)          slot A  \\  two slots, written alternately; the valid one with the
    [4096, 8192)       slot B  /   highest generation wins (a torn write loses one slot only)
    [8192, DATA_OFFSET) reserved for architecture state (SA-RAID's virtual device array,
                        RAID-x's pending-image buffer, logs), described by the superblock
    [DATA_OFFSET, ...)  the layout's data area

Frame of one slot: b"RAIDLAB\\x01" | u32 length | u32 crc32(payload) | payload (UTF-8 JSON) |
zero padding. The generation increases on every metadata change (create, fail, replace, clean
shutdown), like md's event counter.
"""

from __future__ import annotations

import dataclasses
import json
import struct
import uuid
import zlib
from typing import Any

from raidlab.errors import RaidlabError

MAGIC = b"RAIDLAB\x01"
SLOT_SIZE = 4096
SLOTS = (0, SLOT_SIZE)
HEADER = struct.Struct("<8sII")
FORMAT_VERSION = 1
# Default start of the data area on each member: 1 MiB, as md 1.2 leaves room before data.
DEFAULT_DATA_OFFSET = 1 << 20


class MetadataError(RaidlabError):
    """Members that cannot be assembled into one array. Fields: member, reason."""


@dataclasses.dataclass
class Superblock:
    """What every member records about the array and itself."""

    array_uuid: str
    name: str
    arch: str
    n_members: int
    member_index: int
    member_size: int
    data_offset: int
    geometry: dict[str, Any]
    generation: int = 1
    state: str = "active"  # active | clean (orderly shutdown)
    failed_members: list[int] = dataclasses.field(default_factory=list)
    arch_state: dict[str, Any] = dataclasses.field(default_factory=dict)
    member_uuid: str = dataclasses.field(default_factory=lambda: str(uuid.uuid4()))
    format_version: int = FORMAT_VERSION

    def for_member(self, index: int, member_uuid: str | None = None) -> "Superblock":
        """The same array record, as member `index` writes it."""
        return dataclasses.replace(
            self, member_index=index, member_uuid=member_uuid or str(uuid.uuid4())
        )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> "Superblock":
        """The superblock in a decoded slot document. Raises ValueError unless it has this
        shape (a document whose checksum holds may still be another tool's or a newer
        format's, and assembly must be able to compare generations and uuids)."""
        if not isinstance(doc, dict):
            raise ValueError("a superblock is a JSON object")
        known = {f.name for f in dataclasses.fields(cls)}
        sb = cls(**{k: v for k, v in doc.items() if k in known})
        for name, kind in _FIELD_TYPES.items():
            value = getattr(sb, name)
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise ValueError(f"superblock field {name} is not a {kind.__name__}")
        if not all(isinstance(m, int) and not isinstance(m, bool) for m in sb.failed_members):
            raise ValueError("superblock field failed_members is not a list of member indices")
        return sb


# The type of every superblock field (from_json checks them).
_FIELD_TYPES: dict[str, type] = {
    "array_uuid": str, "name": str, "arch": str, "n_members": int, "member_index": int, "member_size": int,
    "data_offset": int, "geometry": dict, "generation": int, "state": str, "failed_members": list,
    "arch_state": dict, "member_uuid": str, "format_version": int,
}


def new_array_uuid() -> str:
    return str(uuid.uuid4())


def encode_slot(sb: Superblock) -> bytes:
    """One 4 KiB slot holding `sb`."""
    payload = json.dumps(sb.to_json(), sort_keys=True, separators=(",", ":")).encode()
    if HEADER.size + len(payload) > SLOT_SIZE:
        raise MetadataError(
            f"array metadata of {len(payload)} bytes does not fit a {SLOT_SIZE}-byte slot",
            hint="keep large architecture state in the reserved area, not in the superblock",
        )
    frame = HEADER.pack(MAGIC, len(payload), zlib.crc32(payload)) + payload
    return frame + bytes(SLOT_SIZE - len(frame))


def decode_slot(raw: bytes) -> Superblock | None:
    """The superblock in a slot, or None when the slot is empty, foreign or torn."""
    if len(raw) < HEADER.size:
        return None
    magic, length, crc = HEADER.unpack_from(raw)
    if magic != MAGIC or HEADER.size + length > len(raw):
        return None
    payload = raw[HEADER.size : HEADER.size + length]
    if zlib.crc32(payload) != crc:
        return None
    try:
        return Superblock.from_json(json.loads(payload))
    except (ValueError, TypeError, RecursionError):  # RecursionError: JSON nested too deep
        return None


def newest(slot_a: bytes, slot_b: bytes) -> Superblock | None:
    """The valid slot with the highest generation."""
    candidates = [sb for sb in (decode_slot(slot_a), decode_slot(slot_b)) if sb is not None]
    if not candidates:
        return None
    return max(candidates, key=lambda sb: sb.generation)


def slot_for_generation(generation: int) -> int:
    """Byte offset of the slot that generation `generation` is written to (alternating)."""
    return SLOTS[generation % 2]


async def read_superblock(member) -> Superblock | None:
    """Read both slots of a BlockTarget member and return the newest valid superblock.

    The two slots of a member always belong to one array (a new array's first superblock
    clears the other slot, write_first_superblock), so valid slots of two arrays are
    damage or a slot copied from elsewhere, and which one is the member's cannot be told
    (a single-member architecture has no other member to ask): MetadataError."""
    raw = await member.read(0, 2 * SLOT_SIZE)
    slots = [sb for sb in (decode_slot(raw[:SLOT_SIZE]), decode_slot(raw[SLOT_SIZE:])) if sb is not None]
    if len({sb.array_uuid for sb in slots}) > 1:
        name = getattr(member, "name", "a member")
        a, b = slots
        raise MetadataError(f"{name} holds superblocks of two arrays ({a.name}, uuid {a.array_uuid[:8]}; "
                            f"{b.name}, uuid {b.array_uuid[:8]}) in its two slots",
                            hint="one slot is damaged or was copied from another disk: it cannot be assembled",
                            member=name)
    return newest(raw[:SLOT_SIZE], raw[SLOT_SIZE:])


async def write_superblock(member, sb: Superblock) -> None:
    """Write `sb` into its generation's slot, durably (FUA), leaving the other slot intact."""
    await member.write(slot_for_generation(sb.generation), encode_slot(sb), fua=True)


async def write_first_superblock(member, sb: Superblock) -> None:
    """A new array's first superblock: written into its generation's slot with the other slot
    cleared, in one durable (FUA) write. A member that held another array (a cluster's disk
    reused by the next array) would otherwise keep that array's superblock in the other slot,
    with a generation that can be higher, and assembly would pick it."""
    slots = [bytes(SLOT_SIZE), bytes(SLOT_SIZE)]
    slots[SLOTS.index(slot_for_generation(sb.generation))] = encode_slot(sb)
    await member.write(0, b"".join(slots), fua=True)


def check_assembly(found: list[Superblock | None], *, labels: list[str] | None = None) -> Superblock:
    """Decide whether these members (in the order given) form one array.

    Returns the authoritative superblock (highest generation). Raises MetadataError naming
    the offending member when one has no superblock, belongs to another array, sits in the
    wrong position, or is missing. A member whose generation is behind the others is
    allowed only if the newest superblock lists it as failed (it is then rebuilt, not used).
    """
    labels = labels or [f"member {i}" for i in range(len(found))]
    present = [(i, sb) for i, sb in enumerate(found) if sb is not None]
    for i, sb in enumerate(found):
        if sb is None:
            raise MetadataError(
                f"{labels[i]} carries no valid raidlab superblock",
                hint="is it the right image? (a blank, foreign or damaged disk cannot be assembled)",
                member=i,
            )
    if not present:
        raise MetadataError("no members given")
    authority = max((sb for _, sb in present), key=lambda sb: sb.generation)
    for i, sb in present:
        if sb.array_uuid != authority.array_uuid:
            raise MetadataError(
                f"{labels[i]} belongs to another array ({sb.name}, uuid {sb.array_uuid[:8]}) "
                f"than the others ({authority.name}, uuid {authority.array_uuid[:8]})",
                hint="give the members of one array only",
                member=i,
            )
    if len(found) != authority.n_members:
        raise MetadataError(
            f"array {authority.name} has {authority.n_members} members, {len(found)} given",
            member=None,
        )
    for i, sb in present:
        if sb.member_index != i:
            raise MetadataError(
                f"{labels[i]} is member {sb.member_index} of array {authority.name}, "
                f"found in position {i}",
                hint="give the members in their original order",
                member=i,
            )
        if sb.generation < authority.generation and i not in authority.failed_members:
            raise MetadataError(
                f"{labels[i]} is stale (generation {sb.generation}, array at "
                f"{authority.generation}) but not recorded as failed",
                hint="it missed writes; replace it with `raidlab replace`",
                member=i,
            )
    return authority
