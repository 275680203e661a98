"""`raidlab damagetest TARGET`: damage a stopped array's metadata on one drive, assemble,
read everything back (raidlab.campaigns.damage). Parsing and printing only."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

_out = Console(highlight=False)
_err = Console(stderr=True, highlight=False)


@click.command()
@click.argument("target")
@click.option("--trials", type=click.IntRange(1, 10000), default=12, show_default=True,
              help="trials, the kinds of damage in turn (flip, zero, torn, stale, foreign, swap)")
@click.option("--seed", type=int, default=0, show_default=True, help="seed of the data and the damage")
@click.option("--disk-size", default="32M", show_default=True)
@click.option("--home", envvar="RAIDLAB_HOME", help="where labs live (default ~/.local/state/raidlab)")
@click.option("--json", "as_json", is_flag=True, help="print the summary as one JSON object")
def damagetest(target, trials, seed, disk_size, home, as_json):
    """Damage-test TARGET (one of raidlab.campaigns.damage.TARGETS: raid5, raid1, raidx, sa3,
    tss, tss-log, vcraid-scd, vcraid-mcd, dcd): each trial writes a pattern over a new array,
    stops it, damages one drive's metadata, assembles and reads it all back. A trial passes
    when assemble refuses in one line or the data comes back intact. Exit 1 if one fails."""
    from raidlab.campaigns.damage import run_damagetest
    from raidlab.lab import private_dir, raidlab_home

    base = private_dir(Path(home) if home else raidlab_home(), tighten=False)
    cli = [sys.executable, "-c", "import sys; from raidlab.cli import main; sys.exit(main())"]

    def done(t):
        mark = "[green]ok[/]" if t.ok else "[red]FAILED[/]"
        _err.print(f"{target} trial {t.trial} ({t.kind} on {t.drive}): {t.outcome} {mark} {t.message[:120]}",
                   markup=True)

    with _err.status(f"damagetest {target}") as spinner:
        summary = run_damagetest(target, trials=trials, seed=seed, home=base, disk_size=disk_size, cli=cli,
                                 phase=lambda k, s: spinner.update(f"damagetest {target}: {s}"), done=done)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        table = Table(title=f"damage test: {target}")
        for col in ("trial", "damage", "drive", "outcome", "state", "message"):
            table.add_column(col)
        for r in summary["results"]:
            table.add_row(str(r["trial"]), r["kind"], r["drive"], r["outcome"] if r["ok"] else f"[red]{r['outcome']}[/]",
                          r["state"], r["message"][:80])
        _out.print(table)
        _out.print(f"{summary['refused']} refused, {summary['recovered']} recovered intact, {summary['wrong']} wrong, "
                   f"{summary['errors']} errors, {summary['leaks']} leaks")
    return 1 if summary["passed"] < summary["trials"] else 0


def register(cli: click.Group) -> None:
    cli.add_command(damagetest)
