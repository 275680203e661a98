"""`raidlab archs [NAME]`: the architectures of the registry, one line each, or one with its options."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table


def one_line_each() -> str:
    """Every architecture as `id  summary`, for --help texts (click keeps a block after \\b)."""
    from raidlab import archs as registry

    width = max(len(name) for name in registry.REGISTRY)
    return "\b\n" + "\n".join(f"{a.name:<{width}}  {a.summary}" for a in registry.REGISTRY.values())


@click.command()
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def archs(name: str | None, as_json: bool) -> int:
    """List the architectures, or show architecture NAME with its options and defaults."""
    from raidlab import archs as registry

    chosen = [registry.get(name)] if name else list(registry.REGISTRY.values())
    if as_json:
        click.echo(json.dumps({a.name: {"family": a.family, "summary": a.summary, "source": a.source,
                                        "runners": list(a.runners),
                                        "options": {o.name: o.default for o in a.options}} for a in chosen},
                              indent=2, default=str))
        return 0
    console = Console(highlight=False)
    if name is None:
        table = Table()
        for col in ("architecture", "family", "runs on", "what it is"):
            table.add_column(col)
        for a in chosen:
            table.add_row(a.name, a.family, ", ".join(a.runners), a.summary)
        console.print(table)
        console.print("options of one: raidlab archs NAME")
        return 0
    (a,) = chosen
    console.print(f"{a.name} ({a.family}): {a.summary}")
    console.print(f"follows: {a.source}")
    console.print(f"runs on: {', '.join(a.runners)}")
    if not a.options:
        console.print("options: none")
        return 0
    table = Table(title="options (-o KEY=VALUE)")
    for col in ("option", "default", "meaning"):
        table.add_column(col)
    for option in a.options:
        table.add_row(option.name, "-" if option.default is None else str(option.default), option.help)
    console.print(table)
    return 0


class ListsArchitectures(click.Command):
    """A command whose --help ends with the registry's architectures, read only when the
    help is shown (so defining the command imports nothing of the engine)."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self.epilog = "Architectures (options of one: raidlab archs NAME):\n\n" + one_line_each()
        super().format_epilog(ctx, formatter)


def register(cli: click.Group) -> None:
    cli.add_command(archs)
