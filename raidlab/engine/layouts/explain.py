"""Teaching output in the style of OSTEP's raid.py: logical request -> physical requests.

Why: the OSTEP homework (remzi-arpacidusseau/ostep-homework, file-raid/raid.py) teaches
layouts by printing, for each logical request, the physical reads and writes it causes, and
by asking the reverse question (here are the physical I/Os: what was the logical request?),
with answers shown only on request (its `-c` flag). raidlab does the same for every one of
its layouts, from the same pure plans the engine executes, so what a student reads is what
the engine does. Everything here returns text; nothing performs I/O; `raidlab explain`
(raidlab.cli.explain) prints it.

Units: addresses and offsets are printed in blocks of `block` bytes (default 4 KiB when
everything is 4 KiB-aligned, else 512-byte sectors); member offsets count from the start of
the layout's data area (the metadata area before `data_offset` is left out).
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


def _where(layout: Layout, disk: int, disk_offset: int, length: int, block: int) -> str:
    rel = disk_offset - layout.data_offset
    text = f"[disk {disk}, offset {_addr(rel, block)}]"
    if length != block:
        text += f" x{length // block}" if length % block == 0 else f" {length} bytes"
    return text


def header(layout: Layout, block: int) -> str:
    opts = ""
    if isinstance(layout, ChunkMappedLayout) and hasattr(layout, "layout"):
        opts = f" layout {layout.layout}"
    text = (
        f"{layout.name}{opts} on {layout.n_disks} disks, chunk {format_size(layout.chunk_bytes)}, "
        f"capacity {format_size(layout.capacity)}; 1 block = {format_size(block)}"
    )
    if layout.data_offset:
        text += f"; member offsets count from the data area at {format_size(layout.data_offset)}"
    return text


def physical_lines(layout: Layout, offset: int, length: int, *, write: bool = False,
                   failed: Iterable[int] = (), block: int | None = None) -> list[str]:
    """The physical requests of one logical request, one line each, in issue order."""
    failed = frozenset(failed)
    block = block or _block_size(layout, offset, length)
    lines: list[str] = []
    if write:
        try:
            plan = layout.write_plan(offset, length, failed)
        except DataUnavailableError as exc:  # the engine answers such a write with EIO
            return [f"  refused with EIO: {exc.strerror}"]
        for stripe in plan.stripes:
            alt = []
            if stripe.rmw_reads is not None:
                alt.append(f"rmw needs {stripe.rmw_reads} reads")
            if stripe.rcw_reads is not None:
                alt.append(f"rcw needs {stripe.rcw_reads} reads")
            lines.append(f"  stripe {stripe.stripe}: {_METHOD_WORDS.get(stripe.method, stripe.method)}"
                         + (f" ({', '.join(alt)})" if alt else ""))
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
            return [f"  addr {_addr(offset, block)}: no surviving copy (disks {', '.join(map(str, sorted(failed)))} failed)"]
        # Some blocks are lost: explain the request block by block.
        for start in range(offset, offset + length, block):
            lines += physical_lines(layout, start, min(block, offset + length - start), failed=failed, block=block)
        return lines
    for rng in plan.reads:
        loc = layout.locate(rng.disk, rng.disk_offset)
        lines.append(f"  read  {_where(layout, rng.disk, rng.disk_offset, rng.length, block):28s} "
                     f"{ROLE_WORDS.get(loc.role, loc.role)}")
    for piece in plan.pieces:
        if len(piece.sources) > 1:
            disks = ", ".join(f"disk {plan.reads[i].disk}" for i, _off in piece.sources)
            lines.append(f"  addr {_addr(piece.offset, block)}+{piece.length // block if piece.length % block == 0 else piece.length}"
                         f" rebuilt as XOR of {disks}")
    return lines


_METHOD_WORDS = {
    "full-stripe": "full-stripe write (no reads)",
    "rmw": "read-modify-write",
    "rcw": "reconstruct-write",
    "rmw+rcw": "degraded: read-modify-write where possible, reconstruct-write over the failed disk",
    "rcw+rmw": "degraded: reconstruct-write over the failed disk, read-modify-write elsewhere",
    "no-parity": "parity disk failed: data written, parity skipped",
}


def explain_request(layout: Layout, offset: int, length: int, *, write: bool = False,
                    failed: Iterable[int] = (), show_answers: bool = True, reverse: bool = False,
                    block: int | None = None) -> str:
    """OSTEP-style text for one logical request.

    forward (default): the logical request, then its physical requests (or the question
    "Physical reads/writes?" when show_answers is False). reverse: the physical requests,
    then the logical request (or "addr:? size:?" when show_answers is False).
    """
    failed = frozenset(failed)
    block = block or _block_size(layout, offset, length)
    op = "WRITE" if write else "READ"
    logical = f"LOGICAL {op} from addr:{_addr(offset, block)} size:{length}"
    lines = physical_lines(layout, offset, length, write=write, failed=failed, block=block)
    out = [header(layout, block)]
    if failed:
        out.append(f"failed disks: {', '.join(map(str, sorted(failed)))}")
    if reverse:
        out.extend(lines)
        out.append(logical if show_answers else f"LOGICAL {op} from addr:? size:?")
    else:
        out.append(logical)
        out.extend(lines if show_answers else ["  Physical reads/writes?"])
    return "\n".join(out)


def explain_physical(layout: Layout, disk: int, disk_offset: int, *, block: int | None = None) -> str:
    """The reverse question for one member address: what lives there?

    disk_offset is a member byte offset (data_offset included), like Extent.disk_offset.
    """
    block = block or _block_size(layout, disk_offset - layout.data_offset)
    loc = layout.locate(disk, disk_offset)
    where = f"disk {disk}, offset {_addr(disk_offset - layout.data_offset, block)}"
    if loc.role == "parity":
        return f"{where}: parity of stripe {loc.stripe}"
    if loc.role in ("unused", "reserved"):
        return f"{where}: {loc.role}"
    copy = f" (copy {loc.copy})" if loc.copy else ""
    return f"{where}: {ROLE_WORDS[loc.role]} of logical addr {_addr(loc.logical_offset, block)}{copy}"


def draw_layout(layout: Layout, rows: int | None = None, *, width: int = 5) -> str:
    """A picture like the RAID-x paper's Fig. 2: one column per disk, one line per chunk row.

    B<i> is logical chunk i, M<i> its mirror or image, P<s> the parity of stripe s, '.' an
    unused chunk. rows defaults to the whole member (capped at 64 lines).
    """
    total_rows = layout.chunks_per_disk if layout.uses_chunks else -(-layout.member_data_size // layout.chunk_bytes)
    rows = min(total_rows, 64) if rows is None else min(rows, total_rows)
    lines = ["row  " + "".join(f"{'disk ' + str(d):>{width + 2}}" for d in range(layout.n_disks))]
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
            cells.append(f"{cell:>{width + 2}}")
        lines.append(f"{row:<5d}" + "".join(cells))
    if rows < total_rows:
        lines.append(f"... ({total_rows - rows} more rows)")
    return "\n".join(lines)


__all__ = ["draw_layout", "explain_physical", "explain_request", "header", "physical_lines", "Raid5Layout"]
