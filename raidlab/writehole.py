"""The write-hole campaign: how often a power cut on a degraded RAID 5 returns wrong data for
blocks nobody wrote, without and with a write journal.

Each trial is one live array of four drives with volatile write caches (raidlab.disks.volatile):

    create (--power-loss) -> random data over every stripe of a region, fsync (on the media)
    -> member 1 fails -> one 4 KiB O_DIRECT write, without fsync, into each of S random
    stripes (each updates a data chunk and the parity chunk, both held in drive caches)
    -> the power is cut at random (each drive loses or keeps each unflushed write, seed of
    the trial) -> assemble -> member 1's chunk of every stripe written is read (the array
    computes it from the others) and compared with what it held before.

A chunk that comes back different although nobody wrote it is the write hole. The written
4 KiB themselves may come back new or old (either is allowed: nothing was flushed); any
other content counts as wrong too. Without a journal about half the written stripes are
torn (data kept, parity lost or the reverse), and where member 1 held a data chunk of the
stripe, that chunk is wrong; with a
journal (raid5 -o journal=4M, md's --write-journal) every journalled stripe is written
again whole at assembly, and none is.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import random
import time
from collections.abc import Callable
from typing import Any

from raidlab.disks.volatile import power_cut_images
from raidlab.errors import RaidlabError
from raidlab.export.serve import check_live_prerequisites
from raidlab.lab import Lab, held_under
from raidlab.service import control
from raidlab.service.spec import ArraySpec

CHUNK = 64 * 1024
DISKS = 4
STRIPE = (DISKS - 1) * CHUNK
REGION_STRIPES = 64           # stripes filled and eligible
CASES = {"raid5": {}, "raid5-journal": {"journal": "4M"}}


@dataclasses.dataclass
class Trial:
    case: str
    seed: int
    stripes_written: int = 0
    writes_lost: int = 0               # drive writes the cut took
    stripes_wrong: int = 0              # written stripes whose unwritten bytes came back changed
    writes_garbled: int = 0            # written 4 KiB that are neither the old nor the new bytes
    replayed: int = 0                  # journal records written again at assembly
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


def run_trial(case: str, seed: int, stripes: int, home: str | None) -> Trial:
    trial = Trial(case, seed)
    started = time.monotonic()
    lab = Lab(f"writehole-{case}", home=home, create=True)
    rng = random.Random(seed)
    try:
        control.stop_daemon(lab)
        control.release_leftovers(lab)
        control.remove_lab(lab, keep_images=False)
        lab.path.mkdir(parents=True, exist_ok=True)
        ArraySpec(lab.name, "raid5", DISKS, "none", 32 << 20, CHUNK, "fifo", dict(CASES[case]), "native",
                  power_loss=True).save(lab.path)
        device = control.start_daemon(lab, "create", home=home)["device"]
        before = rng.randbytes(REGION_STRIPES * STRIPE)
        _direct(device, 0, before, sync=True)
        control.request(lab, "fail", disk=1)
        chosen = sorted(rng.sample(range(REGION_STRIPES), stripes))
        news = {s: rng.randbytes(4096) for s in chosen}
        for s in chosen:
            _direct(device, s * STRIPE, news[s])  # data chunk 0 of the stripe's first member and its parity
        trial.stripes_written = len(chosen)
        control.kill_daemon(lab)
        control.release_leftovers(lab)
        cut = power_cut_images(sorted(lab.images_dir.glob("*.img")), "random", seed)
        trial.writes_lost = sum(r["writes_lost"] for r in cut.values())
        ready = control.start_daemon(lab, "assemble", home=home)
        device = ready["device"]
        status = control.request(lab, "status")
        trial.replayed = status["statistics"].get("journal", {}).get("replayed_records", 0)
        for s in chosen:
            got = _direct(device, s * STRIPE, None, STRIPE)
            head, old_head = got[:4096], before[s * STRIPE:s * STRIPE + 4096]
            if head not in (news[s], old_head):
                trial.writes_garbled += 1
            # the rest of the stripe: nobody wrote it (member 1's chunk, wherever the stripe's
            # rotation puts it, is computed from the others)
            if got[4096:] != before[s * STRIPE + 4096:(s + 1) * STRIPE]:
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
        rows.append({"case": case, "options": CASES[case], "trials": len(mine),
                     "stripes_written": sum(t.stripes_written for t in mine),
                     "writes_lost": sum(t.writes_lost for t in mine),
                     "stripes_wrong": sum(t.stripes_wrong for t in mine),
                     "writes_garbled": sum(t.writes_garbled for t in mine),
                     "replayed": sum(t.replayed for t in mine),
                     "errors": sum(t.error is not None for t in mine),
                     "leaks": sum(len(t.leaks) for t in mine)})
    return {"seed": seed, "trials": trials, "stripes": stripes, "rows": rows,
            "results": [dataclasses.asdict(t) for t in results]}


__all__ = ["CASES", "Trial", "run_campaign", "run_trial"]
