"""`raidlab doctor`: what this host has and which runners can work here."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table


@click.command()
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def doctor(as_json: bool) -> int:
    """Check system tools, kernel capabilities and usable runners.

    Exits 0 when at least one runner (native engine, native md, lab VM) can work, 1 otherwise.
    """
    from raidlab import doctor as doctor_mod

    report = doctor_mod.collect()
    if as_json:
        click.echo(json.dumps(report.as_json(), indent=2))
        return 0 if report.any_runner else 1

    console = Console(highlight=False)
    console.print(f"kernel {report.kernel}, {'root' if report.is_root else 'not root'}")
    tools = Table(title="system tools", show_lines=False)
    for col in ("tool", "status", "version / install hint", "used for"):
        tools.add_column(col)
    for t in report.tools:
        tools.add_row(
            t.name,
            "[green]found[/]" if t.found else "[red]missing[/]",
            (t.version or "") if t.found else f"[yellow]{t.hint}[/]",
            t.purpose,
        )
    console.print(tools)
    caps = Table(title="kernel capabilities")
    caps.add_column("capability")
    caps.add_column("ok")
    caps.add_column("detail")
    for c in report.capabilities:
        caps.add_row(c.name, "[green]yes[/]" if c.ok else "[red]no[/]", c.detail)
    console.print(caps)
    runners = Table(title="runners")
    runners.add_column("runner")
    runners.add_column("usable")
    runners.add_column("why")
    for r in report.runners:
        runners.add_row(r.name, "[green]yes[/]" if r.usable else "[red]no[/]", r.reason)
    console.print(runners)
    arch_table = Table(title="architectures (raidlab archs)")
    for col in ("architecture", "family", "runs on", "usable here"):
        arch_table.add_column(col)
    for a in report.architectures:
        arch_table.add_row(a.name, a.family, ", ".join(a.runners),
                           ", ".join(a.usable) if a.usable else "[red]none[/]")
    console.print(arch_table)
    if not report.any_runner:
        console.print("[red]no runner can work on this host[/]")
        return 1
    return 0


def register(cli: click.Group) -> None:
    cli.add_command(doctor)
