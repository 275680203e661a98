"""`raidlab faulttest ARCH`: a member goes bad while fio writes and verifies, and the array
must keep serving correct data, rebuild onto a fresh member while the workload goes on, and
scrub clean; a layout without redundancy must fail cleanly (fio sees EIO, never wrong data).

The engine's layouts, and VC-RAID, whose raid5 member takes the fault behind the RAM buffer
and the log. One independent run per fault mode, each on an array of its own
(raidlab.disks.disk, "Fault injection"):

    create -> fio A writes and verifies region A (member 1 healthy)
    -> fio B writes and verifies region B; half a second in, member 1 gets the fault:
       vanish (gone, the array is told), read-eio, write-eio (the array finds out from its own
       requests), slow (100x: nothing fails, everything waits)
    -> status: is member 1 failed? If not, a scrub reads every member and may find the
       fault fio did not meet (a mirror whose reads went to the other copy)
    -> if member 1 failed and the layout survives it: replace it while fio C writes and
       verifies region C; then fio reads A and B back (verify only)
    -> check (scrub): mismatches -> destroy -> the host is searched for what the run left.

Verdicts. A redundant layout passes when every fio job verifies, a member with an EIO fault
(or gone) ends failed and rebuilt, and the scrub finds no mismatch. A layout without
redundancy passes when the fault surfaces as an error to fio (an EIO, never a verify
mismatch: wrong data is the failure that matters) and the daemon still answers and is
destroyed without leaks; a slow member must change nothing but the time.
"""

from __future__ import annotations

import dataclasses
import errno
import threading
import time
from collections.abc import Callable
from typing import Any

from raidlab import archs
from raidlab.errors import RaidlabError, UsageError
from raidlab.export.serve import check_live_prerequisites
from raidlab.lab import Lab, held_under
from raidlab.service import control
from raidlab.service.spec import ArraySpec
from raidlab.tools import fio
from raidlab.tools.base import require

MODES = ("vanish", "read-eio", "write-eio", "slow")
FAULTY = 1                  # the member that goes bad
REGION = 8 << 20            # bytes each fio job writes and verifies
INJECT_AFTER = 0.5          # seconds into fio B
NON_REDUNDANT = ("raid0", "sa1", "sa2", "sa3", "saz")


@dataclasses.dataclass
class FaultResult:
    mode: str
    redundant: bool
    during_ok: bool = False          # fio B (the fault struck during it): ran clean and verified
    during_errno: int = 0            # fio B's error when it did not (EIO expected without redundancy)
    during_message: str = ""         # and the end of what fio said then
    member_failed: bool = False
    found_by_scrub: str | None = None    # the scrub failed the member (fio never met the fault)
    state: str = ""
    rebuilt: bool = False
    rebuild_load_ok: bool | None = None  # fio C during the rebuild
    reread_ok: bool | None = None        # regions A and B read back after the rebuild
    mismatches: int | None = None
    error: str | None = None
    leaks: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        if self.error is not None or self.leaks:
            return False
        if self.mode == "slow":
            return self.during_ok and not self.member_failed and self.mismatches in (0, None)
        if not self.redundant:  # the fault must surface as an error, never as wrong data
            return not self.during_ok and self.during_errno == errno.EIO
        return (self.during_ok and self.member_failed and self.rebuilt and bool(self.rebuild_load_ok)
                and bool(self.reread_ok) and self.mismatches == 0)

    def as_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "ok": self.ok}


def _job(device: str, name: str, region: int, seed: int, **extra: str) -> fio.FioJob:
    return fio.FioJob(name=name, filename=device, rw="randwrite", bs="4k", size=str(REGION), iodepth=8,
                      verify="crc32c", seed=seed, extra={"offset": str(region * REGION), **extra})


def _fio(job: fio.FioJob) -> fio.FioRun:
    return fio.run_job(job, check=False, timeout=900)


