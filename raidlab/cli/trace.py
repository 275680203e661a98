"""`raidlab trace stats|synth` and `raidlab sim`: parsing and printing only.

The actions live in raidlab.traces (formats, stats, synth, replay). `raidlab sim --json`
prints only deterministic results on stdout (the same trace, seed and options give the same
bytes); the replay speed, which is wall-clock, goes to stderr.
"""

from __future__ import annotations

import json
import sys

import click

from raidlab.errors import UsageError
from raidlab.units import parse_duration, parse_key_values, parse_size


def _size(text: str | None, option: str) -> int | None:
    """An optional size option: None when not given."""
    return None if text is None else parse_size(text, option)


def _key_values(pairs: tuple[str, ...]) -> dict[str, str]:
    """-o KEY=VALUE pairs -> dict, `cache-size` read as `cache_size` (values stay strings;
    the builder parses them)."""
    return {key.replace("-", "_"): value
            for key, value in parse_key_values(pairs, example="cache=logical").items()}


def _host_value(text: str) -> bool | float | str:
    """A --host-option value: true/false, a number, or the text as given (the host refuses it)."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return float(text)
    except ValueError:
        return text


def _print_stats(s: dict) -> None:
    click.echo(f"requests        {s['requests']}  (reads {s['reads']}, writes {s['writes']}, "
               f"flushes {s['flushes']}, trims {s['trims']})")
    click.echo(f"duration        {s['duration_s']:.3f} s   rate {s['rate_per_s']:.4g}/s")
    click.echo(f"write fraction  {s['write_fraction']:.3f}")
    click.echo(f"sizes           mean {s['size']['mean_bytes'] / 1024:.1f} KiB, max {s['size']['max_bytes'] // 1024} KiB, "
               f"1-8 KiB {s['size']['fraction_1k_to_8k']:.1%}")
    click.echo("                " + "  ".join(f"{k}:{v}" for k, v in s["size"]["classes"].items() if v))
    click.echo(f"inter-arrival   mean {s['interarrival']['mean_s'] * 1e3:.2f} ms, max {s['interarrival']['max_s']:.3f} s")
    click.echo("                " + "  ".join(f"{k}:{v}" for k, v in s["interarrival"]["classes"].items() if v))
    idle = s["idle"]
    click.echo(f"idle            {idle['fraction']:.1%} of the time in {idle['periods']} periods "
               f"(mean {idle['mean_period_s']:.3f} s, max {idle['max_period_s']:.3f} s); {idle['definition']}")
    click.echo(f"burstiness      {s['burstiness']:.1%} of requests within {idle['threshold_s'] * 1e3:g} ms of the previous")
    click.echo(f"overwrites      {s['overwrite_fraction']:.1%} of written sectors were written before")


def _print_sim(r: dict) -> None:
    sizes = sorted(set(r.get("member_sizes") or [r["disk_size"]]))
    each = f"{sizes[0]} bytes each" if len(sizes) == 1 else "sizes " + ", ".join(str(x) for x in r["member_sizes"])
    drives = r.get("physical_drives", r["disks"])
    members = "" if drives == r["disks"] else f"; {r['disks']} members: " + ", ".join(d["name"] for d in r["per_disk"])
    click.echo(f"{r['arch']} on {drives} x {r['disk_model']} ({each}{members}), "
               f"trace {r['trace']['name']} ({r['trace']['requests']} requests, compact {r['compact']:g})")
    if r["trace"]["skipped_lines"]:
        click.echo(f"skipped {r['trace']['skipped_lines']} bad lines, first: "
                   + "; ".join(f"line {b['line']}: {b['reason']}" for b in r["trace"]["bad_lines"][:3]))
    click.echo(f"virtual time {r['virtual_seconds']:.3f} s; max in flight {r['max_in_flight']}"
               + (f"; throttled {r['throttled']}" if r["throttled"] else ""))
    click.echo(f"{'response ms':<12}{'count':>9}{'mean':>10}{'p50':>10}{'p95':>10}{'p99':>10}{'max':>10}")
    for op in ("read", "write", "all"):
        s = r["response"][op]
        if s["count"]:
            click.echo(f"{op:<12}{s['count']:>9}{s['mean_ms']:>10.2f}{s['p50_ms']:>10.2f}{s['p95_ms']:>10.2f}"
                       f"{s['p99_ms']:>10.2f}{s['max_ms']:>10.2f}")
    click.echo(f"{'disk':<8}{'util':>7}{'ios':>9}{'svc ms':>9}{'resp ms':>9}{'wait ms':>9}{'mean q':>8}{'max q':>7}")
    for d in r["per_disk"]:
        click.echo(f"{d['name']:<8}{d['utilization']:>7.1%}{d['requests']:>9}{d['mean_service_ms']:>9.2f}"
                   f"{d['mean_response_ms']:>9.2f}{d['mean_wait_ms']:>9.2f}{d['mean_queue_length']:>8.2f}"
                   f"{d['max_queue_length']:>7}")
    layout = r.get("layout")
    if layout:
        where = ", ".join(f"{m['name']}={m.get('partition') or m.get('slot')}@{m['drive']}"
                          + (f" (zone {m['zone']})" if "zone" in m else "") for m in layout["members"])
        click.echo(f"members on {layout['drives']} drives: {where}")
        for d in r.get("drives") or []:
            click.echo(f"{d['name']:<8}{d['utilization']:>7.1%} busy (whole drive)")
    if r.get("host"):
        h = r["host"]
        work = ", ".join(f"{kind} {w['seconds']:.3g} s" for kind, w in h["work"].items() if w["seconds"])
        click.echo(f"host {h['model']['name']}: " + ", ".join(f"cpu{p['cpu']} {p.get('utilization', 0):.1%} busy"
                                                          for p in h["processors"]) + (f" ({work})" if work else ""))
    if r.get("bus"):
        b = r["bus"]
        click.echo(f"bus {b['rate_mb_s']:g} MB/s ({b['mode']}): {b['utilization']:.1%} busy, "
                   f"{b['waited_transfers']} transfers waited {b['wait_s'] * 1e3:.1f} ms in all")
    arch = {k: v for k, v in r["architecture"].items() if isinstance(v, (int, float)) and not isinstance(v, bool) and v}
    if arch:
        click.echo("architecture: " + ", ".join(f"{k}={v}" for k, v in arch.items()))


class _SimProgress:
    """Progress of a replay on stderr (requests issued, virtual and wall seconds): one line
    rewritten on a terminal, a line per call otherwise (nohup, CI)."""

    def __init__(self) -> None:
        import sys
        import time

        self._clock = time.monotonic
        self.started = time.monotonic()
        self.terminal = sys.stderr.isatty()
        self.shown = False

    def __call__(self, requests: int, virtual_s: float) -> None:
        line = (f"replayed {requests:,} requests: {virtual_s:,.1f} virtual s "
                f"in {self._clock() - self.started:,.1f} wall s")
        click.echo("\r" + line if self.terminal else line, nl=not self.terminal, err=True)
        self.shown = True

    def done(self) -> None:
        if self.terminal and self.shown:
            click.echo("", err=True)


def _speed_line(r: dict) -> str:
    sp = r["speed"]
    return (f"replay speed: {sp['requests_per_wall_second']:,.0f} requests/s, "
            f"{sp['virtual_seconds_per_wall_second']:,.1f} virtual s per wall s ({sp['wall_seconds']:.2f} s wall)")


def register(cli: click.Group) -> None:
    from raidlab.traces.formats import format_names
    from raidlab.traces.synth import PROFILES

    @cli.group("trace")
    def trace() -> None:
        """Block traces: statistics and synthetic office/engineering traces."""

    @trace.command("stats")
    @click.argument("file", type=click.Path(dir_okay=False))
    @click.option("--format", "fmt", default=None,
                  help=f"Trace format: {', '.join(format_names())} (default: what the file's header says).")
    @click.option("--skip-bad", is_flag=True, help="Skip malformed or out-of-order lines (counted) instead of stopping.")
    @click.option("--idle-threshold", type=float, default=0.050, show_default=True,
                  help="Seconds without an arrival before the disk counts as idle (DCD §2.3: 50 ms).")
    @click.option("--json", "as_json", is_flag=True, help="Print JSON.")
    def stats(file: str, fmt: str, skip_bad: bool, idle_threshold: float, as_json: bool) -> int:
        """Request count, read/write mix, sizes, inter-arrival and idle periods, overwrites."""
        from raidlab.traces.formats import TraceReader
        from raidlab.traces.stats import TraceStats

        from raidlab.traces.formats import detect_format

        reader = TraceReader(file, detect_format(file, fmt), skip_bad=skip_bad)
        result = TraceStats(idle_threshold).update(reader).summary()
        result["skipped_lines"] = reader.skipped
        if as_json:
            click.echo(json.dumps(result, indent=2))
        else:
            _print_stats(result)
            if reader.skipped:
                click.echo(f"skipped {reader.skipped} bad lines")
        return 0

    @trace.command("synth")
    @click.option("--profile", "profile_name", required=True, type=click.Choice(list(PROFILES)),
                  help="Which workload to imitate (parameters and sources: raidlab.traces.synth).")
    @click.option("--duration", required=True, help="Trace length: 600, 15m, 2h, 3d.")
    @click.option("--seed", type=int, default=1, show_default=True)
    @click.option("--device-size", default=None, help="Address space (default: HP C2200A, 335 MB).")
    @click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
                  help="Write to FILE (default: stdout), in raidlab's trace format.")
    def synth_cmd(profile_name: str, duration: str, seed: int, device_size: str | None, output: str | None) -> int:
        """A labelled synthetic trace (NOT the real HP trace) in raidlab's format."""
        from raidlab.outputs import writable_file
        from raidlab.traces.formats import RAIDLAB_HEADER, write_raidlab
        from raidlab.traces.synth import HP_C2200A_BYTES, label, synth

        if output is not None:
            writable_file(output, "--output", marker=RAIDLAB_HEADER.encode())
        seconds = parse_duration(duration)
        size = _size(device_size, "--device-size") or HP_C2200A_BYTES
        stream = synth(profile_name, seconds, seed, device_size=size)
        comments = label(PROFILES[profile_name], seconds, seed, size)
        if output is None:
            write_raidlab(stream, sys.stdout, comments=comments)
            return 0
        with open(output, "w", encoding="utf-8") as out:
            count = write_raidlab(stream, out, comments=comments)
        click.echo(f"wrote {count} requests to {output}", err=True)
        return 0

    @trace.command("capture", context_settings={"ignore_unknown_options": True})
    @click.argument("name")
    @click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
    @click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
                  help="Trace file (raidlab format; default NAME-capture.trace).")
    @click.option("--home", envvar="RAIDLAB_HOME", help="Where labs live.")
    @click.option("--timeout", type=float, default=None, help="Kill COMMAND after this many seconds.")
    @click.option("--compare", is_flag=True,
                  help="Then replay the trace on the same architecture in virtual time and compare response times.")
    @click.option("--json", "as_json", is_flag=True)
    def capture(name, command, output, home, timeout, compare, as_json) -> int:
        """Record the requests array NAME's volume receives while COMMAND runs ("{device}" in
        COMMAND becomes the array's block device): raidlab trace capture NAME -- fio ... {device}."""
        from pathlib import Path

        from raidlab.lab import Lab, check_lab_name
        from raidlab.runners.capture import capture_command, comparison_rows, replay_capture

        from raidlab.outputs import writable_file
        from raidlab.traces.formats import RAIDLAB_HEADER

        check_lab_name(name)
        lab = Lab(name, home=home)
        out = writable_file(output or f"{name}-capture.trace", "--output", marker=RAIDLAB_HEADER.encode())
        result = capture_command(lab, list(command), out, timeout=timeout)
        summary = result["capture"]
        doc = {"trace": summary["path"], "command": result["argv"], "rc": result["rc"],
               "live": {"requests": summary["requests"], "seconds": summary["seconds"],
                        "response": summary["response"]}}
        if compare:
            virtual = replay_capture(result["status"], Path(summary["path"]))
            doc["virtual"] = {"requests": virtual["trace"]["requests"], "virtual_seconds": virtual["virtual_seconds"],
                              "response": virtual["response"], "speed": virtual["speed"]}
            doc["comparison"] = comparison_rows(summary, virtual)
        if as_json:
            click.echo(json.dumps(doc, indent=2))
        else:
            click.echo(f"captured {summary['requests']} requests in {summary['seconds']:.2f} s to {summary['path']} "
                       f"(command exit {result['rc']})")
            for row in doc.get("comparison", []):
                click.echo(f"{row['op']:<6} live {row['count_live']} req mean {row['mean_ms_live']:.2f} ms "
                           f"p95 {row['p95_ms_live']:.2f} max {row['max_ms_live']:.2f} | virtual mean "
                           f"{row['mean_ms_virtual']:.2f} ms p95 {row['p95_ms_virtual']:.2f} max "
                           f"{row['max_ms_virtual']:.2f} | live/virtual {row['mean_ratio_live_over_virtual']:.2f}")
        return result["rc"] if result["rc"] else 0

    @cli.command("sim")
    @click.option("--arch", required=True,
                  help="Any architecture that runs in virtual time (raidlab archs): disk, raid5, dcd, vcraid, ...")
    @click.option("--disks", type=click.IntRange(1, 64), default=None, help="Member disks (arrays; default 4).")
    @click.option("--chunk", default=None, help="Chunk size, e.g. 64K (arrays; default 512K).")
    @click.option("--disk-model", required=True, help="Catalog drive model (raidlab disk models).")
    @click.option("--disk-size", default=None, help="Member disk size (default: the drive's capacity).")
    @click.option("--discipline", type=click.Choice(["fifo", "sstf", "scan"]), default="fifo", show_default=True)
    @click.option("--trace", "trace_file", required=True, type=click.Path(dir_okay=False))
    @click.option("--format", "fmt", default=None,
                  help=f"Trace format: {', '.join(format_names())} (default: what the file's header says).")
    @click.option("--compact", type=float, default=1.0, show_default=True,
                  help="Divide inter-arrival times by FACTOR (TSS paper: 1000).")
    @click.option("--seed", type=int, default=0, show_default=True, help="Seed of the written data's content (with --compressibility).")
    @click.option("-o", "--option", "options", multiple=True, metavar="KEY=VALUE",
                  help="Architecture option, repeatable (dcd: cache=physical|logical, report=immediate|"
                       "after-complete, destage=on|off, ram_buffer=512K, cache_size=20M; vcraid: config=scd|mcd ...).")
    @click.option("--outstanding", type=click.IntRange(min=1), default=None,
                  help="Closed loop: at most N requests in flight, each timed from its issue "
                       "(default: open loop, timed from its trace time).")
    @click.option("--compressibility", type=float, default=None,
                  help="Write data of which this share compresses away (0..1; default: zeros). For tss.")
    @click.option("--policy", type=click.Choice(["watermark", "five-minute"]), default=None,
                  help="Run this TSS policy beside the replay, through the device's control interface.")
    @click.option("--policy-option", "policy_options", multiple=True, metavar="KEY=VALUE",
                  help="Policy option, repeatable (watermark: raid1=25:55, period=1; five-minute: "
                       "raid1_raid5=20, raid5_craid5=350).")
    @click.option("--bus", default=None, metavar="RATE[,MODE]",
                  help="One bus all drives share: RATE MB/s or 'shared' (the drive model's own bus rate); "
                       "MODE overlap (default: transfers overlap the media work) or serial.")
    @click.option("--write-cache", type=click.Choice(["model", "on", "off"]), default="model", show_default=True,
                  help="Every drive's write cache: each model's default (the catalog's), or on or off for all.")
    @click.option("--flushes", type=click.Choice(["honoured", "dropped"]), default="honoured", show_default=True,
                  help="The host's flushes and FUA writes at every drive: honoured, or dropped (never sent, as by "
                       "the papers' Linux 2.0).")
    @click.option("--span", type=click.Choice(["full", "start"]), default=None,
                  help="Every drive's image over its whole stroke (full) or at its start; default: as the "
                       "architecture plans each drive (cache drives at the start).")
    @click.option("--drives", type=click.IntRange(min=1), default=None,
                  help="Members are partitions of this many drives, round robin (member k: partition "
                       "k // DRIVES of drive k % DRIVES); --disk-size is then the drive's size.")
    @click.option("--partitions", default=None, metavar="LIST",
                  help="Members are partitions of whole drives of --disk-model, in the SA-RAID paper's "
                       "notation (b8-c1-d1-e1, or 8-1-1-1 for a drive each); see `raidlab create --help`.")
    @click.option("--skip-bad", is_flag=True, help="Skip malformed, unsorted or out-of-range lines (counted).")
    @click.option("--host", "host_model", default=None, metavar="MODEL",
                  help="The machine virtual time charges (a host of raidlab/disks/data/hosts.toml): each "
                       "request's cost, TSS's compression with -o cpu_cost=host (default: none).")
    @click.option("--host-option", "host_options", multiple=True, metavar="KEY=VALUE",
                  help="Replace one of the host's values, e.g. copy_mb_s=65 (repeatable).")
    @click.option("--json", "as_json", is_flag=True, help="Print JSON (deterministic; speed goes to stderr).")
    def sim(arch, disks, chunk, disk_model, disk_size, discipline, trace_file, fmt, compact, seed, options,
            outstanding, compressibility, policy, policy_options, bus, write_cache, flushes, span, drives,
            partitions, skip_bad, host_model, host_options, as_json) -> int:
        """Replay a block trace on an architecture in virtual time (open loop)."""
        from raidlab.disks import catalog
        from raidlab.traces.formats import TraceReader, detect_format
        from raidlab import archs
        from raidlab.runners.virtual import SimSpec, replay

        archs.get(arch, "sim")  # UsageError naming the replayable ids
        catalog.get(disk_model)  # UnknownModelError (one line) before anything is built
        if not compact > 0:
            raise UsageError(f"--compact must be positive, not {compact}")
        if compressibility is not None and not 0.0 <= compressibility <= 1.0:
            raise UsageError(f"--compressibility {compressibility} is outside 0..1")
        if bus is not None:
            from raidlab.disks.bus import parse_bus

            parse_bus(bus, [disk_model])  # a bad rate or mode: one line, before anything runs
        if policy_options and policy is None:
            raise UsageError("--policy-option without --policy", hint="name the policy with --policy")
        if policy is not None:
            from raidlab.policies import make_policy

            make_policy(policy, _key_values(policy_options))  # bad options: one line, before anything runs
        if host_options and host_model is None:
            raise UsageError("--host-option without --host", hint="name the host with --host")
        host = None
        if host_model is not None:
            from raidlab.disks import host as hosts

            values = {key: _host_value(value) for key, value in _key_values(host_options).items()}
            host = hosts.resolve({"model": host_model, **values, "calibrated": "given with --host-option"}
                                 if values else {"model": host_model})
        spec = SimSpec(arch=arch, disk_model=disk_model, disks=disks, chunk=_size(chunk, "--chunk"),
                       disk_size=_size(disk_size, "--disk-size"), discipline=discipline, compact=compact, seed=seed,
                       options=_key_values(options), outstanding=outstanding,
                       compressibility=compressibility, policy=policy,
                       policy_options=_key_values(policy_options), bus=bus, drives=drives,
                       partitions=partitions, write_cache=write_cache, flushes=flushes, span=span, host=host)
        reader = TraceReader(trace_file, detect_format(trace_file, fmt), skip_bad=skip_bad)
        progress = _SimProgress()
        try:
            report = replay(spec, reader, on_progress=progress)
        finally:
            progress.done()
        speed = _speed_line(report)
        if as_json:
            report.pop("speed")
            click.echo(json.dumps(report, indent=2, sort_keys=True))
            click.echo(speed, err=True)
        else:
            _print_sim(report)
            click.echo(speed)
        return 0
