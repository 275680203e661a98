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
@click.option("--site", "site_dir", type=click.Path(path_type=Path), default=None,
              help="write a static HTML site of the whole reproduction there instead: an index of the papers, "
                   "a page per paper with its claims, figures, conditions and raw files (RESULTS: the results "
                   "root whose current.toml names the current directories)")
@click.option("--scenarios", "scenario_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("scenarios"), show_default=True, help="with --site: the scenario files")
def report(results, formats, scenario_file, out_dir, left_out, flushes, title, site_dir, scenario_dir):
    """Figures, our numbers beside the paper's, and claim verdicts for a results directory.

    Several RESULTS directories of one scenario (e.g. cases run on different days) make one
    combined report, written to --out. With --site DIR, RESULTS is the results root and DIR
    gets a static site of every paper's current results."""
    if site_dir is not None:
        return _site(results, site_dir, scenario_dir, (scenario_file, out_dir, left_out, flushes, title))
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


def _site(results, site_dir, scenario_dir, others) -> int:
    from raidlab.report.site import write_site

    if any(others):
        raise UsageError("--site writes the whole site from the results root; it takes no --scenario, --out, "
                         "--leave-out, --flushes or --title", hint="current.toml says which runs count")
    if len(results) != 1 or not results[0].is_dir():
        raise UsageError("--site takes one RESULTS: the results root (e.g. results/)")
    if not scenario_dir.is_dir():
        raise UsageError(f"{scenario_dir}: no such scenario directory")
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        written = write_site(results[0], scenario_dir, site_dir, progress=lambda m: click.echo(m, err=True))
    finally:
        signal.signal(signal.SIGTERM, previous)
    click.echo(str(written[0]))
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
