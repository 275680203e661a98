"""`raidlab explain LAYOUT`: how logical requests become member operations, for teaching.

In the style of the OSTEP RAID homework (raid.py): a logical request and the member reads
and writes it causes (which disk, which offset, data, mirror copies, images, parity; the
RAID 5 write method and what the other method would have read), or the reverse question
(here are the member operations, what was the logical request?) with the answer shown only
with --answers, or random requests from --seed for a quiz. Everything comes from the
layout's own plans (raidlab.engine.layouts.explain over the engine's `write_plan` and
`read_plan`), so what a student reads is what the engine does; nothing is created and no
I/O is done.

Units: --lba and --length count blocks of --block bytes (default 4K, or the chunk when it
is smaller); member offsets count blocks from the start of each member.
"""

from __future__ import annotations

import random

import click

from raidlab.errors import UsageError

SA_LAYOUTS = ("sa1", "sa2", "sa3")
DEFAULT_ROWS = 16  # chunk rows per member when --disk-size is not given
SA_ROWS = 100  # SA-RAID's: one cycle of the 100-entry virtual device array fits


def _key_values(options: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in options:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"option {item!r} is not KEY=VALUE", hint="write it like -o algorithm=left-symmetric")
        out[key.strip()] = value.strip()
    return out


def _numbers(key: str, text: str, n: int) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise UsageError(f"option {key}={text} is not a list of numbers", hint=f"write it like {key}=20,10,10,10") from None
    if len(values) != n:
        raise UsageError(f"option {key}={text} names {len(values)} disks, not {n}")
    return values


def layout_params(name: str, n: int, options: dict[str, str]) -> tuple[dict, str]:
    """The layout's own options from -o KEY=VALUE (numbers and lists parsed), with the
    example values SA-RAID's layouts need when none are given, and a note naming them."""
    params: dict = {}
    note = ""
    for key, value in options.items():
        if key == "bandwidths":
            params[key] = _numbers(key, value, n)
        elif key == "bandwidth_curves":  # saz: outer,inner per disk, "20:10,18:9,..."
            try:
                params[key] = tuple(tuple(float(x) for x in pair.split(":")) for pair in value.split(","))
            except ValueError:
                raise UsageError(f"option {key}={value} is not OUTER:INNER per disk",
                                 hint="write it like bandwidth_curves=20:10,20:10,12:6,12:6") from None
        elif key == "regions":
            params[key] = int(value)
        else:
            params[key] = value
    if name in SA_LAYOUTS and "bandwidths" not in params and "virtual_device_array" not in params:
        params["bandwidths"] = (20.0,) + (10.0,) * (n - 1)
        note = "bandwidths 20,10,... (an example: disk 0 twice as fast; -o bandwidths=... to change)"
    if name == "saz" and "bandwidth_curves" not in params:
        params["bandwidth_curves"] = ((20.0, 10.0),) + ((10.0, 5.0),) * (n - 1)
        params.setdefault("regions", 2)
        note = "bandwidth_curves 20:10,10:5,... (an example; -o bandwidth_curves=... to change)"
    return params, note


def build(name: str, disks: int, chunk: int, disk_size: int | None, options: dict[str, str]):
    """The layout (data area at offset 0) and a note on example parameters."""
    from raidlab.engine.layouts import create_layout, layout_names

    if name not in layout_names():
        raise UsageError(f"no layout named {name!r}", hint=f"layouts: {', '.join(layout_names())}")
    params, note = layout_params(name, disks, options)
    rows = SA_ROWS if name in (*SA_LAYOUTS, "saz") else DEFAULT_ROWS
    size = disk_size if disk_size is not None else rows * chunk
    return create_layout(name, n_disks=disks, disk_size=size, chunk_bytes=chunk, **params), note


