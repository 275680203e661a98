"""The write-hole campaign: how often a power cut on a degraded RAID 5 returns wrong data for
blocks nobody wrote, without and with a write journal, for the engine's raid5 and md's.

Each trial is one live array of four drives with volatile write caches (raidlab.disks.volatile):

    create (--power-loss) -> random data over every stripe of a region, fsync (on the media)
    -> member 1 fails -> one 4 KiB O_DIRECT write, without fsync, into each of S random
    stripes (each updates a data chunk and the parity chunk, both held in drive caches)
    -> the power is cut at random (each drive loses or keeps each unflushed write, seed of
    the trial) -> assemble; the array is dirty and degraded, which md refuses to start
    ("not enough devices to start the array while not clean") and so does the engine's
    raid5: the refusal is counted, and the trial goes on with `assemble --force` -> member
    1's chunk of every stripe written is read (the array computes it from the others) and
    compared with what it held before.

A chunk that comes back different although nobody wrote it is the write hole. The written
4 KiB themselves may come back new or old (either is allowed: nothing was flushed); any
other content counts as wrong too. Without a journal about half the written stripes are
torn (data kept, parity lost or the reverse), and where member 1 held a data chunk of the
stripe, that chunk is wrong; with a journal (raid5 -o journal=4M; md-raid5 -o journal=4M,
mdadm --write-journal) the array starts without --force, every journalled stripe is
written again whole at assembly, and none is wrong.

md runs in the lab VM (runner vm) on the same emulated drives; its writes and reads are dd
with O_DIRECT in the guest, its member is failed with `mdadm --fail`, and its journal
replay is read from the guest kernel's log. md marks a dirty array clean again after
safe_mode_delay (200 ms by default) without writes, flushing every member's cache first. A
real cut during writes falls before that; here the cut comes after the writes return, the
guest command and the daemon's kill, which on a slow host take longer than 200 ms. So the
trial sets safe_mode_delay to SAFE_MODE_DELAY before its writes, and the cut falls inside the
window wherever the lab VM runs.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import random
import re
import time
from collections.abc import Callable
from typing import Any

from raidlab import archs
from raidlab.disks.volatile import power_cut_images
from raidlab.errors import RaidlabError
from raidlab.export.serve import check_live_prerequisites
from raidlab.lab import Lab, held_under
from raidlab.service import control
from raidlab.service.spec import FORCE_ENV, ArraySpec

CHUNK = 64 * 1024
DISKS = 4
STRIPE = (DISKS - 1) * CHUNK
REGION_STRIPES = 64           # stripes filled and eligible
BLOCK = 4096
SAFE_MODE_DELAY = 600          # seconds md waits before marking the array clean, in md trials
# case -> (architecture, options, runner): every architecture's write-hole cases
# (raidlab.archs.base.WriteHoleCase). md's members are fresh zeroed images, whose parity
# is already right: --assume-clean skips an initial resync that would change nothing.
CASES: dict[str, tuple[str, dict[str, Any], str]] = {
    case.name: (arch.name, dict(case.options), case.runner)
    for arch in archs.REGISTRY.values() for case in arch.write_hole_cases
}
JOURNALLED = {name for name, (_arch, options, _runner) in CASES.items() if options.get("journal")}
# md's journal replay at assembly (drivers/md/raid5-cache.c, r5l_recovery_log)
_MD_REPLAY = re.compile(r"recovering (\d+) data-only stripes and (\d+) data-parity stripes")


@dataclasses.dataclass
class Trial:
    case: str
    seed: int
    stripes_written: int = 0
    writes_lost: int = 0               # drive writes the cut took
    refused: bool | None = None        # assembly without --force refused the dirty degraded array
    stripes_wrong: int = 0              # written stripes whose unwritten bytes came back changed
    writes_garbled: int = 0            # written 4 KiB that are neither the old nor the new bytes
    replayed: int = 0                  # journal records (md: stripes) written again at assembly
    error: str | None = None
    leaks: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0


def _direct(device: str, offset: int, data: bytes | None, length: int = 0, *, sync: bool = False) -> bytes:
    buf = mmap.mmap(-1, len(data) if data is not None else length)
    fd = os.open(device, (os.O_WRONLY if data is not None else os.O_RDONLY) | os.O_DIRECT)
    try:
        if data is not None:
            buf.write(data)
            os.pwrite(fd, buf, offset)
            if sync:
                os.fsync(fd)
            return b""
        os.preadv(fd, [buf], offset)
        return bytes(buf)
    finally:
        os.close(fd)


class _HostArray:
    """The engine's raid5 on this host: its loop device, O_DIRECT from here."""

    def __init__(self, lab: Lab, ready: dict[str, Any]):
        self.lab, self.device = lab, ready["device"]

    def fill(self, data: bytes) -> None:
        _direct(self.device, 0, data, sync=True)

    def fail_member(self, index: int) -> None:
        control.request(self.lab, "fail", disk=index)

    def write_blocks(self, blocks: dict[int, bytes]) -> None:
        for offset, data in blocks.items():
            _direct(self.device, offset, data)

    def read(self, offset: int, length: int) -> bytes:
        return _direct(self.device, offset, None, length)

    def replayed(self) -> int:
        return control.request(self.lab, "status")["statistics"].get("journal", {}).get("replayed_records", 0)


