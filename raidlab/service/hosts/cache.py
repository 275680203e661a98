"""The caching family's host in the array daemon: DCD (Hu & Yang, ISCA 96) and VC-RAID (He &
Yang) served live as the FUSE file `volume` and a loop device, like the engine arrays.

Why a host of its own: the mechanisms (raidlab.engine.caches.dcd / vcraid) are BlockTargets
over *several kinds* of disk — a data disk or a raid5 behind, a cache disk or partitions in
front, each possibly a different drive model (VC-RAID Table 1 puts an IDE cache disk beside
SCSI array disks) — with background tasks (log writer, idle detector, destage), a drain on a
clean stop, crash recovery on `assemble`, and operations of their own (`status` lines,
`fail` of a cache disk, `bypass`).

What an architecture needs is declared in the registry (raidlab.archs.dcd, raidlab.archs.vcraid):
`plan` says which member images to make, `build` creates or assembles the mechanism over
them (the same builder `raidlab sim` runs in virtual time), and `serving`
(raidlab.archs.caching.Serving) says what this host cannot see in the parts: the options as
the mechanism reads them, its `status` lines, what it survives, why a drive without a copy
is not failed or rebuilt, the RAM it holds. This host makes those images, calls `build`
with the live clock, serves the result as `volume`, and answers `status`, `fail`,
`replace`, `check` and `bypass` from the parts the builder returns (the mechanism, its
drives, its cache disks and their mirror): a mechanism with an engine array under it (its
`array`) has that array's state, resync and rebuild; one with `set_bypass` a bypass mode.

Not built (refused with one line): a mirrored cache for mcd/1c/1d, failure injection for
1c/1d; the DCD's NVRAM RAM buffer. `raidlab fail` works on every drive (refusing,
unless forced, a failure that loses data). `replace` rebuilds a VC-RAID raid5 member or
refills a side of a mirrored cache disk; a drive whose data exists nowhere else (a DCD's,
an unmirrored cache disk) is refused. `check` scrubs VC-RAID's raid5 and compares the sides
of a mirrored cache disk.

Durability as the volume's user sees it: a flush (ext4's journal commits, fsync) returns
only when every write acknowledged before it is on a cache disk or home (the mechanisms'
flush), and the member disks write through to their images, so a SIGKILL of this daemon
loses nothing that was flushed. `assemble` is crash recovery: DCD rebuilds its mapping from
the summary sectors (§2.5); VC-RAID writes every logged block to the raid5 first (§3.4).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import trio

from raidlab import archs
from raidlab.disks.disk import FAULTS, Partition
from raidlab.errors import LabError, UsageError
from raidlab.service.hosts.status import disks_table, placement_line, write_cache_note
from raidlab.service.hosts.volume import (UncleanStop, arch_config, make_drives, replace_drive, report_progress,
                                          serve_volume, stripe_cache_bytes, write_back_drives)


class CacheHost:
    family = "cache"

    def __init__(self, daemon):
        self.daemon = daemon
        self.spec = daemon.spec
        self.arch = archs.get(self.spec.arch)
        self.serving = self.arch.serving      # raidlab.archs.caching.Serving
        self.options = self.serving.options(self.spec.options)
        self.target = None          # the DCD or VCRAID
        self.drives: list = []      # the EmulatedDisks, one per image
        self.volume_path: Path | None = None
        self.loop_device: str | None = None  # the loop device over `volume` (native runner)
        self.recovered: dict[str, Any] = {}
        self.mirror = None          # MirroredCacheDisk of scd with mirrored_cache=on
        self.caches: list = []      # the cache disks as drives or partitions (cache_placement)
        self.session = None
        self.fs = None              # the FUSE filesystem serving `volume` (the daemon's op_capture swaps its target)
        self.busy = trio.Lock()     # one repair operation (replace, check) at a time
        self.unclean = None         # UncleanStop of the engine array under the cache (VC-RAID's raid5)

    # ------------------------------------------------------------------ build / assemble

    async def open(self, session, mode: str) -> dict:
        spec = self.spec
        self.session = session
        fs, made = await make_drives(session, self.daemon, arch_config(spec))
        self.drives = [disk for _relpath, disk, _image in made]
        await self.build(mode)
        fs.add("volume", self.target)
        self.fs = fs

        async def drain():
            # A clean stop: the RAM buffer goes to the cache disk(s) (what a flush does), so
            # `assemble` finds every write; the array under the cache (VC-RAID's raid5) records
            # a clean stop (unless its resync after an unclean stop did not finish).
            await self.target.flush()
            note = "RAM buffer flushed to the cache disk"
            if self.unclean is not None:
                note += f"; {self.target.array.layout.name} " + await self.unclean.mark_clean()
            return note

        session.push(f"{spec.arch} RAM buffer", drain)
        if self.unclean is not None:   # the array under the cache, after its log was written to it
            self.unclean.start_resync(mode, session.nursery)
        # Natively the array is a loop device over `volume`; the lab VM gets the file itself.
        self.volume_path, self.loop_device = await serve_volume(session, fs, loop=spec.runner == "native")
        return {"device": self.loop_device if spec.runner == "native" else None,
                "volume": str(self.volume_path), "capacity": self.target.size,
                "state": self._state(), "recovered": self.recovered,
                **({"resync": "started"} if self.unclean is not None and self.unclean.pending else {})}

    async def build(self, mode: str) -> None:
        """Create or assemble the architecture over `self.drives` (the member images of its
        plan) with the registry's builder, its background tasks in the session's nursery,
        and keep what the operations need from the parts it returns."""
        def assembled(array, keeper):
            # the array under the cache (VC-RAID's raid5), before the log is written to it:
            # refused dirty and degraded
            self.unclean = UncleanStop(self.spec.name, array, keeper, self.daemon.status, self.busy,
                                       part=array.layout.name)
            self.unclean.refuse_if_dirty_degraded(mode)

        built = await archs.get(self.spec.arch).build(archs.BuildContext(
            self.spec.name, arch_config(self.spec), self.drives, mode=mode, clock=archs.LIVE, nursery=self.session.nursery,
            status=self.daemon.status, assembled=assembled))
        parts = built.parts
        self.target, self.drives, self.caches = parts["mechanism"], parts["drives"], parts["caches"]
        self.mirror, self.recovered = parts["mirror"], parts["recovered"]
        array = getattr(self.target, "array", None)
        if self.unclean is None and array is not None:   # created: a clean start
            self.unclean = UncleanStop(self.spec.name, array, self.target.keeper, self.daemon.status,
                                       self.busy, part=array.layout.name)

    def _state(self) -> str:
        failure = getattr(self.target, "failure", None)
        if failure is not None:  # a drive it needed failed under a background task
            return f"failed: {failure}"
        array = getattr(self.target, "array", None)
        if array is not None:  # the state of the array under the cache
            if self.mirror is not None and self.mirror.failed:
                return f"{array.state}, cache mirror degraded"
            return array.state
        return "bypass" if getattr(self.target, "bypass", False) else "caching"

    def cache_placement(self) -> list[dict[str, Any]]:
        """Which drive holds which cache: a whole drive (scd's cache disk and its backup,
        mcd's cache_models drives, 1c/1d's, a physical DCD's) or a partition of one (mcd's
        partitions on the array drives, a logical DCD's log)."""
        out = []
        for cache in self.caches:
            drive = cache.disk if isinstance(cache, Partition) else cache
            out.append({"cache": cache.name, "drive": drive.name, "model": drive.model.name, "bytes": cache.size,
                        "offset": cache.start if isinstance(cache, Partition) else 0,
                        "whole_drive": not isinstance(cache, Partition)})
        return out

    def vm_disks(self) -> list[Path]:
        return [Path(self.volume_path)]

    def guest_ram_reserved(self) -> int:
        """Bytes of the lab VM's available memory this architecture gives up: its RAM
        buffer (its declaration's, see raidlab.archs.caching.reserved_ram) and the stripe
        cache of its array (as md's raid5 keeps one in the guest's RAM)."""
        return (self.serving.reserved_ram(self.options)
                + stripe_cache_bytes(getattr(self.target, "array", None)))

    # ------------------------------------------------------------------ ops

    async def op_status(self, request, send) -> dict:
        stats = self.target.statistics()
        report = self.serving.status_lines(stats, self.options)
        if self.mirror is not None:
            m = self.mirror.statistics()
            sides = ", ".join(f"{label} d{self.spec.disks + i} {'[red]failed[/]' if i in self.mirror.failed else 'ok'}"
                              for i, label in enumerate(("primary", "backup")))
            report.append(f"mirrored cache disk (§3.4): {sides}; {m['mirrored_writes']} mirrored writes, "
                          f"{m['reads_from_backup']} reads from the backup")
        if self.unclean is not None and self.unclean.pending:
            report.append(f"{self.target.array.layout.name}: resyncing after an unclean stop (every stripe made "
                          f"consistent from its data)")
        placement = self.cache_placement()
        report.append(placement_line(placement))
        redundancy = self.serving.survival(stats, placement, getattr(self.target, "array", None),
                                           None if self.mirror is None else self.mirror.failed)
        report.append(f"redundancy: {redundancy}")
        report.append(f"drives: {write_cache_note([d.statistics() for d in self.drives])}")
        return {
            "kind": "cache",
            "state": self._state(),
            "redundancy": redundancy,
            "failed_members": self._failed_drives(),
            "options": self.options,
            "recovered_at_assemble": self.recovered,
            "resyncing": bool(self.unclean is not None and self.unclean.pending),
            "statistics": stats,
            "report": report,
            "cache_placement": placement,
            "tables": [disks_table(self.drives)],
            "timeline": [[round(t, 6), event, detail] for t, event, detail in list(self.target.timeline)[-50:]],
        }

    async def op_fail(self, request, send) -> dict:
        """Make drive dK fail: gone (`vanish`: EIO from now on, the array is told) or a partial
        fault (raidlab.disks.disk, "Fault injection": failed reads, failed writes, or 100x
        slow) that the drive's user finds from its own requests: a raid5 member the raid5,
        a side of the mirrored cache disk the mirror, a log's cache disk or a DCD's drive the
        mechanism, which then fails the requests that need it. Refused (unless forced) when
        data would be lost: a DCD drive, an unmirrored cache disk, a raid5 member the array
        cannot lose or that holds a cache partition. A slow drive loses nothing and needs no
        force. Refused always where the architecture has no failure injection for these
        options (its `check_faults`)."""
        index, force = int(request["disk"]), bool(request.get("force"))
        name = self.spec.name
        mode = request.get("mode") or "vanish"
        if mode not in ("vanish", *FAULTS):
            raise UsageError(f"--mode {mode}: one of vanish, {', '.join(FAULTS)}")
        if not 0 <= index < len(self.drives):
            raise UsageError(f"no drive {index}: {name} has drives 0..{len(self.drives) - 1}")
        drive = self.drives[index]
        if drive.failed or index in self._failed_drives():
            raise UsageError(f"drive {index} of {name} has already failed")
        n = self.spec.disks
        if self.arch.check_faults is not None:
            self.arch.check_faults(self.options)
        mirror_side = self.mirror is not None and index in (n, n + 1)
        array = getattr(self.target, "array", None)
        raid5_member = array is not None and index < n   # a member of the array under the cache
        if raid5_member:
            holds_cache = any(isinstance(cache, Partition) and cache.disk.name == drive.name for cache in self.caches)
            if (not array.layout.survives(array.failed | {index}) or holds_cache) and not force and mode != "slow":
                why = "holds a cache partition" if holds_cache else f"is one the {array.layout.name} cannot lose"
                raise UsageError(f"drive {index} of {name} {why}: failing it would lose data",
                                 hint="use --force to inject the failure anyway")
        elif not mirror_side and not force and mode != "slow":
            what = self.serving.no_copy_fail
            raise UsageError(f"{name}: {what}: failing drive {index} would lose data",
                             hint="use --force to inject the failure anyway (or -o mirrored_cache=on)")
        if mode != "vanish":
            drive.fault = mode
            return {"fault": mode, "failed_members": self._failed_drives(), "state": self._state()}
        drive.failed = True
        if mirror_side:
            await self.mirror.fail_side(index - n)
            return {"failed_drive": index, "mirror_failed_sides": sorted(self.mirror.failed),
                    "failed_members": self._failed_drives(), "state": self._state()}
        if raid5_member:
            await self.target.array.fail_member(index)
            return {"failed_drive": index, "raid5_failed_members": sorted(self.target.array.failed),
                    "failed_members": self._failed_drives(), "state": self._state()}
        return {"failed_drive": index, "failed_members": self._failed_drives(), "state": self._state()}

    async def op_replace(self, request, send) -> dict:
        """Put a fresh drive in place of failed drive dK: a RAID 5 member of VC-RAID is rebuilt
        from the others while the array serves (the log keeps its newer blocks and destages
        them later, so they win as before); a side of a mirrored cache disk is refilled from
        the other side. Anything else has nothing left to rebuild from and is refused before
        any work starts."""
        index = int(request["disk"])
        name, n = self.spec.name, self.spec.disks
        if not 0 <= index < len(self.drives):
            raise UsageError(f"no drive {index}: {name} has drives 0..{len(self.drives) - 1}")
        old = self.drives[index]
        if index not in self._failed_drives():
            raise UsageError(f"drive {index} of {name} is not failed", hint=f"fail it first with `raidlab fail {name} "
                             f"--disk {index}`")
        if self.spec.partitions:
            raise UsageError(f"{name}'s drives are partitions ({self.spec.partitions}); a replacement partition is "
                             "not supported")
        if self.mirror is not None and index in (n, n + 1):
            side = index - n
            if 1 - side in self.mirror.failed:
                raise UsageError(f"both sides of {name}'s mirrored cache disk have failed: nothing to copy from")
            async with self.busy:
                self.drives[index] = await replace_drive(
                    self.session, self.spec, old, index,
                    lambda disk, progress: self.mirror.replace_side(side, disk, progress=progress), send)
            return {"replaced_drive": index, "copied_bytes": old.size, "failed_members": self._failed_drives(),
                    "state": self._state()}
        array = getattr(self.target, "array", None)
        if array is not None and index < n:   # a member of the array under the cache
            if index not in array.failed:
                raise UsageError(f"drive {index} of {name} is not a failed {array.layout.name} member")
            if not array.layout.survives(array.failed):
                raise UsageError(f"{name}'s raid5 has lost data (failed members {sorted(array.failed)}); "
                                 "a rebuild cannot recover it")
            async with self.busy:
                self.drives[index] = await replace_drive(
                    self.session, self.spec, old, index,
                    lambda disk, progress: array.rebuild(index, disk, progress=progress), send)
            return {"rebuilt_bytes": array.layout.member_data_size, "raid5_failed_members": sorted(array.failed),
                    "failed_members": self._failed_drives(), "state": self._state()}
        what = self.serving.no_copy_replace
        raise UsageError(f"{name}: drive {index} cannot be rebuilt: {what}",
                         hint="destroy the array and create it again (or use -o mirrored_cache=on next time)")

    async def op_check(self, request, send) -> dict:
        """VC-RAID: scrub the raid5 under the cache (parity against data, the log aside), and
        compare the two sides of a mirrored cache disk. A DCD has only its mirrored cache disk
        to compare; without one there is nothing to check, refused before any work."""
        name = self.spec.name
        if request.get("repair"):
            raise UsageError(f"{name} ({self.spec.arch}): --repair is for the engine's layouts",
                             hint=f"`raidlab check {name}` reports mismatches")
        array = getattr(self.target, "array", None)
        if array is None and self.mirror is None:
            raise UsageError(f"{name} ({self.spec.arch}) has no redundancy to check",
                             hint="a DCD's data disk is one drive; -o mirrored_cache=on gives its log a copy")
        if array is not None and array.failed:
            raise UsageError(f"{name}'s raid5 has failed members {sorted(array.failed)}",
                             hint="replace them first (`raidlab replace`)")
        if self.mirror is not None and self.mirror.failed:
            raise UsageError(f"a side of {name}'s mirrored cache disk has failed", hint="replace it first")
        async with self.busy:
            total = (array.layout.member_data_size * len(array.members) if array is not None else 0) + (
                self.mirror.size if self.mirror is not None else 0)
            state = [0, total]
            mismatches: list[dict] = []
            failure: OSError | None = None
            async with trio.open_nursery() as nursery:
                nursery.start_soon(report_progress, send, state)
                done = 0
                try:
                    if array is not None:
                        mismatches += await array.scrub(progress=lambda d, t: state.__setitem__(0, d))
                        done = array.layout.member_data_size * len(array.members)
                    if self.mirror is not None:
                        found = await self.mirror.compare(progress=lambda d, t: state.__setitem__(0, done + d))
                        mismatches += [{**m, "disk": self.spec.disks + 1} for m in found]
                except OSError as exc:  # a drive failed under the check: a finding, said in one line
                    failure = exc
                finally:
                    nursery.cancel_scope.cancel()
            if failure is not None:
                raise LabError(failure.strerror or str(failure), hint=f"see `raidlab status {name}`")
            await send({"progress": [total, total]})
            return {"mismatches": mismatches, "checked_bytes": total}

    async def settle(self) -> dict:
        """Cold start (the daemon's op_settle): the RAM buffer and every cache-disk log
        destaged home (the mechanism's drain()), then the drives flushed, so a benchmark
        begins with empty caches as after the paper's reboot (VC-RAID §4.1)."""
        async with self.busy:
            drained = await self.target.drain()
            await self.target.flush()
            await write_back_drives(self.drives)
        return {"drained_bytes": drained,
                "note": f"RAM buffer and cache-disk log destaged home ({drained} bytes), drives flushed"}

    def _failed_drives(self) -> list[int]:
        """Drives (images dK) failed in this run, by `raidlab fail` or (a raid5 member) by the
        raid5 or the mirror on its own requests' errors; reported as members."""
        array = getattr(self.target, "array", None)
        found = set(array.failed) if array is not None else set()
        if self.mirror is not None:  # a side the mirror dropped on its own requests' errors
            found |= {self.spec.disks + side for side in self.mirror.failed}
        return [i for i, d in enumerate(self.drives) if d.failed or i in found]

    async def op_bypass(self, request, send) -> dict:
        """DCD §3.1: turn the DCD into a plain disk (after draining) or back into a DCD."""
        if not hasattr(self.target, "set_bypass"):
            raise UsageError(f"{self.spec.name} is a {self.spec.arch}: only a DCD has a bypass mode")
        on = bool(request.get("on", True))
        before = self.target.statistics()
        await self.target.set_bypass(on)
        after = self.target.statistics()
        return {"bypass": self.target.bypass, "state": self._state(),
                "drained_bytes": after["destaged_bytes"] - before["destaged_bytes"]}

    async def op_crash_at(self, request, send) -> dict:
        """A crash test's cut at a chosen moment (raidlab.campaigns.crash): with at=home-flush
        the daemon kills itself with SIGKILL, as a crash would, the next time a level-2
        destage has written its blocks home and not yet flushed them (the cache's
        before_home_flush), so the power cut after it meets drives holding destaged writes."""
        if request.get("at") != "home-flush":
            raise UsageError(f"crash_at: unknown moment {request.get('at')!r}", hint="at=home-flush")
        # VC-RAID 1c/1d: the caches below the raid5 (raidlab.engine.caches.perdisk)
        parts = [c for c in [self.target, *getattr(self.target, "caches", ())] if hasattr(c, "before_home_flush")]
        if not parts:
            raise UsageError(f"{self.spec.arch} has no level-2 destage to cut inside")

        def crash() -> None:
            self.daemon.status("crash test: SIGKILL between a destage's writes home and its flush")
            os.kill(os.getpid(), signal.SIGKILL)

        for part in parts:
            part.before_home_flush = crash
        return {"armed": len(parts)}