def random_requests(layout, block: int, count: int, seed: int, op: str | None) -> list[tuple[int, int, bool]]:
    """`count` requests (offset, length, write) inside the layout, aligned to `block`, up to
    one full stripe long, from `seed`."""
    rng = random.Random(seed)
    blocks = layout.capacity // block
    stripe_blocks = max(1, layout.chunk_bytes * max(1, layout.n_disks - 1) // block)
    out = []
    for _ in range(count):
        length = rng.randint(1, min(stripe_blocks, blocks))
        start = rng.randrange(0, blocks - length + 1)
        write = rng.random() < 0.5 if op is None else op == "write"
        out.append((start * block, length * block, write))
    return out


@click.command()
@click.argument("layout_name", metavar="LAYOUT")
@click.option("--disks", type=click.IntRange(min=1), default=4, show_default=True, help="members")
@click.option("--chunk", default="4K", show_default=True, help="chunk (stripe unit)")
@click.option("--disk-size", default=None,
              help=f"bytes per member (default: {DEFAULT_ROWS} chunks; SA-RAID's {SA_ROWS})")
@click.option("-o", "--option", "options", multiple=True, metavar="KEY=VALUE",
              help="a layout option (raid5 algorithm, raid10 layout, chained image_placement, sa bandwidths, ...)")
@click.option("--block", default=None, help="the unit of --lba, --length and member offsets (default 4K, or the chunk)")
@click.option("--lba", type=click.IntRange(min=0), default=None, help="first logical block of the request")
@click.option("--length", type=click.IntRange(min=1), default=1, show_default=True, help="blocks")
@click.option("--write", "op", flag_value="write", default=None, help="a write (default with --lba: a read)")
@click.option("--read", "op", flag_value="read", help="a read")
@click.option("--failed", type=int, multiple=True, help="a failed member (repeatable): degraded plans")
@click.option("--reverse", is_flag=True, help="show the member operations and ask for the logical request")
@click.option("--answers", is_flag=True, help="print the answers (random and reverse questions hide them)")
@click.option("--seed", type=int, default=None, help="random requests from this seed (a quiz)")
@click.option("--count", type=click.IntRange(min=1), default=5, show_default=True, help="random requests")
@click.option("--draw", is_flag=True, help="draw the layout: one column per disk, one line per chunk row")
@click.option("--rows", type=click.IntRange(min=1), default=None, help="chunk rows to draw (default: all, at most 64)")
def explain(layout_name, disks, chunk, disk_size, options, block, lba, length, op, failed, reverse, answers, seed,
            count, draw, rows) -> int:
    """Show how logical requests on LAYOUT become member reads and writes.

    \b
    raidlab explain raid5 --disks 5 --lba 4 --write       # a small write: read-modify-write
    raidlab explain raid5 --lba 0 --length 12 --write     # a full stripe: no reads
    raidlab explain raidx --draw                          # the RAID-x paper's Fig. 2
    raidlab explain raid5 --seed 7 --reverse              # a quiz; --answers to check it
    """
    from raidlab.engine.layouts.explain import draw_layout, explain_request, header
    from raidlab.units import parse_size

    chunk_bytes = parse_size(chunk, "--chunk")
    size = parse_size(disk_size, "--disk-size") if disk_size is not None else None
    layout, note = build(layout_name, disks, chunk_bytes, size, _key_values(options))
    unit = parse_size(block, "--block") if block is not None else min(4096, chunk_bytes)
    if unit <= 0 or unit % 512 or (layout.uses_chunks and chunk_bytes % unit):
        raise UsageError(f"block of {unit} bytes does not divide the chunk of {chunk_bytes} bytes into sectors",
                         hint="use --block 512, 4K or the chunk")
    bad = [d for d in failed if not 0 <= d < disks]
    if bad:
        raise UsageError(f"--failed {bad[0]}: the layout has disks 0..{disks - 1}")
    if draw:
        click.echo(header(layout, unit))
        if note:
            click.echo(note)
        click.echo(draw_layout(layout, rows))
        if lba is None and seed is None:
            return 0
    if lba is not None:
        if (lba + length) * unit > layout.capacity:
            raise UsageError(f"blocks {lba}..{lba + length - 1} are beyond the layout's "
                             f"{layout.capacity // unit} blocks",
                             hint="use a smaller --lba or --length, or a larger --disk-size")
        requests = [(lba * unit, length * unit, op == "write")]
        show = answers or not reverse
    else:
        requests = random_requests(layout, unit, count, 0 if seed is None else seed, op)
        show = answers
    for i, (offset, nbytes, write) in enumerate(requests):
        if i:
            click.echo()
        text = explain_request(layout, offset, nbytes, write=write, failed=failed, show_answers=show,
                               reverse=reverse, block=unit)
        if note and i == 0 and not draw:
            first, _, rest = text.partition("\n")
            text = f"{first}\n{note}\n{rest}"
        elif i:
            text = text.split("\n", 1)[1]  # the header once
        click.echo(text)
    return 0


def register(cli: click.Group) -> None:
    cli.add_command(explain)
