"""`raidlab demo`: the small default comparison behind `make demo`."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from raidlab.demo import run_demo


@click.command()
@click.option("--results", "results_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("results"), show_default=True, help="where to write results/demo/<time>/")
@click.option("--samples", type=click.IntRange(50, 100000), default=600, show_default=True,
              help="random requests per test")
@click.option("--live/--no-live", default=None, help="also run the live-clock bench (default: when root)")
def demo(results_dir: Path, samples: int, live: bool | None) -> int:
    """Benchmark the papers' drives and write a report; prints the report's path."""
    err = Console(stderr=True, highlight=False)
    with err.status("demo") as status:
        report = run_demo(results_dir, samples=samples, live=live,
                          progress=lambda msg: status.update(msg))
    click.echo(str(report))
    return 0


def register(cli: click.Group) -> None:
    cli.add_command(demo)
