"""`raidlab top NAME`: a live view of an array, refreshed every second.

Why: `raidlab status` shows counters since the array started, and a student who runs a
workload sees numbers only after it ends. top asks the array's daemon for the same status
every second and shows what changed since the last look: per drive its queue, busy share,
reads and writes per second and their mean sizes; for the engine's arrays the stripes
written full, by read-modify-write and by reconstruct-write; for the other families
(caching architectures, TSS, md, the cluster) the lines their status reports, which carry
their RAM buffer and log fill, destage level, personalities and migrations.

Where the drives are in a status (every family reports the catalog drives' own statistics,
raidlab.disks.disk): `statistics.members` (the engine, md), `statistics.array.members` and
`statistics.cache_disks` (VC-RAID, DCD), `statistics.columns` (TSS), each a list of dicts
with `reads`, `writes`, `bytes_read`, `bytes_written`, `busy_time` and `queue_length`.

It leaves on `q` or Ctrl-C, and by itself when the array goes away (destroyed, or its daemon
gone), saying so; nothing it reads is changed.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import time
from typing import Any

import click
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

_err = Console(stderr=True, highlight=False)

RATE_KEYS = ("reads", "writes", "bytes_read", "bytes_written", "busy_time")
ENGINE_KEYS = (("full_stripe_writes", "full-stripe"), ("rmw_stripes", "RMW"), ("rcw_stripes", "RCW"),
               ("degraded_reads", "degraded reads"))


def drives(status: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(label, statistics) of every drive a status reports (module doc)."""
    stats = status.get("statistics") or {}
    out: list[tuple[str, dict[str, Any]]] = []
    for label, found in (("member", stats.get("members")),
                         ("member", (stats.get("array") or {}).get("members")),
                         ("cache disk", stats.get("cache_disks")),
                         ("column", stats.get("columns"))):
        for index, drive in enumerate(found or []):
            if isinstance(drive, dict) and "reads" in drive:
                out.append((f"{label} {drive.get('index', index)}", drive))
    return out


def _rate(now: dict[str, Any], before: dict[str, Any] | None, key: str, seconds: float) -> float:
    if before is None or seconds <= 0:
        return 0.0
    return max(0.0, (now.get(key, 0) or 0) - (before.get(key, 0) or 0)) / seconds


def view(name: str, status: dict[str, Any], previous: dict[str, Any] | None, seconds: float) -> Group:
    """The screen for one look: a header, the drives table, the architecture's own lines."""
    spec = status.get("spec") or {}
    geometry = status.get("geometry") or {}
    stats = status.get("statistics") or {}
    arch = geometry.get("arch") or spec.get("arch", "?")
    state = stats.get("state") or status.get("state") or ""
    header = f"[bold]{name}[/]: {arch}" + (f", state [bold]{state}[/]" if state else "")
    header += f"  (the last {seconds:.1f} s; q or Ctrl-C leaves)" if seconds else "  (first look)"
    parts: list[Any] = [Text.from_markup(header)]
    before = dict(drives(previous)) if previous else {}
    table = Table(box=None, pad_edge=False)
    for column in ("drive", "model", "queue", "busy %", "reads/s", "KiB/read", "writes/s", "KiB/write"):
        table.add_column(column, justify="left" if column in ("drive", "model") else "right")
    for label, drive in drives(status):
        was = before.get(label)
        reads = _rate(drive, was, "reads", seconds)
        writes = _rate(drive, was, "writes", seconds)
        read_kib = _rate(drive, was, "bytes_read", seconds) / reads / 1024 if reads else 0.0
        write_kib = _rate(drive, was, "bytes_written", seconds) / writes / 1024 if writes else 0.0
        busy = 100 * _rate(drive, was, "busy_time", seconds)
        table.add_row(label, str(drive.get("model", "")), str(drive.get("queue_length", "")), f"{busy:.0f}",
                      f"{reads:.0f}", f"{read_kib:.1f}" if reads else "-", f"{writes:.0f}",
                      f"{write_kib:.1f}" if writes else "-")
    parts.append(table)
    if status.get("kind") == "engine":
        old = (previous or {}).get("statistics") or {}
        counts = [f"{words} {_rate(stats, old, key, seconds):.0f}/s" for key, words in ENGINE_KEYS if key in stats]
        if counts:
            parts.append(Text("array: " + ", ".join(counts)))
    for line in status.get("report", []):
        parts.append(Text(str(line)))
    return Group(*parts)


@contextlib.contextmanager
def _keys():
    """stdin in cbreak mode where it is a terminal (so `q` arrives without Enter)."""
    if not sys.stdin.isatty():
        yield False
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield True
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _quit_pressed(interactive: bool, wait: float) -> bool:
    """Wait up to `wait` seconds for a key; whether it was q."""
    if not interactive:
        time.sleep(wait)
        return False
    ready, _w, _x = select.select([sys.stdin], [], [], wait)
    if not ready:
        return False
    return os.read(sys.stdin.fileno(), 16).strip().lower().startswith(b"q")


@click.command()
@click.argument("name")
@click.option("--interval", type=click.FloatRange(min=0.2), default=1.0, show_default=True,
              help="seconds between looks")
@click.option("--home", envvar="RAIDLAB_HOME", help="where the array's lab lives (default ~/.local/state/raidlab)")
def top(name: str, interval: float, home: str | None) -> int:
    """A live view of array NAME: per drive its queue, busy share, reads and writes per second
    and their sizes, the array's stripe writes by method, and its family's own status lines;
    refreshed every --interval seconds until q, Ctrl-C or the array goes away."""
    from raidlab.cli.array import _lab
    from raidlab.errors import RaidlabError
    from raidlab.service import control

    lab = _lab(name, home)
    status = control.request(lab, "status")  # an array that is not running is refused here, in one line
    previous, seen = None, time.monotonic()
    with _keys() as interactive, Live(view(name, status, None, 0.0), console=Console(), auto_refresh=False,
                                      transient=False) as live:
        while True:
            if _quit_pressed(interactive, interval):
                break
            try:
                now_status = control.request(lab, "status")
            except RaidlabError as exc:
                live.stop()
                _err.print(f"{name} is gone: {exc}")
                return 0
            now = time.monotonic()
            previous, status, elapsed, seen = status, now_status, now - seen, now
            live.update(view(name, status, previous, elapsed), refresh=True)
    return 0


def register(cli: click.Group) -> None:
    cli.add_command(top)
