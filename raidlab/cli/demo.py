"""`raidlab demo`: the small default comparison behind `make demo` (see raidlab.demo)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console


@click.command()
@click.option("--results", "results_dir", type=click.Path(path_type=Path),
              default=Path("results/demo"), show_default=True, help="results root (writes <root>/<scenario>/<time>/; results/demo is not committed)")
@click.option("--runner", type=click.Choice(["vm", "native"]), default="vm", show_default=True,
              help="vm: md-raid5 needs the lab VM on hosts without md; native only where the kernel has md")
@click.option("--home", envvar="RAIDLAB_HOME", help="where the demo's labs live (default ~/.local/state/raidlab)")
def demo(results_dir: Path, runner: str, home: str | None) -> int:
    """PostMark small, md-raid5 vs VC-RAID scd, quick size; prints the report's path."""
    from raidlab.cli.run import _check_live
    from raidlab.demo import run_demo
    from raidlab.outputs import output_dir
    from raidlab.run import interrupted_error

    output_dir(results_dir, "--results")
    _check_live(runner)
    err = Console(stderr=True, highlight=False)
    with err.status("demo") as status:
        report, summary = run_demo(results_dir, runner=runner, home=home,
                                   progress=lambda msg: status.update(msg))
    err.print(f"demo: {summary.ok} runs ok, {summary.failed} failed; results in {summary.out}")
    for line in summary.failures:
        err.print(f"  failed: {line}", markup=False)
    click.echo(str(report))
    if summary.interrupted:
        raise interrupted_error(summary)
    if summary.missing_tool:
        raise summary.missing_tool
    return 1 if summary.failed else 0


def register(cli: click.Group) -> None:
    cli.add_command(demo)

