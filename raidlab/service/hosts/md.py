"""The md family's host in the array daemon: md-raid0, md-raid1, md-raid5, md-raid10 built by
mdadm on the lab's emulated member disks, the same disks every engine architecture uses.

Why it is built this way:
* Same disks as the engine: the members are the lab's FUSE files disks/dK, served by the
  same EmulatedDisks (timing models) that an engine architecture uses (raidlab.export.serve
  build_disks). Natively md sees them as loop devices (losetup --direct-io=on); in the lab
  VM (--runner vm) as virtio disks with cache=none, so every write md issues reaches the
  timing model when md issues it.
* mdadm's defaults, recorded: the command lines are raidlab.baselines.mdadm's (chunk and
  layout only when the scenario sets them); every mdadm command run for the lab, with its
  exit code and time, is appended to `mdadm-commands.log` in the lab directory, and the
  resync decision to `md.json`.
* Resync is explicit: by default the daemon waits until md's initial resync/recovery is over
  (progress from /proc/mdstat shown as status lines), so the array under test is not doing
  background work the papers' baselines were not doing; `-o assume_clean=true` skips it
  (mdadm --assume-clean) and md.json says so.
* Native needs a kernel with md. This host kernel has none (nor loadable modules), so the
  native runner refuses in one line before any disk is created, and points at --runner vm.
* Cleanup order (lab session stack, reverse of creation): mdadm --stop, then the loop devices
  (native) or the VM (vm runner), then the FUSE mount and the disks.

Departures: no `fail`/`replace`/`check` ops yet (use mdadm directly in the VM through a
RunnerSession: `mdadm /dev/md0 --fail /dev/vdb`).
"""

from __future__ import annotations

import json
import os
import shlex
import time
from pathlib import Path

import trio

from raidlab.archs.layouts import journal_bytes
from raidlab.archs.md import options_of as md_options
from raidlab.baselines import mdadm, sysfs
from raidlab.disks import catalog
from raidlab.errors import CapabilityError, RaidlabError, UsageError
from raidlab.export import BlockExportFS, attach_loop, mount_export
from raidlab.export.serve import ServeRequest, build_disks
from raidlab.service.hosts.status import disks_table, md_survival, write_cache_note
from raidlab.service.hosts.volume import write_back_drives
from raidlab.service.spec import FORCE_ENV
from raidlab.tools.base import require, run
from raidlab.vm import guest_device

GUEST_MD_DEVICE = "/dev/md0"
COMMAND_LOG = "mdadm-commands.log"
MD_RECORD = "md.json"
RESYNC_POLL_SECONDS = 1.0


