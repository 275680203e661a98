"""`raidlab faulttest ARCH`: a drive goes bad while fio writes and verifies, and the array
must keep serving correct data, rebuild onto a fresh drive while the workload goes on, and
scrub clean; where the drive has no copy, the array must fail cleanly (fio sees EIO, never
wrong data).

The drive is one of the engine's layouts' members, a TSS column, a VC-RAID raid5 member
(behind the RAM buffer and the log), a VC-RAID cache disk (a side of the mirrored cache disk
with mirrored_cache=on, else the only copy of the log), or a DCD's data disk or cache disk:
what it is, and whether the array keeps its data without it, is its architecture's
`drive_role` (raidlab.archs); an architecture without one is not fault-tested.
One independent run per fault mode, each on an array of its own (raidlab.disks.disk, "Fault
injection"):

    create -> fio A writes and verifies region A (the drive healthy)
    -> fio B writes (paced) and verifies region B; half a second in, the drive gets the fault:
       vanish (gone, the array is told), read-eio, write-eio (the array finds out from its own
       requests), slow (100x: nothing fails, everything waits)
    -> status: has the drive failed? If not, a scrub reads every copy and may find the
       fault fio did not meet (a mirror whose reads went to the other copy)
    -> if the drive failed and the array survives it: replace it while fio C writes and
       verifies region C; then fio reads A and B back (verify only)
    -> check (scrub): mismatches -> destroy -> the host is searched for what the run left.

Verdicts. Where the drive has a copy, a run passes when every fio job verifies, a drive with
an EIO fault (or gone) ends failed and rebuilt, and the scrub finds no mismatch. Where it
has none, a run passes when the fault surfaces as an error to fio (an EIO, never a verify
mismatch: wrong data is the failure that matters) and the daemon still answers and is
destroyed without leaks; a slow drive must change nothing but the time.
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
FAULTY = 1                  # the drive that goes bad unless told otherwise
REGION = 8 << 20            # bytes each fio job writes and verifies
INJECT_AFTER = 0.5          # seconds into fio B
# fio B's writes are paced so that they are still going when the fault strikes: unpaced, a
# fast array wrote all of region B within INJECT_AFTER, and a write-eio fault then met no
# write at all (2,048 writes at this rate take about 4 s; its verify reads are not paced).
PACED_WRITE_IOPS = 500
OPTIMAL = ("optimal", "active")  # an engine array's and VC-RAID's state with nothing failed; TSS's


def drives_of(arch: str, disks: int, disk_size: int, chunk: int, options: dict[str, Any]) -> list[str]:
    """The names of the drives `raidlab create` makes for this configuration (d0, d1, ...)."""
    from raidlab.archs.base import LIVE, Config

    return [d.name for d in archs.get(arch).plan(Config(arch, disks, disk_size, chunk, dict(options)), LIVE)]


def drive_role(arch: str, disks: int, options: dict[str, Any], disk: int, *, disk_size: int,
               chunk: int) -> tuple[str, bool]:
    """What drive `disk` is to the array, and whether the array keeps its data without it
    (the architecture's `drive_role`)."""
    from raidlab.archs.base import Config

    return archs.get(arch).drive_role(Config(arch, disks, disk_size, chunk, dict(options)), disk)


def fault_tested() -> list[str]:
    """The architectures faulttest fails drives of: those with a `drive_role`."""
    return [arch.name for arch in archs.REGISTRY.values() if arch.drive_role is not None]


@dataclasses.dataclass
class FaultResult:
    mode: str
    redundant: bool
    disk: int = FAULTY
    role: str = "member"
    during_ok: bool = False          # fio B (the fault struck during it): ran clean and verified
    during_errno: int = 0            # fio B's error when it did not (EIO expected without redundancy)
    during_message: str = ""         # and the end of what fio said then
    member_failed: bool = False
    found_by_scrub: str | None = None    # the scrub failed the member (fio never met the fault)
    state: str = ""
    rebuilt: bool = False
    rebuild_load_ok: bool | None = None  # fio C during the rebuild
    reread_ok: bool | None = None        # regions A and B read back (after the rebuild, or the fault)
    reread_errno: int = 0                # their error without a copy to rebuild from (EIO, never 84)
    read_errno: int | None = None        # without a copy: a read of the whole volume afterwards
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
        if not self.redundant:
            # Never wrong data: what fio read verified or failed with EIO. And the fault must
            # surface as EIO: during fio B, in the read-back, or (a drive only some reads need,
            # as a DCD's data disk behind its log) in the read of the whole volume.
            never_wrong = self.during_errno in (0, errno.EIO) and self.reread_errno in (0, errno.EIO)
            met = errno.EIO in (self.during_errno, self.reread_errno, self.read_errno)
            return never_wrong and met
        return (self.during_ok and self.member_failed and self.rebuilt and bool(self.rebuild_load_ok)
                and bool(self.reread_ok) and self.mismatches == 0)

    def as_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "ok": self.ok}


def _job(device: str, name: str, region: int, seed: int, **extra: str) -> fio.FioJob:
    return fio.FioJob(name=name, filename=device, rw="randwrite", bs="4k", size=str(REGION), iodepth=8,
                      verify="crc32c", seed=seed, extra={"offset": str(region * REGION), **extra})


def _fio(job: fio.FioJob) -> fio.FioRun:
    return fio.run_job(job, check=False, timeout=900)


def _errno(run: fio.FioRun) -> int:
    """A failed fio run's error: its first job's errno (EIO, EILSEQ on a verify mismatch), -1
    when fio failed without one."""
    return next((j.error for j in run.jobs if j.error), 0) or -1


