"""The host in virtual time: the processors of the papers' machines and what their work costs.

Why a host of its own: virtual time charges the drives, the bus and the cluster's cables, and
the engine's own processor time does not advance the clock. The papers' results were shaped
by their hosts too: Linux 2.x copying every block between the user and the kernel's caches
(SA-RAID §3.2 blames its ceilings on these copies), a Pentium 75 compressing (TSS §5.3), a
cluster node's driver serving its disk over Fast Ethernet (RAID-x §7). One component charges
all of it, the same way for every architecture of a comparison, baselines included.

A host is a catalog entry (data/hosts.toml, read like the drive catalog: every number a
`value` with a `source` or an `assumed` text) and has

* `processors` processors, each a Timeline (raidlab.disks.bus): a charge books its seconds on
  one processor, no earlier than now, in the first gap that fits; the caller resumes when its
  booking ends. So work on a busy processor waits, and two processors work at once.
* costs per kind of work (`KINDS`): a block-layer request (submission, driver and completion
  interrupt: `request_us` + `interrupt_us`), a memory copy (`copy_mb_s`), parity XOR
  (`parity_mb_s`), a checksum (`checksum_mb_s`), compression and decompression
  (`compress_mb_s`, `decompress_mb_s`, per uncompressed byte) and a network message through
  the protocol stack (`message_us` + bytes at `message_mb_s`). A rate of 0 (or a cost of 0)
  means that work is free on this host: not charged.
* `message_holds_cpu`: whether a message's cost is processor work (true: it is booked on a
  processor like every other charge) or a delay that holds nothing (false: the protocol's
  waiting, which any number of messages do at once). Which reading a paper's "software
  overheads" deserve is a stated assumption; a sweep can flip it.
* `cost_scale`: every charge multiplied by it (1 for the catalog's values); a sweep varies it
  to show what a claim owes to the host as a whole.

Which processor: the caller names one (a program runs on its own processor; a cluster node has
one), or leaves it to the host, which takes the processor that can start soonest (an SMP
kernel runs its driver work wherever it can), the lower index on a tie, so a run stays
deterministic. A program's own processor time (`program`) is booked in slices of
`PROGRAM_SLICE_S`, so kernel work that arrives while a program computes waits at most one
slice, as a kernel preempts a user program at its next return to user mode.

Every charge is counted per processor and per kind (`statistics`), so a result says where the
host's time went.
"""

from __future__ import annotations

import dataclasses
import functools
import tomllib
from importlib import resources
from typing import Any

from raidlab import sched
from raidlab.disks.bus import Timeline
from raidlab.errors import UnknownModelError, UsageError

# A program's processor time is booked in slices this long (assumed: 1 ms, a tenth of Linux
# 2.2's 10 ms tick; driver work is done on interrupt and kernel-thread time, which preempts a
# user program at its next return to user mode).
PROGRAM_SLICE_S = 0.001

KINDS = ("request", "copy", "parity", "checksum", "compress", "decompress", "message", "program")

# Catalog fields: name -> type. Rates in MB/s (10^6 bytes/s), costs in microseconds.
FIELDS: dict[str, type] = {
    "processors": int,
    "request_us": float,
    "interrupt_us": float,
    "copy_mb_s": float,
    "parity_mb_s": float,
    "checksum_mb_s": float,
    "compress_mb_s": float,
    "decompress_mb_s": float,
    "message_us": float,
    "message_mb_s": float,
    "message_holds_cpu": bool,
    "cost_scale": float,
}


class HostCatalogError(ValueError):
    """hosts.toml is malformed (a bug in the data file, not a user mistake)."""


