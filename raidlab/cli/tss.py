"""`raidlab tss ...`: the TSS paper's ioctl() interface (§3.9) from the shell, one command per
mechanism, each one request to the array's daemon (raidlab.service.hosts.tss). Policies
(raidlab.tss_policies) use the same requests. Parsing and printing only.
"""

from __future__ import annotations

import json

import click
from rich.console import Console

_out = Console(highlight=False)
# TSS's personalities as the paper's ioctls name them (raidlab.engine.tss.maptable: RAID1,
# RAID5, CRAID5; spelt here so that the command line needs no engine to start).
KINDS = ("raid1", "raid5", "craid5")


def _call(name: str, home: str | None, op: str, **fields):
    from raidlab.lab import Lab, check_lab_name
    from raidlab.service import control
    from raidlab.service.tss_control import require_tss

    check_lab_name(name)
    lab = Lab(name, home=home)
    require_tss(lab, "raidlab tss works on arrays made with --arch tss")
    return control.request(lab, op, **fields)


def _show(result, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(result))
    elif isinstance(result, dict):
        _out.print(", ".join(f"{k} {v}" for k, v in result.items()))
    else:
        _out.print(result)


_home = click.option("--home", envvar="RAIDLAB_HOME", help="where labs live (default ~/.local/state/raidlab)")
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


@tss.command()
@click.argument("name")
@click.argument("policy", type=click.Choice(["watermark", "five-minute"]))
@click.option("--raid1", "raid1_marks", default=None, help="watermark: RAID1 lower:upper % (25:55)")
@click.option("--raid5", "raid5_marks", default=None, help="watermark: RAID5 lower:upper % (30:60)")
@click.option("--craid5", "craid5_marks", default=None, help="watermark: cRAID5 lower:upper % (7.5:22.5)")
@click.option("--period", type=float, default=None, help="watermark: seconds between checks (1)")
@click.option("--raid1-raid5", type=float, default=None, help="five-minute: seconds between RAID1<->RAID5 turns (20)")
@click.option("--raid5-craid5", type=float, default=None,
              help="five-minute: seconds between RAID5<->cRAID5 turns (350)")
@click.option("--duration", type=click.FloatRange(min=0, min_open=True), default=None,
              help="stop after this many seconds (default: until Ctrl-C)")
@_home
def policy(name, policy, raid1_marks, raid5_marks, craid5_marks, period, raid1_raid5, raid5_craid5, duration, home):
    """Run a TSS policy on array NAME as this process, through the control interface only
    (§3.9): one line per turn that moved stripes; Ctrl-C or SIGTERM stops it."""
    import signal

    import trio

    from raidlab.lab import Lab, check_lab_name
    from raidlab.policies import make_policy
    from raidlab.service.tss_control import SocketControl

    check_lab_name(name)
    given = {"raid1": raid1_marks, "raid5": raid5_marks, "craid5": craid5_marks, "period": period} \
        if policy == "watermark" else {"raid1_raid5": raid1_raid5, "raid5_craid5": raid5_craid5}
    chosen = make_policy(policy, {key: value for key, value in given.items() if value is not None})
    control = SocketControl(Lab(name, home=home))
    _out.print(f"{name}: {policy} policy running ({json.dumps(chosen.describe())})")

    def report(moved: dict) -> None:
        if moved:
            _out.print(", ".join(f"{k} {v}" for k, v in moved.items()))

    async def main() -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                async def stop_on_signal():
                    async for _ in signals:
                        nursery.cancel_scope.cancel()
                        return

                nursery.start_soon(stop_on_signal)
                with trio.move_on_after(duration if duration is not None else float("inf")):
                    await chosen.run(control, on_check=report)
                nursery.cancel_scope.cancel()

    trio.run(main)
    total = ", ".join(f"{k} {v}" for k, v in sorted(chosen.moves.items())) or "none"
    _out.print(f"{name}: {policy} policy stopped; migrations: {total}")


@tss.command("five-minute")
@click.option("--space", default="raid1=2.5,raid5=1.25,craid5=0.875", show_default=True,
              help="bytes each tier occupies per logical byte (Table 3's space overhead)")
@click.option("--access-ms", default="raid1=7.04,raid5=13.47,craid5=54.0", show_default=True,
              help="time per block access of each tier, ms (Table 3, /var)")
@click.option("--object", "object_size", default="8K", show_default=True, help="bytes of one object (a stripe)")
@click.option("--disk-model", default="quantum-fireball-1280s", show_default=True,
              help="the drive whose capacity a byte of space is a share of (raidlab disk models)")
def five_minute(space, access_ms, object_size, disk_model):
    """Break-even intervals of the five-minute rule between TSS tiers (§3.9).

    An object belongs in the faster tier A while it is accessed more often than once per

        T = (t_B - t_A) * disk_bytes / ((space_A - space_B) * object_bytes)

    seconds: keeping it in A costs (space_A - space_B) * object bytes of disk space, and
    each access saves (t_B - t_A) of a disk arm's time (the disk's price cancels). The
    paper's trace runs used 20 s and 350 s instead, "reduced by a large factor" because the
    traces ran 1000 times compacted."""
    from raidlab.disks import catalog
    from raidlab.errors import UsageError
    from raidlab.policies.five_minute import break_even_interval
    from raidlab.units import parse_size

    def pairs(text: str, option: str) -> dict[str, float]:
        out = {}
        for part in text.split(","):
            key, _, value = part.partition("=")
            try:
                out[key.strip()] = float(value)
            except ValueError:
                raise UsageError(f"{option} {part!r} is not KIND=NUMBER") from None
        if set(out) != set(KINDS):
            raise UsageError(f"{option} needs raid1, raid5 and craid5, got {', '.join(sorted(out))}")
        return out

    spaces, times = pairs(space, "--space"), pairs(access_ms, "--access-ms")
    obj, disk = parse_size(object_size), catalog.get(disk_model).media_capacity_bytes
    if not disk:
        raise UsageError(f"{disk_model} has no capacity in the catalog", hint="choose a drive model with one")
    _out.print(f"object {obj} bytes, {disk_model} of {disk:,} bytes")
    for a, b in (("raid1", "raid5"), ("raid5", "craid5")):
        t = break_even_interval(spaces[a], spaces[b], times[a] / 1e3, times[b] / 1e3, obj, disk)
        _out.print(f"{a} -> {b}: an object stays in {a} while accessed more often than every {t:,.1f} s "
                   f"({t / 60:,.1f} min)")


def register(cli: click.Group) -> None:
    cli.add_command(tss)
