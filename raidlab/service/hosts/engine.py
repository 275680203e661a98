"""The engine family's host in the array daemon: an Array of an engine layout over the
lab's member disks, exported as the FUSE file `volume` and attached as a loop device.

The members are the lab's own emulated disks, or, for an array over a cluster
(`raidlab create --cluster`), the cluster's disks as one node reaches them
(raidlab.service.hosts.nodes): then a replacement is the same node's disk reached again,
rebuilt in place.

Ops: status, fail, replace (rebuild with progress), check (scrub with progress). The
daemon (raidlab.service.daemon) owns the lab session and the control socket; this class
only builds the array and answers for it (see raidlab.service.hosts for the interface).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import trio

from raidlab import archs
from raidlab.disks.disk import FAULTS
from raidlab.errors import UsageError
from raidlab.export import BlockExportFS
from raidlab.service.hosts.nodes import attach_member, attach_members, detach, member_label
from raidlab.service.hosts.status import survival
from raidlab.service.hosts.volume import (UncleanStop, arch_config, make_drives, replace_drive, report_progress,
                                          run_with_progress, serve_volume, stripe_cache_bytes,
                                          write_back_drives)



class EngineHost:
    family = "engine"

    def __init__(self, daemon):
        self.daemon = daemon
        self.spec = daemon.spec
        self.array = None
        self.keeper = None
        self.members: list = []
        self.attached: list = []  # over a cluster: each member's connection (raidlab.service.hosts.nodes)
        self.generations: list[int] = []  # over a cluster: how often each member was connected
        self.session = None
        self.volume_path: Path | None = None
        self.loop_device: str | None = None  # the loop device over `volume` (native runner)
        self.fs = None  # the FUSE filesystem serving `volume` (the daemon's op_capture swaps its target)
        self.busy = trio.Lock()  # one repair operation (replace, check, resync) at a time
        self.unclean = None  # UncleanStop: the refusal and resync after an unclean stop

    async def open(self, session, mode: str) -> dict:
        spec, status = self.spec, self.daemon.status
        self.session = session
        arch = archs.get(spec.arch)
        config = arch_config(spec)
        if spec.cluster is not None:
            fs = BlockExportFS()
            self.attached = await attach_members(session, spec)
            self.generations = [0] * len(self.attached)
            self.members = [attached.disk for attached in self.attached]
            labels = [member_label(member) for member in spec.members]
            if mode == "create":
                status(f"creating {spec.arch} over the {len(self.members)} disks of cluster {spec.cluster} "
                       f"as node {spec.node} reaches them")
            elif mode == "join":
                status(f"joining {spec.joins} from node {spec.node}: its {len(self.members)} disks as node "
                       f"{spec.node} reaches them, its metadata read, never written")
        else:
            fs, made = await make_drives(session, self.daemon, config)
            self.members = [disk for _relpath, disk, _image in made]
            labels = [str(image) for _relpath, _disk, image in made]
            if mode == "create":
                models = [disk.model.name for disk in self.members]
                status(f"creating {spec.arch} over "
                       + (f"{spec.disks} x {models[0]}" if len(set(models)) == 1 else ", ".join(models)))
        built = await arch.build(archs.BuildContext(
            spec.name, config, self.members, mode=mode, clock=archs.LIVE, nursery=session.nursery, status=status,
            labels=labels))
        self.array, self.keeper = built.parts["array"], built.parts["keeper"]
        self.unclean = UncleanStop(spec.name, self.array, self.keeper, status, self.busy)
        self.unclean.refuse_if_dirty_degraded(mode)
        fs.add("volume", self.array)
        self.fs = fs

        async def mark_clean():
            if self.array.image_buffer is not None and not self.unclean.pending:
                await self.array.image_buffer.drain()   # RAID-x: write pending images home first
            return await self.unclean.mark_clean()

        session.push("array metadata", mark_clean)
        self.unclean.start_resync(mode, session.nursery, joined=bool(spec.joins))
        # Natively the array is a loop device over `volume`; the lab VM gets the file itself.
        self.volume_path, self.loop_device = await serve_volume(session, fs, loop=spec.runner == "native")
        ready = {"device": self.loop_device if spec.runner == "native" else None,
                 "volume": str(self.volume_path), "capacity": self.array.size,
                 "state": self.array.state, **({"resync": "started"} if self.unclean.pending else {})}
        if self.array.image_buffer is not None and self.array.image_buffer.persistent:
            # RAID-x's pending images an unclean stop left in the logs, rewritten at assembly
            ready["recovered"] = {"images": self.array.image_buffer.stats["recovered"]}
        return ready

    def vm_disks(self) -> list[Path]:
        return [Path(self.volume_path)]

    def guest_ram_reserved(self) -> int:
        """Bytes of the lab VM's available memory the array gives up: md's raid5 keeps its
        stripe cache in the guest's RAM, the engine's lives in this daemon, so a guest with
        an available-memory target loses the same bytes under either."""
        return stripe_cache_bytes(self.array)

    async def op_status(self, request, send) -> dict:
        array = self.array
        return {
            "kind": "engine",
            "geometry": array.layout.geometry(),
            "redundancy": {**dataclasses.asdict(array.layout.redundancy),
                           "now": survival(array.layout.failure_groups(), array.failed, array.layout.n_disks,
                                           array.layout.redundancy.rule)},
            "generation": self.keeper.superblock.generation,
            "arch_state": self.keeper.superblock.arch_state,
            "rebuilding": array._rebuild is not None,
            "resyncing": self.unclean.pending,
            "statistics": array.statistics(),
            **({"cluster": {"name": self.spec.cluster, "node": self.spec.node, "joins": self.spec.joins}}
               if self.spec.cluster else {}),
        }

    async def settle(self) -> dict:
        """Cold start (the daemon's op_settle): RAID-x's pending images written home, as a
        clean stop writes them, and the array flushed (its drives' write caches with it).
        The stripe cache stays, as md's does across its own settle."""
        async with self.busy:
            drained = 0
            buffer = self.array.image_buffer
            if buffer is not None:
                drained = buffer.statistics()["pending_bytes"]
                await buffer.drain()
            await self.array.flush()
            await write_back_drives(self.members)
        return {"drained_bytes": drained,
                "note": (f"pending images written home ({drained} bytes), " if buffer is not None else "")
                + "array flushed"}

    async def op_fail(self, request, send) -> dict:
        index = int(request["disk"])
        array, name = self.array, self.spec.name
        if array.journal is not None and index == len(array.members):
            return self._fail_journal_drive(index, request.get("mode") or "vanish")
        if not 0 <= index < len(array.members):
            raise UsageError(f"no member {index}: {name} has members 0..{len(array.members) - 1}"
                             + (f" and its write journal's drive {len(array.members)}" if array.journal else ""))
        if index in array.failed:
            raise UsageError(f"member {index} of {name} is already failed",
                             hint=f"replace it with `raidlab replace {name} --disk {index}`")
        mode = request.get("mode") or "vanish"
        if mode not in ("vanish", *FAULTS):
            raise UsageError(f"--mode {mode}: one of vanish, {', '.join(FAULTS)}")
        after = array.failed | {index}
        if not array.layout.survives(after) and not request.get("force") and mode != "slow":
            what = ("has no redundancy" if array.layout.redundancy.any_failures == 0
                    else f"cannot survive failed members {sorted(after)}")
            raise UsageError(f"{name} ({array.layout.name}) {what}: failing member {index} would lose data",
                             hint="use --force to inject the failure anyway")
        if mode != "vanish":
            # A partial fault: the member keeps answering, wrongly or slowly, and the array
            # finds out from its own requests (raidlab.disks.disk, "Fault injection").
            if not hasattr(self.members[index], "fault"):
                raise UsageError(f"member {index} of {name} takes no partial faults", hint="use --mode vanish")
            self.members[index].fault = mode
            return {"failed_members": sorted(array.failed), "state": array.state, "fault": mode}
        self.members[index].failed = True
        await array.fail_member(index)
        return {"failed_members": sorted(array.failed), "state": array.state}

    def _fail_journal_drive(self, index: int, mode: str) -> dict:
        """The write journal's drive fails (vanishes at once; a partial fault is found by the
        journal's next write): the array refuses writes from then on, as md's does."""
        journal, drive = self.array.journal, self.members[index]
        if journal.failed is not None:
            raise UsageError(f"the write journal of {self.spec.name} has failed already ({journal.failed})")
        if mode not in ("vanish", *FAULTS):
            raise UsageError(f"--mode {mode}: one of vanish, {', '.join(FAULTS)}")
        if mode == "vanish":
            drive.failed = True
            journal.fail("its drive was failed")
        else:
            drive.fault = mode
        return {"failed_members": sorted(self.array.failed), "state": self.array.state,
                "journal": journal.statistics()}

    def _refuse_if_joined(self, what: str) -> None:
        """A joined instance leaves repairs to the instance that owns the array: a rebuild or
        a scrub's repairs written from two nodes would race each other's writes."""
        if self.spec.joins:
            raise UsageError(f"{self.spec.name} is another instance of {self.spec.joins}: {what} it there",
                             hint=f"`raidlab {what} {self.spec.joins} ...`")

    async def op_replace(self, request, send) -> dict:
        self._refuse_if_joined("replace")
        index = int(request["disk"])
        array, name = self.array, self.spec.name
        if index not in array.failed:
            raise UsageError(f"member {index} of {name} is not failed",
                             hint=f"fail it first with `raidlab fail {name} --disk {index}`")
        if not array.layout.survives(array.failed):
            raise UsageError(f"{name} has lost data (failed members {sorted(array.failed)}); "
                             "a rebuild cannot recover it")
        if self.spec.partitions:
            raise UsageError(f"{name}'s members are partitions of drives ({self.spec.partitions}); a "
                             "replacement partition is not supported", hint=f"check it with `raidlab check {name}`, "
                             "or destroy the array and create it again")
        if self.spec.cluster is not None:
            return await self._replace_node_disk(index, send)
        async with self.busy:
            # The replacement takes the old image's name; the old image is discarded.
            self.members[index] = await replace_drive(
                self.session, self.spec, self.members[index], index,
                lambda disk, progress: array.rebuild(index, disk, progress=progress), send)
            return {"rebuilt_bytes": array.layout.member_data_size, "failed_members": sorted(array.failed),
                    "state": array.state}

    async def _replace_node_disk(self, index: int, send) -> dict:
        """Over a cluster, member `index` is a disk of a node: reach it again (a new NBD
        connection for a remote disk: the old one died with the link), rebuild it in place
        from the other members, then release the old connection. A node that still cannot
        be reached is refused before anything is written."""
        array, member = self.array, self.spec.members[index]
        async with self.busy:
            self.generations[index] += 1
            fresh = await attach_member(self.session, self.spec, member, generation=self.generations[index])
            state = [0, member["size"]]
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(report_progress, send, state)
                    await array.rebuild(index, fresh.disk,
                                        progress=lambda done, total: state.__setitem__(slice(0, 2), [done, total]))
                    nursery.cancel_scope.cancel()
            except BaseException:
                await detach(self.session, fresh)
                raise
            await send({"progress": [state[1], state[1]]})
            old, self.attached[index] = self.attached[index], fresh
            self.members[index] = fresh.disk
            await detach(self.session, old)
            return {"rebuilt_bytes": array.layout.member_data_size, "failed_members": sorted(array.failed),
                    "state": array.state, "member": member_label(member)}

    async def op_check(self, request, send) -> dict:
        """Scrub; with "repair", a scrub that found mismatches is followed by a resync (every
        stripe rewritten from its data, md's repair) and a second scrub, whose mismatches
        are then the answer's, beside the first scrub's as "found"."""
        self._refuse_if_joined("check")
        array = self.array
        if array.layout.redundancy.any_failures == 0 and array.layout.redundancy.copies < 2:
            raise UsageError(f"{self.spec.name} ({array.layout.name}) has no redundancy to check")
        async with self.busy:
            mismatches, checked = await run_with_progress(send, self.spec.name, array.scrub)
            if not (request.get("repair") and mismatches):
                return {"mismatches": mismatches, "checked_bytes": checked}
            repaired, _ = await run_with_progress(send, self.spec.name, array.resync)
            after, _ = await run_with_progress(send, self.spec.name, array.scrub)
            return {"mismatches": after, "found": mismatches, "repaired_bytes": repaired, "checked_bytes": checked}