@dataclasses.dataclass(frozen=True)
class HostModel:
    """One host's processors and costs (module doc); `sources` gives each field's provenance."""

    name: str
    description: str = ""
    processors: int = 1
    request_us: float = 0.0
    interrupt_us: float = 0.0
    copy_mb_s: float = 0.0
    parity_mb_s: float = 0.0
    checksum_mb_s: float = 0.0
    compress_mb_s: float = 0.0
    decompress_mb_s: float = 0.0
    message_us: float = 0.0
    message_mb_s: float = 0.0
    message_holds_cpu: bool = True
    cost_scale: float = 1.0
    sources: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.processors < 1:
            raise UsageError(f"host {self.name}: processors must be at least 1, not {self.processors}")
        for key, kind in FIELDS.items():
            if kind is float and getattr(self, key) < 0:
                raise UsageError(f"host {self.name}: {key} cannot be negative ({getattr(self, key)})")

    def seconds(self, kind: str, nbytes: int = 0) -> float:
        """What one piece of work of `kind` over `nbytes` costs on this host (0: free)."""
        def per_byte(rate_mb_s: float) -> float:
            return nbytes / (rate_mb_s * 1e6) if rate_mb_s else 0.0

        if kind == "request":
            base = (self.request_us + self.interrupt_us) * 1e-6
        elif kind == "copy":
            base = per_byte(self.copy_mb_s)
        elif kind == "parity":
            base = per_byte(self.parity_mb_s)
        elif kind == "checksum":
            base = per_byte(self.checksum_mb_s)
        elif kind == "compress":
            base = per_byte(self.compress_mb_s)
        elif kind == "decompress":
            base = per_byte(self.decompress_mb_s)
        elif kind == "message":
            base = self.message_us * 1e-6 + per_byte(self.message_mb_s)
        else:
            raise ValueError(f"unknown kind of host work {kind!r} (known: {', '.join(KINDS[:-1])})")
        return base * self.cost_scale

    def with_values(self, values: dict[str, Any], why: str) -> "HostModel":
        """This model with some fields replaced; each replaced field's provenance becomes `why`
        (a scenario's calibration or a sweep's value)."""
        unknown = sorted(set(values) - set(FIELDS))
        if unknown:
            raise UsageError(f"host has no parameter {unknown[0]!r}", hint=f"its parameters: {', '.join(FIELDS)}")
        fields: dict[str, Any] = {}
        for key, value in values.items():
            fields[key] = _typed(key, value, UsageError)
        sources = dict(self.sources) | {key: why for key in fields}
        return dataclasses.replace(self, **fields, sources=tuple(sorted(sources.items())))

    def describe(self) -> dict[str, Any]:
        """The model as a result document records it: every field and where it came from."""
        return {"name": self.name, "description": self.description,
                **{key: getattr(self, key) for key in FIELDS}, "sources": dict(self.sources)}


def _typed(key: str, value: Any, error: type[Exception]) -> Any:
    """`value` as field `key`'s type: a flag must be true or false, a number a number."""
    kind = FIELDS[key]
    if kind is bool:
        if not isinstance(value, bool):
            raise error(f"host parameter {key} = {value!r} is not true or false")
        return value
    if isinstance(value, bool):
        raise error(f"host parameter {key} = {value!r} is not a number")
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise error(f"host parameter {key} = {value!r} is not a number") from None


def _build(name: str, entry: dict) -> HostModel:
    params = entry.get("params", {})
    fields: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for key, spec in params.items():
        if key not in FIELDS:
            raise HostCatalogError(f"{name}: unknown parameter {key}")
        if not isinstance(spec, dict) or "value" not in spec:
            raise HostCatalogError(f"{name}.{key}: expected a table with value and source/assumed")
        if "source" in spec:
            sources[key] = str(spec["source"])
        elif "assumed" in spec:
            sources[key] = "assumed: " + str(spec["assumed"])
        else:
            raise HostCatalogError(f"{name}.{key}: a number without `source` or `assumed`")
        fields[key] = _typed(key, spec["value"], HostCatalogError)
    for key in FIELDS:
        if key not in fields and key != "cost_scale":
            raise HostCatalogError(f"{name}: {key} is not given (a free host gives 0 with its reason)")
    return HostModel(name=name, description=str(entry.get("description", "")), **fields,
                     sources=tuple(sorted(sources.items())))


@functools.cache
def _catalog() -> dict[str, HostModel]:
    text = resources.files("raidlab.disks").joinpath("data/hosts.toml").read_text()
    doc = tomllib.loads(text)
    return {name: _build(name, entry) for name, entry in doc.get("hosts", {}).items()}


def names() -> list[str]:
    return sorted(_catalog())


