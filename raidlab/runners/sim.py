"""kind = "sim" scenarios: one (architecture, case) run = one virtual-time trace replay.

Called through raidlab.runners.run_case (`raidlab run`) as `run_case(scenario, arch_entry,
case) -> result document`, the same document a live run writes. Why it is built this way:

* The trace of a case is generated, not read from a file: the DCD paper's HP traces are not
  redistributable, so its tables replay synthetic look-alikes (raidlab.traces.synth). The
  trace is a deterministic function of (profile, duration, trace_seed, device size), so it is
  streamed straight into the replay and never stored; the result records how to regenerate
  it and its `trace stats` (computed on the same stream).
* Every architecture of a scenario replays the *same* trace: its address space is the
  smallest volume among the scenario's [[arch]] entries (a logical DCD's volume is its drive
  minus the cache-disk), so no request is past the end of any of them.
* Or `params.trace` names a trace file (any format of raidlab.traces.formats, `format`),
  e.g. one recorded with `raidlab trace capture`.
* Metrics are the paper's: mean and max response time of writes and reads (DCD Tables 2-5,
  "average response time ... the sum of all individual response times divided by the number
  of requests"), plus percentiles, per-disk utilisation and the architecture's counters that
  explain them (log writes, destages, forced destages, buffer-full waits). The replay is
  deterministic, so the document is too, except `raw.speed` (wall clock).

Case parameters (merged [workload].params and [[case]].params):
    profile      synthetic profile (hplajw, snake, cello, oltp)        | or trace + format
    duration     trace length: seconds or 90s/15m/2h/3d
    trace_seed   seed of the synthetic trace (default 1); repetition k replays trace_seed + k - 1
    seed         seed of the written data's content (compressibility; default 0)
    compact      divide inter-arrival times (default 1)
    compressibility  written data of which this share compresses away (default: zeros);
                 for architectures that compress (TSS)
    outstanding  closed loop: at most this many requests in flight (default: open loop)
    device_size  the synthetic trace's address space (default: the smallest volume of the
                 scenario's architectures)
An [[arch]] entry may name a TSS `policy` (and `policy_options`) that runs beside its replay.
"""

from __future__ import annotations

from typing import Any

from raidlab import archs
from raidlab.disks import host as hosts
from raidlab.errors import UsageError
from raidlab.units import parse_size
from raidlab.runners.virtual import SimSpec, StreamReader, replay, sim_config
from raidlab.traces.formats import TraceReader
from raidlab.traces.stats import TraceStats
from raidlab.traces.synth import HP_C2200A_BYTES, synth
from raidlab.workloads.trace import CASE_PARAMS, WORKLOAD, duration_seconds, validate_params

def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def volume_size(arch_entry: Any) -> int | None:
    """The bytes a replay of `arch_entry` can address (its volume), where the registry's
    declaration knows it without building (Architecture.volume); else None (arrays: the
    replay reports it)."""
    arch = archs.get(_get(arch_entry, "arch"))
    if arch.volume is None:
        return None
    _arch, config = sim_config(_sim_spec(arch_entry, {}))
    return arch.volume(config, archs.VIRTUAL)


def trace_device_size(scenario: Any) -> int:
    sizes = [s for s in (volume_size(a) for a in _get(scenario, "archs", ())) if s]
    if not sizes:
        return HP_C2200A_BYTES
    return min(sizes)