class FaultRun:
    def __init__(self, arch: str, disks: int, options: dict[str, Any], disk_size: int, chunk: int,
                 home: str | None, status: Callable[[str], None]):
        self.arch, self.disks, self.options = arch, disks, options
        self.disk_size, self.chunk, self.home, self.status = disk_size, chunk, home, status
        self.lab = Lab(f"faulttest-{arch}", home=home, create=True)

    def _member_state(self) -> tuple[bool, str]:
        """(whether member FAULTY is failed, the array's state): an engine array says both in its
        statistics, a cache architecture at the top of its status."""
        status = control.request(self.lab, "status")
        where = status if "failed_members" in status else status.get("statistics", {})
        return FAULTY in where.get("failed_members", []), str(status.get("state") or where.get("state", ""))

    def _teardown(self) -> None:
        control.stop_daemon(self.lab)
        control.release_leftovers(self.lab)
        control.remove_lab(self.lab, keep_images=False)
        self.lab.path.mkdir(parents=True, exist_ok=True)

    def close(self) -> None:
        self._teardown()
        if not self.lab.resources() and not self.lab.in_use():
            control.remove_lab(self.lab, keep_images=False)

    def run_mode(self, mode: str, seed: int) -> FaultResult:
        started = time.monotonic()
        redundant = self.arch not in NON_REDUNDANT
        result = FaultResult(mode, redundant)
        try:
            self._teardown()
            self.status(f"{mode}: create")
            ArraySpec(self.lab.name, self.arch, self.disks, "none", self.disk_size, self.chunk, "fifo",
                      dict(self.options), "native").save(self.lab.path)
            device = control.start_daemon(self.lab, "create", home=self.home)["device"]
            self.status(f"{mode}: fio writes region A")
            before = _fio(_job(device, "a", 0, seed))
            if not before.ok:
                raise RaidlabError(f"fio failed on a healthy array: {before.jobs[0].error if before.jobs else before.returncode}")
            self.status(f"{mode}: fio writes region B; member {FAULTY} goes bad")
            box: dict[str, fio.FioRun] = {}
            writer = threading.Thread(target=lambda: box.setdefault("run", _fio(_job(device, "b", 1, seed + 1))))
            writer.start()
            time.sleep(INJECT_AFTER)
            control.request(self.lab, "fail", disk=FAULTY, mode=mode, force=True)
            writer.join()
            during = box["run"]
            result.during_ok = during.ok
            result.during_errno = next((j.error for j in during.jobs if j.error), 0) or (0 if during.ok else -1)
            if not during.ok:
                result.during_message = " ".join(during.stderr.split())[-300:]
            result.member_failed, result.state = self._member_state()
            if redundant and not result.member_failed:
                # A fault fio's requests did not meet (a mirror read elsewhere) is the scrub's
                # to find: it reads every member.
                self.status(f"{mode}: scrub")
                try:
                    result.mismatches = len(control.request(self.lab, "check", timeout=600)["mismatches"])
                except RaidlabError as exc:
                    result.found_by_scrub = str(exc)
                result.member_failed, result.state = self._member_state()
            if redundant and result.member_failed:
                self.status(f"{mode}: replace member {FAULTY} while fio writes region C")
                load: dict[str, fio.FioRun] = {}
                worker = threading.Thread(target=lambda: load.setdefault("run", _fio(_job(device, "c", 2, seed + 2))))
                worker.start()
                replaced = control.request(self.lab, "replace", disk=FAULTY)
                worker.join()
                result.rebuilt = replaced.get("state") == "optimal"
                result.rebuild_load_ok = load["run"].ok
                self.status(f"{mode}: read regions A and B back")
                result.reread_ok = all(_fio(_job(device, name, region, seed + region, verify_only="1")).ok
                                       for name, region in (("a", 0), ("b", 1)))
            if redundant and (result.member_failed or result.mismatches is None):
                self.status(f"{mode}: scrub")
                result.mismatches = len(control.request(self.lab, "check", timeout=600)["mismatches"])
            elif not redundant:
                control.request(self.lab, "status")  # the daemon still answers
        except KeyboardInterrupt:
            raise
        except (RaidlabError, OSError) as exc:
            result.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.status(f"{mode}: destroy")
            self._teardown()
            result.leaks = held_under(self.lab.path)
            result.seconds = round(time.monotonic() - started, 1)
        return result


def run_faulttest(arch: str, *, disks: int, options: dict[str, Any], disk_size: int, chunk: int,
                  modes: list[str], seed: int, home: str | None,
                  status: Callable[[str], None] = lambda s: None,
                  done: Callable[[FaultResult], None] = lambda r: None) -> dict[str, Any]:
    """Every fault mode on `arch` (module doc); the summary document."""
    for mode in modes:
        if mode not in MODES:
            raise UsageError(f"unknown fault mode {mode!r}", hint=f"one of {', '.join(MODES)}")
    if archs.get(arch).family != "engine" and arch != "vcraid":
        raise UsageError(f"faulttest runs the engine's layouts and VC-RAID; {arch} is of the "
                         f"{archs.get(arch).family} family", hint="use raid1, raid5, raid10, chained, raidx, raid0, "
                                                                  "sa3 or vcraid")
    archs.validate(arch, disks, disk_size, chunk, options)
    if disk_size < 4 * REGION:
        raise UsageError(f"--disk-size must hold the three fio regions: at least {4 * REGION >> 20} MiB")
    check_live_prerequisites("raidlab faulttest")
    require("fio")
    run = FaultRun(arch, disks, options, disk_size, chunk, home, status)
    started = time.monotonic()
    results = []
    try:
        for k, mode in enumerate(modes):
            results.append(run.run_mode(mode, seed * 100 + k * 10))
            done(results[-1])
    finally:
        run.close()
    return {"arch": arch, "disks": disks, "options": options, "seed": seed, "modes": len(results),
            "passed": sum(r.ok for r in results), "failed": sum(not r.ok for r in results),
            "leaks": sum(len(r.leaks) for r in results), "seconds": round(time.monotonic() - started, 1),
            "results": [r.as_json() for r in results]}
