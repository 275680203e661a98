"""Open-loop trace replay on the virtual clock: `raidlab sim`.

Why built this way (the design's "one engine, two clocks"):

* The replay drives the *same* engine code as the live volume (EmulatedDisk, Array) on the
  virtual clock (raidlab.sched.run_virtual: raidlab's discrete-event kernel), so it
  is a discrete-event simulation of the real code, byte-for-byte reproducible for a trace,
  seed and options.
* Open loop, like the DCD simulator: request i is issued at t0 + time_i / compact
  whatever happened to earlier requests, each in its own task, so requests overlap and
  queue at the disks. `--compact` divides the trace's times (TSS §5 "trace compaction ...
  by a factor of 1000"). Response time = completion - scheduled issue time.
  Or closed loop (`outstanding` N): at most N requests in flight, the next issued when one
  completes (and not before its compacted trace time), its response timed from then; a
  driver that issues and waits, as the TSS paper's qanak measured its device.
* Streaming: the trace is read as a generator and requests are issued as they are read.
  What grows with the trace is only the response-time record: exact percentiles from a
  compact array of doubles per operation (8 bytes per request: 80 MB for 10 M requests),
  sorted by numpy at the end. Chosen over a bounded sketch because the numbers are exact
  (tests compare them with the model's service time) and the cost is well under the 1 GB
  budget. In-flight requests are bounded by `max_in_flight` (default 100,000): only a
  hopelessly saturated device reaches it; then issuing waits for a slot (the wait counts in
  the response time, and `throttled` in the report says it happened), so memory stays flat.
* Timing-only data: traces carry no data, so member disks get a DiscardBackend (writes are
  dropped, reads return zeros). Parity arithmetic still runs on those zeros, so the engine
  does the same work; memory does not grow with the disk size or with what was written.
  An architecture that reads back its own data (TSS decompresses its cRAID5 stripes) asks
  for drives that keep it (Drive.keeps_data): sparse memory, growing with what is written.
* Each member disk is wrapped in a MeteredTarget that sums the response times the
  architecture sees from it, giving per-disk mean response, mean wait (response - service)
  and mean queue length (Little's law: sum of response times / elapsed time).
* Addresses: offsets/lengths are widened to whole 512-byte sectors (fio and blkparse may
  give bytes). Traces with several devices (SPC ASUs, MSR disks) are replayed onto the one
  simulated device, each keeping its offsets. A request past the device's end is a bad
  line (TraceError naming the line, or skipped and counted with skip_bad).

Architectures come from the registry (raidlab.archs): the replay makes the member drives
an architecture's `plan` asks for (DiscardBackend, metered) and calls the same `build` that
`raidlab create` calls, with the virtual clock.
"""

from __future__ import annotations

import dataclasses
import random
import time as wallclock
import zlib
from array import array
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from raidlab import sched
from raidlab import archs
from raidlab.archs import Built
from raidlab.blockdev import SECTOR, TargetProxy
from raidlab.disks.backend import MemoryBackend
from raidlab.archs.layouts import drive_capacity
from raidlab.disks.bus import Bus, parse_bus
from raidlab.disks import partitions
from raidlab.disks.disk import EmulatedDisk, write_cache_override
from raidlab.disks.host import Host
from raidlab.sched import run_virtual
from raidlab.errors import RaidlabError, UsageError, leaf_exceptions
from raidlab.policies import make_policy
from raidlab.traces.formats import FLUSH, READ, TRIM, WRITE, Request, TraceReader
from raidlab.traces.stats import response_summary

DEFAULT_MAX_IN_FLIGHT = 100_000


class DiscardBackend:
    """A Backend that keeps no data: writes are dropped, reads return zeros (see module doc)."""

    def __init__(self, size: int) -> None:
        self.size = size

    def pread(self, offset: int, length: int) -> bytes:
        return bytes(length)

    def pwrite(self, offset: int, data: bytes) -> None:
        pass

    def flush(self) -> None:
        pass

    def trim(self, offset: int, length: int) -> None:
        pass

    def close(self) -> None:
        pass


