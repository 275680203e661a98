"""Create and assemble engine architectures: the architecture registry.

Why a module of its own: `raidlab create`, `raidlab assemble`, the trace replayer and the
tests all turn (architecture name, members, options) into a served Array the same way, and
the member superblocks must always be written and checked by the same code.

Creation: validate the geometry (the layout raises UsageError for too few disks, a chunk
that does not divide, ...), refuse members of different sizes, run the architecture's
creation-time work (SA-RAID's bandwidth probe), write a superblock on every member (FUSE
writes with FUA), and return the Array. Assembly: read every member's superblock, check
that they form one array in order (raidlab.engine.metadata.check_assembly), rebuild the
layout from the stored geometry — never re-measure: the SA-RAID mapping "remains the same
for the life of the device" (McCormick §2) — and return the Array with the recorded failure
set.

The SA-RAID probe (McCormick §2: "test each disks' bandwidth by writing and then reading a
large amount of data to/from each disk and timing the operations"; §4 "a write and then
read on the raw device"): each member in turn gets a sequential write of `probe_bytes` in
1 MiB requests, a flush, and a sequential read of the same range; bandwidth = 2 x bytes /
elapsed. The probe runs in the middle of the member's data area by default, where a file
system will put most of its data; `--probe-at start` measures the first bytes instead. Time
comes from trio.current_time(), so the probe measures the timing model under both clocks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import trio

from raidlab.blockdev import SECTOR
from raidlab.engine import metadata
from raidlab.engine.array import Array
from raidlab.engine.layouts import DEFAULT_CHUNK, create_layout, layout_from_geometry, layout_names
from raidlab.errors import UsageError

MiB = 1 << 20
SA_ARCHS = ("sa1", "sa2", "sa3")
DEFAULT_PROBE_BYTES = 8 * MiB


def engine_archs() -> list[str]:
    """Architecture ids the engine builds (md-* baselines are built by mdadm instead)."""
    return layout_names()


@dataclasses.dataclass
class ProbeResult:
    member: int
    bytes: int
    write_seconds: float
    read_seconds: float

    @property
    def bandwidth(self) -> float:
        """Bytes per second; infinite for an untimed member (disk model `none`)."""
        elapsed = self.write_seconds + self.read_seconds
        return 2 * self.bytes / elapsed if elapsed > 0 else float("inf")


async def probe_bandwidth(member, offset: int, nbytes: int, index: int = 0) -> ProbeResult:
    """Write then read `nbytes` sequentially at `offset` of `member`, timed (SA-RAID §2)."""
    step = MiB
    pattern = bytes(range(256)) * (step // 256)
    start = trio.current_time()
    pos = offset
    while pos < offset + nbytes:
        n = min(step, offset + nbytes - pos)
        await member.write(pos, pattern[:n])
        pos += n
    await member.flush()
    written = trio.current_time()
    pos = offset
    while pos < offset + nbytes:
        n = min(step, offset + nbytes - pos)
        await member.read(pos, n)
        pos += n
    done = trio.current_time()
    return ProbeResult(index, nbytes, written - start, done - written)


def check_members(members: Sequence[Any]) -> int:
    """All members must have one size; return it."""
    sizes = {m.size for m in members}
    if len(sizes) != 1:
        detail = ", ".join(f"{getattr(m, 'name', i)}={m.size}" for i, m in enumerate(members))
        raise UsageError(f"members differ in size ({detail})", hint="use members of one size")
    return sizes.pop()


async def create_array(
    name: str,
    arch: str,
    members: Sequence[Any],
    *,
    chunk: int = DEFAULT_CHUNK,
    options: dict[str, Any] | None = None,
    data_offset: int = metadata.DEFAULT_DATA_OFFSET,
    probe_bytes: int = DEFAULT_PROBE_BYTES,
    probe_at: str = "middle",
    status: Callable[[str], None] | None = None,
    nursery: trio.Nursery | None = None,
    image_delay: float | None = None,
) -> tuple[Array, "MetadataKeeper"]:
    """Build architecture `arch` over `members`, write their superblocks, return the Array."""
    if arch not in engine_archs():
        raise UsageError(f"unknown architecture {arch!r}", hint=f"choose one of: {', '.join(engine_archs())}")
    options = dict(options or {})
    member_size = check_members(members)
    params: dict[str, Any] = dict(n_disks=len(members), disk_size=member_size, chunk_bytes=chunk,
                                  data_offset=data_offset, **options)
    arch_state: dict[str, Any] = {}
    if arch in SA_ARCHS and "virtual_device_array" not in options and "bandwidths" not in options:
        # Validate the geometry before spending time on the probe.
        create_layout(arch, **{**params, "bandwidths": tuple([1.0] * len(members))})
        probes = []
        room = member_size - data_offset
        nbytes = min(probe_bytes, room) // SECTOR * SECTOR
        where = data_offset if probe_at == "start" else data_offset + (room - nbytes) // 2 // SECTOR * SECTOR
        for index, member in enumerate(members):
            if status:
                status(f"probing bandwidth of member {index} ({nbytes // MiB} MiB write then read)")
            probes.append(await probe_bandwidth(member, where, nbytes, index))
        measured = [p.bandwidth for p in probes]
        untimed = [p.member for p in probes if p.bandwidth == float("inf")]
        if untimed and len(untimed) < len(probes):
            raise UsageError(
                f"members {untimed} take no time (disk model 'none') while the others do: "
                f"their bandwidths cannot be compared",
                hint="give every member a timed disk model, or pass bandwidths explicitly",
            )
        # All untimed: every member is equally (infinitely) fast, so the shares are equal.
        params["bandwidths"] = tuple(1.0 for _ in probes) if untimed else tuple(measured)
        arch_state["probe"] = [
            dataclasses.asdict(p) | {"bandwidth": None if p.member in untimed else p.bandwidth}
            for p in probes
        ]
    layout = create_layout(arch, **params)
    base = metadata.Superblock(
        array_uuid=metadata.new_array_uuid(), name=name, arch=arch, n_members=len(members),
        member_index=0, member_size=member_size, data_offset=data_offset,
        geometry=layout.geometry(), arch_state=arch_state,
    )
    async with trio.open_nursery() as writers:
        for index, member in enumerate(members):
            writers.start_soon(metadata.write_superblock, member, base.for_member(index))
    keeper = MetadataKeeper(members, base)
    array = Array(name, layout, members, on_failure=keeper.on_failure)
    await attach_image_buffer(array, base.array_uuid, nursery, image_delay)
    return array, keeper


async def read_superblocks(members: Sequence[Any]) -> list[metadata.Superblock | None]:
    found: list[metadata.Superblock | None] = [None] * len(members)

    async def one(i: int) -> None:
        try:
            found[i] = await metadata.read_superblock(members[i])
        except OSError:
            found[i] = None

    async with trio.open_nursery() as nursery:
        for i in range(len(members)):
            nursery.start_soon(one, i)
    return found


async def assemble_array(
    members: Sequence[Any],
    *,
    labels: Sequence[str] | None = None,
    status: Callable[[str], None] | None = None,
    nursery: trio.Nursery | None = None,
    image_delay: float | None = None,
) -> tuple[Array, "MetadataKeeper"]:
    """Bring an array back from its members' superblocks (refusing foreign/out-of-order ones).

    RAID-x: pending images found in the members' logs are written home before returning."""
    found = await read_superblocks(members)
    authority = metadata.check_assembly(found, labels=list(labels) if labels else None)
    layout = layout_from_geometry(authority.geometry)
    # Back to "active" with a new generation: a later crash is then told from a clean stop.
    keeper = MetadataKeeper(members, authority)
    reopened = dataclasses.replace(authority, generation=authority.generation + 1, state="active")
    await keeper._write_all(reopened, skip=frozenset(authority.failed_members))
    array = Array(authority.name, layout, members, failed=authority.failed_members,
                  on_failure=keeper.on_failure)
    buffer = await attach_image_buffer(array, authority.array_uuid, nursery, image_delay)
    if buffer is not None:
        recovered = await buffer.recover()
        if recovered and status:
            status(f"rewrote {recovered} pending RAID-x image(s) left by an unclean stop")
    return array, keeper


