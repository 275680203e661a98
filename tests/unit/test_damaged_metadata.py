"""Every on-disk decoder of the engine, fed damaged copies of valid records (hypothesis).

The formats: the member superblock (raidlab.engine.metadata), the cache-disk log of DCD and
VC-RAID (raidlab.engine.caches.log: record chain, tombstone area, marker journal slot, tail
slots), TSS's map table and data log (raidlab.engine.tss.persist, datalog), RAID-x's image
log (raidlab.engine.imagebuffer), SA-RAID's virtual device array (kept in the superblock's
geometry, raidlab.engine.layouts.sa) and the RAID 5 stripe journal (raidlab.engine.journal).

Damage, as a drive or an operator does it: bit flips, torn (short) records, zeroed sectors,
a stale record (an older valid record where a newer one belongs), a record of another array
(another uuid), and members swapped. The property of every decoder: it returns a record that
was written whole, or "no record" (None, the end of a chain, its documented refusal); it
never raises anything else, never loops, and never hands back a record whose bytes were
damaged. What the architectures make of a refused record end to end is
test_damaged_assembly.py's subject.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import uuid as uuid_mod
import zlib

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raidlab.blockdev import SECTOR
from raidlab.engine import journal as journal_mod
from raidlab.engine import metadata as md
from raidlab.engine.caches import log as cachelog
from raidlab.engine.imagebuffer import PendingImage, decode_header, decode_tails, encode_entry, encode_tail, parse_log
from raidlab.engine.layouts import layout_from_geometry
from raidlab.engine.layouts.sa import build_virtual_device_array
from raidlab.engine.tss import datalog as tsslog
from raidlab.engine.tss import persist
from raidlab.engine.tss.geometry import TSSGeometry
from raidlab.engine.tss.maptable import CRAID5, RAID1, RAID5, Compressed, MapTable, Mapping
from raidlab.errors import RaidlabError

KiB, MiB = 1024, 1 << 20
DECODER = settings(max_examples=150, deadline=None, database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class Image:
    """A drive as the decoders see it (async read/write of a bytearray)."""

    def __init__(self, size: int | bytes, name: str = "img") -> None:
        self.buf = bytearray(size)
        self.size = len(self.buf)
        self.name = name

    async def read(self, offset: int, length: int) -> bytes:
        return bytes(self.buf[offset:offset + length])

    async def write(self, offset: int, data, fua: bool = False) -> None:
        self.buf[offset:offset + len(data)] = bytes(data)

    async def flush(self) -> None:
        pass

    def copy(self) -> "Image":
        return Image(bytes(self.buf), self.name)


def run(fn, *args):
    return trio.run(fn, *args)


class Endless(Exception):
    """A decoder that did not return (an endless loop on damaged bytes)."""


@pytest.fixture(autouse=True)
def no_endless_loops():
    def alarm(_signum, _frame):
        raise Endless("a test of damaged records ran for 120 s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, 120)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


# ---- damage ------------------------------------------------------------------------------

DAMAGES = ("flip", "torn", "zero", "stale", "foreign")


class Damaged(bytes):
    """Damaged bytes that show as what was done to them (hypothesis prints every draw)."""

    kind: str
    what: str

    def __repr__(self) -> str:
        return f"<{self.what}>"


@st.composite
def damage_of(draw, raw: bytes, *, stale: bytes | None = None, foreign: bytes | None = None,
              focus: tuple[int, int] | None = None, kinds=DAMAGES, unit: int = SECTOR):
    """(kind, damaged bytes) of `raw`, the same length. `stale`/`foreign`: the same region as
    it was earlier / on another array's drive. `focus`: the byte range worth damaging (where
    the records are); sector-sized pieces are aligned to `unit`."""
    kinds = [k for k in kinds if (k != "stale" or stale is not None) and (k != "foreign" or foreign is not None)]
    kind = draw(st.sampled_from(kinds))
    lo, hi = focus or (0, len(raw))
    hi = max(hi, lo + 1)
    out = bytearray(raw)
    if kind == "flip":
        bits = draw(st.lists(st.integers(lo * 8, hi * 8 - 1), min_size=1, max_size=8))
        for bit in bits:
            out[bit // 8] ^= 1 << (bit % 8)
        what = f"flip bits {bits}"
    else:
        first = draw(st.integers(lo // unit, max(lo // unit, (hi - 1) // unit)))
        count = draw(st.integers(1, 8))
        start, end = first * unit, min(len(raw), (first + count) * unit)
        if kind == "torn":  # a write that stopped part way: from a byte on, the old bytes
            start = draw(st.integers(start, max(start, end - 1)))
            before = stale if stale is not None else bytes(len(raw))
            out[start:end] = before[start:end]
        elif kind == "zero":
            out[start:end] = bytes(end - start)
        else:
            source = stale if kind == "stale" else foreign
            out[start:end] = source[start:end]
        what = f"{kind} [{start}, {end})"
    damaged = Damaged(out)
    damaged.kind, damaged.what = kind, what
    return kind, damaged


def used_span(raw: bytes, start: int = 0) -> tuple[int, int]:
    """[first, last) non-zero sector of `raw` (where damage matters), relative to `start`."""
    sectors = [i for i in range(start // SECTOR, len(raw) // SECTOR) if any(raw[i * SECTOR:(i + 1) * SECTOR])]
    if not sectors:
        return start, len(raw)
    return sectors[0] * SECTOR, (sectors[-1] + 1) * SECTOR


# ---- the member superblock (raidlab.engine.metadata) -------------------------------------

def superblocks(n: int = 3, *, generation: int = 3, arch: str = "raid5", geometry=None, name="a"):
    base = md.Superblock(array_uuid=md.new_array_uuid(), name=name, arch=arch, n_members=n, member_index=0,
                         member_size=8 * MiB, data_offset=md.DEFAULT_DATA_OFFSET,
                         geometry=geometry or {"arch": arch, "chunk": 65536}, generation=generation)
    return [base.for_member(i) for i in range(n)]


def member_slots(sb: md.Superblock) -> bytes:
    """Both slots of a member as the keeper leaves them: this generation and the one before."""
    older = dataclasses.replace(sb, generation=sb.generation - 1)
    slots = [b"", b""]
    for one in (older, sb):
        slots[md.SLOTS.index(md.slot_for_generation(one.generation))] = md.encode_slot(one)
    return b"".join(slots)


@DECODER
@given(st.data())
def test_superblock_slot_decodes_whole_or_not_at_all(data):
    ours, theirs = superblocks()[1], superblocks(name="b")[1]
    older = dataclasses.replace(ours, generation=ours.generation - 1, state="clean")
    raw = md.encode_slot(ours)
    kind, damaged = data.draw(damage_of(raw, stale=md.encode_slot(older), foreign=md.encode_slot(theirs),
                                        focus=(0, 2 * SECTOR)))
    got = md.decode_slot(damaged)
    assert got in (None, ours, older, theirs), (kind, got)
    if got not in (None, ours):
        assert kind in ("stale", "foreign", "torn")
    short = md.decode_slot(damaged[:data.draw(st.integers(0, md.SLOT_SIZE))])  # a short read
    assert short in (None, ours, older, theirs)


@DECODER
@given(st.data())
def test_newest_slot_never_picks_a_damaged_or_older_one_over_a_whole_newer_one(data):
    ours = superblocks()[0]
    raw = member_slots(ours)
    kind, damaged = data.draw(damage_of(raw, stale=member_slots(dataclasses.replace(ours, generation=1)),
                                        foreign=member_slots(superblocks(name="b")[0])))
    got = md.newest(damaged[:md.SLOT_SIZE], damaged[md.SLOT_SIZE:])
    whole = [md.decode_slot(damaged[s:s + md.SLOT_SIZE]) for s in md.SLOTS]
    assert got is None or got in whole
    if ours in whole and kind != "foreign":
        assert got == ours


@st.composite
def json_values(draw):
    return draw(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                             lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                         max_size=4),
                             max_leaves=12))


@DECODER
@given(st.data())
def test_a_checksummed_slot_with_a_document_of_the_wrong_shape_is_no_superblock(data):
    # A frame whose checksum holds around a document that is not a superblock (another
    # tool's, a future version's, a bug's): decode refuses it, and assembly never trips on it.
    doc = superblocks()[0].to_json()
    if data.draw(st.booleans()):
        doc = data.draw(json_values())
    else:
        key = data.draw(st.sampled_from(sorted(doc)))
        doc[key] = data.draw(json_values())
    payload = json.dumps(doc).encode()
    if data.draw(st.booleans()):
        depth = data.draw(st.integers(500, 2000))
        payload = b"[" * depth + b"]" * depth
    frame = md.HEADER.pack(md.MAGIC, len(payload), zlib.crc32(payload)) + payload
    sb = md.decode_slot(frame.ljust(md.SLOT_SIZE, b"\0"))
    if sb is not None:
        assert isinstance(sb.generation, int) and isinstance(sb.array_uuid, str)
        assert isinstance(sb.failed_members, list) and isinstance(sb.geometry, dict)
    others = superblocks()
    found = [sb, *others[1:]]
    try:
        md.check_assembly(found)
    except md.MetadataError:
        pass
    md.newest(frame.ljust(md.SLOT_SIZE, b"\0"), md.encode_slot(others[0]))


def test_a_member_whose_slots_hold_two_arrays_is_refused():
    # A member's two slots always belong to one array (write_first_superblock clears the
    # other): slots of two arrays are damage, and which is the member's cannot be told.
    ours, theirs = superblocks(1)[0], superblocks(1, generation=9, name="b")[0]
    image = Image(member_slots(ours), "cachedisk")
    at = md.slot_for_generation(theirs.generation)
    image.buf[at:at + md.SLOT_SIZE] = md.encode_slot(theirs)
    assert md.decode_slot(bytes(image.buf[:md.SLOT_SIZE])) and md.decode_slot(bytes(image.buf[md.SLOT_SIZE:]))
    with pytest.raises(md.MetadataError, match="cachedisk holds superblocks of two arrays"):
        run(md.read_superblock, image)
    assert run(md.read_superblock, Image(member_slots(ours))) == ours


MEMBER_DAMAGES = (*DAMAGES, "swap")


@DECODER
@given(st.data())
def test_assembly_of_members_one_damaged_is_the_array_or_a_refusal_naming_it(data):
    n = data.draw(st.integers(2, 5))
    members = superblocks(n)
    images = [member_slots(sb) for sb in members]
    victim = data.draw(st.integers(0, n - 1))
    kind = data.draw(st.sampled_from(MEMBER_DAMAGES))
    if kind == "swap":
        other = (victim + 1) % n
        images[victim], images[other] = images[other], images[victim]
    else:
        stale = member_slots(dataclasses.replace(members[victim], generation=members[victim].generation - 2))
        foreign = member_slots(superblocks(n, generation=data.draw(st.integers(2, 9)), name="b")[victim])
        _, images[victim] = data.draw(damage_of(images[victim], stale=stale, foreign=foreign, kinds=(kind,)))
    found = [md.newest(img[:md.SLOT_SIZE], img[md.SLOT_SIZE:]) for img in images]
    labels = [f"disk{i}" for i in range(n)]
    try:
        authority = md.check_assembly(found, labels=labels)
    except md.MetadataError as err:
        assert "\n" not in str(err)
        assert any(label in str(err) for label in labels) or "members" in str(err), str(err)
        return
    # Accepted: every member is the one it claims to be, and the array is ours as it was.
    assert authority.array_uuid == members[0].array_uuid and authority.generation == members[0].generation
    for i, sb in enumerate(found):
        assert sb.member_index == i and sb.member_uuid == members[i].member_uuid


# ---- SA-RAID's virtual device array (kept in the superblock geometry) --------------------

@DECODER
@given(st.data())
def test_a_damaged_virtual_device_array_is_refused_by_the_layout(data):
    # The superblock's checksum catches damage on the disk; this is the layout's own check,
    # for a geometry that passed it (an edited or mis-generated one): a UsageError, never
    # an IndexError in the mapping.
    n = data.draw(st.integers(2, 6))
    arch = data.draw(st.sampled_from(["sa1", "sa2", "sa3"]))
    vda = list(build_virtual_device_array(arch, [float(data.draw(st.integers(1, 9))) for _ in range(n)]))
    geometry = layout_from_geometry({"arch": arch, "n_disks": n, "disk_size": 64 * MiB, "chunk_bytes": 64 * KiB,
                                     "data_offset": md.DEFAULT_DATA_OFFSET, "virtual_device_array": vda}).geometry()
    mutation = data.draw(st.sampled_from(["entry", "drop", "extra", "type"]))
    at = data.draw(st.integers(0, len(vda) - 1))
    if mutation == "entry":
        vda[at] = data.draw(st.integers(-3, n + 3))
    elif mutation == "drop":
        del vda[at]
    elif mutation == "extra":
        vda.insert(at, data.draw(st.integers(0, n - 1)))
    else:
        vda[at] = data.draw(st.sampled_from([None, "1", 1.5, True, [0]]))
    try:
        layout = layout_from_geometry({**geometry, "virtual_device_array": vda})
    except RaidlabError:
        return
    assert len(layout.virtual_device_array) == 100 and set(layout.virtual_device_array) == set(range(n))
    for chunk in range(0, 300):
        extents = layout.map(chunk * 64 * KiB, 64 * KiB)
        assert all(0 <= e.disk < n for e in extents)


# ---- RAID-x's image log (raidlab.engine.imagebuffer) -------------------------------------

def image_log(array_uuid: bytes, entries: list[tuple[int, int, int, bytes]], size: int) -> tuple[bytes, list]:
    region = bytearray(size)
    pos, placed = 0, []
    for seq, home, logical, payload in entries:
        raw = encode_entry(array_uuid, PendingImage(seq, 0, home, logical, payload, pos))
        region[pos:pos + len(raw)] = raw
        placed.append((seq, home, logical, pos, payload))
        pos += len(raw)
    return bytes(region), placed


@st.composite
def image_entries(draw, first_seq: int = 1):
    out = []
    for k in range(draw(st.integers(1, 6))):
        n = draw(st.integers(1, 4)) * SECTOR
        out.append((first_seq + k, draw(st.integers(0, 1 << 20)) * SECTOR, draw(st.integers(0, 1 << 20)) * SECTOR,
                    draw(st.binary(min_size=n, max_size=n))))
    return out


@DECODER
@given(st.data())
def test_image_log_entries_come_back_whole_or_not_at_all(data):
    # The stale region is the ring's previous lap: entries the tail record says were
    # written home (sequence numbers up to `cleared`).
    ours, theirs = uuid_mod.uuid4().bytes, uuid_mod.uuid4().bytes
    old_entries = data.draw(image_entries())
    cleared = len(old_entries) + data.draw(st.integers(0, 2))
    entries = data.draw(image_entries(first_seq=len(old_entries) + 1))
    size = 64 * SECTOR
    region, placed = image_log(ours, entries, size)
    stale, _ = image_log(ours, old_entries, size)
    foreign, _ = image_log(theirs, data.draw(image_entries(first_seq=cleared + 1)), size)
    kind, damaged = data.draw(damage_of(region, stale=stale, foreign=foreign, focus=used_span(region)))
    found = parse_log(ours, damaged, 0, cleared)
    assert set(found) <= {e for e in placed if e[0] > cleared}, kind
    for header in (damaged[i:i + SECTOR] for i in range(0, size, SECTOR)):
        decode_header(ours, header)


@DECODER
@given(st.data())
def test_image_tail_slots_give_a_whole_tail_record_or_none(data):
    ours = uuid_mod.uuid4().bytes
    gen = data.draw(st.integers(4, 1000))
    cleared_new, cleared_old = data.draw(st.integers(10, 1 << 40)), data.draw(st.integers(0, 9))
    slots = [b"", b""]
    slots[gen % 2] = encode_tail(ours, gen, cleared_new)
    slots[(gen - 1) % 2] = encode_tail(ours, gen - 1, cleared_old)
    raw = b"".join(slots)
    foreign = encode_tail(uuid_mod.uuid4().bytes, gen + 5, 1 << 50) * 2
    stale = encode_tail(ours, gen - 3, 0) * 2
    kind, damaged = data.draw(damage_of(raw, stale=stale, foreign=foreign))
    got = decode_tails(ours, damaged)
    assert got in ((gen, cleared_new), (gen - 1, cleared_old), (gen - 3, 0), (0, 0)), (kind, got)
    if kind == "foreign":
        assert got != (gen + 5, 1 << 50)
    assert decode_tails(ours, damaged[:data.draw(st.integers(0, len(damaged)))]) in (
        (gen, cleared_new), (gen - 1, cleared_old), (gen - 3, 0), (0, 0))


# ---- the RAID 5 stripe journal (raidlab.engine.journal) ----------------------------------

JOURNAL_BYTES = 64 * journal_mod.BLOCK


async def journal_images(array_uuid: str, before, after) -> tuple[Image, Image, list, list]:
    """A journal that logged `before`, checkpointed them all (it starts over) and logged
    `after`: (the drive as it was before the checkpoint, as it is now, the records to
    replay, the records `before` left)."""
    target = Image(JOURNAL_BYTES, "j")
    journal = await journal_mod.StripeJournal.create(target, array_uuid)
    for plan in before:
        journal.completed(await journal.log(plan, flush_members=_nothing))
    stale = target.copy()
    if before:
        await journal.checkpoint(journal.seq)
    for plan in after:
        await journal.log(plan, flush_members=_nothing)
    return stale, target, [[(d, o, bytes(p)) for d, o, p in plan] for plan in after], \
        [[(d, o, bytes(p)) for d, o, p in plan] for plan in before]


async def _nothing() -> None:
    pass


@st.composite
def journal_plans(draw, min_size=0):
    plans = []
    for _ in range(draw(st.integers(min_size, 4))):
        plan = []
        for _ in range(draw(st.integers(1, 3))):
            n = draw(st.sampled_from([SECTOR, 4 * KiB, 5 * KiB]))
            plan.append((draw(st.integers(0, 5)), draw(st.integers(0, 1 << 30)) * SECTOR,
                         draw(st.binary(min_size=8, max_size=8)) * (n // 8)))
        plans.append(plan)
    return plans


@DECODER
@given(st.data())
def test_journal_replays_a_prefix_of_its_records_or_refuses(data):
    ours, theirs = str(uuid_mod.uuid4()), str(uuid_mod.uuid4())
    stale, target, want, old = run(journal_images, ours, data.draw(journal_plans()), data.draw(journal_plans(1)))
    _, foreign, _, _ = run(journal_images, theirs, [], data.draw(journal_plans(1)))
    kind, damaged = data.draw(damage_of(bytes(target.buf), stale=bytes(stale.buf), foreign=bytes(foreign.buf),
                                        focus=used_span(target.buf), unit=data.draw(st.sampled_from([SECTOR, 4096]))))

    async def open_():
        return await journal_mod.StripeJournal.open(Image(damaged, "jdisk"), ours)

    try:
        _, records = run(open_)
    except md.MetadataError as err:
        assert "jdisk" in str(err) and "\n" not in str(err)
        return
    if kind in ("stale", "torn"):
        # The header and records of the pass before, whole again (a torn write keeps the
        # stale bytes): only records written whole come back (test_damaged_assembly
        # follows what replaying them does).
        assert all(r in want or r in old for r in records), kind
    else:
        assert records == want[:len(records)], kind


def test_journal_replays_the_records_after_a_checkpoint_taken_while_others_were_in_flight():
    # A flush that checkpoints only the records whose member writes had completed does not
    # start the journal over: the covered records stay first, the ones to replay follow.
    async def body():
        target, uuid = Image(JOURNAL_BYTES, "j"), str(uuid_mod.uuid4())
        journal = await journal_mod.StripeJournal.create(target, uuid)
        first = await journal.log([(0, 0, b"a" * SECTOR)], _nothing)
        await journal.log([(1, 0, b"b" * SECTOR)], _nothing)
        journal.completed(first)
        await journal.checkpoint(journal.durable_candidate())
        await journal.log([(2, 0, b"c" * SECTOR)], _nothing)
        _, records = await journal_mod.StripeJournal.open(target, uuid)
        return journal.checkpoint_seq, journal.position, records

    checkpoint, position, records = run(body)
    assert checkpoint == 1 and position > 2 * journal_mod.BLOCK  # not started over
    assert records == [[(1, 0, b"b" * SECTOR)], [(2, 0, b"c" * SECTOR)]]


# ---- TSS map table (raidlab.engine.tss.persist) ------------------------------------------

def tss_geometry() -> TSSGeometry:
    return TSSGeometry(columns=4, unit=4 * KiB, column_size=48 * 4 * KiB, data_offset=64 * KiB, substripes=4)


def change_map(table: MapTable, draw, logical: int) -> list[int]:
    """Give some invalid logical stripes of `table` a RAID1, RAID5 or cRAID5 personality;
    the logical stripes changed."""
    g = table.geometry
    changed = []
    for ls in draw(st.lists(st.integers(0, logical - 1), unique=True, max_size=12)):
        if table.entries[ls].kind != "invalid":
            continue
        kind = draw(st.sampled_from([RAID1, RAID5, CRAID5]))
        try:
            if kind == RAID1:
                table.set(ls, Mapping(RAID1, table.take_mirror_pair()))
            elif kind == RAID5:
                table.set(ls, Mapping(RAID5, (table.take_whole(),), unwritten=draw(st.booleans())))
            else:
                count = draw(st.integers(1, g.substripes))
                ps, first, _fresh = table.take_substripes(count)
                table.set(ls, Mapping(CRAID5, (ps,), Compressed(ps, first, count, count * 1000, draw(st.booleans()))))
        except Exception:  # NoSpace: a fuller map is as good
            break
        changed.append(ls)
    return changed


LOGICAL = 40


async def map_images(array_uuid: str | None, draw) -> tuple[list[Image], list[Image], MapTable]:
    """The two copies of a map written whole, then changed stripe by stripe: (the copies as
    they were before the changes, as they are now, the table now)."""
    table = MapTable(tss_geometry(), LOGICAL)
    change_map(table, draw, LOGICAL)
    columns = [Image(persist.PRIVATE_OFFSET + persist.private_area_bytes(LOGICAL), f"c{i}") for i in range(2)]
    store = persist.MapStore(columns, LOGICAL, array_uuid)
    await store.write_all(table)
    before = [c.copy() for c in columns]
    for ls in change_map(table, draw, LOGICAL):
        await store.write_entry(ls, table.entries[ls])
    return before, columns, table


@DECODER
@given(st.data())
def test_map_table_loads_as_written_from_either_copy_or_is_refused(data):
    ours = str(uuid_mod.uuid4())
    stale, columns, table = run(map_images, ours, data.draw)
    _, foreign, _ = run(map_images, str(uuid_mod.uuid4()), data.draw)
    copies = data.draw(st.sampled_from([[0], [1], [0, 1]]))
    kinds = {}
    for c in copies:
        raw = bytes(columns[c].buf)
        kinds[c], columns[c].buf[:] = data.draw(damage_of(raw, stale=bytes(stale[c].buf), foreign=bytes(foreign[c].buf),
                                                          focus=(persist.PRIVATE_OFFSET, len(raw))))

    async def load():
        return await persist.MapStore(columns, LOGICAL, ours).load(MapTable(tss_geometry(), LOGICAL))

    try:
        loaded = run(load)
    except md.MetadataError as err:
        assert "\n" not in str(err) and "map" in str(err)
        assert len(copies) == 2, kinds  # one damaged copy: the other has every record whole
        return
    loaded.check()
    if len(copies) == 2 and {"stale", "torn"} & set(kinds.values()):
        return  # an older whole record on both copies (a write torn on both): it was never acknowledged
    assert list(loaded.entries) == list(table.entries), kinds
    assert loaded.reserved == table.reserved


@DECODER
@given(st.data())
def test_a_map_table_of_the_first_format_is_still_read(data):
    _, columns, table = run(map_images, None, data.draw)

    async def load():
        store = persist.MapStore(columns, LOGICAL, str(uuid_mod.uuid4()))
        return store, await store.load(MapTable(tss_geometry(), LOGICAL))

    store, loaded = run(load)
    assert list(loaded.entries) == list(table.entries) and store.seed is None
    assert bytes(columns[0].buf[persist.PRIVATE_OFFSET:persist.PRIVATE_OFFSET + 8]) == persist.HEADER_MAGIC_V1


@DECODER
@given(st.data())
def test_a_map_record_decodes_as_written_or_is_refused(data):
    entry = data.draw(st.sampled_from([
        Mapping(), Mapping(RAID1, (0, 25)), Mapping(RAID5, (7,)), Mapping(RAID5, (7,), unwritten=True),
        Mapping(CRAID5, (9,), Compressed(9, 1, 2, 3000, False))]))
    seed = data.draw(st.sampled_from([None, persist.owner_seed(str(uuid_mod.uuid4()))]))
    raw = persist.encode_record(entry, 5, seed)
    _, damaged = data.draw(damage_of(raw, kinds=("flip", "zero", "torn"), unit=4))
    try:
        got = persist.decode_record(damaged, "here", seed)
    except ValueError as err:
        assert "damaged map record" in str(err)
        return
    assert got in ((entry, 5 if seed is not None else 0), (Mapping(), 0))
    if got[0] != entry:
        assert seed is None and damaged == bytes(len(damaged))


# ---- TSS data log (raidlab.engine.tss.datalog) -------------------------------------------

DATA_LOG_BYTES = 48 * SECTOR


async def data_log_images(array_uuid: str, before, after) -> tuple[Image, Image, set, set]:
    """A data log that logged and committed `before` (records, as after a clean run), then
    logged `after` (the odd ones committed): (the drive after `before`, the drive now, the
    records a scan must replay, every record written)."""
    device = Image(DATA_LOG_BYTES, "log")
    log = tsslog.DataLog(device, array_uuid)
    await log.reset()
    written = set()
    for ls, start, payload in before:
        rec = await log.append(ls, start, payload)
        written.add((rec.seq, ls, start, payload))
        await log.commit(rec)
    stale = device.copy()
    want = set()
    for k, (ls, start, payload) in enumerate(after):
        rec = await log.append(ls, start, payload)
        written.add((rec.seq, ls, start, payload))
        if k % 2:
            await log.commit(rec)
        else:
            want.add((rec.seq, ls, start, payload))
    return stale, device, want, written


@st.composite
def log_records(draw, max_size=5):
    return [(draw(st.integers(0, 100)), draw(st.integers(0, 16)) * SECTOR,
             draw(st.binary(min_size=SECTOR, max_size=SECTOR)) * draw(st.integers(1, 4)))
            for _ in range(draw(st.integers(1, max_size)))]


@DECODER
@given(st.data())
def test_tss_data_log_replays_only_records_it_wrote_whole(data):
    ours = str(uuid_mod.uuid4())
    stale, device, want, written = run(data_log_images, ours, data.draw(log_records()), data.draw(log_records(3)))
    _, foreign, _, _ = run(data_log_images, str(uuid_mod.uuid4()), [], data.draw(log_records()))
    kind, damaged = data.draw(damage_of(bytes(device.buf), stale=bytes(stale.buf), foreign=bytes(foreign.buf),
                                        focus=used_span(device.buf)))

    async def scan():
        return await tsslog.DataLog(Image(damaged), ours).scan()

    try:
        found = run(scan)
    except md.MetadataError as err:  # damage to a record a whole header says was written whole
        assert damaged != bytes(device.buf), f"the undamaged log is refused: {err}"
        assert "\n" not in str(err)
        return
    got = {(s, ls, st_, bytes(p)) for s, ls, st_, p in found}
    # Only records written whole come back; a committed one whose commit record was damaged
    # may come back too (what replaying it again does is test_damaged_assembly's subject).
    assert got <= written, kind  # a foreign record's bytes are never among them


def test_a_data_log_of_another_device_replays_nothing():
    # The log drive carries no superblock: its headers name their device.
    records = [(3, 0, b"x" * SECTOR), (4, SECTOR, b"y" * 2 * SECTOR)]
    _, device, _, _ = run(data_log_images, str(uuid_mod.uuid4()), [], records)

    async def scan(owner):
        return await tsslog.DataLog(device, owner).scan()

    assert len(run(scan, str(uuid_mod.uuid4()))) == 0
    assert {(s, ls, st_, bytes(p)) for s, ls, st_, p in run(scan, None)} == set()


# ---- the cache-disk log of DCD and VC-RAID (raidlab.engine.caches.log) -------------------

LOG_ID, FOREIGN_ID = cachelog.log_id_of(str(uuid_mod.uuid4())), cachelog.log_id_of(str(uuid_mod.uuid4()))
LOG_SIZE = 96 * KiB
BLOCK = 1 * KiB


def new_store(image: Image, log_id: int, epoch: int, order: str) -> cachelog.LogStore:
    log = cachelog.CacheDiskLog(image, 0, cachelog.DEFAULT_LOG_START, image.size, BLOCK, log_id)
    return cachelog.LogStore([log], BLOCK, epoch=epoch, order=order)


WRITTEN_RECORDS: set[tuple] = set()  # every data record fill_log wrote (chain_of's form)


async def fill_log(image: Image, log_id: int, ops, *, order: str, epoch: int = 1, formatted: bool = False):
    """Run `ops` (("w", addresses) log writes, ("d", bytes) destages, ("f", addresses) large
    writes around the log) on a log over `image`; return its store. Every data record
    written goes to WRITTEN_RECORDS."""
    store = new_store(image, log_id, epoch, order)
    if not formatted:
        await store.format()
    else:
        await store.recover()
    for op, arg in ops:
        if op == "w":
            if store.logs[0].free < cachelog.max_record_bytes(len(arg), BLOCK):
                continue
            items = [(a, bytes([a % 251 + 1, store._seq % 256]) * (BLOCK // 2)) for a in sorted(set(arg))]
            r = await store.append(0, items, store.next_seq())
            WRITTEN_RECORDS.add((r.seq, r.offset, r.kind, tuple(r.addresses), tuple(r.bounds or ())))
        elif op == "d" and store.logs[0].records:
            await store.destage(0, arg, _home)
        elif op == "f":
            await store.forget(0, arg)
    return store


async def _home(blocks) -> bool:
    return True


@st.composite
def log_ops(draw):
    ops = []
    for _ in range(draw(st.integers(1, 14))):
        roll = draw(st.integers(0, 9))
        if roll < 6:
            ops.append(("w", draw(st.lists(st.integers(0, 40), min_size=1, max_size=6))))
        elif roll < 8:
            ops.append(("d", draw(st.sampled_from([BLOCK, 4 * KiB, 16 * KiB]))))
        else:
            ops.append(("f", draw(st.lists(st.integers(0, 40), min_size=1, max_size=4))))
    return ops


def chain_of(store: cachelog.LogStore) -> list[tuple]:
    return [(r.seq, r.offset, r.kind, tuple(r.addresses), tuple(r.bounds or ())) for r in store.logs[0].records]


async def recovered(image: Image, order: str) -> tuple[cachelog.LogStore, list, list]:
    store = new_store(image, LOG_ID, 2, order)
    log = store.logs[0]
    chain = [(r.seq, r.offset, r.kind, tuple(r.addresses), tuple(r.bounds or ())) for r in await log.scan()]
    area = [(r.seq, r.offset, r.kind, tuple(r.addresses), tuple(r.bounds or ())) for r in await log.scan_area()]
    await store.recover()
    return store, chain, area


@DECODER
@given(st.data())
def test_cache_log_scan_keeps_a_prefix_of_the_chain_and_only_whole_records(data):
    order = data.draw(st.sampled_from(cachelog.DESTAGE_ORDERS))
    early_ops, late_ops = data.draw(log_ops()), data.draw(log_ops())
    WRITTEN_RECORDS.clear()

    async def build():
        image = Image(LOG_SIZE, "cache")
        await fill_log(image, LOG_ID, early_ops, order=order)
        stale = image.copy()
        store = await fill_log(image, LOG_ID, late_ops, order=order, epoch=2, formatted=True)
        written = set(WRITTEN_RECORDS)
        foreign = Image(LOG_SIZE, "other")
        await fill_log(foreign, FOREIGN_ID, early_ops + late_ops, order=order)
        return image, stale, foreign, written

    image, stale, foreign, written = run(build)
    _, want_chain, want_area = run(recovered, image.copy(), order)
    kind, damaged = data.draw(damage_of(bytes(image.buf), stale=bytes(stale.buf), foreign=bytes(foreign.buf),
                                        focus=used_span(image.buf, cachelog.DEFAULT_LOG_START)))
    try:
        store, chain, area = run(recovered, Image(damaged, "cachedisk"), order)
    except md.MetadataError as err:
        assert str(err).startswith("cachedisk: the cache-disk log is damaged") and "\n" not in str(err)
        return
    if kind in ("stale", "torn"):  # a torn write leaves the stale bytes: whole older records
        return  # test_damaged_assembly follows what they do end to end
    # A stack (LWFD) keeps a prefix of its chain. A circular log only whole records it
    # wrote, in order: one whose newest tail record is gone starts at the older one, whose
    # records went home (module doc of log.py), and one whose chain breaks before the end
    # may go on with its wrapped part.
    assert chain == sorted(chain), kind
    if order == cachelog.ORDER_LWFD:
        assert chain == want_chain[:len(chain)], kind
    else:
        assert set(chain) <= written, kind
    assert set(area) <= set(want_area), kind
    # Every block the recovered mapping names reads back the bytes its record's checksum covered.
    for addr, loc in store.mapping.items():
        block = damaged[loc.offset:loc.offset + BLOCK]
        assert block[0] == addr % 251 + 1, (kind, addr)


@DECODER
@given(st.data())
def test_cache_log_summary_and_tail_parsers_return_whole_records_or_none(data):
    addresses = sorted(set(data.draw(st.lists(st.integers(0, 1 << 40), min_size=1, max_size=20))))
    kind_ = data.draw(st.sampled_from([cachelog.KIND_DATA, cachelog.KIND_TOMBSTONE]))
    bounds = {a: data.draw(st.integers(0, 1 << 60)) for a in addresses} if kind_ == cachelog.KIND_TOMBSTONE else None
    payload = bytes(len(addresses) * BLOCK) if kind_ == cachelog.KIND_DATA else b""
    raw = cachelog.encode_record(LOG_ID, 77, kind_, addresses, payload, BLOCK, bounds)
    n_summary = cachelog.summary_sectors_for(len(cachelog.extents_of(addresses)) if bounds is None
                                             else len(cachelog.tombstone_runs(bounds)), kind_)
    summary = raw[:n_summary * SECTOR]
    foreign = cachelog.encode_record(FOREIGN_ID, 77, kind_, addresses, payload, BLOCK, bounds)[:len(summary)]
    kind, damaged = data.draw(damage_of(summary, foreign=foreign, kinds=("flip", "torn", "zero", "foreign")))
    parsed = cachelog.parse_summary(damaged, LOG_ID, BLOCK)
    if parsed is not None:
        assert parsed.addresses == addresses and parsed.seq == 77, kind
        assert parsed.bounds == ([bounds[a] for a in addresses] if bounds else None)
    cachelog.parse_first_sector(damaged, LOG_ID, BLOCK)
    cachelog.parse_summary(damaged[:data.draw(st.integers(0, len(damaged)))], LOG_ID, BLOCK)
    tail = cachelog.encode_tail(LOG_ID, 99, 64 * KiB, 50, BLOCK)
    _, bad_tail = data.draw(damage_of(tail, foreign=cachelog.encode_tail(FOREIGN_ID, 99, 64 * KiB, 50, BLOCK),
                                      kinds=("flip", "torn", "zero", "foreign")))
    assert cachelog.parse_tail(bad_tail, LOG_ID, BLOCK) in (None, (99, 64 * KiB, 50))