class MeteredTarget(TargetProxy):
    """A BlockTarget proxy that counts requests and sums their response times."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.requests = 0
        self.response_sum = 0.0

    def partition(self, start: int, size: int, name: str):
        """A partition of the drive itself, unmetered: a builder that shares a drive between
        partitions (a logical DCD, VC-RAID's mcd) meters each one (BuildContext.meter)."""
        return self.inner.partition(start, size, name)

    async def read(self, offset: int, length: int) -> bytes:
        start = sched.current_time()
        try:
            return await self.inner.read(offset, length)
        finally:
            self.requests += 1
            self.response_sum += sched.current_time() - start

    async def write(self, offset: int, data: bytes, *, fua: bool = False) -> None:
        start = sched.current_time()
        try:
            await self.inner.write(offset, data, fua=fua)
        finally:
            self.requests += 1
            self.response_sum += sched.current_time() - start

    async def flush(self) -> None:
        start = sched.current_time()
        try:
            await self.inner.flush()
        finally:
            self.requests += 1
            self.response_sum += sched.current_time() - start

    async def trim(self, offset: int, length: int) -> None:
        start = sched.current_time()
        try:
            await self.inner.trim(offset, length)
        finally:
            self.requests += 1
            self.response_sum += sched.current_time() - start


@dataclasses.dataclass
class SimSpec:
    """What to build and how to replay (the `raidlab sim` options)."""

    arch: str
    disk_model: str
    disks: int | None = None
    chunk: int | None = None
    disk_size: int | None = None
    discipline: str = "fifo"
    compact: float = 1.0
    seed: int = 0
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    outstanding: int | None = None          # closed loop: at most this many in flight (module doc)
    compressibility: float | None = None   # written bytes: None zeros, else this share compresses away
    policy: str | None = None              # a TSS policy running beside the replay (raidlab.policies)
    policy_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    bus: str | None = None                 # one bus all drives share (raidlab.disks.bus.parse_bus)
    drives: int | None = None              # members are partitions of this many drives (on_drives)
    partitions: str | None = None          # members are these partitions of whole drives (raidlab.disks.partitions)
    write_cache: str = "model"             # every drive's write cache: model (its default) | on | off
    flushes: str = "honoured"              # the host's flushes and FUA at every drive: honoured | dropped
    span: str | None = None                # every drive's span (full | start); None: as the plan says
    host: Any = None                       # the machine's processors and costs (raidlab.disks.host.HostModel)


def _per_block(sums: list) -> float | None:
    """Mean response (ms) of a 1 KiB block: sum of response x KiB over the KiB."""
    weighted, kib = sums
    return weighted / kib * 1e3 if kib else None


def _mean_ms(total_s: float, count: int) -> float | None:
    return total_s / count * 1e3 if count else None


def _per_kib(samples: array, kib: float) -> float | None:
    """Response time (ms) per KiB transferred: sum of responses over the KiB."""
    return sum(samples) / kib * 1e3 if kib else None


class Payload:
    """The bytes a replay writes when the data matter (an architecture that compresses
    them): each 512-byte sector is zeros with probability `compressibility`, else bytes of a
    seeded random pool, chosen by the sector's address, so a write's content (and how well
    lz4 compresses it: about 1 - compressibility of its size) depends only on where it
    goes and the seed."""

    POOL = 1 << 20

    def __init__(self, compressibility: float, seed: int) -> None:
        if not 0.0 <= compressibility <= 1.0:
            raise UsageError(f"compressibility {compressibility} is outside 0..1")
        rng = random.Random(seed)
        self.pool = rng.randbytes(self.POOL)
        self.threshold = int(compressibility * 2**32)
        self.seed = seed

    def __call__(self, offset: int, length: int) -> bytes:
        out = []
        for sector in range(offset // SECTOR, (offset + length) // SECTOR):
            draw = zlib.crc32(sector.to_bytes(8, "little"), self.seed)
            if draw < self.threshold:
                out.append(bytes(SECTOR))
            else:
                start = (draw * SECTOR) % (self.POOL - SECTOR)
                out.append(self.pool[start:start + SECTOR])
        return b"".join(out)


def sim_config(spec: SimSpec) -> tuple[Any, Any]:
    """(architecture, Config) of `spec`, validated. With `spec.drives`, each member is one
    partition of a drive (`on_drives`), so the member size is the drive's share."""
    arch = archs.get(spec.arch, "sim")
    config = archs.Config(spec.arch, spec.disks, spec.disk_size, spec.chunk, dict(spec.options), spec.disk_model,
                          spec.discipline)
    if spec.partitions is not None:
        if spec.drives is not None:
            raise UsageError("give partitions or drives, not both",
                             hint="partitions names each member's drive itself (b8-c1-d1-e1)")
        where = partitions.layout(spec.partitions, spec.disk_model, spec.disks)
        config = dataclasses.replace(config, disks=len(where.members), disk_size=where.member_bytes,
                                     partitions=spec.partitions)
    elif spec.drives is not None:
        if spec.drives < 1:
            raise UsageError(f"drives must be at least 1, not {spec.drives}")
        members = len(arch.plan(config, archs.VIRTUAL))
        slots = -(-members // spec.drives)
        drive = spec.disk_size if spec.disk_size is not None else drive_capacity(spec.disk_model.split(",")[0])
        config = dataclasses.replace(config, disk_size=drive // slots // PARTITION_ALIGN * PARTITION_ALIGN)
    arch.validate(config, "sim")
    return arch, config


def on_drives(planned: list, drives: int) -> list[tuple[int, int]]:
    """Where each planned member goes when members are partitions of `drives` drives: member
    k is slot k // drives of drive k % drives (round robin: the first `drives` members are
    the drives' first partitions, the next ones their second, ...), as (drive, slot).
    A member uses its own size from its slot's start; every slot is the largest member's."""
    return [(k % drives, k // drives) for k in range(len(planned))]


async def build_virtual(spec: SimSpec, nursery: sched.Nursery,
                        wrap_members: Callable[[list], list] | None = None) -> Built:
    """The architecture of `spec` from the registry, over drives that keep no data, each
    metered; the same builder `raidlab create` uses, under the virtual clock. With
    `spec.bus` the drives share one bus (raidlab.disks.bus); every drive has the write cache
    `spec.write_cache` says (each model's default, or on or off for all) and the span
    `spec.span` says (or the plan's); with fewer
    `spec.drives` than members, the members are partitions of them (`on_drives`;
    parts["physical"]). `wrap_members` may put each metered member behind a proxy of its own
    (the cluster twin's RemoteMember) before the architecture is built over them. With
    `spec.host` the run has that machine's processors (parts["host"], raidlab.disks.host),
    which the workload charges for its copies and the architecture for its own work."""
    arch, config = sim_config(spec)
    planned = arch.plan(config, archs.VIRTUAL)
    bus_spec = parse_bus(spec.bus, [drive.model for drive in planned])
    bus = Bus(*bus_spec) if bus_spec is not None else None
    write_cache = write_cache_override(spec.write_cache)

    def disk(name: str, model: str, size: int, keeps_data: bool, span: str) -> EmulatedDisk:
        backend = MemoryBackend(size) if keeps_data else DiscardBackend(size)
        made = EmulatedDisk(name, model, backend, discipline=spec.discipline, span=spec.span or span,
                            write_cache=write_cache, bus=bus, flushes=spec.flushes)
        made.start(nursery)
        return made

    physical: list[EmulatedDisk] = []
    if spec.partitions is not None:
        where = partitions.layout(spec.partitions, spec.disk_model, len(planned))
        keeps = any(d.keeps_data for d in planned)
        physical = [disk(f"drive-{label}", spec.disk_model, where.drive_bytes, keeps, "full")
                    for label in where.drive_labels]
        drives = [MeteredTarget(physical[m.drive].partition(m.start, m.size, d.name))
                  for d, m in zip(planned, where.members)]
    elif spec.drives is None or spec.drives >= len(planned):
        drives = [MeteredTarget(disk(d.name, d.model, d.size, d.keeps_data, d.span)) for d in planned]
    else:
        places = on_drives(planned, spec.drives)
        slot = max(d.size for d in planned)
        slots = max(s for _d, s in places) + 1
        for index in range(spec.drives):
            mine = [d for d, (at, _s) in zip(planned, places) if at == index]
            physical.append(disk(f"drive{index}", mine[0].model, slot * slots, any(d.keeps_data for d in mine), "full"))
        drives = [MeteredTarget(physical[at].partition(s * slot, d.size, d.name))
                  for d, (at, s) in zip(planned, places)]
    if wrap_members is not None:
        drives = wrap_members(drives)
    host = Host(spec.host) if spec.host is not None else None
    built = await arch.build(archs.BuildContext(f"sim-{spec.arch}", config, drives, mode="create",
                                                clock=archs.VIRTUAL, nursery=nursery, meter=MeteredTarget,
                                                host=host))
    built.parts.setdefault("bus", bus)
    built.parts.setdefault("host", host)
    if physical:
        built.parts.setdefault("physical", physical)
    return built


def _drive_of(member: Any) -> Any:
    """The drive under a (metered) member: the member itself, or the drive of a partition."""
    inner = getattr(member, "inner", member)
    return getattr(inner, "disk", inner)


def layout_report(spec: SimSpec, members: list) -> dict[str, Any]:
    """Where each member lies when members are partitions of drives (the report's `layout`)."""
    if spec.partitions is not None:
        where = partitions.layout(spec.partitions, spec.disk_model, len(members))
        return {"partitions": spec.partitions, "drives": len(where.drive_labels),
                "members": [{"name": m.name, **placed} for m, placed in zip(members, where.describe())]}
    return {"drives": spec.drives, "members": [{"name": m.name, "drive": f"drive{at}", "slot": slot}
                                               for m, (at, slot) in zip(members, on_drives(members, spec.drives))]}


# ------------------------------------------------------------------------------ replay


PARTITION_ALIGN = 1 << 20  # a member carved from a drive is whole MiB

_BASELINE_KEYS = ("reads", "writes", "ios", "flushes", "busy_time", "merged_requests", "bus_wait_s")
_BUS_KEYS = ("transfers", "bytes", "busy_s", "waited_transfers", "wait_s")


async def _replay(spec: SimSpec, reader: TraceReader, on_progress) -> dict[str, Any]:
    archs.get(spec.arch, "sim")
    if not spec.compact > 0:
        raise UsageError(f"--compact must be positive, not {spec.compact}")
    if spec.outstanding is not None and spec.outstanding < 1:
        raise UsageError(f"outstanding must be at least 1, not {spec.outstanding}")
    samples = {READ: array("d"), WRITE: array("d")}
    block_sums = {READ: [0.0, 0], WRITE: [0.0, 0]}  # sum of response x KiB, KiB
    request_per_kib = {READ: 0.0, WRITE: 0.0}  # sum over requests of response / KiB
    other_ops = {FLUSH: 0, TRIM: 0}
    zeros: dict[int, bytes] = {}
    state = {"in_flight": 0, "max_in_flight": 0, "throttled": 0}
    slot_free = sched.Event()

    async with sched.open_nursery() as disks_nursery:
        built = await build_virtual(spec, disks_nursery)
        target = built.target
        size = target.size
        baseline = [{k: m.statistics().get(k, 0) for k in _BASELINE_KEYS} for m in built.members]
        base_members = [(m.requests, m.response_sum) for m in built.members]
        bus = built.parts.get("bus")
        bus_base = bus.statistics() if bus is not None else None
        physical = built.parts.get("physical")
        physical_base = [d.statistics()["busy_time"] for d in physical] if physical else None
        if spec.policy is not None:
            control = built.parts.get("control")
            if control is None:
                raise UsageError(f"{spec.arch} has no control interface for a policy", hint="policies manage tss")
            policy = make_policy(spec.policy, spec.policy_options)
            disks_nursery.start_soon(policy.run, control)
        payload = Payload(spec.compressibility, spec.seed) if spec.compressibility is not None else None
        limit = spec.outstanding if spec.outstanding is not None else spec.max_in_flight
        t0 = sched.current_time()
        read, write, flush, trim = target.read, target.write, target.flush, target.trim
        compact = spec.compact
        first_time: float | None = None
        host = built.parts.get("host")

        async def one(op: str, offset: int, length: int, issue_at: float) -> None:
            nonlocal slot_free
            if host is not None:  # the block layer's and the driver's work for the request
                await host.charge("request")
            if op == READ:
                await read(offset, length)
            elif op == WRITE:
                if payload is not None:
                    data = payload(offset, length)
                else:
                    data = zeros.get(length)
                    if data is None:
                        data = zeros[length] = bytes(length)
                await write(offset, data)
            elif op == FLUSH:
                await flush()
            else:
                await trim(offset, length)
            if op in samples:
                response = sched.current_time() - issue_at
                samples[op].append(response)
                kib = length / 1024
                block_sums[op][0] += response * kib
                block_sums[op][1] += kib
                request_per_kib[op] += response / kib
            else:
                other_ops[op] += 1
            state["in_flight"] -= 1
            if state["in_flight"] == limit - 1:
                slot_free.set()
                slot_free = sched.Event()

        async with sched.open_nursery() as requests_nursery:
            count = 0
            for request in reader:
                if first_time is None:
                    first_time = request.time
                op = request.op
                if op == FLUSH:
                    offset = length = 0
                else:
                    offset = request.offset - request.offset % SECTOR
                    end = request.offset + request.length
                    end += -end % SECTOR
                    length = end - offset
                    if end > size:
                        reader.fail(request.line, f"request [{request.offset}, {request.offset + request.length}) "
                                                  f"is past the end of the device ({size} bytes, arch {spec.arch})",
                                    hint=f"{spec.arch} here serves {size} bytes: make a synthetic trace that fits "
                                         f"with `raidlab trace synth ... --device-size {size}`, or pass --skip-bad "
                                         "to skip such lines")
                        continue
                issue_at = t0 + (request.time - first_time) / compact
                if issue_at > sched.current_time():
                    await sched.sleep_until(issue_at)
                while state["in_flight"] >= limit:
                    if spec.outstanding is None:
                        state["throttled"] += 1
                    await slot_free.wait()
                if spec.outstanding is not None:  # closed loop: timed from when it is issued
                    issue_at = sched.current_time()
                state["in_flight"] += 1
                if state["in_flight"] > state["max_in_flight"]:
                    state["max_in_flight"] = state["in_flight"]
                requests_nursery.start_soon(one, op, offset, length, issue_at)
                count += 1
                if on_progress is not None and count % PROGRESS_EVERY == 0:
                    on_progress(count, sched.current_time() - t0)
        elapsed = sched.current_time() - t0
        per_disk = []
        for member, base, (base_requests, base_sum) in zip(built.members, baseline, base_members):
            stats = member.statistics()
            busy = stats.get("busy_time", 0.0) - base["busy_time"]
            requests = member.requests - base_requests
            response_sum = member.response_sum - base_sum
            mean_response = response_sum / requests if requests else 0.0
            mean_service = stats.get("mean_service_ms", 0.0) / 1e3
            per_disk.append({
                "name": member.name,
                "requests": requests,
                "reads": stats.get("reads", 0) - base["reads"],
                "writes": stats.get("writes", 0) - base["writes"],
                "utilization": busy / elapsed if elapsed > 0 else 0.0,
                "busy_s": busy,
                "mean_service_ms": stats.get("mean_service_ms", 0.0),
                "mean_response_ms": mean_response * 1e3,
                "mean_wait_ms": max(mean_response - mean_service, 0.0) * 1e3,
                "mean_queue_length": response_sum / elapsed if elapsed > 0 else 0.0,
                "max_queue_length": stats.get("max_queue_length", 0),
                # requests the drive's queue served as part of another (contiguous, queued together)
                "merged_requests": stats.get("merged_requests", 0) - base["merged_requests"],
            } | ({"bus_wait_ms": (stats["bus_wait_s"] - base["bus_wait_s"]) / requests * 1e3 if requests else 0.0}
                 if "bus_wait_s" in stats else {}))
        drive_stats = None
        if physical:  # members are partitions: each whole drive's share of the time too
            drive_stats = [{"name": d.name, "busy_s": d.statistics()["busy_time"] - base,
                            "utilization": (d.statistics()["busy_time"] - base) / elapsed if elapsed > 0 else 0.0}
                           for d, base in zip(physical, physical_base)]
        bus_stats = None
        if bus is not None:
            now = bus.statistics()
            bus_stats = now | {k: now[k] - bus_base[k] for k in _BUS_KEYS}
            bus_stats["utilization"] = bus_stats["busy_s"] / elapsed if elapsed > 0 else 0.0
        arch_stats = built.statistics()
        host_stats = host.statistics(elapsed=elapsed) if host is not None else None
        disks_nursery.cancel_scope.cancel()
    all_samples = array("d", samples[READ])
    all_samples.extend(samples[WRITE])
    return {
        "arch": spec.arch,
        "disk_model": spec.disk_model,
        "disks": len(per_disk),
        "disk_size": max((m.size for m in built.members), default=None),
        "member_sizes": [m.size for m in built.members],
        "physical_drives": len({id(_drive_of(m)) for m in built.members}),
        "chunk": spec.chunk,
        "discipline": spec.discipline,
        "compact": spec.compact,
        "seed": spec.seed,
        "compressibility": spec.compressibility,
        "policy": ({"name": spec.policy, **policy.describe(), "moves": dict(policy.moves)}
                   if spec.policy is not None else None),
        "trace": {"name": reader.name, "format": reader.format, "requests": reader.requests,
                  "skipped_lines": reader.skipped,
                  "bad_lines": [{"line": line, "reason": reason} for line, reason in reader.bad_lines]},
        "device_size": size,
        "virtual_seconds": elapsed,
        "response": {"read": response_summary(samples[READ]), "write": response_summary(samples[WRITE]),
                     "all": response_summary(all_samples)},
        # Per 1 KiB block, three readings of TSS Tables 1-4's "time per block" (the paper does
        # not say which its qanak driver computed): each block's response (a request's response
        # for each of its blocks) averaged over blocks; the response time per KiB transferred
        # (all responses over all KiB); and each request's response over its own KiB,
        # averaged over requests (`request_mean`).
        "per_block": {name: _per_block(sums) for name, sums in
                      (("read", block_sums[READ]), ("write", block_sums[WRITE]),
                       ("all", [block_sums[READ][0] + block_sums[WRITE][0],
                                block_sums[READ][1] + block_sums[WRITE][1]]))}
                     | {"ms_per_kib": {name: _per_kib(samples_of, kib) for name, samples_of, kib in
                                       (("read", samples[READ], block_sums[READ][1]),
                                        ("write", samples[WRITE], block_sums[WRITE][1]),
                                        ("all", all_samples, block_sums[READ][1] + block_sums[WRITE][1]))}}
                     | {"request_mean": {
                         "read": _mean_ms(request_per_kib[READ], len(samples[READ])),
                         "write": _mean_ms(request_per_kib[WRITE], len(samples[WRITE])),
                         "all": _mean_ms(request_per_kib[READ] + request_per_kib[WRITE], len(all_samples))}},
        "outstanding": spec.outstanding,
        "flushes": other_ops[FLUSH],
        "trims": other_ops[TRIM],
        "max_in_flight": state["max_in_flight"],
        "throttled": state["throttled"],
        "per_disk": per_disk,
        "bus": bus_stats,
        "host": host_stats,
        "drives": drive_stats,
        "layout": layout_report(spec, built.members) if physical else None,
        "architecture": arch_stats,
    }


def _single_user_error(group: BaseExceptionGroup) -> RaidlabError | None:
    """The RaidlabError inside the nurseries' nested exception groups, if it is the only
    error there (cancellations of the sibling tasks aside): the CLI then prints one line."""
    found = [e for e in leaf_exceptions(group) if not isinstance(e, sched.Cancelled)]
    if len(found) == 1 and isinstance(found[0], RaidlabError):
        return found[0]
    return None


PROGRESS_EVERY = 10_000  # requests between two on_progress(requests issued, virtual seconds) calls


def run_timed(fn: Callable[..., Awaitable[dict[str, Any]]], *args: Any) -> dict[str, Any]:
    """`fn(*args)` on the virtual clock (run_virtual); its report with "speed" =
    {"wall_seconds"} added (the one entry that is not deterministic). A lone user error
    inside the nurseries' exception groups is raised as itself, so the CLI prints one line."""
    start = wallclock.perf_counter()
    try:
        report = run_virtual(fn, *args)
    except BaseExceptionGroup as group:
        user_error = _single_user_error(group)
        if user_error is None:
            raise
        raise user_error from None
    report["speed"] = {"wall_seconds": wallclock.perf_counter() - start}
    return report


def replay(spec: SimSpec, reader: TraceReader, *,
           on_progress: Callable[[int, float], None] | None = None) -> dict[str, Any]:
    """Replay `reader`'s requests on `spec`'s architecture in virtual time; return the
    report (deterministic) with a "speed" entry (wall-clock, not deterministic) added."""
    report = run_timed(_replay, spec, reader, on_progress)
    wall = report["speed"]["wall_seconds"]
    report["speed"].update({
        "virtual_seconds_per_wall_second": report["virtual_seconds"] / wall if wall > 0 else 0.0,
        "requests_per_wall_second": report["trace"]["requests"] / wall if wall > 0 else 0.0,
    })
    return report


def replay_requests(spec: SimSpec, requests: Iterable[Request], **kw) -> dict[str, Any]:
    """Replay an in-memory or generated request stream (tests, bench): wraps it in a
    reader-like object with the same bad-line handling."""
    return replay(spec, StreamReader(requests), **kw)


class StreamReader(TraceReader):
    def __init__(self, requests: Iterable[Request]) -> None:
        self.format = "stream"
        self.name = "<requests>"
        self.skip_bad = False
        self.skipped = 0
        self.bad_lines = []
        self.requests = 0
        self.lines = 0
        self._stream = requests

    def __iter__(self):
        for number, request in enumerate(self._stream, 1):
            self.requests += 1
            yield request if request.line else request._replace(line=number)
