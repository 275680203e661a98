"""Every stateful architecture, assembled after damage to one drive's metadata (virtual time).

Each architecture is built over in-memory drives (model `none`), written with known data in
two phases, each ended by a flush, and stopped the hard way (its tasks cancelled: caches and
logs keep what the crash left). Then one drive's metadata region of one format is damaged as
test_damaged_metadata does it to single records (bit flips, a torn write, zeroed sectors,
sectors as they were after the first phase, sectors of another array built the same way, or
the region swapped with another drive's), the architecture is assembled again and all of its
written range is read back against the copy.

Every trial ends in one of two ways: a refusal, a RaidlabError of one line (what the CLI
prints), or a recovery that reads back every byte. Anything else fails the test at once (an
exception of another type, a hang in virtual or real time), and a read that differs from
the copy is counted `wrong`, which must stay 0.

One exception, counted apart as `unvouched`: a log's newest records, which no later write
vouches for (the cache-disk log's top record with nothing written after it, the TSS data
log's records newer than every header's `durable`). Damage there looks exactly like the
torn write a crash leaves of a write in flight, so recovery drops them as it would drop
that one, as a journal does (ext4's jbd2 ends its replay at the first transaction whose
checksum fails); and they carry the only proof that the records just before them were
whole. A read that differs after damage that reaches those records is `unvouched`; damage
anywhere else must be refused or recovered. The counts per architecture and outcome
are printed at the end (pytest -s).
"""

from __future__ import annotations

import collections
import dataclasses
import random
import signal
from collections.abc import Awaitable, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raidlab import sched
from raidlab.disks import EmulatedDisk, MemoryBackend
from raidlab.engine import build
from raidlab.engine.caches import assemble_dcd, assemble_vcraid, create_dcd, create_vcraid
from raidlab.engine.caches import log as cachelog
from raidlab.engine.caches.log import DEFAULT_LOG_START
from raidlab.engine.imagebuffer import LOG_START as IMAGE_LOG_START
from raidlab.engine.metadata import SLOT_SIZE, newest
from raidlab.engine.tss import datalog as tsslog
from raidlab.engine.tss.build import TSSOptions, assemble_tss, create_tss
from raidlab.engine.tss.persist import PRIVATE_OFFSET
from raidlab.sched import run_virtual
from raidlab.errors import RaidlabError, leaf_exceptions

from test_damaged_metadata import DAMAGES, damage_of, used_span

KiB, MiB = 1024, 1 << 20
SECTOR = 512
CHUNK = 16 * KiB
WRITTEN = 512 * KiB          # the range each architecture is written in and read back
EXAMPLES = 16                # trials per architecture, format and kind of damage
# Derandomized: the same trials every run, so that a wrong read found once is found every
# time and a new one is not a matter of luck; test_many_more_trials (slow) goes wider.
TRIALS = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
TALLY: dict[tuple[str, str, str], collections.Counter] = collections.defaultdict(collections.Counter)


# ---- the architectures --------------------------------------------------------------------

Disks = dict[str, EmulatedDisk]


@dataclasses.dataclass(frozen=True)
class Arch:
    """How to build, write and assemble one architecture over named drives, and where each
    of its formats lives: format -> [(drive, start, end)], the regions one trial may damage."""

    name: str
    drives: dict[str, int]
    create: Callable[[Disks, sched.Nursery], Awaitable]
    assemble: Callable[[Disks, sched.Nursery], Awaitable]
    formats: dict[str, list[tuple[str, int, int]]]
    # format -> the byte ranges (drive, start, end) of its records that no later write
    # vouches for, in the undamaged images (module doc: `unvouched`)
    unvouched: dict[str, Callable[[dict], list[tuple[str, int, int]]]] = dataclasses.field(default_factory=dict)
    # The second phase ends without a flush where every acknowledged write is durable
    # already, so the crash leaves a journal or a data log with records to replay.
    flush_at_end: bool = True
    model: str = "none"


def superblocks_on(names) -> list[tuple[str, int, int]]:
    return [(n, 0, 2 * SLOT_SIZE) for n in names]


MEMBERS = [f"d{i}" for i in range(4)]


def members(disks: Disks, names=MEMBERS):
    return [disks[n] for n in names]


