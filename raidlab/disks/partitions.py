"""Array members that are partitions of modelled drives, written as the SA-RAID paper writes them.

McCormick §3.1 builds every array from 128 MB partitions of four drives, named by drive
letter and partition number: "b8-c1-d1-e1 represents a configuration with disk b utilizing
the slowest partition and the remaining disks using the fastest partition". raidlab reads the
same notation (`raidlab create --partitions b8-c1-d1-e1`, a scenario's `partitions`):

* `b8-c1-d1-e1`: member k is the partition named by the k-th item; items with the same
  letter are partitions of the same drive (they share its arm and queue), different letters
  are different drives, numbered in the order they first appear;
* `8-1-1-1` (or `8,1,1,1`): the same without letters, every member on a drive of its own.

Where partition K lies is the drive model's partition table in the catalog (`partitions`:
the partition size and the zone of each partition, with the assumption behind it):
partition K starts at the first MiB boundary of its zone, so a partition keeps its zone's
transfer rate and the seek distances of its place on the drive. The drives themselves are
whole drives (their images are the model's full capacity, sparse), so the timing model's
full-span geometry puts every byte of a partition where it is on the drive.

Pure: parsing and placement only; the callers (raidlab.export.serve for live labs,
raidlab.runners.virtual for virtual time) make the drives and carve the partitions with
EmulatedDisk.partition.
"""

from __future__ import annotations

import dataclasses
import re

from raidlab.disks import catalog
from raidlab.disks.geometry import DriveSpec, Geometry
from raidlab.errors import UsageError

MiB = 1 << 20
_ITEM = re.compile(r"^([a-z]?)([0-9]+)$")


@dataclasses.dataclass(frozen=True)
class MemberPartition:
    """Member `member` is partition `number` of drive `drive` (0-based index into the
    layout's drives), bytes [start, start + size) of that drive, in zone `zone` (1-based)."""

    member: int
    drive: int
    drive_label: str
    number: int
    start: int
    size: int
    zone: int

    @property
    def label(self) -> str:
        return f"{self.drive_label}{self.number}"


@dataclasses.dataclass(frozen=True)
class PartitionLayout:
    """The drives to make and where each member lies on them."""

    text: str
    model: str
    drive_bytes: int
    drive_labels: tuple[str, ...]
    members: tuple[MemberPartition, ...]

    @property
    def member_bytes(self) -> int:
        return self.members[0].size

    def describe(self) -> list[dict]:
        return [{"member": m.member, "partition": m.label, "drive": m.drive_label, "zone": m.zone,
                 "start": m.start, "size": m.size} for m in self.members]


def parse(text: str) -> list[tuple[str | None, int]]:
    """[(drive letter or None, partition number), ...] of a partition list (see the module doc)."""
    raw = str(text).strip().lower()
    items = [item.strip() for item in re.split(r"[-,\s]+", raw) if item.strip()]
    if not items:
        raise UsageError(f"partition list {text!r} is empty", hint="write it like b8-c1-d1-e1 or 8-1-1-1")
    parsed: list[tuple[str | None, int]] = []
    for item in items:
        match = _ITEM.match(item)
        if match is None:
            raise UsageError(f"partition list {text!r}: {item!r} is not a partition",
                             hint="each item is an optional drive letter and a partition number, like b8")
        parsed.append((match.group(1) or None, int(match.group(2))))
    lettered = [letter is not None for letter, _ in parsed]
    if any(lettered) and not all(lettered):
        raise UsageError(f"partition list {text!r} mixes items with and without drive letters",
                         hint="give every item a letter (b8-c1) or none (8-1)")
    return parsed


def zone_starts(spec: DriveSpec) -> list[int]:
    """The first byte of every zone of a whole drive of `spec` (zone 1 first), as the timing
    model maps a whole-drive image."""
    return [zone.byte_start for zone in Geometry(spec, spec.media_capacity_bytes).zones]


def table(model: str) -> list[tuple[int, int, int]]:
    """The catalog's partition table of `model`: [(start, size, zone), ...] for partitions
    1, 2, ... (UsageError for a model without one)."""
    spec = catalog.get(model)
    if not spec.partition_zones:
        having = [m.name for m in catalog.all_models() if m.partition_zones]
        raise UsageError(f"drive model {model} has no partition table in the catalog",
                         hint=f"models with one: {', '.join(having) or 'none'}")
    starts = zone_starts(spec)
    out = []
    for number, zone in enumerate(spec.partition_zones, start=1):
        start = max(-(-starts[zone - 1] // MiB) * MiB, MiB)
        end_of_zone = starts[zone] if zone < len(starts) else spec.media_capacity_bytes
        if start + spec.partition_bytes > end_of_zone:
            raise catalog.CatalogError(f"{model}: partition {number} does not fit in zone {zone}")
        out.append((start, spec.partition_bytes, zone))
    return out


def layout(text: str, model: str, disks: int | None = None) -> PartitionLayout:
    """Where the members of partition list `text` lie on drives of `model`; `disks`, if
    given, must equal the number of members."""
    parsed = parse(text)
    if disks is not None and disks != len(parsed):
        raise UsageError(f"partition list {text!r} names {len(parsed)} members, --disks is {disks}",
                         hint="give one partition per member")
    if "," in str(model):
        raise UsageError("members from partitions take one drive model for every drive",
                         hint=f"give --disk-model a single model, not {model!r}")
    parts = table(model)
    spec = catalog.get(model)
    labels: list[str] = []
    members = []
    for member, (letter, number) in enumerate(parsed):
        if not 1 <= number <= len(parts):
            raise UsageError(f"partition list {text!r}: {model} has partitions 1..{len(parts)}, not {number}")
        label = letter if letter is not None else f"drive{member}"
        if label not in labels:
            labels.append(label)
        start, size, zone = parts[number - 1]
        members.append(MemberPartition(member, labels.index(label), letter or "", number, start, size, zone))
    seen = set()
    for m in members:
        if (m.drive, m.number) in seen:
            raise UsageError(f"partition list {text!r} uses partition {m.label or m.number} twice",
                             hint="each member needs a partition of its own")
        seen.add((m.drive, m.number))
    return PartitionLayout(str(text), model, spec.media_capacity_bytes // 512 * 512, tuple(labels), tuple(members))
