"""Commands of the caching architectures (raidlab.engine.caches) beyond create/status:
`raidlab bypass NAME [--off]` (DCD §3.1). Parsing and printing only; the daemon's
CacheHost does the work.
"""

from __future__ import annotations

import json

import click
from rich.console import Console

_err = Console(stderr=True, highlight=False)


@click.command()
@click.argument("name")
@click.option("--off", is_flag=True, help="leave bypass mode: cache again")
@click.option("--home", envvar="RAIDLAB_HOME", help="where labs live (default ~/.local/state/raidlab)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def bypass(name, off, home, as_json):
    """Turn DCD NAME into a plain disk on the fly (drains RAM buffer and cache-disk first)."""
    from raidlab.service import control
    from raidlab.lab import Lab, check_lab_name

    check_lab_name(name)
    with _err.status(f"{name}: draining" if not off else f"{name}: leaving bypass"):
        result = control.request(Lab(name, home=home), "bypass", on=not off)
    if as_json:
        click.echo(json.dumps(result))
        return
    _err.print(f"{name}: {result['state']}"
               + (f" (drained {result['drained_bytes'] >> 10} KiB to the data disk)" if not off else ""))


def register(cli: click.Group) -> None:
    cli.add_command(bypass)