async def create_engine(arch: str, disks: Disks, nursery, **kw):
    array, _ = await build.create_array("a", arch, members(disks), chunk=CHUNK, nursery=nursery, **kw)
    return array


async def assemble_engine(disks: Disks, nursery, **kw):
    array, _ = await build.assemble_array(members(disks), nursery=nursery, **kw)
    return array


async def create_journalled(disks: Disks, nursery):
    array, keeper = await build.create_array("a", "raid5", members(disks), chunk=CHUNK, nursery=nursery)
    await build.attach_journal(array, disks["j"], keeper.superblock.array_uuid, create=True)
    return array


async def assemble_journalled(disks: Disks, nursery):
    array, keeper = await build.assemble_array(members(disks), nursery=nursery)
    await build.attach_journal(array, disks["j"], keeper.superblock.array_uuid, create=False)
    return array


async def create_dcd_(disks: Disks, nursery):
    dcd = await create_dcd("c", disks["cache"], disks["data"], ram_buffer=32 * KiB, destage_segment=32 * KiB,
                           high_watermark=1.0)
    dcd.start(nursery)
    return dcd


async def assemble_dcd_(disks: Disks, nursery):
    dcd = await assemble_dcd(disks["cache"], disks["data"])
    dcd.start(nursery)
    return dcd


async def create_vcraid_(disks: Disks, nursery):
    vc = await create_vcraid("v", members(disks), [disks["cache"]], ram_buffer=32 * KiB, destage_segment=32 * KiB,
                             high_watermark=1.0, chunk=CHUNK)
    vc.start(nursery)
    return vc


async def assemble_vcraid_(disks: Disks, nursery):
    vc = await assemble_vcraid(members(disks), [disks["cache"]])
    vc.start(nursery)
    return vc


TSS_COLUMNS = MEMBERS


async def create_tss_(disks: Disks, nursery):
    device = await create_tss("t", [*members(disks), disks["log"]], unit=4 * KiB,
                              options=TSSOptions(log=True, writes="async", logical_stripes=64))
    device.start(nursery)
    return device


async def assemble_tss_(disks: Disks, nursery):
    device = await assemble_tss([*members(disks), disks["log"]])
    device.start(nursery)
    return device


def superblock_of(images, drive: str):
    return newest(images[drive].pread(0, SLOT_SIZE), images[drive].pread(SLOT_SIZE, SLOT_SIZE))


def cache_log_top(images) -> list[tuple[str, int, int]]:
    """The cache-disk log's top record: the data record with the largest sequence number
    (every record above the top is older, module doc of raidlab.engine.caches.log)."""
    sb = superblock_of(images, "cache")
    log_id, block = cachelog.log_id_of(sb.array_uuid), int(sb.geometry.get("block_size", SECTOR))
    raw = images["cache"].pread(0, images["cache"].size)
    top = None
    for pos in range(DEFAULT_LOG_START, len(raw), SECTOR):
        first = cachelog.parse_first_sector(raw[pos:pos + SECTOR], log_id, block)
        if first is None:
            continue
        parsed = cachelog.parse_summary(raw[pos:pos + first[1] * SECTOR], log_id, block)
        if parsed is not None and parsed.kind == cachelog.KIND_DATA and (top is None or parsed.seq > top[0]):
            top = (parsed.seq, pos, pos + parsed.n_summary * SECTOR + parsed.n_blocks * block)
    return [("cache", top[1], top[2])] if top else []


def data_log_newest(images) -> list[tuple[str, int, int]]:
    """The TSS data log's data records numbered above every header's `durable`."""
    seed = tsslog.owner_seed(superblock_of(images, "d0").array_uuid)
    raw = images["log"].pread(0, images["log"].size)
    headers = [(pos, tsslog._parse(raw[pos:pos + SECTOR], seed)) for pos in range(0, len(raw), SECTOR)]
    headers = [(pos, h) for pos, h in headers if h is not None]
    durable = max((h[10] or 0 for _, h in headers), default=0)
    # each with the commit sector reserved after its data
    return [("log", pos, pos + 2 * SECTOR + h[7]) for pos, h in headers if h[1] == tsslog.DATA and h[2] > durable]


