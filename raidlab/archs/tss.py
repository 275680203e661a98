"""TSS, Temperature Sensitive Storage (Pallipadi & Gopinath, ALS 2001), as an architecture.

The mechanism is raidlab.engine.tss (the integrated device, its map table, persistence and
temperatures). Members are the columns, `--chunk` the stripe unit; a logical stripe holds
(columns - 1) stripe units.

Options (-o):
* mode: tss (the integrated device) or a static device of one personality, raid1, raid5 or
  craid5 (the paper's Table 3 "RAID devices through TSS");
* placement: halfway or successive, where a RAID1 stripe's second physical stripe goes
  (§4, Table 2; the paper ran everything after Table 2 with halfway);
* substripes: allocation units of a physical stripe for cRAID5 (§3.3's example: 4);
* logical_stripes: how many logical stripes the device exports (default: as many as fit
  beside the reserved stripe; a static RAID1 device, half as many);
* read_balance: RAID1 reads from the copy whose columns served fewer reads (§4), on/off;
* cpu_cost: what compression and decompression cost in virtual time (none; host: the run's
  host charges compression, its cache copy and parity on its processors, see
  raidlab.engine.tss.compression; measured: lz4 timed on this host; or "C/D": C MB/s
  compressing and D MB/s decompressing); live, the host's own CPU pays and only none is
  accepted;
* log, log_size, log_model: the data log (§3.8) on a drive of its own after the columns
  (the paper's "additional partition for logging"), 4 MiB of the first column's model by
  default (an assumption: the paper gives no size);
* writes, max_async: sync (log, write, commit, then acknowledge); async (§4: log, do the
  stripe write's reads and compression, issue its member writes and acknowledge; the
  commit follows when they are done); logged (acknowledge once logged, the whole stripe
  write in the background); at most max_async = 8 background stripe writes (§4);
* allocate_on_read: a first read allocates the stripe and reads its disks, as §3.6's device
  did (on), or answers zeros without any I/O (off).

Drives: live, d0..d{N-1} of --disk-size. In virtual time the drives keep their data
(Drive.keeps_data): cRAID5 decompresses what it wrote, so a replay needs the bytes; memory
grows only with what the replay writes. Without --chunk in virtual time the stripe unit is
16 KiB, an assumption (the paper does not give its stripe unit).

Served live by the TSS family's host (raidlab.service.hosts.tss), with the paper's ioctls as
control operations (`raidlab tss`). In the campaigns: the crash test runs it with the map
table on its private area alone and with its data log, writes acknowledged after the stripe
write and commit (sync) or once logged (async); the fault campaign fails a column and the
log drive; a replay reports the space each personality holds and the migrations
(`sim_metrics`).
"""

from __future__ import annotations

from typing import Any

from raidlab.archs.base import (LIVE, VIRTUAL, Architecture, BuildContext, Built, Config, CrashPreset, DamageTarget,
                                Drive, Family, FaultCell, Option)
from raidlab.archs.layouts import drive_size
from raidlab.disks import catalog
from raidlab.engine.tss.build import TSSOptions, assemble_tss, create_tss, plan_geometry
from raidlab.engine.tss.compression import CpuCost, HostCost, measured_cost
from raidlab.engine.tss.control import TSSControl
from raidlab.engine.tss.device import MODES
from raidlab.engine.tss.maptable import CRAID5, PLACEMENTS, RAID1, RAID5
from raidlab.errors import UsageError
from raidlab.units import parse_size

# The TSS family: served live by its own host, natively over loop and FUSE.
FAMILY = Family("tss", {"native": "native-engine", "vm": "vm"}, host="raidlab.service.hosts.tss:TSSHost")
PERSONALITIES = (RAID1, RAID5, CRAID5)

DEFAULT_UNIT_VIRTUAL = 16 * 1024
DEFAULT_COLUMNS = 3  # the paper's three Quantum Fireball drives (§5.3)

OPTIONS = (
    Option("mode", "tss", f"tss (integrated) or a static {', '.join(MODES[1:])} device (Table 3)"),
    Option("placement", "halfway", "RAID1 mirror placement: halfway or successive (§4, Table 2)"),
    Option("substripes", 4, "cRAID5 allocation units per physical stripe (§3.3)"),
    Option("logical_stripes", None, "logical stripes exported (default: all that fit)"),
    Option("read_balance", "on", "RAID1 reads from the less-read copy (§4): on/off"),
    Option("cpu_cost", "none", "processor time in virtual time: none, host (the run's host), measured, or C/D MB/s"),
    Option("log", "off", "the data log (§3.8) on a log drive after the columns: on/off"),
    Option("log_size", "4M", "bytes of the log drive"),
    Option("log_model", None, "the log drive's model (default: the first column's)"),
    Option("writes", "sync", "sync; async: member writes not waited for (§4); logged: acknowledged once logged (need log=on)"),
    Option("max_async", 8, "asynchronous stripe writes in flight at most (§4, Table 1)"),
    Option("allocate_on_read", "on", "a read of an invalid stripe allocates it and reads its disks (§3.6)"),
)


