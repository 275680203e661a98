"""`raidlab report RESULTS [--format md,html]`: parse, then raidlab.report.write_report;
`--flushes`: raidlab.report.flushes' Markdown tables on stdout instead."""

from __future__ import annotations

import signal
from pathlib import Path

import click

from raidlab.errors import UsageError


@click.command()
@click.argument("results", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--format", "formats", default="md,html", show_default=True,
              help="comma-separated: md, html")
@click.option("--scenario", "scenario_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="check the results against this scenario file (default: the copy kept in RESULTS)")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=None,
              help="where to write (default RESULTS/report/; required with several RESULTS)")
@click.option("--leave-out", "left_out", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
              help="a run file of RESULTS not to use, e.g. a repetition made again later with a "
                   "changed engine (repeatable); the report names it")
@click.option("--flushes", is_flag=True,
              help="print, as Markdown, the flushes the guest sent each architecture and those that "
                   "reached each of its drives, and which claims compare columns whose drives served "
                   "different numbers of flushes (writes no report)")
@click.option("--title", default=None, help="with --flushes: the section's heading (default: the scenario)")
def report(results, formats, scenario_file, out_dir, left_out, flushes, title):
    """Figures, our numbers beside the paper's, and claim verdicts for a results directory.

    Several RESULTS directories of one scenario (e.g. cases run on different days) make one
    combined report, written to --out."""
    if flushes:
        return _flushes(results, scenario_file, left_out, title, out_dir)
    if title is not None:
        raise UsageError("--title goes with --flushes")
    from raidlab.report import write_report
    from raidlab.report.render import FORMATS

    chosen = tuple(f.strip() for f in formats.split(",") if f.strip())
    for fmt in chosen:
        if fmt not in FORMATS:
            raise UsageError(f"--format {fmt!r} is not one of {', '.join(FORMATS)}")
    for path in results:
        if not path.exists():
            raise UsageError(f"{path}: no such results directory", hint="see results/<scenario>/")
    # SIGTERM ends the report as Ctrl-C does: through its cleanup, so no partial file stays.
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        written = write_report(list(results), formats=chosen or FORMATS, scenario_file=scenario_file,
                               out_dir=out_dir, left_out=list(left_out))
    finally:
        signal.signal(signal.SIGTERM, previous)
    for path in written:
        click.echo(str(path))
    return 0


def _flushes(results, scenario_file, left_out, title, out_dir) -> int:
    from raidlab.report import flushes
    from raidlab.report.results import leave_out, load_combined

    if out_dir is not None:
        raise UsageError("--flushes prints its tables; --out is for reports", hint="redirect stdout to a file")
    for path in results:
        if not path.exists():
            raise UsageError(f"{path}: no such results directory", hint="see results/<scenario>/")
    loaded = leave_out(load_combined(list(results), scenario_file=scenario_file), list(left_out))
    click.echo(flushes.to_markdown(loaded, flushes.flush_rows(loaded), title=title))
    return 0


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


def register(cli: click.Group) -> None:
    cli.add_command(report)