class _GuestArray:
    """md in the lab VM: dd with O_DIRECT in the guest, through the daemon's runner session."""

    def __init__(self, lab: Lab, ready: dict[str, Any]):
        from raidlab.runners.session import open_session

        self.lab, self.session, self.device = lab, open_session(lab), ready["guest_device"]

    def _exec(self, argv: list[str], stdin: bytes | None = None, timeout: float = 300) -> bytes:
        result = self.session.exec(argv, timeout=timeout, stdin=stdin)
        return result.stdout

    def fill(self, data: bytes) -> None:
        self._exec(["dd", f"of={self.device}", f"bs={STRIPE}", "oflag=direct", "conv=fsync"], stdin=data)

    def fail_member(self, index: int) -> None:
        from raidlab.vm import guest_device

        self._exec(["mdadm", self.device, "--fail", guest_device(index)])

    def write_blocks(self, blocks: dict[int, bytes]) -> None:
        # one guest command for all of them, so the cut follows the last write at once
        seeks = " ".join(str(offset // BLOCK) for offset in blocks)
        md = os.path.basename(self.device)
        script = (f"echo {SAFE_MODE_DELAY} > /sys/block/{md}/md/safe_mode_delay || exit 1; "
                  f"for s in {seeks}; do dd of={self.device} bs={BLOCK} seek=$s count=1 iflag=fullblock "
                  "oflag=direct 2>/dev/null || exit 1; done")
        self._exec(["sh", "-c", script], stdin=b"".join(blocks.values()))

    def read(self, offset: int, length: int) -> bytes:
        return self._exec(["dd", f"if={self.device}", f"bs={length}", f"skip={offset // length}", "count=1",
                           "iflag=direct"])

    def replayed(self) -> int:
        found = _MD_REPLAY.search(self._exec(["dmesg"]).decode(errors="replace"))
        return int(found.group(1)) + int(found.group(2)) if found else 0


def run_trial(case: str, seed: int, stripes: int, home: str | None) -> Trial:
    arch, options, runner = CASES[case]
    trial = Trial(case, seed)
    started = time.monotonic()
    lab = Lab(f"writehole-{case}", home=home, create=True)
    rng = random.Random(seed)
    place = _HostArray if runner == "native" else _GuestArray
    try:
        control.stop_daemon(lab)
        control.release_leftovers(lab)
        control.remove_lab(lab, keep_images=False)
        lab.path.mkdir(parents=True, exist_ok=True)
        ArraySpec(lab.name, arch, DISKS, "none", 32 << 20, CHUNK, "fifo", dict(options), runner,
                  power_loss=True).save(lab.path)
        array = place(lab, control.start_daemon(lab, "create", home=home))
        before = rng.randbytes(REGION_STRIPES * STRIPE)
        array.fill(before)
        array.fail_member(1)
        chosen = sorted(rng.sample(range(REGION_STRIPES), stripes))
        news = {s: rng.randbytes(BLOCK) for s in chosen}
        # each into data chunk 0 of its stripe: that member's chunk and the parity's
        array.write_blocks({s * STRIPE: news[s] for s in chosen})
        trial.stripes_written = len(chosen)
        control.kill_daemon(lab)
        control.release_leftovers(lab)
        cut = power_cut_images(sorted(lab.images_dir.glob("*.img")), "random", seed)
        trial.writes_lost = sum(r["writes_lost"] for r in cut.values())
        try:
            ready = control.start_daemon(lab, "assemble", home=home)
            trial.refused = False
        except control.DaemonError as exc:
            if "--force" not in str(exc):   # refused for another reason than the dirty degraded start
                raise
            trial.refused = True
            control.release_leftovers(lab)
            ready = control.start_daemon(lab, "assemble", home=home, env={FORCE_ENV: "1"})
        array = place(lab, ready)
        trial.replayed = array.replayed()
        for s in chosen:
            got = array.read(s * STRIPE, STRIPE)
            head, old_head = got[:BLOCK], before[s * STRIPE:s * STRIPE + BLOCK]
            if head not in (news[s], old_head):
                trial.writes_garbled += 1
            # the rest of the stripe: nobody wrote it (member 1's chunk, wherever the stripe's
            # rotation puts it, is computed from the others)
            if got[BLOCK:] != before[s * STRIPE + BLOCK:(s + 1) * STRIPE]:
                trial.stripes_wrong += 1
    except (RaidlabError, OSError) as exc:
        trial.error = f"{type(exc).__name__}: {exc}"
    finally:
        control.stop_daemon(lab)
        control.release_leftovers(lab)
        control.remove_lab(lab, keep_images=False)
        trial.leaks = held_under(lab.path)
        trial.seconds = round(time.monotonic() - started, 1)
    return trial


def run_campaign(*, trials: int, stripes: int, seed: int, home: str | None, cases: list[str] | None = None,
                 done: Callable[[Trial], None] = lambda t: None) -> dict[str, Any]:
    check_live_prerequisites("raidlab reliability (write hole)")
    rows, results = [], []
    for case in cases or list(CASES):
        mine = []
        for k in range(trials):
            mine.append(run_trial(case, seed * 1000 + k, stripes, home))
            done(mine[-1])
        results += mine
        arch, options, runner = CASES[case]
        rows.append({"case": case, "arch": arch, "options": options, "runner": runner, "trials": len(mine),
                     "stripes_written": sum(t.stripes_written for t in mine),
                     "writes_lost": sum(t.writes_lost for t in mine),
                     "refused": sum(bool(t.refused) for t in mine),
                     "stripes_wrong": sum(t.stripes_wrong for t in mine),
                     "writes_garbled": sum(t.writes_garbled for t in mine),
                     "replayed": sum(t.replayed for t in mine),
                     "errors": sum(t.error is not None for t in mine),
                     "leaks": sum(len(t.leaks) for t in mine)})
    return {"seed": seed, "trials": trials, "stripes": stripes, "rows": rows,
            "results": [dataclasses.asdict(t) for t in results]}


def merge(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """One summary from campaigns of the same seed, trials and stripes run case by case."""
    first = summaries[0]
    return {"seed": first["seed"], "trials": first["trials"], "stripes": first["stripes"],
            "rows": [row for s in summaries for row in s["rows"]],
            "results": [r for s in summaries for r in s["results"]]}


def failed_rows(summary: dict[str, Any]) -> list[str]:
    """The cases whose result breaks what the campaign expects: an error, a leak, a written
    block garbled, a journalled case refused or with a wrong stripe, a plain case started
    without --force."""
    bad = []
    for row in summary["rows"]:
        journalled = row["case"] in JOURNALLED
        if (row["errors"] or row["leaks"] or row["writes_garbled"]
                or (journalled and (row["stripes_wrong"] or row["refused"]))
                or (not journalled and row["refused"] != row["trials"] - row["errors"])):
            bad.append(row["case"])
    return bad


__all__ = ["CASES", "JOURNALLED", "Trial", "failed_rows", "merge", "run_campaign", "run_trial"]
