"""`raidlab run SCENARIO`: parse, validate everything, then hand the loop to raidlab.run.

Everything that can be refused (scenario file, --only labels, root, missing programs) is
checked before the first array is created; the progress display is rich's, on stderr, and
the results directory is the one line on stdout.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

_err = Console(stderr=True, highlight=False)


class _RichProgress:
    """raidlab.run.Progress drawn with rich bars (or timestamped lines off a terminal)."""

    def __init__(self, scenario, runner: str, progress: Progress):
        self.scenario = scenario
        self.runner = runner
        self.bars = progress
        self.total_task = None
        self.run_task = None
        self.current = ""
        self.repetitions = 0

    def start(self, total: int) -> None:
        self.total_task = self.bars.add_task(f"{self.scenario.id} ({self.runner})", total=total)
        self.run_task = self.bars.add_task("", total=None)

    def run_started(self, index: int, run) -> None:
        reps = self.repetitions or run.repetition
        self.current = (f"{run.arch.label} [{run.arch.arch}] · {self.scenario.workload} {run.case.name} · "
                        f"rep {run.repetition}/{reps}")
        self.bars.update(self.run_task, description=self.current)

    def step(self, message: str) -> None:
        self.bars.update(self.run_task, description=f"{self.current}: {message}")
        if not self.bars.console.is_terminal:
            # No live bar in a log file, CI or nohup: one timestamped line per step instead,
            # so a run of hours shows where it is (e.g. `tail -f` of its stderr).
            self.bars.console.print(f"{time.strftime('%H:%M:%S')} {self.current}: {message}",
                                    markup=False, highlight=False, soft_wrap=True)

    def notice(self, message: str) -> None:
        self.bars.console.print(message, markup=False, highlight=False, soft_wrap=True)

    def run_finished(self, index: int, run, doc: dict) -> None:
        self.bars.advance(self.total_task)
        if doc["status"] != "ok":
            self.bars.console.print(f"[red]failed[/]: {run.run_id}: {doc['error']}", markup=True, highlight=False,
                                    soft_wrap=True)
        else:
            metrics = doc.get("metrics", {})
            from raidlab.scenarios import pattern_x

            named = [c.metric for c in self.scenario.claims] + [p.metric for p in self.scenario.paper_values]
            for pattern in self.scenario.report.metrics:
                named += [m for m in metrics if m == pattern or ("{x}" in pattern and pattern_x(pattern, m) is not None)]
            keys = [k for k in dict.fromkeys(named) if k in metrics][:6] or list(metrics)[:3]
            shown = ", ".join(f"{k} {metrics[k]['value']:.4g} {metrics[k].get('unit', '')}".rstrip()
                              for k in keys
                              if isinstance(metrics[k], dict) and isinstance(metrics[k].get("value"), (int, float)))
            self.bars.console.print(f"ok: {run.run_id} ({doc['seconds']:.1f} s){': ' + shown if shown else ''}",
                                    markup=False, highlight=False, soft_wrap=True)


@click.command(name="run")
@click.argument("scenario_file", metavar="SCENARIO", type=click.Path(dir_okay=False, path_type=Path), required=False)
@click.option("--runner", type=click.Choice(["native", "vm"]), default=None,
              help="where arrays and workloads run (default: the scenario's runner)")
@click.option("--quick", is_flag=True, help="the scenario's [quick] sizes (CI, demos)")
@click.option("--repeat", type=click.IntRange(1, 100), default=None, help="repetitions (default: the scenario's)")
@click.option("--only", "only", multiple=True, metavar="LABEL",
              help="run only this architecture label (repeatable or comma-separated)")
@click.option("--case", "cases", multiple=True, metavar="NAME",
              help="run only this case (repeatable or comma-separated)")
@click.option("--results", "results_root", type=click.Path(path_type=Path),
              default=Path("results"), show_default=True, help="results root: writes <root>/<scenario>/<time>/")
@click.option("--home", envvar="RAIDLAB_HOME", help="where the run's labs live (default ~/.local/state/raidlab)")
@click.option("--dry-run", is_flag=True, help="validate and list the runs, start nothing")
@click.option("--resume", "resume", type=click.Path(file_okay=False, exists=True, path_type=Path), default=None,
              metavar="RESULTS_DIR", help="continue an interrupted run in its own directory: its ok runs are kept, "
                                          "the rest run again (the scenario, runner and sizes are the run's own)")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=1, show_default=True,
              help="virtual-time runs at once, each in a worker process (a live scenario's runs go one at a time)")
@click.option("--scheduler", metavar="ADDRESS",
              help="run on the workers of this Dask scheduler (tcp://HOST:PORT, tls://HOST:PORT; workers started "
                   "with `raidlab worker`), or local:N for N worker processes here (docs/scale-out.md)")
def run_cmd(scenario_file, runner, quick, repeat, only, cases, results_root, home, dry_run, resume, jobs, scheduler):
    """Run every architecture x case x repetition of SCENARIO; print the results directory."""
    from raidlab import run as runmod
    from raidlab import scenarios
    from raidlab.errors import UsageError
    from raidlab.outputs import output_dir

    if resume is not None:
        if scenario_file is not None or quick or repeat or only or cases:
            raise UsageError("--resume continues a run as it was planned",
                             hint="give only the results directory (and --home if the run had one)")
        # resume_plan refuses a directory that is a link or not the caller's before reading it
        scenario, previous, planned, done = runmod.resume_plan(resume)
        runner, quick = previous.get("runner", scenario.runner), bool(previous.get("quick"))
        _err.print(f"resuming {resume}: {len(done)} of {len(planned)} runs kept, {len(planned) - len(done)} to run",
                   highlight=False)
    else:
        if scenario_file is None:
            raise UsageError("give a SCENARIO file (or --resume RESULTS_DIR)")
        output_dir(results_root, "--results")
        scenario = scenarios.load(scenario_file)
        runner = runner or scenario.runner
        labels = tuple(label for item in only for label in item.split(",") if label)
        case_names = tuple(name for item in cases for name in item.split(",") if name)
        planned = scenarios.plan_runs(scenario, quick=quick, repeat=repeat, only=labels, cases_only=case_names)
    if runner != scenario.runner:
        runmod.check_runner(scenario, runner, {p.arch.label for p in planned})
    if dry_run:
        for p in planned:
            click.echo(f"{p.run_id}\t{p.arch.arch}\t{p.case.params}")
        return 0
    if scheduler is not None:
        if jobs > 1:
            raise UsageError("--jobs and --scheduler: give one", hint="the scheduler's workers declare their cores")
        return _run_on_cluster(scheduler, scenario, planned, runner, results_root, quick, home, resume)
    if scenario.kind == "live":
        check_live(runner)
        if jobs > 1:
            _err.print(f"--jobs {jobs}: {scenario.id} is a live scenario; its runs go one at a time "
                       f"(they share this host's devices and timing)", highlight=False)
    runmod.check_programs(scenario, runner)
    return _run_shown(scenario, planned, runner, results_root, quick, home, resume, jobs=jobs)


_COLUMNS = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("ETA"), TimeRemainingColumn())


def _run_on_cluster(scheduler, scenario, planned, runner, results_root, quick, home, resume) -> int:
    return _finish(scenario, run_on_cluster(scheduler, scenario, planned, runner, results_root, quick, home, resume))


def run_on_cluster(scheduler, scenario, planned, runner, results_root, quick, home, resume=None):
    """The runs as tasks of a Dask scheduler (raidlab.scaleout): the workers are asked their
    revision before anything is written; the programs and root are theirs to have. Returns
    run_scenario's summary."""
    from raidlab import scaleout

    notice = lambda line: _err.print(line, markup=False, highlight=False, soft_wrap=True)  # noqa: E731
    # local:N runs here: the client's --home is the workers' too; a remote worker uses its own
    here = home if scheduler.startswith(scaleout.LOCAL) else None
    with scaleout.connect(scheduler, scenario.kind, notice) as cluster:
        _err.print(f"{scheduler}: {len(cluster.workers)} workers at {scaleout.show_revision(cluster.revision)}: "
                   + ", ".join(f"{w['name']} ({w['host']})" for w in cluster.workers.values()), highlight=False,
                   soft_wrap=True)
        return run_with_progress(scenario, planned, runner, results_root, quick, here, resume, cluster=cluster)