async def attach_image_buffer(array: Array, array_uuid: str, nursery, delay: float | None):
    """RAID-x: give the array its persistent buffer of pending images and start the
    background writer in `nursery` (without one, the buffer is written out whenever it
    fills: still durable, just not in the background). Other layouts: None."""
    if array.layout.name != "raidx":
        return None
    from raidlab.engine.imagebuffer import DEFAULT_DELAY, ImageBuffer

    buffer = ImageBuffer(array, array_uuid, delay=DEFAULT_DELAY if delay is None else delay)
    array.image_buffer = buffer
    if nursery is not None:
        await nursery.start(buffer.run)
    return buffer


class MetadataKeeper:
    """Holds an array's current superblock and rewrites it on every member when the
    failure set changes (generation + 1), before the failing request is answered."""

    def __init__(self, members: Sequence[Any], sb: metadata.Superblock) -> None:
        self.members = members
        self.superblock = sb

    async def on_failure(self, failed: frozenset[int]) -> None:
        new = dataclasses.replace(self.superblock, generation=self.superblock.generation + 1,
                                  failed_members=sorted(failed))
        await self._write_all(new, skip=failed)

    async def mark_clean(self, failed: frozenset[int]) -> None:
        """Orderly shutdown: record state "clean" and the failure set."""
        new = dataclasses.replace(self.superblock, generation=self.superblock.generation + 1,
                                  state="clean", failed_members=sorted(failed))
        await self._write_all(new, skip=failed)

    async def _write_all(self, new: metadata.Superblock, skip: frozenset[int]) -> None:
        async def one(index: int) -> None:
            try:
                await metadata.write_superblock(self.members[index], new.for_member(index))
            except OSError:
                pass  # that member is failing too; the array notices on its next I/O

        async with trio.open_nursery() as nursery:
            for index in range(len(self.members)):
                if index not in skip:
                    nursery.start_soon(one, index)
        self.superblock = new