class FaultRun:
    def __init__(self, arch: str, disks: int, options: dict[str, Any], disk_size: int, chunk: int,
                 home: str | None, status: Callable[[str], None], disk: int = FAULTY):
        self.arch, self.disks, self.options, self.disk = arch, disks, options, disk
        self.disk_size, self.chunk, self.home, self.status = disk_size, chunk, home, status
        self.role, self.redundant = drive_role(arch, disks, options, disk, disk_size=disk_size, chunk=chunk)
        self.lab = Lab(f"faulttest-{arch}", home=home, create=True)

    def _member_state(self) -> tuple[bool, str]:
        """(whether the faulty drive has failed, the array's state): an engine array says both
        in its statistics, TSS and the cache architectures at the top of their status."""
        status = control.request(self.lab, "status")
        where = status if "failed_members" in status else status.get("statistics", {})
        return self.disk in where.get("failed_members", []), str(status.get("state") or where.get("state", ""))

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
        redundant, disk = self.redundant, self.disk
        result = FaultResult(mode, redundant, disk, self.role)
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
            self.status(f"{mode}: fio writes region B; drive {disk} ({self.role}) goes bad")
            box: dict[str, fio.FioRun] = {}
            paced = _job(device, "b", 1, seed + 1, rate_iops=f",{PACED_WRITE_IOPS}")
            writer = threading.Thread(target=lambda: box.setdefault("run", _fio(paced)))
            writer.start()
            time.sleep(INJECT_AFTER)
            control.request(self.lab, "fail", disk=disk, mode=mode, force=True)
            writer.join()
            during = box["run"]
            result.during_ok = during.ok
            result.during_errno = 0 if during.ok else _errno(during)
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
                self.status(f"{mode}: replace drive {disk} while fio writes region C")
                load: dict[str, fio.FioRun] = {}
                worker = threading.Thread(target=lambda: load.setdefault("run", _fio(_job(device, "c", 2, seed + 2))))
                worker.start()
                control.request(self.lab, "replace", disk=disk)
                worker.join()
                failed, result.state = self._member_state()
                result.rebuilt = not failed and result.state in OPTIMAL
                result.rebuild_load_ok = load["run"].ok
                self.status(f"{mode}: read regions A and B back")
                result.reread_ok = all(_fio(_job(device, name, region, seed + region, verify_only="1")).ok
                                       for name, region in (("a", 0), ("b", 1)))
            if redundant and (result.member_failed or result.mismatches is None):
                self.status(f"{mode}: scrub")
                result.mismatches = len(control.request(self.lab, "check", timeout=600)["mismatches"])
            elif not redundant:
                result.member_failed, result.state = self._member_state()  # the daemon still answers
                if mode != "slow":
                    self.status(f"{mode}: read regions A and B back, then the whole volume")
                    reread = [_fio(_job(device, name, region, seed + region, verify_only="1"))
                              for name, region in (("a", 0), ("b", 1))]
                    result.reread_ok = all(r.ok for r in reread)
                    result.reread_errno = next((_errno(r) for r in reread if not r.ok), 0)
                    whole = _fio(fio.FioJob(name="all", filename=device, rw="read", bs="1M", size="100%",
                                            iodepth=4))
                    result.read_errno = 0 if whole.ok else _errno(whole)
                    result.member_failed, result.state = self._member_state()
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
                  modes: list[str], seed: int, home: str | None, disk: int = FAULTY,
                  status: Callable[[str], None] = lambda s: None,
                  done: Callable[[FaultResult], None] = lambda r: None) -> dict[str, Any]:
    """Every fault mode on drive `disk` of `arch` (module doc); the summary document."""
    for mode in modes:
        if mode not in MODES:
            raise UsageError(f"unknown fault mode {mode!r}", hint=f"one of {', '.join(MODES)}")
    declared = archs.get(arch)
    if declared.drive_role is None:
        tested = fault_tested()
        raise UsageError(f"faulttest fails drives of {', '.join(tested[:-1])} and {tested[-1]}; {arch} (of the "
                         f"{declared.family} family) is not one", hint=f"use one of {', '.join(tested)}")
    archs.validate(arch, disks, disk_size, chunk, options)
    names = drives_of(arch, disks, disk_size, chunk, options)
    if not 0 <= disk < len(names):
        raise UsageError(f"--disk {disk}: {arch} with these options has drives 0..{len(names) - 1}")
    if declared.check_faults is not None:
        try:
            declared.check_faults(options)
        except UsageError as exc:
            raise UsageError(f"faulttest: {exc.message}", hint=exc.hint) from None
    if disk_size < 4 * REGION:
        raise UsageError(f"--disk-size must hold the three fio regions: at least {4 * REGION >> 20} MiB")
    check_live_prerequisites("raidlab faulttest")
    require("fio")
    run = FaultRun(arch, disks, options, disk_size, chunk, home, status, disk)
    started = time.monotonic()
    results = []
    try:
        for k, mode in enumerate(modes):
            results.append(run.run_mode(mode, seed * 100 + k * 10))
            done(results[-1])
    finally:
        run.close()
    return {"arch": arch, "disks": disks, "options": options, "disk": disk, "role": run.role,
            "redundant": run.redundant, "seed": seed, "modes": len(results),
            "passed": sum(r.ok for r in results), "failed": sum(not r.ok for r in results),
            "leaks": sum(len(r.leaks) for r in results), "seconds": round(time.monotonic() - started, 1),
            "results": [r.as_json() for r in results]}