RAIDX_DATA_OFFSET = 256 * KiB
TSS_DATA_OFFSET = 64 * KiB  # plan_geometry's for these members (checked in test_the_regions_are_where_the_formats_are)
ARCHS = {
    "raid5": Arch("raid5", {n: 2 * MiB for n in MEMBERS}, lambda d, n: create_engine("raid5", d, n),
                  assemble_engine, {"superblock": superblocks_on(MEMBERS)}),
    "raid5+journal": Arch("raid5+journal", {**{n: 2 * MiB for n in MEMBERS}, "j": 256 * KiB}, create_journalled,
                          assemble_journalled, {"superblock": superblocks_on(MEMBERS),
                                                "stripe journal": [("j", 0, 256 * KiB)]}, flush_at_end=False),
    "sa2": Arch("sa2", {n: 2 * MiB for n in MEMBERS},
                lambda d, n: create_engine("sa2", d, n, options={"bandwidths": (4.0, 3.0, 2.0, 1.0)}),
                assemble_engine, {"superblock": superblocks_on(MEMBERS)}),
    "raidx": Arch("raidx", {n: 2 * MiB for n in MEMBERS},
                  lambda d, n: create_engine("raidx", d, n, data_offset=RAIDX_DATA_OFFSET, image_delay=600.0),
                  lambda d, n: assemble_engine(d, n, image_delay=600.0),
                  {"superblock": superblocks_on(MEMBERS),
                   "image log": [(m, IMAGE_LOG_START, RAIDX_DATA_OFFSET) for m in MEMBERS]}),
    "dcd": Arch("dcd", {"cache": 448 * KiB, "data": 2 * MiB}, create_dcd_, assemble_dcd_,
                {"superblock": superblocks_on(["cache"]), "log": [("cache", DEFAULT_LOG_START, 448 * KiB)]},
                unvouched={"log": cache_log_top}),
    "vcraid": Arch("vcraid", {**{n: 2 * MiB for n in MEMBERS}, "cache": 448 * KiB}, create_vcraid_, assemble_vcraid_,
                   {"superblock": superblocks_on([*MEMBERS, "cache"]),
                    "log": [("cache", DEFAULT_LOG_START, 448 * KiB)]},
                   unvouched={"log": cache_log_top}),
    "tss": Arch("tss", {**{n: 2 * MiB for n in TSS_COLUMNS}, "log": 256 * KiB}, create_tss_, assemble_tss_,
                {"superblock": superblocks_on(TSS_COLUMNS),
                 "map table": [(c, PRIVATE_OFFSET, TSS_DATA_OFFSET) for c in TSS_COLUMNS[:2]],
                 "data log": [("log", 0, 256 * KiB)]}, flush_at_end=False, model="hp-c2200a",
                unvouched={"data log": data_log_newest}),
}


# ---- images, runs and the workload --------------------------------------------------------

Images = dict[str, MemoryBackend]


def clone(images: Images) -> Images:
    out = {}
    for name, backend in images.items():
        copy = MemoryBackend(backend.size)
        copy.pwrite(0, backend.pread(0, backend.size))
        out[name] = copy
    return out


class Hang(Exception):
    """A trial that did not end in real time (an endless loop in a decoder)."""


