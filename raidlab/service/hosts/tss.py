"""The TSS host in the array daemon: a TSS device (raidlab.engine.tss) served as `volume`,
and the paper's ioctl() interface (§3.9) as operations on the array's control socket.

The ioctls, as ops (request fields in brackets) and `raidlab tss` commands:

    tss_get [stripe]              temperature, personality and fields of one logical stripe
    tss_set [stripe, value]       set its temperature
    tss_reset                     reset every stripe's temperature
    tss_age                       aging: recent accesses raise temperatures
    tss_degrade [factor]          exponential degradation of the stripes not accessed
    tss_counts                    stripes of each personality, the maximum temperature of
                                  each, free space, the space each personality occupies
    tss_promote [stripe | kind, above, recent]    promote one stripe, or the hottest of a
                                  personality
    tss_victimize [stripe | kind, below, recent]  victimize one stripe, or the coldest of a
                                  personality

The operations are raidlab.engine.tss.control.TSSControl's methods, which say what `above`,
`below` and `recent` select.

As in the paper, nothing is locked across calls: what one call reports may have changed by
the next ("the policy enforcement is more to optimize the performance and not a strict
guideline"). Policies are separate processes that use only these operations
(raidlab.tss_policies). A clean stop flushes the members; the map table is always on disk.
"""

from __future__ import annotations

from pathlib import Path

import trio

from raidlab import archs
from raidlab.disks.disk import FAULTS
from raidlab.engine.tss.control import TSSControl
from raidlab.engine.tss.maptable import CRAID5, INVALID, RAID1, RAID5
from raidlab.engine.tss.temperature import DEFAULT_DEGRADE_FACTOR
from raidlab.errors import UsageError
from raidlab.service.hosts.status import tss_survival, write_cache_note
from raidlab.service.hosts.volume import (arch_config, make_drives, replace_drive, run_with_progress, serve_volume,
                                          write_back_drives)


