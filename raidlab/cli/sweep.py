"""`raidlab sweep SCENARIO --vary KEY=V1,V2,...`: parse, plan (raidlab.sweep), run the
variants, then write the sweep's report (raidlab.report.sweep).

Everything that can be refused (the scenario, every --vary and the variant it makes, the
claims, --jobs for a live scenario, root and programs for a live one) is refused before
the first run starts. Progress is rich's, on stderr (variants and runs done); the sweep
directory is the one line on stdout.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

_err = Console(stderr=True, highlight=False)


class _RichSweepProgress:
    """raidlab.sweep.SweepProgress drawn with rich: variants done / total, runs done / total."""

    def __init__(self, bars: Progress, title: str):
        self.bars, self.title = bars, title
        self.variants_task = self.runs_task = None

    def start(self, variants: int, runs: int) -> None:
        self.variants_task = self.bars.add_task(f"{self.title}: variants", total=variants)
        self.runs_task = self.bars.add_task("runs", total=runs)

    def variant_started(self, variant) -> None:
        if not self.bars.console.is_terminal:
            self._line(f"{time.strftime('%H:%M:%S')} {variant.id}: {len(variant.planned)} runs")

    def run_finished(self, variant: str, run_id: str, status: str) -> None:
        self.bars.advance(self.runs_task)
        if status != "ok":
            self._line(f"failed: {variant}/{run_id}")

    def variant_finished(self, variant, outcome) -> None:
        self.bars.advance(self.variants_task)
        if outcome.kept:
            self.bars.advance(self.runs_task, len(variant.planned))
            self._line(f"kept: {variant.id} (finished before)")
        elif outcome.error:
            self._line(f"not run: {variant.id}: {outcome.error}")
        elif outcome.interrupted and not outcome.ok + outcome.failed:
            self._line(f"{variant.id}: stopped before a run finished")
        else:
            state = " (interrupted)" if outcome.interrupted else ""
            self._line(f"{variant.id}: {outcome.ok} ok, {outcome.failed} failed{state}")

    def _line(self, text: str) -> None:
        self.bars.console.print(text, markup=False, highlight=False, soft_wrap=True)


@click.command(name="sweep")
@click.argument("scenario_file", metavar="SCENARIO", type=click.Path(dir_okay=False, path_type=Path), required=False)
@click.option("--vary", "varies", multiple=True, metavar="KEY=V1,V2,...",
              help="an assumption and its values: a dotted key into the scenario (workload.params.read_depth, "
                   "case.NAME.params.file_kb, arch.LABEL.chunk, arch.*.disk_model, host.copy_mb_s); repeatable. "
                   "Default: the scenario's [[sweep]] tables")
@click.option("--claim", "claims", multiple=True, metavar="ID",
              help="sweep only this claim (repeatable or comma-separated; default: every claim)")
@click.option("--repeat", type=click.IntRange(1, 100), default=None, help="repetitions (default: the scenario's)")
@click.option("--jobs", "-j", type=click.IntRange(1, 64), default=1, show_default=True,
              help="variants run at once, each in a worker process (virtual-time scenarios only)")
@click.option("-o", "--out", "out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="the sweep's directory (default: results/sweeps/<scenario>/<time>/)")
@click.option("--resume", type=click.Path(file_okay=False, exists=True, path_type=Path), default=None,
              metavar="SWEEP_DIR", help="continue an interrupted sweep in its own directory (finished variants "
                                        "are kept, an interrupted one keeps its ok runs)")
@click.option("--quick", is_flag=True, help="the scenario's [quick] sizes (claims are then not judged)")
@click.option("--home", envvar="RAIDLAB_HOME", help="live scenarios: where the runs' labs live")
@click.option("--dry-run", is_flag=True, help="validate and list the variants and their runs, start nothing")
def sweep_cmd(scenario_file, varies, claims, repeat, jobs, out, resume, quick, home, dry_run):
    """Rerun SCENARIO's claim cases across stated assumptions, one at a time; report per claim
    how its measured value moves against its band and where its verdict flips."""
    from raidlab import run as runmod
    from raidlab import scenarios
    from raidlab import sweep as sweepmod
    from raidlab.errors import UsageError
    from raidlab.report.sweep import REPORT_MD, write_sweep_report

    if resume is not None:
        if scenario_file is not None or varies or claims or repeat or out or quick:
            raise UsageError("--resume continues a sweep as it was planned",
                             hint="give only the sweep directory (and --jobs, --home)")
        plan, recorded = sweepmod.resume(resume)
        runner, target = recorded.get("runner", plan.base.runner), resume
    else:
        if scenario_file is None:
            raise UsageError("give a SCENARIO file (or --resume SWEEP_DIR)")
        base = scenarios.load(scenario_file)
        assumptions = ([sweepmod.parse_vary(v) for v in varies] if varies
                       else sweepmod.scenario_assumptions(base))
        plan = sweepmod.plan(base, assumptions, claims=claims, quick=quick, repeat=repeat)
        runner, target = base.runner, out
    sweepmod.check_jobs(plan.base, jobs)
    if plan.skipped:
        _err.print(f"left out (none of their cases runs at this size): {', '.join(plan.skipped)}")
    if dry_run:
        for variant in plan.variants:
            where = "" if variant.runs_in == variant.id else f"\t(the runs of {variant.runs_in})"
            click.echo(f"{variant.id}\t{len(variant.planned)} runs{where}")
            if variant.runs_in == variant.id:
                for p in variant.planned:
                    click.echo(f"  {p.run_id}")
        return 0
    if plan.base.kind == "live":
        from raidlab.cli.run import check_live

        check_live(runner)
    runmod.check_programs(plan.base, runner)
    if resume is None:
        target = sweepmod.prepare(plan, target, Path("results"), runner=runner, jobs=jobs, command_line=sys.argv)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=_err, transient=False) as bars:
        shown = _RichSweepProgress(bars, plan.base.id)
        summary = sweepmod.execute(plan, target, runner=runner, jobs=jobs, home=home, progress=shown)
    for line in summary.errors:
        _err.print(f"not run: {line}", markup=False)
    if summary.interrupted:
        _err.print(f"{plan.base.id}: sweep interrupted; continue it with: raidlab sweep --resume {target}")
        click.echo(str(target))
        raise _interrupted(summary, target)
    write_sweep_report(target)
    _err.print(f"{plan.base.id}: {len(plan.variants)} variants, report {target / REPORT_MD}")
    click.echo(str(target))
    return 1 if summary.failed or summary.errors else 0


def _interrupted(summary, target: Path):
    from raidlab.errors import LabInterrupted

    err = LabInterrupted(int(summary.signum or signal.SIGINT))
    err.message = (f"interrupted by {signal.Signals(err.exit_code - 128).name}: finished variants and runs kept "
                   f"in {target}; continue with raidlab sweep --resume {target}")
    return err


def register(cli: click.Group) -> None:
    cli.add_command(sweep_cmd)