def _on_off(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).lower()
    if text in ("on", "true", "1", "yes"):
        return True
    if text in ("off", "false", "0", "no"):
        return False
    raise UsageError(f"option {key}={value} is not on or off")


def _positive_int(key: str, value: Any, *, allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise UsageError(f"option {key}={value} is not a whole number") from None
    if isinstance(value, bool) or number < 1 or str(number) != str(value).strip():
        raise UsageError(f"option {key}={value} must be a whole number of at least 1")
    return number


def tss_options(options: dict[str, Any]) -> tuple[TSSOptions, str]:
    """(TSSOptions, cpu_cost text) from -o options, refusing unknown or bad values."""
    arch = ARCHITECTURES[0]
    arch.check_option_names(options)
    merged = {o.name: o.default for o in OPTIONS} | dict(options)
    parsed = TSSOptions(mode=str(merged["mode"]), placement=str(merged["placement"]),
                        substripes=_positive_int("substripes", merged["substripes"]),
                        logical_stripes=_positive_int("logical_stripes", merged["logical_stripes"], allow_none=True),
                        read_balance=_on_off("read_balance", merged["read_balance"]),
                        log=_on_off("log", merged["log"]), writes=str(merged["writes"]),
                        max_async=_positive_int("max_async", merged["max_async"]),
                        allocate_on_read=_on_off("allocate_on_read", merged["allocate_on_read"]))
    parsed.check()  # mode, placement, writes
    log_size(merged)
    if merged["log_model"] is not None:
        catalog.get(str(merged["log_model"]))
    cost = str(merged["cpu_cost"])
    cpu_cost(cost, VIRTUAL, check_only=True)
    return parsed, cost


def cpu_cost(text: str, clock: str, *, check_only: bool = False, host: Any = None) -> CpuCost | HostCost | None:
    """The cost named by the cpu_cost option (module doc); `host` is the run's host, which
    cpu_cost=host charges."""
    if text == "none":
        return None
    if clock == LIVE:
        raise UsageError(f"cpu_cost={text} charges time in virtual time only",
                         hint="a live device pays the host's real CPU time; drop the option")
    if text == "host":
        if check_only:
            return None
        if host is None:
            raise UsageError("cpu_cost=host needs a host to charge",
                             hint="give the scenario a [host] table (raidlab.disks.host)")
        return HostCost(host)
    if text == "measured":
        return None if check_only else measured_cost()
    try:
        compress_mb_s, decompress_mb_s = (float(part) for part in text.split("/"))
    except ValueError:
        raise UsageError(f"option cpu_cost={text} is not none, host, measured or C/D",
                         hint="write it like cpu_cost=2.1/5.4 (MB/s compressing / decompressing)") from None
    if not (compress_mb_s > 0 and decompress_mb_s > 0):
        raise UsageError(f"option cpu_cost={text}: rates must be positive")
    return CpuCost(1e-6 / compress_mb_s, 1e-6 / decompress_mb_s, f"{compress_mb_s:g}/{decompress_mb_s:g} MB/s")


def log_size(merged: dict[str, Any]) -> int:
    value = merged.get("log_size", "4M")
    try:
        size = value if isinstance(value, int) and not isinstance(value, bool) else parse_size(str(value))
    except UsageError:
        raise UsageError(f"option log_size={value} is not a size", hint="write it like log_size=4M") from None
    if size < 64 * 1024 or size % 512:
        raise UsageError(f"option log_size={value}: the log needs at least 64 KiB in whole sectors")
    return size


def _unit(config: Config, clock: str) -> int:
    if config.chunk is not None:
        return config.chunk
    if clock != VIRTUAL:
        raise UsageError("tss needs a stripe unit", hint="give --chunk")
    return DEFAULT_UNIT_VIRTUAL


def plan(config: Config, clock: str) -> list[Drive]:
    """The columns d0..d{N-1}, then (log=on) the log drive: d{N} live, "log" in virtual time."""
    models = catalog.member_models(config.disk_model, config.disks or DEFAULT_COLUMNS)
    size = drive_size(Config("tss", 1, config.disk_size, None, disk_model=models[0]), clock)
    drives = [Drive(f"d{index}", model, size, keeps_data=clock == VIRTUAL) for index, model in enumerate(models)]
    merged = {o.name: o.default for o in OPTIONS} | dict(config.options)
    if _on_off("log", merged["log"]):
        name = "log" if clock == VIRTUAL else f"d{len(models)}"
        drives.append(Drive(name, str(merged["log_model"] or models[0]), log_size(merged), span="start",
                            keeps_data=clock == VIRTUAL))
    return drives


def volume_size(config: Config, clock: str) -> int:
    """Bytes of the device `config` builds (its logical stripes), without building it."""
    options, _cost = tss_options(config.options)
    drives = plan(config, clock)
    columns = len(drives) - (1 if options.log else 0)
    geometry, logical = plan_geometry(columns, drives[0].size, _unit(config, clock), options)
    return logical * geometry.data_bytes


def check(config: Config, runner: str) -> None:
    clock = VIRTUAL if runner == "sim" else LIVE
    options, cost = tss_options(config.options)
    cpu_cost(cost, clock, check_only=True)
    drives = plan(config, clock)
    columns = len(drives) - (1 if options.log else 0)
    plan_geometry(columns, drives[0].size, _unit(config, clock), options)


async def build(ctx: BuildContext) -> Built:
    """Create or assemble the device over the drives of `plan`. parts: "device", and
    "control" (its TSSControl, which a replay's policy uses)."""
    options, cost_text = tss_options(ctx.config.options)
    cost = cpu_cost(cost_text, ctx.clock, host=ctx.host)
    if ctx.mode == "create":
        ctx.status(f"creating a {options.mode} TSS over {len(ctx.drives)} columns")
        device = await create_tss(ctx.name, ctx.drives, unit=_unit(ctx.config, ctx.clock), options=options,
                                  cost=cost, status=ctx.status)
    else:
        ctx.status(f"assembling {ctx.name}: loading the map table from the private area")
        device = await assemble_tss(ctx.drives, labels=ctx.labels, cost=cost, status=ctx.status)
    device.start(ctx.nursery)

    def statistics() -> dict[str, Any]:
        stats = device.statistics()
        if ctx.clock == VIRTUAL:
            stats.pop("members", None)  # the replay reports each drive itself
        return stats

    return Built(device, list(ctx.drives), statistics, {"device": device, "control": TSSControl(device)})


def drive_role(config: Config, disk: int) -> tuple[str, bool]:
    """A column, or with log=on the data log's drive after the columns, which holds no data of
    its own; the device keeps every byte without either."""
    log = str(config.options.get("log", "off")) == "on"
    return ("log drive", True) if disk == (config.disks or DEFAULT_COLUMNS) and log else ("column", True)


def sim_metrics(stats: dict[str, Any]) -> dict[str, tuple[Any, str]]:
    """A replay's metrics: the space each personality holds (the paper's Tables 3-4) and its
    overhead, the migrations, and what asynchronous writes cost the others."""
    space = stats["space"]
    backed = sum(space[f"logical_{kind}"] for kind in PERSONALITIES)
    used = sum(space[f"physical_{kind}"] for kind in PERSONALITIES)
    out: dict[str, tuple[Any, str]] = {"space_overhead": (used / backed if backed else None, "fraction")}
    for kind in PERSONALITIES:
        out[f"stripes_{kind}"] = (stats["personalities"][kind], "stripes")
    out["migrations"] = (sum(v for k, v in stats.items() if k.startswith(("promote_", "victimize_"))), "count")
    for key in ("wait_for_async_s", "wait_for_slot_s"):
        out[key] = (stats.get(key, 0.0), "s")
    out["waits_for_async"] = (stats.get("waits_for_async", 0), "count")
    return out


ARCHITECTURES = (
    Architecture(
        name="tss", family=FAMILY.name,
        summary="TSS: RAID1 / RAID5 / compressed RAID5 stripes under one map table, moved by temperature",
        source="Pallipadi & Gopinath, Temperature Sensitive Storage (ALS 2001) §3-5", options=OPTIONS,
        check=check, plan=plan, build=build, volume=volume_size,
        crash_presets=(CrashPreset("tss", 4), CrashPreset("tss-log-sync", 4, {"log": "on", "writes": "sync"}),
                       CrashPreset("tss-log-async", 4, {"log": "on", "writes": "async"})),
        fault_cells=(FaultCell("tss", 4), FaultCell("tss-log", 4, {"log": "on"}, 4)),
        damage_targets=(DamageTarget("tss", 4), DamageTarget("tss-log", 4, {"log": "on"})),
        drive_role=drive_role, sim_metrics=sim_metrics),
)