def _sim_spec(arch_entry: Any, params: dict[str, Any], host: Any = None):
    """The SimSpec of one [[arch]] entry with the case's replay parameters, on `host` (a
    HostModel, or None: no host charged)."""
    arch = _get(arch_entry, "arch")
    disks = _get(arch_entry, "disks")
    declared = archs.REGISTRY.get(arch)
    one_disk = declared is not None and declared.one_disk  # --disks 1 and --chunk mean nothing there
    return SimSpec(
        arch=arch, disk_model=_get(arch_entry, "disk_model"),
        disks=None if one_disk and disks in (None, 1) else disks,
        chunk=_get(arch_entry, "chunk") if not one_disk else None,
        disk_size=_get(arch_entry, "disk_size"), discipline=_get(arch_entry, "discipline", "fifo") or "fifo",
        compact=float(params.get("compact", 1.0)), seed=int(params.get("seed", 0)),
        options=dict(_get(arch_entry, "options", {}) or {}),
        compressibility=float(params["compressibility"]) if "compressibility" in params else None,
        outstanding=int(params["outstanding"]) if "outstanding" in params else None,
        policy=_get(arch_entry, "policy"), policy_options=dict(_get(arch_entry, "policy_options", {}) or {}),
        bus=_get(arch_entry, "bus"), drives=_get(arch_entry, "drives"), partitions=_get(arch_entry, "partitions"),
        write_cache=_get(arch_entry, "write_cache", "model") or "model", span=_get(arch_entry, "span"),
        flushes=_get(arch_entry, "flushes", "honoured") or "honoured", host=host)


def _metric(value: float | None, unit: str) -> dict[str, Any]:
    return {"value": value, "unit": unit}


def host_metrics(stats: dict[str, Any] | None) -> dict[str, Any]:
    """A run's host counters as metrics (raidlab.disks.host.Host.statistics): each processor's
    utilisation and the seconds of each kind of work; none without a host."""
    if not stats:
        return {}
    out = {f"host_utilization_cpu{p['cpu']}": _metric(p.get("utilization"), "fraction")
           for p in stats["processors"]}
    for kind, work in stats["work"].items():
        out[f"host_{kind}_s"] = _metric(work["seconds"], "s")
    return out


def metrics_of(report: dict[str, Any]) -> dict[str, Any]:
    """The result document's metrics from a replay report (pure)."""
    out: dict[str, Any] = {}
    for op in ("write", "read", "all"):
        summary = report["response"][op]
        out[f"{op}_count"] = _metric(summary["count"], "requests")
        for stat in ("mean", "max", "p50", "p95", "p99"):
            out[f"{op}_{stat}_ms"] = _metric(summary.get(f"{stat}_ms"), "ms")
    for op in ("write", "read", "all"):
        out[f"{op}_per_block_ms"] = _metric(report["per_block"][op], "ms")
        out[f"{op}_ms_per_kib"] = _metric(report["per_block"]["ms_per_kib"][op], "ms")
        out[f"{op}_request_ms_per_kib"] = _metric(report["per_block"]["request_mean"][op], "ms")
    out["virtual_seconds"] = _metric(report["virtual_seconds"], "s")
    out["requests"] = _metric(report["trace"]["requests"], "requests")
    for disk in report["per_disk"]:
        out[f"utilization_{disk['name']}"] = _metric(disk["utilization"], "fraction")
        out[f"mean_wait_ms_{disk['name']}"] = _metric(disk["mean_wait_ms"], "ms")
    bus = report.get("bus")
    if bus is not None:
        out["bus_utilization"] = _metric(bus["utilization"], "fraction")
        out["bus_wait_s"] = _metric(bus["wait_s"], "s")
    out.update(host_metrics(report.get("host")))
    arch = report["architecture"]
    for key in ("log_writes", "destages", "forced_destages", "waited_for_full_buffer", "large_writes_to_data_disk",
                "idle_periods_found", "read_hits_ram_sectors", "read_hits_cache_disk_sectors",
                "read_hits_data_disk_sectors", "level1_destages", "level2_destages"):
        if key in arch:
            out[key] = _metric(arch[key], "count")
    declared = archs.REGISTRY.get(arch.get("arch"))
    if declared is not None and declared.sim_metrics is not None:  # its own (TSS: space per personality, migrations)
        for name, (value, unit) in declared.sim_metrics(arch).items():
            out[name] = _metric(value, unit)
    return out