class TSSHost:
    family = "tss"

    def __init__(self, daemon):
        self.daemon = daemon
        self.spec = daemon.spec
        self.device = None
        self.control = None
        self.drives: list = []
        self.session = None
        self.fs = None
        self.volume_path: Path | None = None
        self.loop_device: str | None = None  # the loop device over `volume` (native runner)
        self.busy = trio.Lock()  # one repair operation (replace, check) at a time

    async def open(self, session, mode: str) -> dict:
        spec = self.spec
        self.session = session
        config = arch_config(spec)
        fs, made = await make_drives(session, self.daemon, config)
        self.drives = [disk for _relpath, disk, _image in made]
        built = await archs.get(spec.arch).build(archs.BuildContext(
            spec.name, config, self.drives, mode=mode, clock=archs.LIVE, nursery=session.nursery,
            status=self.daemon.status, labels=[str(image) for _relpath, _disk, image in made]))
        self.device = built.parts["device"]
        self.control = TSSControl(self.device)
        fs.add("volume", self.device)
        self.fs = fs

        async def flush():
            await self.device.drain()
            await self.device.flush()
            await write_back_drives(self.drives)
            return "asynchronous writes applied, members flushed; the map table is on the private area"

        session.push("tss device", flush)
        # Natively the device is a loop device over `volume`; the lab VM gets the file itself.
        self.volume_path, self.loop_device = await serve_volume(session, fs, loop=spec.runner == "native")
        c = self.device.counters
        return {"device": self.loop_device if spec.runner == "native" else None,
                "volume": str(self.volume_path), "capacity": self.device.size, "state": self._state(),
                "recovered": {"log_records": c["recovered_records"], "blocks": c["recovered_sectors"],
                              "shared_stripes_resynced": c["shared_stripes_resynced"]}}

    def vm_disks(self) -> list[Path]:
        return [Path(self.volume_path)]

    # ------------------------------------------------------------------ status

    async def op_status(self, request, send) -> dict:
        device = self.device
        stats = device.statistics()
        counts = await self.control.counts()
        g = stats["geometry"]
        p = counts["personalities"]
        space = counts["space"]
        migrations = {k: v for k, v in stats.items() if k.startswith(("promote_", "victimize_"))}
        report = [
            f"state: {self._state()}",
            f"redundancy: {tss_survival(g['columns'], device.failed)}",
            f"{stats['mode']} device: {g['columns']} columns, stripe unit {g['unit'] >> 10} KiB, "
            f"{counts['logical_stripes']} logical stripes of {g['stripe_data_bytes'] >> 10} KiB over "
            f"{g['physical_stripes']} physical stripes ({counts['free_stripes']} free, reserved "
            f"{stats['reserved_stripe']}), RAID1 placement {stats['placement']}",
            f"personalities: {p[RAID1]} RAID1, {p[RAID5]} RAID5, {p[CRAID5]} cRAID5, {p[INVALID]} invalid",
            f"space: RAID1 {space['physical_raid1'] >> 10} KiB, RAID5 {space['physical_raid5'] >> 10} KiB, "
            f"cRAID5 {space['physical_craid5'] >> 10} KiB (backing {space['logical_craid5'] >> 10} KiB)",
            "migrations: " + (", ".join(f"{k} {v}" for k, v in sorted(migrations.items())) or "none"),
        ]
        if stats["log"] is not None:
            log = stats["log"]
            report.append(f"data log: {log['log_bytes'] >> 10} KiB, {log.get('records', 0)} records, "
                          f"{log.get('commits', 0)} commits, writes {stats['writes_mode']}"
                          + (f" (at most {stats['max_async']} behind, peak {stats.get('async_in_flight_max', 0)})"
                             if stats["writes_mode"] == "async" else "")
                          + (f"; {stats.get('recovered_records', 0)} records replayed at assembly"
                             if stats.get("recovered_records") else ""))
        rows = [[m["name"], m.get("model", ""), m.get("reads", 0), m.get("writes", 0),
                 m.get("bytes_read", 0) >> 10, m.get("bytes_written", 0) >> 10, f"{m.get('busy_time', 0):.3f}"]
                for m in stats["members"]]
        report.append(f"columns: {write_cache_note(stats['members'])}")
        return {"kind": "tss", "state": self._state(), "failed_members": self._failed_members(),
                "report": report, "statistics": stats, "counts": counts,
                "tables": [{"title": "columns", "columns": ["drive", "model", "reads", "writes", "KiB read",
                                                            "KiB written", "busy s"], "rows": rows}]}

    async def settle(self) -> dict:
        """Cold start (the daemon's op_settle): every asynchronous write applied and
        committed, the columns flushed; TSS holds no write-back cache to destage."""
        async with self.busy:
            await self.device.drain()
            await self.device.flush()
        return {"drained_bytes": 0, "note": "asynchronous writes applied, columns flushed"}

    # ------------------------------------------------------------------ failure (§3.7)

    def _column(self, request, *, log_drive: bool = False) -> int:
        """The drive a request names: a column, or with `log_drive` also the data log's drive
        (the one after the columns, when the log is on)."""
        index = request.get("disk")
        columns = self.device.geometry.columns
        if log_drive and index == columns and self.device.log is not None:
            return index
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < columns:
            extra = f" and the data log's drive {columns}" if self.device.log is not None else ""
            raise UsageError(f"no drive {index}: {self.spec.name} has columns 0..{columns - 1}{extra}")
        return index

    def _failed_members(self) -> list[int]:
        """The failed columns, and the data log's drive when the log failed."""
        log = [self.device.geometry.columns] if self.device.log_failure is not None else []
        return sorted(self.device.failed) + log

    async def op_fail(self, request, send) -> dict:
        index = self._column(request, log_drive=True)
        device, name = self.device, self.spec.name
        if index == device.geometry.columns:
            return await self._fail_log(index, request.get("mode") or "vanish")
        if index in device.failed:
            raise UsageError(f"column {index} of {name} is already failed",
                             hint=f"replace it with `raidlab replace {name} --disk {index}`")
        mode = request.get("mode") or "vanish"
        if mode not in ("vanish", *FAULTS):
            raise UsageError(f"--mode {mode}: one of vanish, {', '.join(FAULTS)}")
        if device.failed and not request.get("force") and mode != "slow":
            raise UsageError(f"{name} already runs without column {sorted(device.failed)[0]}: failing column {index} "
                             "would lose data", hint="use --force to inject the failure anyway")
        if mode != "vanish":
            # A partial fault (raidlab.disks.disk, "Fault injection"): the column's drive keeps
            # answering, wrongly or slowly; an EIO on the device's own request fails the column.
            self.drives[index].fault = mode
            return {"failed_members": self._failed_members(), "state": self._state(), "fault": mode}
        self.drives[index].failed = True
        try:
            await device.fail(index)
        except OSError:
            pass  # forced: the device has lost its data, and says so on every request
        return {"failed_members": self._failed_members(), "state": self._state()}

    async def _fail_log(self, index: int, mode: str) -> dict:
        """The data log's drive fails: writes go straight to the columns from now on
        (raidlab.engine.tss.logwrites); a partial fault is found by the device's
        next log write, flush or (read-eio) the scrub's read of the log."""
        if mode not in ("vanish", *FAULTS):
            raise UsageError(f"--mode {mode}: one of vanish, {', '.join(FAULTS)}")
        if mode != "vanish":
            self.drives[index].fault = mode
            return {"failed_members": self._failed_members(), "state": self._state(), "fault": mode}
        self.drives[index].failed = True
        await self.device.fail_log()
        return {"failed_members": self._failed_members(), "state": self._state()}

    async def _replace_log(self, index: int, send) -> dict:
        """A new drive for the data log: an empty log on it, writes logged again."""
        if self.device.log_failure is None:
            raise UsageError(f"the data log's drive {index} of {self.spec.name} has not failed",
                             hint=f"fail it first with `raidlab fail {self.spec.name} --disk {index}`")

        async def fill(disk, progress) -> None:
            await self.device.replace_log(disk)

        async with self.busy:
            self.drives[index] = await replace_drive(self.session, self.spec, self.drives[index], index, fill, send)
        return {"failed_members": self._failed_members(), "state": self._state()}

    async def op_replace(self, request, send) -> dict:
        index = self._column(request, log_drive=True)
        device, name = self.device, self.spec.name
        if index == device.geometry.columns:
            return await self._replace_log(index, send)
        if index not in device.failed:
            raise UsageError(f"column {index} of {name} is not failed",
                             hint=f"fail it first with `raidlab fail {name} --disk {index}`")
        if len(device.failed) > 1:
            raise UsageError(f"{name} has lost data (failed columns {sorted(device.failed)}); a rebuild cannot "
                             "recover it")
        stripe = device.geometry.data_bytes  # progress in the bytes of the stripes looked at
        rebuilt = 0

        async def fill(disk, progress) -> None:
            nonlocal rebuilt
            rebuilt = await device.rebuild(index, disk, progress=lambda d, t: progress(d * stripe, t * stripe))

        async with self.busy:
            self.drives[index] = await replace_drive(self.session, self.spec, self.drives[index], index, fill, send)
        return {"rebuilt_stripes": rebuilt, "rebuilt_bytes": rebuilt * device.geometry.unit,
                "failed_members": self._failed_members(), "state": self._state()}

    async def op_check(self, request, send) -> dict:
        if request.get("repair"):
            raise UsageError(f"{self.spec.name} (tss): --repair is for the engine's layouts",
                             hint=f"`raidlab check {self.spec.name}` reports mismatches")
        async with self.busy:
            await self.device.check_log()  # a log drive that fails its reads is found here
            stripe = self.device.geometry.data_bytes

            async def scrub(progress):
                return await self.device.scrub(progress=lambda d, t: progress(d * stripe, t * stripe))

            (mismatches, checked), _ = await run_with_progress(send, self.spec.name, scrub)
            return {"mismatches": mismatches, "checked_bytes": checked}

    def _state(self) -> str:
        failed = self.device.failed
        if len(failed) > 1:
            return "failed"
        if self.device.rebuilding is not None:
            return f"rebuilding column {self.device.rebuilding}"
        state = f"degraded (column {sorted(failed)[0]} failed)" if failed else "active"
        if self.device.log_failure is not None:
            state += ", data log failed (writes unlogged)"
        return state

    # ------------------------------------------------------------------ the ioctls (§3.9)
    # Each op is one method of raidlab.engine.tss.control.TSSControl, which a virtual-time
    # replay hands its policies directly.

    async def op_tss_get(self, request, send) -> dict:
        return await self.control.get(request.get("stripe"))

    async def op_tss_set(self, request, send) -> dict:
        return await self.control.set(request.get("stripe"), request.get("value"))

    async def op_tss_reset(self, request, send) -> dict:
        return await self.control.reset()

    async def op_tss_age(self, request, send) -> dict:
        return await self.control.age()

    async def op_tss_degrade(self, request, send) -> dict:
        return await self.control.degrade(request.get("factor", DEFAULT_DEGRADE_FACTOR))

    async def op_tss_counts(self, request, send) -> dict:
        return await self.control.counts()

    async def op_tss_promote(self, request, send) -> dict:
        return await self.control.promote(request.get("stripe"), request.get("kind"), above=request.get("above"),
                                          recent=request.get("recent"))

    async def op_tss_victimize(self, request, send) -> dict:
        return await self.control.victimize(request.get("stripe"), request.get("kind"), below=request.get("below"),
                                            recent=request.get("recent"))