def _run_shown(scenario, planned, runner, results_root, quick, home, resume, **how) -> int:
    return _finish(scenario, run_with_progress(scenario, planned, runner, results_root, quick, home, resume, **how))


def run_with_progress(scenario, planned, runner, results_root, quick, home, resume=None, **how):
    """raidlab.run.run_scenario with its progress drawn (rich); returns its summary. `how`:
    jobs=N for local workers, or cluster= a connected Dask cluster."""
    from raidlab import run as runmod

    with Progress(*_COLUMNS, console=_err, transient=False) as bars:
        shown = _RichProgress(scenario, runner, bars)
        shown.repetitions = max((p.repetition for p in planned), default=0)
        return runmod.run_scenario(scenario, planned, runner=runner, results_root=results_root, quick=quick,
                                   home=home, progress=shown, resume=resume, **how)


def _finish(scenario, summary) -> int:
    from raidlab import run as runmod

    _err.print(f"{scenario.id}: {summary.ok} ok, {summary.failed} failed"
               + (" (interrupted)" if summary.interrupted else ""), highlight=False)
    click.echo(str(summary.out))
    if summary.interrupted:
        raise runmod.interrupted_error(summary)
    if summary.missing_tool:  # found on the runner only (the lab VM, or a driver that declares nothing)
        raise summary.missing_tool
    return 1 if summary.failed else 0


def check_live(runner: str) -> None:
    import importlib.util

    from raidlab.errors import NeedsRootError, UsageError
    from raidlab.export.serve import check_live_prerequisites

    if runner == "vm" and importlib.util.find_spec("raidlab.vm.hosted") is None:
        raise UsageError("the lab VM runner cannot host arrays in this version", hint="use --runner native")
    if os.geteuid() != 0:
        raise NeedsRootError("raidlab run")
    check_live_prerequisites("raidlab run")


def register(cli: click.Group) -> None:
    cli.add_command(run_cmd)
