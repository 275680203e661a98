"""Teaching output in the style of OSTEP's raid.py: logical request -> physical requests.

Why: the OSTEP homework (remzi-arpacidusseau/ostep-homework, file-raid/raid.py) teaches
layouts by printing, for each logical request, the physical reads and writes it causes, and
by asking the reverse question (here are the physical I/Os: what was the logical request?),
with answers shown only on request (its `-c` flag). raidlab does the same for every one of
its layouts, from the same pure plans the engine executes, so what a student reads is what
the engine does. Everything here returns text; nothing performs I/O; `raidlab explain`
(raidlab.cli.explain) prints it.

Units: every address and length is said in blocks of `block` bytes, and every line says
"block" or "blocks" (the header says how many bytes a block is: 4 KiB when everything is
4 KiB-aligned, else a 512-byte sector); member blocks count from the start of the layout's
data area (the metadata area before `data_offset` is left out). The one count that is not
blocks, a RAID 5 method's cost, is said in member reads (requests).

A question (show_answers=False) shows nothing that gives its answer away: the forward one
no member operation and no stripe, the reverse one no logical block (not even in a
degraded read's reconstruction) and no stripe number.
"""

from __future__ import annotations

from collections.abc import Iterable

from raidlab.blockdev import SECTOR
from raidlab.engine.layouts.base import ChunkMappedLayout, DataUnavailableError, Layout, format_size
from raidlab.engine.layouts.raid5 import Raid5Layout

ROLE_WORDS = {"data": "data", "mirror": "mirror copy", "image": "image", "parity": "parity", "unused": "unused"}


def _block_size(layout: Layout, *values: int) -> int:
    if all(v % 4096 == 0 for v in (layout.chunk_bytes, layout.data_offset, *values)):
        return 4096
    return SECTOR


