"""`raidlab demo`: the two small comparisons behind `make demo` (see raidlab.demo)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console


@click.command()
@click.option("--results", "results_dir", type=click.Path(path_type=Path),
              default=Path("results/demo"), show_default=True, help="results root (writes <root>/<scenario>/<time>/; results/demo is not committed)")
@click.option("--runner", type=click.Choice(["vm", "native"]), default="vm", show_default=True,
              help="the live part's runner. vm: md-raid5 needs the lab VM on hosts without md; native only "
                   "where the kernel has md")
@click.option("--home", envvar="RAIDLAB_HOME", help="where the demo's labs live (default ~/.local/state/raidlab)")
def demo(results_dir: Path, runner: str, home: str | None) -> int:
    """DCD Table 2 in virtual time (judged), then PostMark small, md-raid5 vs VC-RAID scd, live at
    the quick size (not judged); prints each report's path, one a line."""
    from raidlab.cli.run import check_live
    from raidlab.demo import run_demo
    from raidlab.outputs import output_dir
    from raidlab.run import interrupted_error

    output_dir(results_dir, "--results")
    check_live(runner)
    err = Console(stderr=True, highlight=False)
    with err.status("demo") as status:
        parts = run_demo(results_dir, runner=runner, home=home, progress=lambda msg: status.update(msg))
    failed = 0
    for part in parts:
        summary = part.summary
        err.print(f"demo: {part.title}: {summary.ok} runs ok, {summary.failed} failed; results in {summary.out}",
                  markup=False)
        for line in summary.failures:
            err.print(f"  failed: {line}", markup=False)
        err.print(f"  {part.line()}", markup=False)
        click.echo(str(part.report))
        failed += summary.failed
    for part in parts:
        if part.summary.interrupted:
            raise interrupted_error(part.summary)
        if part.summary.missing_tool:
            raise part.summary.missing_tool
    return 1 if failed else 0


def register(cli: click.Group) -> None:
    cli.add_command(demo)