class MdHost:
    family = "md"
    command_log = COMMAND_LOG  # in the lab directory: every command run for the array, one JSON line each

    def __init__(self, daemon):
        self.daemon = daemon
        self.spec = daemon.spec
        self.session = None
        self.loops: list[str] = []  # the loop devices over disks/dK (native runner)
        self.member_files: list[Path] = []  # disks/dK in the export (the lab VM's disks)
        self.md_device: str | None = None
        self.where = "host" if self.spec.runner == "native" else "vm"
        self.vm = None  # HostedVM with --runner vm
        self.resync: dict = {}
        self.members: list[str] = []
        self.disks: list = []  # the EmulatedDisks behind disks/dK, for their I/O statistics
        self.options = md_options(self.spec.arch, dict(self.spec.options))

    # -- running mdadm here or in the VM, recorded -----------------------------------------

    def _log(self, argv: list[str], rc: int, seconds: float, stderr: str) -> None:
        entry = {"where": self.where, "cmd": shlex.join(argv), "rc": rc, "seconds": round(seconds, 3),
                 "at": time.strftime("%Y-%m-%dT%H:%M:%S")}
        last = stderr.strip().splitlines()[-1:] if rc else []
        if last:
            entry["stderr"] = last[0]
        with open(self.session.lab.path / self.command_log, "a") as fh:
            fh.write(json.dumps(entry) + "\n")

    async def _run(self, argv: list[str], timeout: float = 120.0, check: bool = True) -> tuple[int, str, str]:
        started = time.monotonic()
        if self.vm is not None:
            result = await self.vm.run_script(shlex.join(argv) + " < /dev/null", timeout=timeout, check=False)
            rc, out, err = result.rc, result.stdout_text, result.stderr_text
        else:
            proc = await trio.to_thread.run_sync(lambda: run(argv, check=False, timeout=timeout))
            rc, out, err = proc.returncode, proc.stdout, proc.stderr
        self._log(argv, rc, time.monotonic() - started, err)
        if check and rc != 0:
            last = (err.strip() or out.strip()).splitlines()[-1:] or ["(no message)"]
            hint = f"the command was: {shlex.join(argv)}"
            if "consider --force" in last[0]:   # a dirty degraded array (see raidlab assemble --force)
                hint = f"`raidlab assemble {self.spec.name} --force` starts it anyway; {hint}"
            tool = "the kernel" if argv[0] == "sh" else argv[0]  # sh: a sysfs write
            raise UsageError(f"{tool} refused {self.spec.arch} over {self.spec.disks} disks: {last[0]}", hint=hint)
        return rc, out, err

    async def _read(self, path: str) -> str:
        if self.vm is not None:
            return (await self.vm.run_script(f"cat {shlex.quote(path)}", timeout=30, check=True)).stdout_text
        return await trio.Path(path).read_text()

    # -- open ---------------------------------------------------------------------------

    async def open(self, session, mode: str) -> dict:
        spec = self.spec
        self.session = session
        if spec.runner == "native" and not mdadm.kernel_has_md():
            raise CapabilityError("this kernel has no md driver (/proc/mdstat is missing), so mdadm cannot "
                                  "build an array here", hint="use --runner vm (md runs in the lab VM)",
                                  capability="md")
        if spec.runner == "native":
            require("mdadm")
        fs = BlockExportFS()
        journal = journal_bytes(self.options)
        # md raid5's write journal: one more drive after the members, of journal_model or
        # the first member's model
        models = catalog.member_models(spec.disk_model, spec.disks)
        members = None if journal is None else [
            *((model, spec.disk_size) for model in models), (self.options.get("journal_model") or models[0], journal)]
        req = ServeRequest(disks=spec.disks + (journal is not None), model=spec.disk_model, size=spec.disk_size,
                           name=spec.name, discipline=spec.discipline, keep_images=True, home=self.daemon.home,
                           members=members, partitions=spec.partitions, bus=spec.bus, span=spec.span,
                           write_cache=spec.write_cache, flushes=spec.flushes, power_loss=spec.power_loss)
        made = await build_disks(session, fs, req)
        self.disks = [disk for _relpath, disk, _image in made]
        export = await mount_export(session, fs)
        if spec.runner != "native":
            # The member files are the lab VM's disks, as the engine's volume file is
            # (raidlab.export); the array is built inside the VM once it has booted (vm_ready).
            self.member_files = [export.mountpoint / relpath for relpath, _d, _i in made]
            return {"device": None, "capacity": 0, "state": "starting",
                    "members": [str(path) for path in self.member_files]}
        # The members as loop devices, for the host's mdadm.
        self.loops = [(await attach_loop(session, export, relpath)).device for relpath, _d, _i in made]
        self.md_device = await trio.to_thread.run_sync(free_md_device)
        return await self._build(self.loops, mode)

    def vm_disks(self) -> list[Path]:
        return list(self.member_files)

    async def vm_ready(self, hosted) -> dict:
        self.vm = hosted
        self.md_device = GUEST_MD_DEVICE
        built = await self._build([guest_device(i) for i in range(len(self.member_files))], self.daemon.mode)
        built["guest_device"] = built.pop("device")
        return built

    async def _build(self, devices: list[str], mode: str) -> dict:
        """`devices`: the members, then the write journal's drive when there is one."""
        spec, status = self.spec, self.daemon.status
        journal = devices[spec.disks] if len(devices) > spec.disks else None
        self.members = devices[:spec.disks]
        if mode == "create":
            argv = mdadm.create_argv(spec.arch, self.md_device, self.members, spec.chunk,
                                     {k: v for k, v in self.options.items() if k != "journal"}, journal=journal)
        else:
            argv = mdadm.assemble_argv(self.md_device, devices, force=os.environ.get(FORCE_ENV) == "1")
        status(("creating " if mode == "create" else "assembling ") + f"{spec.arch} with mdadm ({self.where})")
        await self._run(argv, timeout=300)

        async def stop():
            if self.vm is not None and self.vm.stopping_under_command():
                # The guest is busy with a command the stop cut short; the lab VM's shutdown,
                # next on the stack, kills QEMU under it, and md with it (a power cut).
                return f"{self.md_device} not stopped: the lab VM is killed under a running command"
            rc, _out, err = await self._run(mdadm.stop_argv(self.md_device), timeout=120, check=False)
            if rc != 0:
                raise RaidlabError(f"mdadm --stop {self.md_device} failed: {err.strip()[-200:]}")
            return f"{self.md_device} stopped"

        self.session.push(f"md array {self.md_device}", stop)
        # md keeps these in memory only (raid5.c, raid5-cache.c): set at every start
        for setting in ("journal_mode", "stripe_cache_size"):
            if self.options.get(setting) is None:
                continue
            if setting == "journal_mode" and self.options[setting] == "write-back" and await self._degraded():
                # raid5-cache.c (r5c_journal_mode_set) refuses write-back while the array is
                # degraded and leaves the journal writing through; `md.journal_mode` below
                # says so, and the next start of the whole array sets write-back again.
                status(f"{self.md_device} is degraded: md keeps its journal write-through until it is whole")
                continue
            await self._run(["sh", "-c", f"echo {self.options[setting]} > {md_sysfs(self.md_device)}/{setting}"])
        if mode == "create":
            await self._settle_resync()
        capacity = int((await self._run(["blockdev", "--getsize64", self.md_device], check=True))[1].split()[0])
        detail = mdadm.detail_fields((await self._run(["mdadm", "--detail", self.md_device]))[1])
        attributes = await self._md_attributes()
        return {"device": self.md_device, "capacity": capacity, "state": detail.get("State", "unknown"),
                "md": {"level": detail.get("Raid Level"), "chunk": detail.get("Chunk Size"),
                       "layout": detail.get("Layout"), "resync": self.resync.get("resync"),
                       **{key: attributes[key] for key in ("consistency_policy", "journal_mode") if key in attributes}}}

    async def _degraded(self) -> bool:
        """Whether md counts a member of the running array missing (its sysfs `degraded`)."""
        rc, out, _err = await self._run(["cat", f"{md_sysfs(self.md_device)}/degraded"], check=False)
        return rc == 0 and out.strip().isdigit() and int(out.strip()) > 0

    async def _md_attributes(self) -> dict[str, str]:
        """md's own view of the array from sysfs (mdadm.MD_ATTRIBUTES: its consistency policy,
        the journal's mode, the stripe cache's size and use), the bracketed choice of a
        list ("[write-through] write-back") as the chosen word."""
        script = sysfs.read_script(md_sysfs(self.md_device), mdadm.MD_ATTRIBUTES)
        if self.vm is not None:
            text = (await self.vm.run_script(script, timeout=30, check=False)).stdout_text
        else:
            text = (await trio.to_thread.run_sync(lambda: run(["sh", "-c", script], check=False, timeout=30))).stdout
        return mdadm.md_attributes(text)

    async def _settle_resync(self) -> None:
        """Wait for md's initial resync/recovery (or record that it was skipped)."""
        name = self.md_device.rsplit("/", 1)[-1]
        started = time.monotonic()
        if self.options.get("assume_clean"):
            self.resync = {"resync": "skipped (--assume-clean)", "seconds": 0.0}
        else:
            # Generous: md's guaranteed minimum speed is 1 MB/s per device.
            deadline = started + 600 + self.spec.disk_size / 1e6
            seen = None
            while True:
                progress = mdadm.mdstat_progress(await self._read("/proc/mdstat"), name)
                if progress is None:
                    break
                seen = progress["action"]
                self.daemon.status(f"md {progress['action']} {progress['percent']:.1f}%"
                                   + (f", {progress['speed']}" if progress.get("speed") else ""))
                if time.monotonic() > deadline:
                    raise RaidlabError(f"md's initial {progress['action']} did not finish in "
                                       f"{deadline - started:.0f} s", hint="use -o assume_clean=true to skip it")
                await trio.sleep(RESYNC_POLL_SECONDS)
            self.resync = {"resync": f"waited ({seen})" if seen else "none needed",
                           "seconds": round(time.monotonic() - started, 2)}
        await trio.Path(self.session.lab.path / MD_RECORD).write_text(json.dumps(
            {"device": self.md_device, "where": self.where, "members": self.members, **self.resync}, indent=1))

    # -- ops ----------------------------------------------------------------------------

    async def op_status(self, request, send) -> dict:
        """mdadm --detail and /proc/mdstat, plus what the emulated member disks saw (host side:
        the same statistics an engine array reports for its members, and the drives table
        the caching hosts show). While the lab VM runs a command (a workload), md's own view
        waits for it; the member statistics do not."""
        members = [{"index": i, **disk.statistics()} for i, disk in enumerate(self.disks)]
        head = (f"md {self.md_device} ({'in the lab VM' if self.vm else 'on this host'}), "
                f"members {' '.join(self.members)}; initial resync: {self.resync.get('resync', 'n/a')}; "
                f"drives: {write_cache_note(members)}")
        busy = self.vm.busy() if self.vm is not None else None
        block_stat: dict = {}
        attributes: dict = {}
        redundancy = ""
        if busy:
            mdstat = ""
            detail: dict = {}
            md_lines = [f"the lab VM is running a command for {busy['seconds']:.0f} s ({busy['command']}); "
                        "mdadm --detail and /proc/mdstat are read when it has ended"]
        else:
            block_stat = await self._block_stat()
            _rc, detail_text, _err = await self._run(["mdadm", "--detail", self.md_device], check=False)
            mdstat = await self._read("/proc/mdstat")
            detail = mdadm.detail_fields(detail_text)
            redundancy = md_survival(detail, detail_text)
            attributes = await self._md_attributes()
            md_lines = [f"md: {', '.join(f'{k} {v}' for k, v in attributes.items())}", "",
                        "$ mdadm --detail " + self.md_device, *detail_text.rstrip().splitlines(),
                        "", "$ cat /proc/mdstat", *mdstat.rstrip().splitlines()]
        return {"kind": "md", "md_device": self.md_device, "where": self.where, "members": self.members,
                "detail": detail, "mdstat": mdstat, "resync": self.resync, "vm_busy": busy, "md": attributes,
                "block_stat": block_stat,
                "redundancy": redundancy, "statistics": {"members": members},
                "report": [head, *([f"redundancy: {redundancy}"] if redundancy else []), "", *md_lines],
                "tables": [disks_table(self.disks)],
                "commands_log": str(self.session.lab.path / self.command_log)}

    async def settle(self) -> dict:
        """Cold start (the daemon's op_settle): md keeps no write-back cache of its own on
        this side, so nothing is drained; the member drives' write caches are flushed.
        Whatever md and the page cache hold is the runner's to drop (`raidlab run` unmounts
        first and drops the page cache where md runs)."""
        for disk in self.disks:
            await disk.flush()
        await write_back_drives(self.disks)
        return {"drained_bytes": 0, "note": "md has no cache here to drain; member drives flushed"}

    async def _block_stat(self) -> dict:
        """The kernel's I/O counters of each member device where md runs (/sys/block/NAME/stat:
        requests completed, merged and sectors, reads and writes): what md sent its members,
        to set beside an engine array's member counters."""
        names = [Path(m).name for m in self.members]
        paths = [f"/sys/block/{n}/stat" for n in names]
        if self.vm is not None:  # one round trip to the guest (not an mdadm command: not logged)
            script = "cat " + " ".join(shlex.quote(p) for p in paths)
            lines = (await self.vm.run_script(script, timeout=30, check=False)).stdout_text.splitlines()
        else:
            lines = [await self._read(p) for p in paths]
        stats = {}
        for name, line in zip(names, lines):
            f = [int(x) for x in line.split()]
            stats[name] = {"reads": f[0], "read_merges": f[1], "read_bytes": f[2] * 512,
                           "writes": f[4], "write_merges": f[5], "write_bytes": f[6] * 512}
        return stats


def md_sysfs(md_device: str) -> str:
    """/dev/md0 -> /sys/block/md0/md, where md shows and takes the array's settings."""
    return f"/sys/block/{Path(md_device).name}/md"


def free_md_device() -> str:
    """The first /dev/mdN (N < 127) the kernel does not use (md127 is mdadm's auto-assembly)."""
    used = {p.name for p in Path("/sys/block").glob("md*")}
    for n in range(127):
        if f"md{n}" not in used:
            return f"/dev/md{n}"
    raise CapabilityError("no free md device number", capability="md")