def _addr(nbytes: int, block: int) -> str:
    return str(nbytes // block)


def _blocks(offset: int, length: int, block: int) -> str:
    """"block 5", "blocks 8..10" (first and last), or bytes where a range is not whole blocks."""
    if offset % block or length % block:
        return f"bytes {offset}..{offset + length - 1}"
    first, count = offset // block, length // block
    return f"block {first}" if count == 1 else f"blocks {first}..{first + count - 1}"


def _count(length: int, block: int) -> str:
    n = length // block
    return f"{n} block{'s' if n != 1 else ''}" if length % block == 0 else f"{length} bytes"


def _where(layout: Layout, disk: int, disk_offset: int, length: int, block: int) -> str:
    return f"[disk {disk}, {_blocks(disk_offset - layout.data_offset, length, block)}]"


def _reads(n: int) -> str:
    return f"{n} member read{'s' if n != 1 else ''}"


def _block_count(nbytes: int, block: int) -> str:
    n = nbytes / block
    shown = f"{n:g}" if n != int(n) else str(int(n))
    return f"{shown} block{'s' if n != 1 else ''}"


def _decision(choice, block: int) -> str:
    """What a RAID 5 stripe's (or range of rows') method was chosen on
    (raidlab.engine.layouts.base.StripeWrite, RowsWrite): the bytes each method would read,
    the fewer winning in every row and a tie going to RCW, as md decides; for a whole
    stripe, each with its member reads."""
    costs = []
    for name, attr in (("RMW", "rmw"), ("RCW", "rcw")):
        nbytes = getattr(choice, f"{attr}_read_bytes")  # None: impossible with the failed disk
        if nbytes is None:
            continue
        reads = getattr(choice, f"{attr}_reads", None)  # a whole stripe's also counts its member reads
        costs.append(f"{name} reads {_block_count(nbytes, block)}" + (f" in {_reads(reads)}" if reads is not None else ""))
    if not costs:
        return ""
    rule = "; the fewer blocks read wins, a tie goes to RCW" if choice.method in ("rmw", "rcw") and len(costs) == 2 else ""
    return f" ({', '.join(costs)}{rule})"


def _rows(row, block: int) -> str:
    """"row 2" or "rows 0..1": the rows (blocks inside the chunk) a RowsWrite covers."""
    first, last = row.start // block, (row.end - 1) // block
    return f"row {first}" if first == last else f"rows {first}..{last}"


def header(layout: Layout, block: int) -> str:
    opts = ""
    if isinstance(layout, ChunkMappedLayout) and hasattr(layout, "layout"):
        opts = f" layout {layout.layout}"
    text = (
        f"{layout.name}{opts} on {layout.n_disks} disks of {format_size(layout.disk_size)}, chunk "
        f"{format_size(layout.chunk_bytes)}, capacity {format_size(layout.capacity)}; "
        f"1 block = {format_size(block)}"
    )
    if layout.data_offset:
        text += f"; member blocks count from the data area at {format_size(layout.data_offset)}"
    return text


def physical_lines(layout: Layout, offset: int, length: int, *, write: bool = False,
                   failed: Iterable[int] = (), block: int | None = None, reveal: bool = True) -> list[str]:
    """The physical requests of one logical request, one line each, in issue order; with
    reveal=False (a reverse question) without the lines that name the logical request:
    the RAID 5 stripe and its method, the logical blocks a degraded read rebuilds."""
    failed = frozenset(failed)
    block = block or _block_size(layout, offset, length)
    lines: list[str] = []
    if write:
        try:
            plan = layout.write_plan(offset, length, failed)
        except DataUnavailableError as exc:  # the engine answers such a write with EIO
            return [f"  refused with EIO: {exc.strerror}"]
        for stripe in plan.stripes if reveal else ():
            if stripe.method == "rmw+rcw":  # rows decide apart (md decides per stripe_head)
                lines.append(f"  stripe {stripe.stripe}: each row its own method, as md decides per row")
                for row in stripe.rows:
                    lines.append(f"    {_rows(row, block)}: {_METHOD_WORDS.get(row.method, row.method)}"
                                 + _decision(row, block))
                continue
            lines.append(f"  stripe {stripe.stripe}: {_METHOD_WORDS.get(stripe.method, stripe.method)}"
                         + _decision(stripe, block))
        for rng in plan.reads:
            loc = layout.locate(rng.disk, rng.disk_offset)
            what = "old parity" if loc.role == "parity" else "old data"
            lines.append(f"  read  {_where(layout, rng.disk, rng.disk_offset, rng.length, block):28s} {what}")
        for ext in plan.writes:
            lines.append(f"  write {_where(layout, ext.disk, ext.disk_offset, ext.length, block):28s} "
                         f"{ROLE_WORDS.get(ext.role, ext.role)}")
        for ext in plan.skipped:
            lines.append(f"  (skip {_where(layout, ext.disk, ext.disk_offset, ext.length, block)}: disk {ext.disk} failed)")
        return lines
    try:
        plan = layout.degraded_read_plan(offset, length, failed)
    except DataUnavailableError:
        if length <= block:
            where = _blocks(offset, length, block) if reveal else "a block"
            return [f"  {where}: no surviving copy (disks {', '.join(map(str, sorted(failed)))} failed)"]
        # Some blocks are lost: explain the request block by block.
        for start in range(offset, offset + length, block):
            lines += physical_lines(layout, start, min(block, offset + length - start), failed=failed, block=block,
                                    reveal=reveal)
        return lines
    for rng in plan.reads:
        loc = layout.locate(rng.disk, rng.disk_offset)
        lines.append(f"  read  {_where(layout, rng.disk, rng.disk_offset, rng.length, block):28s} "
                     f"{ROLE_WORDS.get(loc.role, loc.role)}")
    for piece in plan.pieces:
        if len(piece.sources) > 1:
            disks = ", ".join(str(plan.reads[i].disk) for i, _off in piece.sources)
            where = _blocks(piece.offset, piece.length, block) if reveal else _count(piece.length, block)
            lines.append(f"  {where} rebuilt as XOR of disks {disks}")
    if reveal and any(len(copies) > 1 for copies in layout.copies(offset, length)):
        lines.append("  " + MIRROR_READS + (f"; {layout.md_read_policy})" if layout.md_read_policy else ")"))
    return lines


# Which copy of a mirrored block a read takes (raidlab.engine.array reads the layout's plan).
MIRROR_READS = "(mirrored: the engine reads each block from its first surviving copy"


_METHOD_WORDS = {
    "full-stripe": "full-stripe write (no reads)",
    "rmw": "read-modify-write",
    "rcw": "reconstruct-write",
    "rmw+rcw": "read-modify-write in some rows, reconstruct-write in others",
    "no-parity": "parity disk failed: data written, parity skipped (md still reads what reconstruct-write would)",
}


def request_lines(layout: Layout, offset: int, length: int, *, write: bool = False,
                  failed: Iterable[int] = (), show_answers: bool = True, reverse: bool = False,
                  block: int | None = None) -> list[str]:
    """One logical request, OSTEP-style, without the layout's header.

    forward (default): the logical request, then its physical requests (or the question
    "Physical reads and writes?" when show_answers is False). reverse: the physical requests,
    then the logical request (or "at block ?, ? blocks" when show_answers is False).
    """
    block = block or _block_size(layout, offset, length)
    op = "WRITE" if write else "READ"
    logical = f"LOGICAL {op} at block {_addr(offset, block)}, {_count(length, block)}"
    if reverse:
        lines = physical_lines(layout, offset, length, write=write, failed=failed, block=block,
                               reveal=show_answers)
        return [*lines, logical if show_answers else f"LOGICAL {op} at block ?, ? blocks"]
    if not show_answers:
        return [logical, "  Physical reads and writes?"]
    return [logical, *physical_lines(layout, offset, length, write=write, failed=failed, block=block)]


def explain_request(layout: Layout, offset: int, length: int, *, write: bool = False,
                    failed: Iterable[int] = (), show_answers: bool = True, reverse: bool = False,
                    block: int | None = None) -> str:
    """The layout's header, the failed disks if any, and `request_lines`."""
    failed = frozenset(failed)
    block = block or _block_size(layout, offset, length)
    out = [header(layout, block)]
    if failed:
        out.append(f"failed disks: {', '.join(map(str, sorted(failed)))}")
    out += request_lines(layout, offset, length, write=write, failed=failed, show_answers=show_answers,
                         reverse=reverse, block=block)
    return "\n".join(out)


def explain_physical(layout: Layout, disk: int, disk_offset: int, *, block: int | None = None) -> str:
    """The reverse question for one member address: what lives there?

    disk_offset is a member byte offset (data_offset included), like Extent.disk_offset.
    """
    block = block or _block_size(layout, disk_offset - layout.data_offset)
    loc = layout.locate(disk, disk_offset)
    where = f"disk {disk}, block {_addr(disk_offset - layout.data_offset, block)}"
    if loc.role == "parity":
        return f"{where}: parity of stripe {loc.stripe}"
    if loc.role in ("unused", "reserved"):
        return f"{where}: {loc.role}"
    copy = f" (copy {loc.copy})" if loc.copy else ""
    return f"{where}: {ROLE_WORDS[loc.role]} of logical block {_addr(loc.logical_offset, block)}{copy}"


def draw_layout(layout: Layout, rows: int | None = None, *, width: int = 5) -> str:
    """A picture like the RAID-x paper's Fig. 2: one column per disk, one line per chunk row.

    B<i> is logical chunk i, M<i> its mirror or image, P<s> the parity of stripe s, '.' an
    unused chunk; a legend under the drawing names the symbols it uses. rows defaults to the
    whole member (capped at 64 lines).
    """
    total_rows = layout.chunks_per_disk if layout.uses_chunks else -(-layout.member_data_size // layout.chunk_bytes)
    rows = min(total_rows, 64) if rows is None else min(rows, total_rows)
    lines = ["row  " + "".join(f"{'disk ' + str(d):>{width + 2}}" for d in range(layout.n_disks))]
    used: set[str] = set()
    for row in range(rows):
        cells = []
        for disk in range(layout.n_disks):
            loc = layout.locate(disk, layout.data_offset + row * layout.chunk_bytes)
            if loc.role == "parity":
                cell = f"P{loc.stripe}"
            elif loc.role in ("data",):
                cell = f"B{loc.logical_offset // layout.chunk_bytes}"
            elif loc.role in ("mirror", "image"):
                cell = f"M{loc.logical_offset // layout.chunk_bytes}"
            else:
                cell = "."
            used.add(cell[0])
            cells.append(f"{cell:>{width + 2}}")
        lines.append(f"{row:<5d}" + "".join(cells))
    if rows < total_rows:
        lines.append(f"... ({total_rows - rows} more rows)")
    lines.append(legend(layout, used))
    return "\n".join(lines)


_LEGEND = (("B", "Bn = logical chunk n (data)"), ("M", "Mn = a mirror copy or image of chunk n"),
           ("P", "Pn = the parity of stripe n"), (".", ". = unused"))


def legend(layout: Layout, symbols: Iterable[str] = "BMP.") -> str:
    """What the drawing's cells mean, for the symbols it uses; a cell is one chunk."""
    symbols = set(symbols)
    words = "; ".join(text for symbol, text in _LEGEND if symbol in symbols)
    return f"one cell = one chunk of {format_size(layout.chunk_bytes)}: {words}"


__all__ = ["draw_layout", "explain_physical", "explain_request", "header", "legend", "physical_lines",
           "request_lines", "Raid5Layout"]
