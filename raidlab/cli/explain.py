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
is smaller); every line says "block" or "blocks", member blocks counting from the start of
each member. Without --disk-size each member is 16 chunks (SA-RAID's: 100), or as many more
as a request given by --lba and --length needs; a --disk-size too small for the request is
refused with the size it would take.

A quiz (--seed, or no --lba) numbers its questions and ends with how to see the answers;
no question shows any part of its answer before --answers.
"""

from __future__ import annotations

import random

import click

from raidlab.errors import UsageError



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
    example values the layout needs when none are given (SA-RAID's: its `explain_example`),
    and a note naming them."""
    from raidlab.engine.layouts import layout_class

    params: dict = {}
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
    return layout_class(name).explain_example(n, params)


def _layout_of(name: str, disks: int, chunk: int, size: int, params: dict):
    from raidlab.engine.layouts import create_layout

    return create_layout(name, n_disks=disks, disk_size=size, chunk_bytes=chunk, **params)


def smallest_disk_for(name: str, disks: int, chunk: int, params: dict, need: int, *, multiple: int = 1) -> int | None:
    """The smallest member size, in whole multiples of `multiple` chunk rows, whose layout
    holds `need` logical bytes; None if none up to 1 TiB per member does."""
    per_row = _layout_of(name, disks, chunk, multiple * chunk, params).capacity / multiple
    rows = max(multiple, int(need // max(per_row, 1)) // multiple * multiple)
    while rows * chunk <= 1 << 40:
        try:
            if _layout_of(name, disks, chunk, rows * chunk, params).capacity >= need:
                return rows * chunk
        except UsageError:
            pass  # a size the layout cannot take (RAID-x's halves): the next one
        rows += multiple
    return None


def build(name: str, disks: int, chunk: int, disk_size: int | None, options: dict[str, str], need: int = 0):
    """The layout (data area at offset 0) and notes on example parameters and on a member
    size grown to hold `need` logical bytes (the end of the request asked about)."""
    from raidlab.engine.layouts import layout_class, layout_names
    from raidlab.engine.layouts.base import format_size

    if name not in layout_names():
        raise UsageError(f"no layout named {name!r}", hint=f"layouts: {', '.join(layout_names())}")
    params, note = layout_params(name, disks, options)
    rows = layout_class(name).explain_rows  # chunk rows per member when --disk-size is not given
    if disk_size is not None:
        return _layout_of(name, disks, chunk, disk_size, params), note
    layout = _layout_of(name, disks, chunk, rows * chunk, params)
    if layout.capacity < need:
        size = smallest_disk_for(name, disks, chunk, params, need, multiple=rows)
        if size is None:
            raise UsageError(f"no {name} on {disks} disks holds {need} bytes", hint="use a smaller --lba or --length")
        layout = _layout_of(name, disks, chunk, size, params)
        grown = (f"disks of {format_size(size)}: {rows} chunks each (the default) would end before the request "
                 f"(--disk-size to choose)")
        note = f"{note}\n{grown}" if note else grown
    return layout, note


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


def workload_requests(layout, block: int, count: int, seed: int, kind: str, size: int, writes_pct: int,
                      range_blocks: int | None) -> list[tuple[int, int, bool]]:
    """`count` requests of `size` blocks (offset, length, write) inside blocks 0..range-1 (the
    capacity by default): sequential from block 0 (wrapping at the range's end) or at random
    places, each a write with probability `writes_pct` percent, from `seed`: OSTEP's raid.py
    -W seq|rand -S -R -w -n, in blocks of --block."""
    blocks = layout.capacity // block
    span = blocks if range_blocks is None else range_blocks
    if span > blocks:
        raise UsageError(f"--range {span} is beyond the layout's {blocks} blocks", hint="give --disk-size for more")
    if size > span:
        raise UsageError(f"--size {size} blocks does not fit in a range of {span} blocks")
    rng = random.Random(seed)
    out = []
    for i in range(count):
        start = (i * size) % (span - span % size) if kind == "seq" else rng.randrange(0, span - size + 1)
        write = rng.random() * 100 < writes_pct
        out.append((start * block, size * block, write))
    return out


@click.command()
@click.argument("layout_name", metavar="LAYOUT")
@click.option("--disks", type=click.IntRange(min=1), default=4, show_default=True, help="members")
@click.option("--chunk", default="4K", show_default=True, help="chunk (stripe unit)")
@click.option("--disk-size", default=None,
              help="bytes per member (default: the layout's explain_rows chunks, 16 or SA-RAID's 100, or more to "
                   "hold the request of --lba and --length)")
@click.option("-o", "--option", "options", multiple=True, metavar="KEY=VALUE",
              help="a layout option (raid5 algorithm, raid10 layout, chained image_placement, sa bandwidths, ...)")
@click.option("--block", default=None, help="the unit of --lba, --length and member offsets (default 4K, or the chunk)")
@click.option("--lba", type=click.IntRange(min=0), default=None, help="first logical block of the request")
@click.option("--length", type=click.IntRange(min=1), default=1, show_default=True, help="blocks")
@click.option("--write", "op", flag_value="write", default=None, help="a write (default with --lba: a read)")
@click.option("--read", "op", flag_value="read", help="a read")
@click.option("--failed", type=int, multiple=True, help="a failed member (repeatable): degraded plans")
@click.option("--reverse", is_flag=True, help="show the member operations and ask for the logical request")
@click.option("--answers", is_flag=True, help="print the answers (a quiz and a reverse question hide them)")
@click.option("--seed", type=int, default=None, help="numbered random requests from this seed (a quiz)")
@click.option("--count", type=click.IntRange(min=1), default=5, show_default=True, help="random requests")
@click.option("--draw", is_flag=True, help="draw the layout: one column per disk, one line per chunk row")
@click.option("--rows", type=click.IntRange(min=1), default=None, help="chunk rows to draw (default: all, at most 64)")
@click.option("--timing", is_flag=True,
              help="time the request of --lba on drives of --disk-model: each member operation's queue, seek, "
                   "rotation and transfer, and per-disk totals")
@click.option("--disk-model", default="hp-c2200a", show_default=True,
              help="the drive model --timing uses (`raidlab disk models` lists them)")
@click.option("--workload", type=click.Choice(["seq", "rand"]), default=None,
              help="--count generated requests, sequential or random (raid.py -W); with --timing, timed as a run")
@click.option("--size", "request_blocks", type=click.IntRange(min=1), default=1, show_default=True,
              help="blocks per generated request (raid.py -S)")
@click.option("--writes", "writes_pct", type=click.IntRange(0, 100), default=0, show_default=True,
              help="percent of generated requests that write (raid.py -w)")
@click.option("--range", "range_blocks", type=click.IntRange(min=1), default=None,
              help="generated requests fall in blocks 0..RANGE-1 (raid.py -R; default: the whole capacity)")
def explain(layout_name, disks, chunk, disk_size, options, block, lba, length, op, failed, reverse, answers, seed,
            count, draw, rows, timing, disk_model, workload, request_blocks, writes_pct, range_blocks) -> int:
    """Show how logical requests on LAYOUT become member reads and writes.

    \b
    raidlab explain raid5 --disks 5 --lba 4 --write       # a small write: read-modify-write
    raidlab explain raid5 --lba 0 --length 12 --write     # a full stripe: no reads
    raidlab explain raidx --draw                          # the RAID-x paper's Fig. 2
    raidlab explain raid5 --seed 7 --reverse              # a quiz; --answers to check it
    raidlab explain raid5 --disks 5 --lba 4 --write --timing   # the small write on HP C2200A drives
    """
    from raidlab.engine.layouts.base import format_size
    from raidlab.engine.layouts.explain import draw_layout, header, request_lines
    from raidlab.units import parse_size

    if workload is not None and lba is not None:
        raise UsageError("--workload generates the requests: leave --lba out")
    if timing and ((lba is None and workload is None) or reverse):
        raise UsageError("--timing times the request of --lba or a --workload (and not --reverse)",
                         hint="raidlab explain raid5 --lba 4 --write --timing")
    if timing:
        from raidlab.disks import catalog

        catalog.get(disk_model)  # an unknown model is refused before anything is built
    chunk_bytes = parse_size(chunk, "--chunk")
    size = parse_size(disk_size, "--disk-size") if disk_size is not None else None
    unit = parse_size(block, "--block") if block is not None else min(4096, chunk_bytes)
    need = (lba + length) * unit if lba is not None else 0
    options_given = _key_values(options)
    layout, note = build(layout_name, disks, chunk_bytes, size, options_given, need)
    if unit <= 0 or unit % 512 or (layout.uses_chunks and chunk_bytes % unit):
        raise UsageError(f"block of {unit} bytes does not divide the chunk of {chunk_bytes} bytes into sectors",
                         hint="use --block 512, 4K or the chunk")
    bad = [d for d in failed if not 0 <= d < disks]
    if bad:
        raise UsageError(f"--failed {bad[0]}: the layout has disks 0..{disks - 1}")
    if lba is not None and need > layout.capacity:
        params, _note = layout_params(layout_name, disks, options_given)
        fits = smallest_disk_for(layout_name, disks, chunk_bytes, params, need)
        raise UsageError(f"blocks {lba}..{lba + length - 1} are beyond the layout's {layout.capacity // unit} "
                         f"blocks (disks of {format_size(layout.disk_size)})",
                         hint=(f"give --disk-size {_size_flag(fits)} or more, or " if fits else "use ")
                         + "a smaller --lba or --length")
    click.echo(header(layout, unit))
    if note:
        click.echo(note)
    entries = layout.geometry().get("virtual_device_array")
    if entries:  # SA-RAID: each disk's share of the 100 entries, what the drawing spreads
        click.echo("virtual device array: " + ", ".join(f"disk {d} {entries.count(d)} entries"
                                                        for d in range(layout.n_disks)))
    if failed:
        click.echo(f"failed disks: {', '.join(map(str, sorted(set(failed))))}")
    if draw:
        click.echo(draw_layout(layout, rows))
        if lba is None and seed is None:
            return 0
    if lba is not None:
        show = answers or not reverse
        click.echo("\n".join(request_lines(layout, lba * unit, length * unit, write=op == "write", failed=failed,
                                           show_answers=show, reverse=reverse, block=unit)))
        if not show:
            click.echo(ANSWERS_HINT)
        if timing:
            from raidlab.engine.timing import time_request, timing_lines

            timed = time_request(layout, disk_model, lba * unit, length * unit, write=op == "write",
                                 failed=frozenset(failed))
            click.echo("\n".join(timing_lines(timed, layout, unit)))
        return 0
    if workload is not None:
        requests = workload_requests(layout, unit, count, seed or 0, workload, request_blocks, writes_pct,
                                     range_blocks)
        if timing:
            from raidlab.engine.timing import time_requests, workload_lines

            click.echo(f"{count} {'sequential' if workload == 'seq' else 'random'} requests of {request_blocks} "
                       f"block{'s' if request_blocks != 1 else ''}, {writes_pct}% writes, seed {seed or 0}")
            timed = time_requests(layout, disk_model, requests, failed=frozenset(failed))
            click.echo("\n".join(workload_lines(timed, layout)))
            return 0
        answers = answers or not reverse  # generated requests are shown with their plans
    else:
        requests = random_requests(layout, unit, count, seed or 0, op)
    label = "Request" if workload is not None and not reverse else "Question"
    for number, (offset, nbytes, write) in enumerate(requests, 1):
        click.echo(f"\n{label} {number}:")
        click.echo("\n".join(request_lines(layout, offset, nbytes, write=write, failed=failed,
                                           show_answers=answers, reverse=reverse, block=unit)))
    if not answers:
        click.echo(f"\n{ANSWERS_HINT}")
    return 0


ANSWERS_HINT = "To see the answers, run the same command with --answers."


def _size_flag(nbytes: int) -> str:
    """A --disk-size value: 2M, 320K, or bytes."""
    for suffix, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes % size == 0:
            return f"{nbytes // size}{suffix}"
    return str(nbytes)


def register(cli: click.Group) -> None:
    cli.add_command(explain)
