"""Create and assemble a TSS device over its columns, for both clocks.

Each column (member drive) carries the engine's superblock (raidlab.engine.metadata: array
identity, member index, the TSS geometry and options), then the private area that holds the
map table on columns 0 and 1 (raidlab.engine.tss.persist; reserved on every column so all
columns are laid out alike), then the stripes from `data_offset`, a whole number of stripe
units and at least 64 KiB into the drive.

Creation writes a fresh map (every stripe invalid) and the superblocks. Assembly checks the
superblocks as an engine array's are checked (foreign, out-of-order or stale members are
refused), rebuilds the geometry from them, never from the drives' sizes, loads the map from
the private area and recovers (the data log's uncommitted records, shared stripes' parity);
temperatures start cold, as the paper keeps them in memory only. With the data log on
(§3.8), the log device is the drive after the columns; it carries no superblock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from raidlab import sched
from raidlab.engine import metadata
from raidlab.engine.build import MetadataKeeper, check_members, read_superblocks
from raidlab.engine.tss.compression import CpuCost
from raidlab.engine.tss.datalog import DataLog
from raidlab.engine.tss.device import MODES, TSSDevice
from raidlab.engine.tss.geometry import DEFAULT_SUBSTRIPES, TSSGeometry
from raidlab.engine.tss.logwrites import DEFAULT_MAX_ASYNC, WRITE_MODES
from raidlab.engine.tss.maptable import PLACEMENTS, RAID1, MapTable
from raidlab.engine.tss.persist import PRIVATE_OFFSET, MapStore, private_area_bytes
from raidlab.errors import UsageError

MIN_DATA_OFFSET = 64 * 1024


@dataclasses.dataclass(frozen=True)
class TSSOptions:
    """The options a TSS device is created with (recorded in its superblocks)."""

    mode: str = "tss"
    placement: str = "halfway"
    substripes: int = DEFAULT_SUBSTRIPES
    logical_stripes: int | None = None   # None: as many as fit (RAID1 mode: half as many)
    read_balance: bool = True
    log: bool = False                    # the data log (§3.8) on a log drive after the columns
    writes: str = "sync"                 # sync, async (§4) or logged; the last two need the log
    max_async: int = DEFAULT_MAX_ASYNC
    allocate_on_read: bool = True        # §3.6: a read allocates an invalid stripe too

    def check(self) -> None:
        if self.mode not in MODES:
            raise UsageError(f"unknown tss mode {self.mode!r}", hint=f"use one of: {', '.join(MODES)}")
        if self.writes not in WRITE_MODES:
            raise UsageError(f"unknown write mode {self.writes!r}", hint=f"use one of: {', '.join(WRITE_MODES)}")
        if self.writes != "sync" and not self.log:
            raise UsageError("asynchronous writes need the data log", hint="add -o log=on")
        if self.placement not in PLACEMENTS:
            raise UsageError(f"unknown RAID1 placement {self.placement!r}",
                             hint=f"use one of: {', '.join(PLACEMENTS)}")


def plan_geometry(columns: int, member_size: int, unit: int, options: TSSOptions) -> tuple[TSSGeometry, int]:
    """(geometry, logical stripes) for `columns` members of `member_size` bytes."""
    options.check()
    most_records = max(1, member_size // unit)
    data_offset = PRIVATE_OFFSET + private_area_bytes(most_records)
    data_offset = max(MIN_DATA_OFFSET, -(-data_offset // unit) * unit)
    column_size = max(0, member_size - data_offset) // unit * unit
    geometry = TSSGeometry(columns=columns, unit=unit, column_size=column_size, data_offset=data_offset,
                           substripes=options.substripes)
    most = geometry.physical_stripes - 1
    if options.mode == RAID1:
        most //= 2
    logical = options.logical_stripes if options.logical_stripes is not None else most
    if not 1 <= logical <= most:
        raise UsageError(f"{logical} logical stripes do not fit: this {options.mode} device holds 1..{most}")
    return geometry, logical


def _device(name: str, columns: Sequence[Any], log: DataLog | None, table: MapTable, options: TSSOptions,
            store: MapStore, cost: CpuCost | None, keeper: MetadataKeeper) -> TSSDevice:
    device = TSSDevice(name, columns, table, mode=options.mode, cost=cost, read_balance=options.read_balance,
                       store=store, log=log, writes=options.writes, max_async=options.max_async,
                       on_failure=keeper.on_failure, allocate_on_read=options.allocate_on_read)
    keeper.members = device.members  # one list: a rebuilt column's new drive gets the superblocks too
    device.keeper = keeper
    return device


def _split_drives(drives: Sequence[Any], options_log: bool,
                  array_uuid: str | None = None) -> tuple[list[Any], DataLog | None]:
    """The columns, and the data log of device `array_uuid` on the drive after them when
    the log is on."""
    if options_log:
        return list(drives[:-1]), DataLog(drives[-1], array_uuid)
    return list(drives), None


async def create_tss(name: str, drives: Sequence[Any], *, unit: int, options: TSSOptions,
                     cost: CpuCost | None = None, status: Callable[[str], None] | None = None) -> TSSDevice:
    """A new TSS device over `drives` (every stripe invalid), its superblocks and map written.
    With the log on, the last drive is the log device."""
    options.check()
    array_uuid = metadata.new_array_uuid()
    drives, log = _split_drives(drives, options.log, array_uuid)
    member_size = check_members(drives)
    geometry, logical = plan_geometry(len(drives), member_size, unit, options)
    table = MapTable(geometry, logical, placement=options.placement)
    store = MapStore(drives, logical, array_uuid)
    if log is not None:
        await log.reset()  # whatever an earlier use left there is not this device's
    if status:
        status(f"writing the map table of {logical} logical stripes ({store.size} bytes on columns 0 and 1)")
    await store.write_all(table)
    base = metadata.Superblock(
        array_uuid=array_uuid, name=name, arch="tss", n_members=len(drives), member_index=0,
        member_size=member_size, data_offset=geometry.data_offset,
        geometry={**dataclasses.asdict(options), **geometry.describe(), "logical_stripes": logical})
    async with sched.open_nursery() as writers:
        for index, drive in enumerate(drives):
            writers.start_soon(metadata.write_first_superblock, drive, base.for_member(index))
    return _device(name, drives, log, table, options, store, cost, MetadataKeeper(drives, base))


async def assemble_tss(drives: Sequence[Any], *, labels: Sequence[str] | None = None,
                       cost: CpuCost | None = None, status: Callable[[str], None] | None = None) -> TSSDevice:
    """The TSS device recorded on `drives` (superblocks, then the map table), recovered:
    the log's uncommitted records replayed and shared stripes' parity rewritten
    (TSSDevice.recover). With the log on, the last drive is the log device."""
    found = await read_superblocks(drives)
    columns = [sb for sb in found if sb is not None]
    has_log = bool(columns) and columns[0].arch == "tss" and columns[0].geometry.get("log", False)
    log_drive = drives[-1] if has_log else None
    drives, _ = _split_drives(drives, has_log)
    found = found[:len(drives)]
    authority = metadata.check_assembly(found, labels=list(labels)[:len(drives)] if labels else None)
    log = DataLog(log_drive, authority.array_uuid) if log_drive is not None else None
    if authority.arch != "tss":
        raise UsageError(f"member images hold a {authority.arch} array, not a tss device")
    g = authority.geometry
    geometry = TSSGeometry(columns=g["columns"], unit=g["unit"], column_size=g["column_size"],
                           data_offset=g["data_offset"], substripes=g["substripes"])
    options = TSSOptions(mode=g["mode"], placement=g["placement"], substripes=g["substripes"],
                         logical_stripes=g["logical_stripes"], read_balance=g["read_balance"],
                         log=g.get("log", False), writes=g.get("writes", "sync"),
                         max_async=g.get("max_async", DEFAULT_MAX_ASYNC),
                         allocate_on_read=g.get("allocate_on_read", True))
    failed = frozenset(authority.failed_members)
    store = MapStore(drives, g["logical_stripes"], authority.array_uuid)
    store.failed = {column for column in failed if column < len(store.members)}  # stale copies
    table = await store.load(MapTable(geometry, g["logical_stripes"], placement=options.placement))
    if status:
        counts = ", ".join(f"{n} {kind}" for kind, n in table.counts.items() if n)
        status(f"map table loaded: {counts}")
    # Back to "active" with a new generation, as an engine array's assembly does.
    keeper = MetadataKeeper(drives, authority)
    await keeper._write_all(dataclasses.replace(authority, generation=authority.generation + 1, state="active"),
                            skip=failed)
    device = _device(authority.name, drives, log, table, options, store, cost, keeper)
    device.failed = set(failed)
    replayed = await device.recover()
    if status:
        status(f"recovery: {replayed} logged stripe write(s) replayed, "
               f"{device.counters['shared_stripes_resynced']} shared stripe(s) resynced")
    return device
