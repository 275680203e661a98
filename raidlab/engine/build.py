"""Create and assemble an Array of an engine layout, with the engine's member superblocks.

Why a module of its own: the architecture registry (raidlab.archs), the caching
architectures' raid5 and the tests all turn (architecture name, members, options) into a served Array the same way, and
the member superblocks must always be written and checked by the same code.

Creation: validate the geometry (the layout raises UsageError for too few disks, a chunk
that does not divide, ...), refuse members of different sizes, run the architecture's
creation-time work (the layout's `prepare`), write a superblock on every member (FUSE
writes with FUA), and return the Array. Assembly: read every member's superblock, check
that they form one array in order (raidlab.engine.metadata.check_assembly), rebuild the
layout from the stored geometry — never re-measure: the SA-RAID mapping "remains the same
for the life of the device" (McCormick §2) — and return the Array with the recorded failure
set.

Creation-time work of a layout (SA-RAID's bandwidth probe, raidlab.engine.layouts.sa) is
the layout class's own `prepare`, so this module has no branch for any layout.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from raidlab import sched
from raidlab.blockdev import SECTOR
from raidlab.engine import metadata
from raidlab.engine.array import Array
from raidlab.engine.imagebuffer import DEFAULT_DELAY, ImageBuffer
from raidlab.engine.layouts import DEFAULT_CHUNK, create_layout, layout_class, layout_from_geometry, layout_names
from raidlab.errors import UsageError


def engine_archs() -> list[str]:
    """Architecture ids the engine builds as an Array of a layout."""
    return layout_names()


def check_geometry(arch: str, disks: int, disk_size: int, chunk: int, options: dict[str, Any],
                   data_offset: int = metadata.DEFAULT_DATA_OFFSET) -> None:
    """Refuse an impossible geometry (too few disks, a chunk that does not divide, a bad
    option) with the layout's own UsageError, before anything is started or measured."""
    cls = layout_class(arch)
    if cls.max_disks is not None and disks > cls.max_disks:
        raise UsageError(f"{arch} takes at most {cls.max_disks} disks, got {disks}",
                         hint=f"its superblock keeps every member's bandwidth probe; use --disks {cls.max_disks} "
                              f"or fewer")
    params = dict(n_disks=disks, disk_size=disk_size, chunk_bytes=chunk, data_offset=data_offset, **options)
    create_layout(arch, **cls.placeholder_params(params))


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
    status: Callable[[str], None] | None = None,
    nursery: sched.Nursery | None = None,
    image_delay: float | None = None,
    prepare_options: dict[str, Any] | None = None,
) -> tuple[Array, "MetadataKeeper"]:
    """Build architecture `arch` over `members`, write their superblocks, return the Array."""
    if arch not in engine_archs():
        raise UsageError(f"unknown architecture {arch!r}", hint=f"choose one of: {', '.join(engine_archs())}")
    options = dict(options or {})
    member_size = check_members(members)
    params: dict[str, Any] = dict(n_disks=len(members), disk_size=member_size, chunk_bytes=chunk,
                                  data_offset=data_offset, **options)
    check_geometry(arch, len(members), member_size, chunk, options, data_offset)
    params, arch_state = await layout_class(arch).prepare(members, params, status=status, **(prepare_options or {}))
    layout = create_layout(arch, **params)
    base = metadata.Superblock(
        array_uuid=metadata.new_array_uuid(), name=name, arch=arch, n_members=len(members),
        member_index=0, member_size=member_size, data_offset=data_offset,
        geometry=layout.geometry(), arch_state=arch_state,
    )
    async with sched.open_nursery() as writers:
        for index, member in enumerate(members):
            writers.start_soon(metadata.write_first_superblock, member, base.for_member(index))
    keeper = MetadataKeeper(members, base)
    array = Array(name, layout, members, on_failure=keeper.on_failure)
    await attach_image_buffer(array, base.array_uuid, nursery, image_delay)
    return array, keeper


async def read_superblocks(members: Sequence[Any]) -> list[metadata.Superblock | None]:
    """Every member's newest superblock (None: unreadable or none). A member whose slots
    cannot be told apart is refused here, as itself (not inside an exception group)."""
    found: list[metadata.Superblock | None] = [None] * len(members)
    refused: list[metadata.MetadataError] = []

    async def one(i: int) -> None:
        try:
            found[i] = await metadata.read_superblock(members[i])
        except OSError:
            found[i] = None
        except metadata.MetadataError as exc:
            refused.append(exc)

    async with sched.open_nursery() as nursery:
        for i in range(len(members)):
            nursery.start_soon(one, i)
    if refused:
        raise refused[0]
    return found


