"""`raidlab tss ...`: the TSS paper's ioctl() interface (§3.9) from the shell, one command per
mechanism, each one request to the array's daemon (raidlab.service.hosts.tss). Policies
(raidlab.tss_policies) use the same requests. Parsing and printing only.
"""

from __future__ import annotations

import json

import click
from rich.console import Console

_out = Console(highlight=False)
KINDS = ("raid1", "raid5", "craid5")


def _call(name: str, home: str | None, op: str, **fields):
    from raidlab.errors import UsageError
    from raidlab.lab import Lab, check_lab_name
    from raidlab.service import control
    from raidlab.service.spec import ArraySpec

    check_lab_name(name)
    lab = Lab(name, home=home)
    arch = ArraySpec.load(lab.path).arch
    if arch != "tss":
        raise UsageError(f"{name} is a {arch} array, not tss", hint="raidlab tss works on arrays made with --arch tss")
    return control.request(lab, op, **fields)


def _show(result, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(result))
    elif isinstance(result, dict):
        _out.print(", ".join(f"{k} {v}" for k, v in result.items()))
    else:
        _out.print(result)


_home = click.option("--home", envvar="RAIDLAB_HOME", help="where labs live (default ./run)")
_json = click.option("--json", "as_json", is_flag=True, help="print one JSON object")


@click.group()
def tss() -> None:
    """The TSS device's control interface (the paper's ioctls, §3.9)."""


@tss.command()
@click.argument("name")
@click.argument("stripe", type=click.IntRange(min=0))
@_home
@_json
def get(name, stripe, home, as_json):
    """Temperature, personality and access fields of logical STRIPE."""
    _show(_call(name, home, "tss_get", stripe=stripe), as_json)


@tss.command("set")
@click.argument("name")
@click.argument("stripe", type=click.IntRange(min=0))
@click.argument("temperature", type=click.FloatRange(min=0))
@_home
@_json
def set_(name, stripe, temperature, home, as_json):
    """Set the temperature of logical STRIPE."""
    _show(_call(name, home, "tss_set", stripe=stripe, value=temperature), as_json)


@tss.command()
@click.argument("name")
@_home
@_json
def reset(name, home, as_json):
    """Reset the temperature of every stripe."""
    _show(_call(name, home, "tss_reset"), as_json)


@tss.command()
@click.argument("name")
@_home
@_json
def age(name, home, as_json):
    """Aging: each stripe's accesses since the last aging raise its temperature."""
    _show(_call(name, home, "tss_age"), as_json)


@tss.command()
@click.argument("name")
@click.option("--factor", type=click.FloatRange(0.0, 1.0, max_open=True), default=0.5, show_default=True,
              help="temperature multiplier of the stripes not accessed since the last degradation")
@_home
@_json
def degrade(name, factor, home, as_json):
    """Exponential degradation of the stripes not accessed recently."""
    _show(_call(name, home, "tss_degrade", factor=factor), as_json)


@tss.command()
@click.argument("name")
@_home
@_json
def counts(name, home, as_json):
    """Stripes of each personality, their maximum temperatures, free space."""
    result = _call(name, home, "tss_counts")
    if as_json:
        click.echo(json.dumps(result))
        return
    p, t = result["personalities"], result["max_temperature"]
    for kind in KINDS:
        _out.print(f"{kind:7} {p[kind]:8} stripes, max temperature {t[kind]}")
    _out.print(f"invalid {p['invalid']:8} stripes; {result['free_stripes']} of {result['physical_stripes']} "
               "physical stripes free")


def _migrate(name, stripe, best, home, as_json, op):
    if (stripe is None) == (best is None):
        raise click.UsageError("give a STRIPE or --best KIND (one of them)")
    fields = {"stripe": stripe} if stripe is not None else {"kind": best}
    _show(_call(name, home, op, **fields), as_json)


@tss.command()
@click.argument("name")
@click.argument("stripe", type=click.IntRange(min=0), required=False)
@click.option("--best", type=click.Choice(["raid5", "craid5"]), help="promote the hottest stripe of this kind")
@_home
@_json
def promote(name, stripe, best, home, as_json):
    """Promote logical STRIPE (cRAID5 -> RAID5 -> RAID1), or the hottest of a kind."""
    _migrate(name, stripe, best, home, as_json, "tss_promote")


@tss.command()
@click.argument("name")
@click.argument("stripe", type=click.IntRange(min=0), required=False)
@click.option("--best", type=click.Choice(["raid1", "raid5"]), help="victimize the coldest stripe of this kind")
@_home
@_json
def victimize(name, stripe, best, home, as_json):
    """Victimize logical STRIPE (RAID1 -> RAID5 -> cRAID5), or the coldest of a kind."""
    _migrate(name, stripe, best, home, as_json, "tss_victimize")


def register(cli: click.Group) -> None:
    cli.add_command(tss)
