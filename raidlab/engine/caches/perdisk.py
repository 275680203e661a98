"""VC-RAID's per-disk configurations (He & Yang §2, Fig. 1c and 1d): private write caches
*below* the RAID5, one cache disk for each data disk.

"It is also possible to have private write caches for each disk in the disk array. That is,
there is a virtual NVRAM cache for each individual disk in the disk array. Figure 1c shows
this configuration where a cache disk is associated with each data disk in the array and
only cache data for the particular data disk below it. If the RAM buffer is also managed
individually for each data disk, then we have the fourth configuration as shown in Figure 1d."

Why built from the VCRAID class: a per-disk cache is the same mechanism (RAM buffer of
block-size slots, level-1 log writes to a cache disk, level-2 LWFD home on idle, headers for
recovery) with one data disk instead of the raid5 behind it. So:

* 1d: N independent VCRAID caches, cache i over data disk i with its own RAM buffer (the
  configured RAM buffer split evenly) and its own idle detector; the engine's raid5 runs
  over the N caches, so parity is computed *above* them and both data and parity writes are
  cached.
* 1c: one VCRAID with the one RAM buffer, over the N data disks end to end (`Concat`), with
  N cache disks and a `route`: a block's level-1 log write goes to the cache disk of the data
  disk it belongs to (VCRAID(route=...)), so cache disk i holds only blocks of data disk i
  and its level-2 destage writes only there. The raid5 runs over N `Window`s of that cache,
  one per data disk.

Crash recovery (§3.4) is per cache, before anything else: every cache writes its logged
blocks home (raidlab.engine.caches.vcraid.recover_cache), then the raid5 is assembled from
the superblocks it keeps at the start of each data disk — which may only have reached a
cache disk before the crash, hence this order.

Where this departs from the paper, and why:

* The paper does not say how the RAM buffer of 1d is sized; we split the configured total
  evenly (so 1c and 1d use the same RAM), and likewise the cache size over the cache disks.
* In 1d each cache has its own idle detector (no request *to its disk* for the threshold);
  in 1c there is one, as in scd.
* Which data disk a cache disk belongs to is recorded (member index in the cache disks'
  superblocks), but not the raid5's identity: the raid5 above is assembled from its own
  superblocks after the caches were written home.
* Failure injection (`raidlab fail`) is not built for these configurations: a failed data
  disk would fail its cache's background destage rather than degrade the raid5.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from typing import Any

from raidlab import sched
from raidlab.blockdev import check_aligned
from raidlab.engine import build, metadata
from raidlab.engine.caches.log import DEFAULT_LOG_START, LOG_GEOMETRY
from raidlab.engine.caches.vcraid import (
    DEFAULTS,
    PER_DISK_CONFIGS,
    VCRAID,
    check_vcraid_config,
    recover_cache,
)
from raidlab.engine.layouts.raid5 import Raid5Layout
from raidlab.errors import UsageError


class Concat:
    """BlockTargets of one size end to end (1c's data disks under the one cache)."""

    def __init__(self, name: str, parts: Sequence[Any]) -> None:
        sizes = {p.size for p in parts}
        if len(sizes) != 1:
            raise ValueError(f"{name}: parts differ in size")
        self.name = name
        self.parts = list(parts)
        self.part_size = sizes.pop()

    @property
    def size(self) -> int:
        return self.part_size * len(self.parts)

    def _pieces(self, offset: int, length: int):
        while length > 0:
            index, within = divmod(offset, self.part_size)
            n = min(length, self.part_size - within)
            yield index, within, n
            offset += n
            length -= n

    async def read(self, offset: int, length: int) -> bytes:
        check_aligned(offset, length, self.size)
        out = bytearray()
        for index, within, n in self._pieces(offset, length):
            out += await self.parts[index].read(within, n)
        return bytes(out)

    async def write(self, offset: int, data: bytes, *, fua: bool = False) -> None:
        check_aligned(offset, len(data), self.size)
        done = 0
        for index, within, n in self._pieces(offset, len(data)):
            await self.parts[index].write(within, data[done:done + n], fua=fua)
            done += n

    async def flush(self) -> None:
        async with sched.open_nursery() as nursery:
            for part in self.parts:
                nursery.start_soon(part.flush)

    async def trim(self, offset: int, length: int) -> None:
        check_aligned(offset, length, self.size)

    def statistics(self) -> dict[str, Any]:
        return {"name": self.name, "parts": [p.statistics() for p in self.parts]}


class Window:
    """Bytes [start, start + size) of a BlockTarget (1c: one data disk's share of the cache)."""

    def __init__(self, target: Any, start: int, size: int, name: str) -> None:
        self.target, self.start, self._size, self.name = target, start, size, name

    @property
    def size(self) -> int:
        return self._size

    async def read(self, offset: int, length: int) -> bytes:
        check_aligned(offset, length, self._size)
        return await self.target.read(self.start + offset, length)

    async def write(self, offset: int, data: bytes, *, fua: bool = False) -> None:
        check_aligned(offset, len(data), self._size)
        await self.target.write(self.start + offset, data, fua=fua)

    async def flush(self) -> None:
        await self.target.flush()

    async def trim(self, offset: int, length: int) -> None:
        check_aligned(offset, length, self._size)

    def statistics(self) -> dict[str, Any]:
        return {"name": self.name, "start": self.start, "size": self._size}


class PerDiskVCRAID:
    """The volume of 1c/1d: the engine's raid5 over per-disk caches. A BlockTarget with the
    VCRAID-like `statistics()`, `timeline`, `array` and `keeper` the host reports on."""

    def __init__(self, name: str, config: str, caches: list[VCRAID], array: Any, keeper: Any) -> None:
        self.name, self.config, self.caches = name, config, caches
        self.array, self.keeper = array, keeper

    @property
    def size(self) -> int:
        return self.array.size

    def start(self, nursery: sched.Nursery) -> None:
        """The caches were started when built (the raid5 writes its superblocks through them)."""

    async def read(self, offset: int, length: int) -> bytes:
        return await self.array.read(offset, length)

    async def write(self, offset: int, data: bytes, *, fua: bool = False) -> None:
        await self.array.write(offset, data, fua=fua)

    async def flush(self) -> None:
        await self.array.flush()

    async def trim(self, offset: int, length: int) -> None:
        await self.array.trim(offset, length)

    async def drain(self) -> int:
        """Every per-disk cache drained to its data disk (VCRAID.drain); the bytes destaged."""
        total = 0
        for vc in self.caches:
            total += await vc.drain()
        return total

    @property
    def timeline(self) -> list[tuple[float, str, dict[str, Any]]]:
        tagged = [[(t, ev, {**d, "cache": i}) for t, ev, d in vc.timeline] for i, vc in enumerate(self.caches)]
        return list(heapq.merge(*tagged, key=lambda e: e[0]))

    def statistics(self) -> dict[str, Any]:
        per = [vc.statistics() for vc in self.caches]
        out: dict[str, Any] = {"arch": "vcraid", "name": self.name, "config": self.config,
                               "capacity": self.size, "block_size": per[0]["block_size"],
                               "destage_order": per[0]["destage_order"]}
        for key, value in per[0].items():
            if key not in out and isinstance(value, int | float) and not isinstance(value, bool):
                out[key] = sum(p[key] for p in per)
        out["cache_disk_used_per_disk"] = [u for p in per for u in p["cache_disk_used_per_disk"]]
        out["level1_per_disk"] = [n for p in per for n in p["level1_per_disk"]]
        out["cache_disks"] = [c for p in per for c in p["cache_disks"]]
        out["array"] = self.array.statistics()
        out["per_disk_caches"] = [{k: v for k, v in p.items() if k not in ("array", "cache_disks")} for p in per]
        return out


def _route_by_disk(blocks_per_disk: int):
    return lambda lba: lba // blocks_per_disk


def check_perdisk_config(config: str, data_disks: Sequence[Any], cache_disks: Sequence[Any], *, block_size: int,
           ram_buffer: int, level1_write: int, destage_segment: int, idle_threshold: float,
           **policy: Any) -> int:
    """Validate; return the RAM buffer of one cache (1d: the total split evenly). `policy`:
    VCRAID's durability, background-destage settings and destage order (check_vcraid_config)."""
    if config not in PER_DISK_CONFIGS:
        raise UsageError(f"{config} is not a per-disk VC-RAID configuration", hint="use 1c or 1d")
    n = len(data_disks)
    if len(cache_disks) != n:
        raise UsageError(f"{config} needs one cache disk per data disk: {n} data disks, {len(cache_disks)} cache disks")
    sizes = [c.size for c in cache_disks]
    kw = dict(block_size=block_size, level1_write=level1_write, destage_segment=destage_segment,
              idle_threshold=idle_threshold, **policy)
    check_vcraid_config(config, sizes, ram_buffer=ram_buffer, **kw)
    if build.check_members(data_disks) % block_size:
        raise UsageError(f"data disks of {data_disks[0].size} bytes are not a multiple of the block size {block_size}")
    if config == "1c":
        return ram_buffer
    per_disk = ram_buffer // n // block_size * block_size
    if per_disk < block_size:
        raise UsageError(f"a RAM buffer of {ram_buffer} bytes split over {n} disks holds no {block_size}-byte block")
    check_vcraid_config("scd", sizes[:1], ram_buffer=per_disk, **kw)  # each private cache on its own
    return per_disk


def _build(config: str, name: str, data_disks: Sequence[Any], cache_disks: Sequence[Any],
           sb: metadata.Superblock) -> list[VCRAID]:
    if config == "1d":
        return [VCRAID(f"{name}-c{i}", d, [c], sb.for_member(i)) for i, (d, c) in enumerate(zip(data_disks, cache_disks))]
    blocks_per_disk = data_disks[0].size // int(sb.geometry["block_size"])
    return [VCRAID(name, Concat(f"{name}-data", data_disks), cache_disks, sb,
                   route=_route_by_disk(blocks_per_disk))]


def _members(config: str, caches: list[VCRAID], n: int, disk_size: int) -> list[Any]:
    if config == "1d":
        return caches
    return [Window(caches[0], i * disk_size, disk_size, f"{caches[0].name}-w{i}") for i in range(n)]


async def create_perdisk(name: str, config: str, data_disks: Sequence[Any], cache_disks: Sequence[Any], *,
                         nursery: sched.Nursery, block_size: int = DEFAULTS["block_size"],
                         ram_buffer: int = DEFAULTS["ram_buffer"], level1_write: int = DEFAULTS["level1_write"],
                         destage_segment: int = DEFAULTS["destage_segment"],
                         idle_threshold: float = DEFAULTS["idle_threshold"], chunk: int = 64 * 1024,
                         **policy: Any) -> PerDiskVCRAID:
    """Build 1c or 1d: caches (superblock + empty log on each cache disk, started in
    `nursery`), then the raid5 over them (its superblocks go through the caches)."""
    per_cache_ram = check_perdisk_config(config, data_disks, cache_disks, block_size=block_size, ram_buffer=ram_buffer,
                           level1_write=level1_write, destage_segment=destage_segment,
                           idle_threshold=idle_threshold, **policy)
    sb = metadata.Superblock(
        array_uuid=metadata.new_array_uuid(), name=name, arch="vcraid", n_members=len(cache_disks),
        member_index=0, member_size=cache_disks[0].size, data_offset=DEFAULT_LOG_START,
        geometry=dict(arch="vcraid", config=config, block_size=block_size, ram_buffer=per_cache_ram,
                      ram_buffer_total=ram_buffer, level1_write=level1_write, destage_segment=destage_segment,
                      idle_threshold=idle_threshold, data_disk_size=data_disks[0].size,
                      **policy, **LOG_GEOMETRY),
    )
    caches = _build(config, name, data_disks, cache_disks, sb)
    for vc in caches:
        await vc.store.format()
    for i, disk in enumerate(cache_disks):
        await metadata.write_first_superblock(disk, sb.for_member(i))
    for vc in caches:
        vc.start(nursery)
    members = _members(config, caches, len(data_disks), data_disks[0].size)
    array, keeper = await build.create_array(name, "raid5", members, chunk=chunk)
    if array.size % block_size:
        raise UsageError(f"raid5 capacity {array.size} is not a multiple of the block size {block_size}")
    return PerDiskVCRAID(name, config, caches, array, keeper)


async def assemble_perdisk(data_disks: Sequence[Any], cache_disks: Sequence[Any], *,
                           nursery: sched.Nursery,
                           assembled: Callable[[Any, Any], None] = lambda array, keeper: None) -> PerDiskVCRAID:
    """Bring 1c/1d back: check the cache disks' superblocks, write every cache's logged
    blocks to its data disk(s) (§3.4), start the caches, then assemble the raid5 (which
    `assembled` sees first, and may refuse)."""
    found = [await metadata.read_superblock(c) for c in cache_disks]
    authority = metadata.check_assembly(found, labels=[getattr(c, "name", str(i)) for i, c in enumerate(cache_disks)])
    config = authority.geometry.get("config")
    if authority.arch != "vcraid" or config not in PER_DISK_CONFIGS:
        raise metadata.MetadataError(f"the cache disks hold a {authority.arch} {config}, not a per-disk VC-RAID")
    if authority.geometry.get("data_disk_size") != data_disks[0].size or len(data_disks) != authority.n_members:
        raise metadata.MetadataError(f"the data disks do not match VC-RAID {authority.name}'s cache disks",
                                     hint="give the data disks and cache disks of one VC-RAID, in order")
    name = authority.name
    if config == "1d":
        caches = [await recover_cache(authority.for_member(i), d, [c], first_index=i, name=f"{name}-c{i}")
                  for i, (d, c) in enumerate(zip(data_disks, cache_disks))]
    else:
        blocks_per_disk = data_disks[0].size // int(authority.geometry["block_size"])
        caches = [await recover_cache(authority, Concat(f"{name}-data", data_disks), cache_disks,
                                      route=_route_by_disk(blocks_per_disk))]
    for vc in caches:
        vc.start(nursery)
    members = _members(config, caches, len(data_disks), data_disks[0].size)
    array, keeper = await build.assemble_array(members, labels=[getattr(d, "name", str(i)) for i, d in enumerate(data_disks)])
    assembled(array, keeper)
    if not isinstance(array.layout, Raid5Layout):
        raise metadata.MetadataError(f"the data disks hold a {array.layout.name}, not VC-RAID {name}'s raid5")
    return PerDiskVCRAID(name, config, caches, array, keeper)


__all__ = ["Concat", "Window", "PerDiskVCRAID", "create_perdisk", "assemble_perdisk"]