def run_case(scenario: Any, arch_entry: Any, case: Any, *, repetition: int = 1) -> dict[str, Any]:
    """Replay `case`'s trace on `arch_entry` in virtual time; return the result document (see
    the module doc). The full replay report is its raw.replay; nothing is written beside it
    (a replay.json would only repeat what the run's JSON already holds). Repetition k of a
    synthetic trace replays seed trace_seed + k - 1: a replay is deterministic, so repeating
    one seed would only repeat its number."""
    params = dict(_get(case, "params", {}) or {})
    host = hosts.resolve(_get(scenario, "host"))
    if _get(scenario, "workload") == "seqfile":
        return run_stream_case(arch_entry, params, repetition=repetition, host=host)
    if _get(scenario, "workload") == "parallel":
        return run_parallel_case(arch_entry, params, repetition=repetition, host=host)
    if _get(scenario, "workload") == "bonnie":
        return run_bonnie_case(arch_entry, params, repetition=repetition, host=host)
    if _get(scenario, "workload") == "andrew":
        return run_andrew_case(arch_entry, params, repetition=repetition, host=host)
    validate_params(params)
    spec = _sim_spec(arch_entry, params, host)
    stats = TraceStats()
    equivalent: list[list[str]] = []
    if "profile" in params:
        duration = duration_seconds(params["duration"])
        trace_seed = int(params.get("trace_seed", 1)) + repetition - 1
        device_size = trace_device_size(scenario)
        if "device_size" in params:
            wanted = parse_size(str(params["device_size"]))
            if wanted > device_size:
                raise UsageError(f"device_size {params['device_size']} is larger than the smallest volume "
                                 f"of the scenario ({device_size} bytes)")
            device_size = wanted
        stream = synth(str(params["profile"]), duration, trace_seed, device_size=device_size)
        source = {"profile": params["profile"], "duration_s": duration, "trace_seed": trace_seed,
                  "device_size": device_size, "synthetic": True}
        equivalent.append(["raidlab", "trace", "synth", "--profile", str(params["profile"]), "--duration",
                           f"{duration:g}", "--seed", str(trace_seed), "--device-size", str(device_size),
                           "-o", "TRACE"])
        fmt = "raidlab"

        def observed(requests):
            add = stats.add
            for request in requests:
                add(request)
                yield request

        reader = StreamReader(observed(stream))
        reader.name = f"synth:{params['profile']}:{duration:g}s:seed{trace_seed}"
    else:
        fmt = str(params.get("format", "raidlab"))
        source = {"file": str(params["trace"]), "format": fmt, "synthetic": False}

        class _Observed(TraceReader):  # same reader, with trace stats on the side
            def __iter__(self_inner):
                for request in TraceReader.__iter__(self_inner):
                    stats.add(request)
                    yield request

        reader = _Observed(str(params["trace"]), fmt)
    argv = ["raidlab", "sim", "--arch", spec.arch, "--disk-model", spec.disk_model, "--trace", "TRACE",
            "--format", fmt, "--seed", str(spec.seed), "--compact", f"{spec.compact:g}", "--json"]
    if spec.disks:
        argv += ["--disks", str(spec.disks)]
    if spec.chunk:
        argv += ["--chunk", str(spec.chunk)]
    if spec.disk_size:
        argv += ["--disk-size", str(spec.disk_size)]
    for key, value in spec.options.items():
        if isinstance(value, (list, tuple)):  # e.g. cache_models: the CLI's m0,m1
            value = ",".join(str(v) for v in value)
        argv += ["-o", f"{key}={value}"]
    if spec.compressibility is not None:
        argv += ["--compressibility", f"{spec.compressibility:g}"]
    if spec.outstanding is not None:
        argv += ["--outstanding", str(spec.outstanding)]
    if spec.bus is not None:
        argv += ["--bus", str(spec.bus)]
    if spec.write_cache != "model":
        argv += ["--write-cache", spec.write_cache]
    if spec.flushes != "honoured":
        argv += ["--flushes", spec.flushes]
    if spec.span is not None:
        argv += ["--span", spec.span]
    if spec.drives is not None:
        argv += ["--drives", str(spec.drives)]
    if spec.partitions is not None:
        argv += ["--partitions", spec.partitions]
    if spec.policy is not None:
        argv += ["--policy", spec.policy]
        for key, value in spec.policy_options.items():
            argv += ["--policy-option", f"{key}={value}"]
    equivalent.append(argv)
    report = replay(spec, reader)
    speed = report.pop("speed")
    return {
        "workload": WORKLOAD,
        "params": params,
        "metrics": metrics_of(report),
        "commands": [],
        "raw": {
            "trace": source,
            "trace_stats": stats.summary(),
            "equivalent_commands": equivalent,
            "replay": report,
            "speed": speed,
        },
    }