async def assemble_array(
    members: Sequence[Any],
    *,
    labels: Sequence[str] | None = None,
    status: Callable[[str], None] | None = None,
    nursery: sched.Nursery | None = None,
    image_delay: float | None = None,
    join: bool = False,
) -> tuple[Array, "MetadataKeeper"]:
    """Bring an array back from its members' superblocks (refusing foreign/out-of-order ones).

    RAID-x: pending images found in the members' logs are written home before returning.

    join: another instance of an array that runs elsewhere (a client on another node of a
    cluster, docs/cluster.md). It reads the superblocks and never writes them: the instance
    that created or assembled the array owns its metadata, its recovery and the image disks'
    logs. A member failure is then known to this instance only. A RAID-x layout whose images
    wait in the image disks' logs writes them home at once here instead (write-through), as
    each log has one writer; images kept in memory stay in this instance's memory."""
    found = await read_superblocks(members)
    authority = metadata.check_assembly(found, labels=list(labels) if labels else None)
    layout = layout_from_geometry(authority.geometry)
    keeper = MetadataKeeper(members, authority, readonly=join)
    keeper.stopped_cleanly = authority.state == "clean"
    if not join:
        # Back to "active" with a new generation: a later crash is then told from a clean stop.
        reopened = dataclasses.replace(authority, generation=authority.generation + 1, state="active")
        await keeper._write_all(reopened, skip=frozenset(authority.failed_members))
    array = Array(authority.name, layout, members, failed=authority.failed_members,
                  on_failure=keeper.on_failure)
    buffer = await attach_image_buffer(array, authority.array_uuid, nursery, image_delay)
    if buffer is not None and join:
        buffer.join()
    elif buffer is not None:
        recovered = await buffer.recover()
        if recovered and status:
            status(f"rewrote {recovered} pending RAID-x image(s) left by an unclean stop")
    return array, keeper


async def attach_journal(array: Array, target: Any, array_uuid: str, *, create: bool,
                         status: Callable[[str], None] | None = None) -> int:
    """Give a parity array its write journal on `target` (raidlab.engine.journal): a new one,
    or the existing one, whose records after the checkpoint are first written to the members
    in service, in order, and made durable (what the crash left half done). Returns the
    records replayed."""
    from raidlab.engine.journal import StripeJournal

    if create:
        array.journal = await StripeJournal.create(target, array_uuid)
        return 0
    journal, records = await StripeJournal.open(target, array_uuid)
    for writes in records:
        async with sched.open_nursery() as nursery:
            for disk, offset, payload in writes:
                if disk not in array.failed:
                    nursery.start_soon(array.members[disk].write, offset, payload)
    if records:
        await array._flush_members()
        if status:
            status(f"replayed {len(records)} journal record(s) onto the members")
    await journal.checkpoint(journal.seq)  # everything replayed is durable: the journal starts over
    journal.counters["replayed_records"] = len(records)
    array.journal = journal
    return len(records)


async def attach_image_buffer(array: Array, array_uuid: str, nursery, delay: float | None):
    """A layout that buffers its images (RAID-x) gets its persistent buffer of pending images
    as the array's image hook, with the background writer started in `nursery` (without one,
    the buffer is written out whenever it fills: still durable, just not in the background).
    Other layouts: None."""
    if not array.layout.buffers_images:
        return None
    if delay is None:
        delay = getattr(array.layout, "image_delay_seconds", DEFAULT_DELAY)
    buffer = ImageBuffer(array, array_uuid, delay=delay)
    array.image_buffer = buffer
    if nursery is not None:
        await nursery.start(buffer.run)
    return buffer


class MetadataKeeper:
    """Holds an array's current superblock and rewrites it on every member when the
    failure set changes (generation + 1), before the failing request is answered. A
    read-only keeper (a joined instance, see assemble_array) keeps it in memory only."""

    def __init__(self, members: Sequence[Any], sb: metadata.Superblock, *, readonly: bool = False) -> None:
        self.members = members
        self.superblock = sb
        self.readonly = readonly
        # Whether the array's last run ended with mark_clean (assemble_array sets it from
        # the superblock it found; a new array has had no run to end badly).
        self.stopped_cleanly = True

    async def on_failure(self, failed: frozenset[int]) -> None:
        new = dataclasses.replace(self.superblock, generation=self.superblock.generation + 1,
                                  failed_members=sorted(failed))
        await self._write_all(new, skip=failed)

    async def record_arch_state(self, **entries: Any) -> None:
        """Add `entries` to the superblock's arch_state on every member (generation + 1): what
        the architecture over this array must find again at assembly."""
        new = dataclasses.replace(self.superblock, generation=self.superblock.generation + 1,
                                  arch_state={**self.superblock.arch_state, **entries})
        await self._write_all(new, skip=frozenset(self.superblock.failed_members))

    async def mark_clean(self, failed: frozenset[int]) -> None:
        """Orderly shutdown: record state "clean" and the failure set."""
        new = dataclasses.replace(self.superblock, generation=self.superblock.generation + 1,
                                  state="clean", failed_members=sorted(failed))
        await self._write_all(new, skip=failed)

    async def _write_all(self, new: metadata.Superblock, skip: frozenset[int]) -> None:
        if self.readonly:
            self.superblock = new
            return

        async def one(index: int) -> None:
            try:
                await metadata.write_superblock(self.members[index], new.for_member(index))
            except OSError:
                pass  # that member is failing too; the array notices on its next I/O

        async with sched.open_nursery() as nursery:
            for index in range(len(self.members)):
                if index not in skip:
                    nursery.start_soon(one, index)
        self.superblock = new
