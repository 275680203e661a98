"""`raidlab crashtest ARCH [--points N] [--seed S]`: SIGKILL the array daemon at random
moments of an untar onto ext4, recover, fsck, check fsync'ed files (raidlab.campaigns.crash).
Parsing and printing only."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from raidlab.errors import UsageError
from raidlab.units import parse_size

_out = Console(highlight=False)
_err = Console(stderr=True, highlight=False)


@click.command()
@click.argument("target")
@click.option("--points", type=click.IntRange(1, 1000), default=20, show_default=True,
              help="crash points (one create/untar/SIGKILL/assemble/fsck cycle each)")
@click.option("--seed", type=int, default=0, show_default=True, help="seed of trees and kill moments")
@click.option("--disks", type=click.IntRange(1, 64), help="member disks (default: the preset's, else 3)")
@click.option("--disk-model", default="none", show_default=True,
              help="catalog model of every member disk, or one per member: m0,m1,...")
@click.option("--disk-size", default="64M", show_default=True)
@click.option("--chunk", default="64K", show_default=True)
@click.option("--files", type=click.IntRange(8, 100000), default=120, show_default=True,
              help="files in the untarred tree (every 4th is fsync'ed)")
@click.option("-o", "--option", "options", multiple=True, help="architecture option KEY=VALUE (over the preset's)")
@click.option("--mode", type=click.Choice(["kill", "power", "power-model", "power-random"]), default="kill",
              show_default=True, help="kill the daemon only, or also cut the drives' power: lose every "
                                       "unflushed write, what the drive model had not written back, or a random "
                                       "subset of them")
@click.option("--home", envvar="RAIDLAB_HOME", help="where labs live (default ~/.local/state/raidlab)")
@click.option("--json", "as_json", is_flag=True, help="print the summary as one JSON object")
@click.option("--keep-failed", type=click.Path(file_okay=False, path_type=Path),
              help="keep each failed point's drive images as the cut left them (before recovery) and its "
                   "result in DIR/TARGET-MODE-point-K/")
def crashtest(target, points, seed, disks, disk_model, disk_size, chunk, files, options, mode, home, as_json,
              keep_failed):
    """Crash-test TARGET: a crash preset that an architecture declares (for example
    vcraid-scd, vcraid-scd-paper, dcd-immediate, raid5-paper-world, and md's in the lab VM:
    md-raid5, md-raid5-wb, md-raid0-paper-world; docs/reliability.md's crash table names
    them all), `all` (every preset), or any architecture id. Exit 1 if a point fails."""
    from raidlab.cli.array import _parse_options
    from raidlab.campaigns.crash import PRESETS, config_for, run_crashtest

    if keep_failed is not None and keep_failed.exists() and any(keep_failed.iterdir()):
        raise UsageError(f"--keep-failed {keep_failed}: the directory is not empty",
                         hint="name a new or empty directory; a failed point's images go in a subdirectory of it")
    names = list(PRESETS) if target == "all" else [target]
    opts = _parse_options(options)
    configs = [config_for(name, disks=disks, options=opts, disk_model=disk_model, disk_size=parse_size(disk_size, "--disk-size"),
                          chunk=parse_size(chunk, "--chunk"), files=files, mode=mode) for name in names]
    summaries = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[phase]}"), console=_err, transient=False) as progress:
        for config in configs:
            task = progress.add_task(config.name, total=points, phase="")

            def phase(k, text, task=task):
                progress.update(task, phase=f"point {k}: {text}"[:70])

            def done(result, task=task, config=config):
                progress.advance(task)
                if not result.ok:
                    progress.console.print(f"[red]{config.name} point {result.point} failed[/]: "
                                           + (result.error or ("fsck not clean" if not result.fsck_clean
                                                               else f"damaged {result.damaged}")))
                if result.journal:
                    progress.console.print(f"  md's journal after the cut: {result.journal['summary']}")
                if result.kept:
                    progress.console.print(f"  its images as the cut left them: {result.kept}")

            summary = run_crashtest(config, points=points, seed=seed, home=home, phase=phase, done=done,
                                    keep_failed=keep_failed)
            progress.update(task, phase=f"{summary['passed']}/{summary['points']} passed")
            summaries.append(summary)
    if as_json:
        click.echo(json.dumps(summaries[0] if len(summaries) == 1 else summaries, indent=2))
    else:
        table = Table(title=f"crash test ({mode})")
        for col in ("target", "points", "passed", "failed", "fsync'ed files checked", "lost", "lost, allowed",
                    "forced / unmountable", "leaks",
                    "files written (mean)", "writes lost to the power cut", "seconds"):
            # Names are what a reader looks for; the numbers' headers wrap instead.
            table.add_column(col, no_wrap=col == "target",
                             min_width=max(len(s["target"]) for s in summaries) if col == "target" else None)
        for s in summaries:
            written = sum(r["files_written"] for r in s["results"]) / max(len(s["results"]), 1)
            table.add_row(s["target"], str(s["points"]), str(s["passed"]),
                          f"[red]{s['failed']}[/]" if s["failed"] else "0", str(s["fsynced_files_checked"]),
                          str(s["fsynced_files_lost"]), str(s.get("fsynced_files_lost_allowed", 0)),
                          f"{s.get('forced', 0)} / {s.get('unmountable', 0)}", str(s["leaks"]), f"{written:.1f}",
                          str(s["writes_lost_to_power_cuts"]), f"{s['seconds']:.1f}")
        # Into a pipe or a log (no terminal, no COLUMNS) rich fits a table to 80 columns, which
        # cuts every name and number of this one short.
        wide = _out.is_terminal or os.environ.get("COLUMNS")
        (_out if wide else Console(highlight=False, width=240)).print(table)
    return 1 if any(s["failed"] for s in summaries) else 0


def register(cli: click.Group) -> None:
    cli.add_command(crashtest)
