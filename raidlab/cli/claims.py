"""`raidlab claims`: the claim table of every paper, generated from the committed results."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.option("--results", "results_root", type=click.Path(file_okay=False, path_type=Path), default=Path("results"),
              show_default=True, help="results root (its current.toml names each scenario's results)")
@click.option("--scenarios", "scenario_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("scenarios"), show_default=True, help="the scenario files")
@click.option("--write", "out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="write the table to this file (default: print it)")
def claims(results_root: Path, scenario_dir: Path, out: Path | None) -> int:
    """Count every paper's claims from its scenarios' results (raidlab.report.claimtable):
    holding, judged, calibration rows, and each headline with what its sweep says flips it."""
    from raidlab.errors import UsageError
    from raidlab.outputs import write_whole
    from raidlab.report import claimtable

    for path, what in ((results_root, "results root"), (scenario_dir, "scenario directory")):
        if not path.is_dir():
            raise UsageError(f"{path}: no such {what}")
    text = claimtable.markdown(claimtable.rows(results_root, scenario_dir))
    if out is None:
        click.echo(text, nl=False)
    else:
        write_whole(out, lambda partial: partial.write_text(text))
        click.echo(str(out))
    return 0


def register(cli: click.Group) -> None:
    cli.add_command(claims)
