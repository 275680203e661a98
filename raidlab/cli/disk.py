"""`raidlab disk models` and `raidlab disk bench`: parsing and printing only.

The actions live in raidlab.disks.catalog and raidlab.disks.bench. The `disk` group is
shared: raidlab.cli.export adds `disk serve` to it (registered after this module), so the
group keeps the name `disk`.
"""

from __future__ import annotations

import json

import click
from rich import box
from rich.console import Console
from rich.table import Table

from raidlab.errors import UsageError

_out = Console(highlight=False)


def _parse_size(text: str | None) -> int | None:
    if text is None:
        return None
    from raidlab.units import parse_size  # one size syntax across the CLI

    return parse_size(text, "--size")


def _fmt(value, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def model_rows() -> list[dict]:
    """One row per catalog drive: what `disk models` shows (and prints with --json)."""
    from raidlab.disks import catalog
    from raidlab.disks.geometry import zone_sequential_rate
    from raidlab.disks.seek import manufacturer_average_seek_ms

    rows = []
    for spec in catalog.all_models():
        row = {
            "name": spec.name,
            "kind": spec.kind,
            "description": spec.description,
            "papers": catalog.raw_entry(spec.name).get("papers", []),
            "assumed": sorted(k for k, v in spec.sources.items() if v.startswith("assumed:")),
        }
        if spec.kind == "hdd":
            row.update(
                capacity_bytes=spec.media_capacity_bytes,
                rpm=spec.rpm,
                heads=spec.heads,
                cylinders=spec.cylinders,
                zones=len(spec.zones),
                average_seek_ms=round(manufacturer_average_seek_ms(spec.seek, spec.cylinders), 3),
                outer_mb_s=round(zone_sequential_rate(spec, 0) / 1e6, 2),
                inner_mb_s=round(zone_sequential_rate(spec, len(spec.zones) - 1) / 1e6, 2),
                readahead_bytes=spec.readahead_bytes,
                write_cache_bytes=spec.write_cache_bytes,
                write_cache_default=spec.write_cache_default,
            )
        elif spec.kind == "ssd":
            row.update(
                read_latency_ms=spec.read_latency_ms,
                write_latency_ms=spec.write_latency_ms,
                outer_mb_s=spec.read_mb_s,
                inner_mb_s=spec.read_mb_s,
            )
        row["sources"] = spec.sources
        rows.append(row)
    return rows


@click.group("disk")
def disk() -> None:
    """Emulated member disks: the drive catalog, benchmarks, serving them as block devices."""


@disk.command("models")
@click.option("--json", "as_json", is_flag=True, help="Print the catalog as JSON (with every source).")
def models(as_json: bool) -> int:
    """The drive catalog: the papers' drives, a current 7200 rpm drive, an SSD, none."""
    rows = model_rows()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return 0
    table = Table(title="raidlab disk models", caption="sources and assumptions: raidlab disk models --json",
                  box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1), collapse_padding=True, show_edge=False)
    for col in ("model", "GB", "rpm", "seek ms", "MB/s out..in", "buffer", "assumed"):
        table.add_column(col, justify="left" if col == "model" else "right", no_wrap=True)
    for r in rows:
        cap = r.get("capacity_bytes")
        buf = r.get("readahead_bytes") or 0
        table.add_row(
            r["name"],
            (f"{cap / 1e9:.2f}" if cap < 1e12 else f"{cap / 1e9:.0f}") if cap else "-",
            _fmt(r.get("rpm"), 0),
            _fmt(r.get("average_seek_ms"), 2),
            f"{r['outer_mb_s']:.4g}..{r['inner_mb_s']:.4g}" if "outer_mb_s" in r else "-",
            (f"{buf >> 20}M" if buf >= 1 << 20 else f"{buf >> 10}K") if buf else "-",
            f"{len(r['assumed'])}/{len(r['sources'])}" if r["sources"] else "-",
        )
    _out.print(table)
    return 0


@disk.command("bench")
@click.argument("model")
@click.option("--clock", type=click.Choice(["virtual", "live"]), default="virtual", show_default=True,
              help="virtual: exact model time (raidlab's kernel); live: real clock, real I/O on a sparse image.")
@click.option("--size", default=None, help="Disk size, e.g. 256M, 4G (default: the drive's capacity).")
@click.option("--samples", type=click.IntRange(10, 1_000_000), default=None,
              help="Requests per random test (default 2000 virtual, 200 live).")
@click.option("--discipline", type=click.Choice(["fifo", "sstf", "scan"]), default="fifo", show_default=True)
@click.option("--image-dir", type=click.Path(), default=None,
              help="Live mode: directory for the scratch image (default: a temporary directory).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench(model: str, clock: str, size: str | None, samples: int | None, discipline: str,
          image_dir: str | None, as_json: bool) -> int:
    """QD1 random reads/writes and sequential rates in the outer and inner zone of MODEL."""
    from raidlab.disks import catalog
    from raidlab.disks.bench import run_bench

    catalog.get(model)  # unknown model: one line, before any work
    if image_dir is not None and clock != "live":
        raise UsageError("--image-dir is only used with --clock live")
    if not as_json:
        _out.print(f"benchmarking {model} on the {clock} clock ...")
    result = run_bench(model, clock=clock, size=_parse_size(size), samples=samples,
                       image_dir=image_dir, discipline=discipline)
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return 0
    _print_bench(result)
    return 0


def _print_bench(r: dict) -> None:
    table = Table(title=f"{r['model']} ({r['clock']} clock, {r['size'] / 1e9:.2f} GB, {r['discipline']})",
                  box=box.SIMPLE_HEAD)
    table.add_column("test")
    table.add_column("mean ms", justify="right")
    table.add_column("p99 ms", justify="right")
    table.add_column("model (closed form) ms", justify="right")
    cf = r.get("closed_form", {})
    for key, label, closed in (("random_read_4k", "random read 4 KiB QD1", "random_read_4k_ms"),
                               ("random_read_8k", "random read 8 KiB QD1", "random_read_8k_ms"),
                               ("random_write_4k", "random write 4 KiB QD1", None)):
        t = r[key]
        table.add_row(label, f"{t['mean_ms']:.3f}", f"{t['p99_ms']:.3f}", _fmt(cf.get(closed), 3) if closed else "-")
    _out.print(table)
    seq = Table(title="sequential, 64 KiB requests, QD1 (MB/s)", box=box.SIMPLE_HEAD)
    for col in ("zone", "read", "write", "model zone rate"):
        seq.add_column(col, justify="right" if col != "zone" else "left")
    for zone in ("outer", "inner"):
        seq.add_row(zone, _fmt(r["sequential"][f"read_{zone}_mb_s"], 2),
                    _fmt(r["sequential"][f"write_{zone}_mb_s"], 2), _fmt(cf.get(f"zone_rate_{zone}_mb_s"), 2))
    _out.print(seq)
    if "lateness_qd1" in r:
        late = Table(title="lateness = actual completion - model completion (ms)", box=box.SIMPLE_HEAD)
        for col in ("queue depth", "p50", "p99", "max", "samples"):
            late.add_column(col, justify="right")
        for key, label in (("lateness_qd1", "1 (random)"), ("lateness_sequential", "1 (sequential)"),
                           ("lateness_qd16", "16 (random)")):
            x = r[key]
            late.add_row(label, f"{x['p50_ms']:.3f}", f"{x['p99_ms']:.3f}", f"{x['max_ms']:.3f}", str(x["samples"]))
        _out.print(late)


def register(cli: click.Group) -> None:
    cli.add_command(disk)