def run_on(images: Images, body, *, seconds: float = 20.0, model: str = "none"):
    """Start drives over `images`, await body(disks, nursery), then cancel everything (the
    architecture's tasks die where they stand, as in a crash); body's result. A run that
    takes more than an hour of virtual time or `seconds` of real time raises Hang."""
    disks = {name: EmulatedDisk(name, model, backend) for name, backend in images.items()}

    async def main():
        out = {}
        with sched.move_on_after(3600) as scope:
            async with sched.open_nursery() as nursery:
                for d in disks.values():
                    d.start(nursery)
                out["result"] = await body(disks, nursery)
                nursery.cancel_scope.cancel()
        if scope.cancelled_caught:
            raise Hang("an hour of virtual time")
        return out["result"]

    def alarm(_signum, _frame):
        raise Hang(f"{seconds} s of real time")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return run_virtual(main)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def phase_writes(seed: int, phase: int) -> list[tuple[int, bytes]]:
    rng = random.Random(seed * 10 + phase)
    out = []
    for _ in range(24):
        length = rng.choice([1, 2, 8, 16, 32]) * KiB
        offset = rng.randrange(0, (WRITTEN - length) // (4 * KiB)) * 4 * KiB
        out.append((offset, rng.randbytes(length)))
    return out


@dataclasses.dataclass
class Built:
    final: Images      # the drives after the crash
    stale: Images      # the drives after the first phase's flush
    expected: bytes    # what the written range must read


def build_arch(arch: Arch, seed: int) -> Built:
    images: Images = {name: MemoryBackend(size) for name, size in arch.drives.items()}
    reference = bytearray(WRITTEN)
    snapshot: dict[str, Images] = {}

    async def body(disks, nursery):
        target = await arch.create(disks, nursery)
        for phase in (1, 2):
            for offset, data in phase_writes(seed, phase):
                await target.write(offset, data)
                reference[offset:offset + len(data)] = data
            if phase == 1 or arch.flush_at_end:
                await target.flush()
            if phase == 1:
                snapshot["stale"] = clone(images)

    run_on(images, body, model=arch.model)
    return Built(images, snapshot["stale"], bytes(reference))


_BUILT: dict[tuple[str, int], Built] = {}


def built(name: str, seed: int = 1) -> Built:
    if (name, seed) not in _BUILT:
        _BUILT[(name, seed)] = build_arch(ARCHS[name], seed)
    return _BUILT[(name, seed)]


# ---- one trial ----------------------------------------------------------------------------

KINDS = (*DAMAGES, "swap")


@st.composite
def damage_plan(draw, arch: Arch, fmt: str, kind: str):
    """Which region of which drive, and what damage of `kind` is done to it:
    (description, damaged images)."""
    ours, foreign = built(arch.name), built(arch.name, seed=2)
    regions = arch.formats[fmt]
    drive, start, end = draw(st.sampled_from(regions))
    images = clone(ours.final)
    if kind == "swap":  # with the same region of another drive of this format
        other = draw(st.sampled_from([d for d, _s, _e in regions if d != drive]))
        mine, theirs = images[drive].pread(start, end - start), images[other].pread(start, end - start)
        images[drive].pwrite(start, theirs)
        images[other].pwrite(start, mine)
        return f"swap {drive}[{start}, {end}) with {other}", images
    raw = images[drive].pread(start, end - start)
    _, damaged = draw(damage_of(raw, stale=ours.stale[drive].pread(start, end - start),
                                foreign=foreign.final[drive].pread(start, end - start),
                                focus=used_span(raw), kinds=(kind,)))
    images[drive].pwrite(start, bytes(damaged))
    return f"{drive} at {start}: {damaged.what}", images


def read_back(arch: Arch, images: Images) -> bytes | None:
    """Assemble `images` and read the written range; None if refused (one line)."""
    async def body(disks, nursery):
        target = await arch.assemble(disks, nursery)
        return await target.read(0, WRITTEN)

    try:
        got = run_on(images, body, model=arch.model)
    except Exception as exc:  # noqa: BLE001 - sorted below: a refusal, or re-raised
        leaves = leaf_exceptions(exc)
        if not all(isinstance(leaf, RaidlabError) for leaf in leaves):
            raise
        for leaf in leaves:
            assert "\n" not in str(leaf), str(leaf)
        return None
    return got


def trial(arch: Arch, images: Images, expected: bytes) -> str:
    """Assemble `images` and read the written range: "refused", "recovered" or "wrong"."""
    got = read_back(arch, images)
    return "refused" if got is None else "recovered" if got == expected else "wrong"


def reaches_unvouched(arch: Arch, fmt: str, images: Images, reference: Images) -> bool:
    """Whether the damage in `images` reaches one of the format's unvouched records (module
    doc), which also carry the only proof that the records before them were whole."""
    newest = arch.unvouched[fmt](reference) if fmt in arch.unvouched else []
    return any(d == drive and s <= at < e for drive, at in changed_sectors(images, reference) for d, s, e in newest)


def changed_sectors(images: Images, reference: Images) -> list[tuple[str, int]]:
    """(drive, offset) of every sector of `images` that differs from `reference`."""
    out = []
    for name, backend in images.items():
        a, b = backend.pread(0, backend.size), reference[name].pread(0, backend.size)
        if a != b:
            out += [(name, at) for at in range(0, len(a), SECTOR) if a[at:at + SECTOR] != b[at:at + SECTOR]]
    return out


def campaign(arch_name: str, fmt: str, kind: str, max_examples: int) -> tuple[collections.Counter, list[str]]:
    """`max_examples` trials of damage `kind` to format `fmt` of `arch_name`: the counts
    per outcome and what was done in each trial that read back wrong."""
    arch = ARCHS[arch_name]
    ours = built(arch_name)
    tally = TALLY[(arch_name, fmt, kind)]
    wrong: list[str] = []

    @settings(TRIALS, max_examples=max_examples)
    @given(damage_plan(arch, fmt, kind))
    def one(plan):
        what, images = plan
        outcome = trial(arch, clone(images), ours.expected)
        if outcome == "wrong" and reaches_unvouched(arch, fmt, images, ours.final):
            outcome = "unvouched"
        tally[outcome] += 1
        if outcome == "wrong":
            wrong.append(what)

    one()
    return tally, wrong


# ---- the tests ----------------------------------------------------------------------------

CASES = [(arch, fmt, kind) for arch, spec in ARCHS.items() for fmt, regions in spec.formats.items()
         for kind in KINDS if kind != "swap" or len(regions) > 1]


def case(arch: str, fmt: str, kind: str):
    return pytest.param(arch, fmt, kind, id=f"{arch}-{fmt.replace(' ', '_')}-{kind}")


@pytest.mark.parametrize("arch, fmt, kind", [case(*c) for c in CASES])
def test_damaged_metadata_is_refused_or_recovered_never_read_wrong(arch, fmt, kind):
    tally, wrong = campaign(arch, fmt, kind, EXAMPLES)
    assert sum(tally.values()) > 0
    assert tally["wrong"] == 0, f"{tally['wrong']} wrong read(s) after: {wrong[:5]}"


@pytest.mark.slow
@pytest.mark.parametrize("arch, fmt, kind", [case(*c) for c in CASES])
def test_many_more_trials(arch, fmt, kind):
    tally, wrong = campaign(arch, fmt, kind, 20 * EXAMPLES)
    assert tally["wrong"] == 0, f"{tally['wrong']} wrong read(s) after: {wrong[:5]}"


def test_a_trial_of_the_undamaged_drives_recovers_everything():
    # The baseline every damaged trial is measured against: a crash alone loses nothing.
    for name, arch in ARCHS.items():
        assert trial(arch, clone(built(name).final), built(name).expected) == "recovered", name


def test_the_regions_are_where_the_formats_are():
    # Each region holds its format's bytes after the run (damage there is damage to it).
    for name, arch in ARCHS.items():
        images = built(name).final
        for fmt, regions in arch.formats.items():
            assert any(any(images[d].pread(s, e - s)) for d, s, e in regions), (name, fmt)
    column = built("tss").final["d0"].pread(0, 2 * SLOT_SIZE)
    assert newest(column[:SLOT_SIZE], column[SLOT_SIZE:]).data_offset == TSS_DATA_OFFSET
    member = built("raidx").final["d0"].pread(0, 2 * SLOT_SIZE)
    assert newest(member[:SLOT_SIZE], member[SLOT_SIZE:]).data_offset == RAIDX_DATA_OFFSET


@pytest.fixture(scope="module", autouse=True)
def report_counts():
    yield
    if not TALLY:
        return
    per_arch: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    per_format: dict[tuple[str, str], collections.Counter] = collections.defaultdict(collections.Counter)
    for (arch, fmt, _kind), tally in TALLY.items():
        per_arch[arch].update(tally)
        per_format[(arch, fmt)].update(tally)
    print("\ndamaged-metadata trials: refused / recovered / unvouched / wrong")

    def line(arch, fmt, kind, t):
        print(f"  {arch:14s} {fmt:15s} {kind:8s} {t['refused']:4d} {t['recovered']:4d} {t['unvouched']:4d} {t['wrong']:4d}")
    for (arch, fmt, kind), tally in sorted(TALLY.items()):
        line(arch, fmt, kind, tally)
    for (arch, fmt), tally in sorted(per_format.items()):
        line(arch, fmt, "(all)", tally)
    for arch, tally in sorted(per_arch.items()):
        line(arch, "(all)", "", tally)