def run_stream_case(arch_entry: Any, params: dict[str, Any], *, repetition: int = 1,
                    host: Any = None) -> dict[str, Any]:
    """The seqfile workload in virtual time (raidlab.runners.stream) on `arch_entry`: repetition
    k uses scheduling seed `seed` + k - 1 (a run is deterministic; the seed only breaks ties
    between simultaneous events, so repetitions show how much those matter)."""
    from raidlab.runners.stream import run_stream
    from raidlab.workloads.seqfile import resolve_sim as resolve

    resolved = resolve(params)
    resolved["seed"] = resolved["seed"] + repetition - 1
    spec = _sim_spec(arch_entry, {}, host)
    report = run_stream(spec, resolved)
    speed = report.pop("speed")
    metrics: dict[str, Any] = {}
    for phase in ("write", "read"):
        metrics[f"{phase}_mb_s"] = _metric(report[f"{phase}_mb_s"], "MB/s")
        metrics[f"{phase}_seconds"] = _metric(report[f"{phase}_seconds"], "s")
        for member in report[f"members_{phase}"]:
            metrics[f"{phase}_utilization_{member['name']}"] = _metric(member["utilization"], "fraction")
    if "random_mb_s" in report:
        metrics["random_mb_s"] = _metric(report["random_mb_s"], "MB/s")
        metrics["random_mean_ms"] = _metric(report["random_mean_ms"], "ms")
    metrics["write_read_mb_s"] = _metric(2 * report["file_bytes"] / (report["write_seconds"] + report["read_seconds"])
                                         / 1e6, "MB/s")
    if report.get("bus"):
        metrics["bus_utilization"] = _metric(report["bus"]["utilization"], "fraction")
        metrics["bus_wait_s"] = _metric(report["bus"]["wait_s"], "s")
    metrics.update(host_metrics(report.get("host")))
    probe = (report.get("arch_state") or {}).get("probe")
    if probe:
        for entry in probe:
            metrics[f"probe_mb_s_d{entry['member']}"] = _metric(entry["bandwidth"] / 1e6, "MB/s")
    return {"workload": "seqfile", "params": resolved, "metrics": metrics, "commands": [],
            "raw": {"stream": report, "speed": speed}}