def get(name: str) -> HostModel:
    try:
        return _catalog()[name]
    except KeyError:
        raise UnknownModelError(f"unknown host model {name!r}", hint=f"known: {', '.join(names())}") from None


def resolve(table: dict[str, Any] | None) -> HostModel | None:
    """The host a scenario's [host] table names: `model` (a catalog name), and any field
    replaced by its value, with `calibrated` (text) saying where replaced values came from
    and `calibrated_on` (claim ids) the claims whose rows they were calibrated on, which the
    report shows but does not judge. None without a table: no host (virtual time charges no
    processor)."""
    if not table:
        return None
    table = dict(table)
    table.pop("calibrated_on", None)  # the claims the values were calibrated on (the report reads it)
    model = table.pop("model", None)
    if not isinstance(model, str):
        raise UsageError("[host] needs model = \"<name>\"", hint=f"hosts: {', '.join(names())}")
    why = str(table.pop("calibrated", "set by the scenario"))
    base = get(model)
    return base.with_values(table, why) if table else base


class Host:
    """A HostModel's processors at work in one virtual-time run (module doc)."""

    def __init__(self, model: HostModel) -> None:
        self.model = model
        self.cpus = [Timeline() for _ in range(model.processors)]
        self.busy = [0.0] * model.processors
        self.wait = [0.0] * model.processors
        self.seconds = {kind: 0.0 for kind in KINDS}
        self.counts = {kind: 0 for kind in KINDS}
        self.bytes = {kind: 0 for kind in KINDS}
        self.delay_s = 0.0  # message costs that held no processor (message_holds_cpu false)

    def _pick(self, now: float, duration: float) -> int:
        starts = [cpu.earliest_start(now, now, duration) for cpu in self.cpus]
        return min(range(len(starts)), key=lambda i: (starts[i], i))

    async def run_for(self, seconds: float, kind: str, *, cpu: int | None = None, nbytes: int = 0) -> float:
        """Book `seconds` of `kind` work on processor `cpu` (or the soonest free one) and
        return when it is done; the time it ends."""
        if cpu is not None and not 0 <= cpu < len(self.cpus):
            raise ValueError(f"processor {cpu} of a {len(self.cpus)}-processor host")
        self.counts[kind] += 1
        self.bytes[kind] += nbytes
        now = sched.current_time()
        if seconds <= 0:
            return now
        index = self._pick(now, seconds) if cpu is None else cpu
        start = self.cpus[index].reserve(now, now, seconds)
        self.busy[index] += seconds
        self.wait[index] += start - now
        self.seconds[kind] += seconds
        end = start + seconds
        await sched.sleep_until(end)
        return end

    async def charge(self, kind: str, nbytes: int = 0, *, cpu: int | None = None) -> float:
        """One piece of `kind` work over `nbytes` (HostModel.seconds), on `cpu` or the soonest
        free processor; returns when it is done. A message whose cost does not hold the
        processor (message_holds_cpu false) is a delay of that length, which any number of
        messages take at once."""
        seconds = self.model.seconds(kind, nbytes)
        if kind == "message" and not self.model.message_holds_cpu:
            self.counts[kind] += 1
            self.bytes[kind] += nbytes
            self.delay_s += seconds
            await sched.sleep(seconds)
            return sched.current_time()
        return await self.run_for(seconds, kind, cpu=cpu, nbytes=nbytes)

    async def program(self, seconds: float, *, cpu: int) -> None:
        """A user program's own processor time on `cpu`, in slices (module doc); scaled by
        cost_scale like every other charge."""
        left = seconds * self.model.cost_scale
        while left > 1e-12:
            piece = min(PROGRAM_SLICE_S, left)
            await self.run_for(piece, "program", cpu=cpu)
            left -= piece

    def statistics(self, elapsed: float | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "model": self.model.describe(),
            "processors": [{"cpu": i, "busy_s": self.busy[i], "wait_s": self.wait[i],
                            **({"utilization": self.busy[i] / elapsed} if elapsed else {})}
                           for i in range(len(self.cpus))],
            "work": {kind: {"count": self.counts[kind], "bytes": self.bytes[kind], "seconds": self.seconds[kind]}
                     for kind in KINDS if self.counts[kind]},
            "message_delay_s": self.delay_s,
        }
        return out
