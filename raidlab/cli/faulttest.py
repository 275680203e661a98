"""`raidlab faulttest ARCH`: a member goes bad under fio --verify, then rebuild and scrub
(raidlab.campaigns.fault). Parsing and printing only."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from raidlab.units import parse_size

_out = Console(highlight=False)
_err = Console(stderr=True, highlight=False)


@click.command()
@click.argument("arch")
@click.option("--disks", type=click.IntRange(1, 64), default=4, show_default=True, help="member disks")
@click.option("--disk", "disk", type=click.IntRange(0, 127), default=1, show_default=True,
              help="the drive that goes bad (dK; a cache architecture's cache disks follow its members)")
@click.option("--disk-size", default="64M", show_default=True)
@click.option("--chunk", default="64K", show_default=True)
@click.option("--mode", "modes", multiple=True, type=click.Choice(["vanish", "read-eio", "write-eio", "slow"]),
              help="fault modes to try (repeatable; default: all four)")
@click.option("--seed", type=int, default=0, show_default=True, help="seed of the fio jobs")
@click.option("-o", "--option", "options", multiple=True, help="architecture option KEY=VALUE")
@click.option("--home", envvar="RAIDLAB_HOME", help="where labs live (default ~/.local/state/raidlab)")
@click.option("--json", "as_json", is_flag=True, help="print the summary as one JSON object")
def faulttest(arch, disks, disk, disk_size, chunk, modes, seed, options, home, as_json):
    """Fault-test ARCH (an engine layout, tss, dcd or vcraid): drive --disk vanishes, fails its
    reads, fails its writes or turns 100x slow while fio writes and verifies; then replace
    under load and scrub where the drive has a copy, or an EIO to fio where it has none.
    Exit 1 if a mode fails."""
    from raidlab.cli.array import _parse_options
    from raidlab.campaigns.fault import MODES, run_faulttest

    def done(result):
        mark = "[green]ok[/]" if result.ok else "[red]FAILED[/]"
        _err.print(f"{arch} {result.mode}: {mark} (fio during the fault {'verified' if result.during_ok else f'error {result.during_errno}'}, "
                   f"drive failed {result.member_failed}, rebuilt {result.rebuilt}, mismatches {result.mismatches}, "
                   f"leaks {len(result.leaks)}{', ' + result.error if result.error else ''})")

    with _err.status(f"faulttest {arch}") as spinner:
        summary = run_faulttest(arch, disks=disks, options=_parse_options(options),
                                disk_size=parse_size(disk_size, "--disk-size"), chunk=parse_size(chunk, "--chunk"),
                                modes=list(modes) or list(MODES), seed=seed, home=home, disk=disk,
                                status=lambda m: spinner.update(f"faulttest {arch}: {m}"), done=done)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        table = Table(title=f"fault test: {arch}, {disks} disks, drive {disk} ({summary['role']})")
        for col in ("mode", "fio during the fault", "drive failed", "rebuilt under load", "read back",
                    "mismatches", "leaks", "verdict"):
            table.add_column(col)
        for r in summary["results"]:
            table.add_row(r["mode"], "verified" if r["during_ok"] else f"error {r['during_errno']}",
                          str(r["member_failed"]), str(r["rebuilt"]), str(r["reread_ok"]), str(r["mismatches"]),
                          str(len(r["leaks"])), "ok" if r["ok"] else "[red]FAILED[/]")
        _out.print(table)
    return 1 if summary["failed"] else 0


def register(cli: click.Group) -> None:
    cli.add_command(faulttest)