def run_parallel_case(arch_entry: Any, params: dict[str, Any], *, repetition: int = 1,
                      host: Any = None) -> dict[str, Any]:
    """The parallel workload on the cluster's twin (raidlab.runners.parallel) on `arch_entry`:
    repetition k uses seed `seed` + k - 1 (scheduling ties and the small accesses' places)."""
    from raidlab.runners.parallel import run_parallel
    from raidlab.workloads.parallel import resolve_sim as resolve

    resolved = resolve(params)
    resolved["seed"] = resolved["seed"] + repetition - 1
    report = run_parallel(_sim_spec(arch_entry, {}, host), resolved)
    speed = report.pop("speed")
    seconds = report["seconds"]
    metrics: dict[str, Any] = {
        "aggregate_mb_s": _metric(report["aggregate_mb_s"], "MB/s"),
        "seconds": _metric(seconds, "s"),
        "clients": _metric(resolved["clients"], "clients"),
    }
    for member in report["members"]:
        metrics[f"utilization_{member['name']}"] = _metric(member["utilization"], "fraction")
    nodes = report["network"]["nodes"]
    for key in ("send", "receive", "cpu"):
        metrics[f"max_{key}_utilization"] = _metric(max(n[f"{key}_utilization"] for n in nodes), "fraction")
    metrics["network_bytes"] = _metric(sum(n["bytes_sent"] for n in nodes), "bytes")
    return {"workload": "parallel", "params": resolved, "metrics": metrics, "commands": [],
            "raw": {"parallel": report, "speed": speed}}


def run_bonnie_case(arch_entry: Any, params: dict[str, Any], *, repetition: int = 1,
                    host: Any = None) -> dict[str, Any]:
    """Bonnie from one node of the cluster's twin (raidlab.runners.bonnie) on `arch_entry`:
    repetition k uses seed `seed` + k - 1 (scheduling ties and the seeks' places)."""
    from raidlab.runners.bonnie import PHASES, run_bonnie
    from raidlab.workloads.bonnie import resolve_sim as resolve

    resolved = resolve(params)
    resolved["seed"] = resolved["seed"] + repetition - 1
    report = run_bonnie(_sim_spec(arch_entry, {}, host), resolved)
    speed = report.pop("speed")
    metrics: dict[str, Any] = {}
    for name in PHASES:
        phase = report["phases"][name]
        if name == "random_seeks":
            metrics["random_seeks_per_s"] = _metric(phase["per_s"], "1/s")
        else:
            metrics[f"{name}_mb_s"] = _metric(phase["mb_s"], "MB/s")
        metrics[f"{name}_seconds"] = _metric(phase["seconds"], "s")
        metrics[f"{name}_client_cpu_utilization"] = _metric(phase["client_cpu_utilization"], "fraction")
        metrics[f"{name}_max_member_utilization"] = _metric(
            max(m["utilization"] for m in phase["members"]), "fraction")
    return {"workload": "bonnie", "params": resolved, "metrics": metrics, "commands": [],
            "raw": {"bonnie": report, "speed": speed}}


def run_andrew_case(arch_entry: Any, params: dict[str, Any], *, repetition: int = 1,
                    host: Any = None) -> dict[str, Any]:
    """One Andrew benchmark per client on the cluster's twin (raidlab.runners.andrew) on
    `arch_entry`: repetition k uses seed `seed` + k - 1 (scheduling ties, the reads' places)."""
    from raidlab.runners.andrew import run_andrew
    from raidlab.workloads.andrew import PHASES, resolve_sim as resolve

    resolved = resolve(params)
    resolved["seed"] = resolved["seed"] + repetition - 1
    report = run_andrew(_sim_spec(arch_entry, {}, host), resolved)
    speed = report.pop("speed")
    metrics: dict[str, Any] = {
        "elapsed_seconds": _metric(report["elapsed_seconds"], "s"),
        "max_elapsed_seconds": _metric(report["max_elapsed_seconds"], "s"),
        "clients": _metric(resolved["clients"], "clients"),
    }
    for phase in PHASES:
        metrics[f"{phase}_seconds"] = _metric(report["phase_seconds"][phase], "s")
    nodes = report["network"]["nodes"]
    for key in ("send", "receive", "cpu"):
        metrics[f"max_{key}_utilization"] = _metric(max(n[f"{key}_utilization"] for n in nodes), "fraction")
    return {"workload": "andrew", "params": resolved, "metrics": metrics, "commands": [],
            "raw": {"andrew": report, "speed": speed}}


# ------------------------------------------------------------------------------ scenarios
