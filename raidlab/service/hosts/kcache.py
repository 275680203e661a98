"""The kcache family's host in the array daemon: dm-writecache, bcache and dm-cache built by
the kernel's own tools (dmsetup, make-bcache, mdadm) in the lab VM, over the lab's emulated
drives (raidlab.archs.kcache names them and their options; raidlab.baselines.kcache writes
the command lines and reads the kernel's counters).

It is md's host (raidlab.service.hosts.md) with another build: the same member images
served through the lab's FUSE mount and handed to the VM as virtio disks with cache=none,
every command run in the guest and appended to `commands.log` in the lab directory, the
same member statistics, and the same cold start (the drives flushed; what the kernel's
cache holds stays there, as it would on a real machine: `raidlab run` unmounts and drops
the guest's page cache, and a write-back cache is part of the system under test).

Build, in the guest (create and assemble alike, but for the formatting steps):

    dm-writecache  modprobe; dmsetup create raidlab-wc (writecache s d0 d1 ...)
    bcache         modprobe; make-bcache -B d0 -C d1 (create only); register both; wait for
                   /dev/bcache0; write the settings that are set (cache_mode ...)
    dm-cache       modprobe; mdadm --create (assemble) md0: RAID 5 over the members, md1:
                   RAID 1 over the fast drives; raidlab-meta and raidlab-fast, linear parts of
                   md1; dmsetup create raidlab-cache (cache raidlab-meta raidlab-fast md0 ...)

Teardown is the build's reverse, each step on the session's cleanup stack as it succeeds.
When the lab VM is killed under a running command (a power cut), no step runs in the guest:
the VM's shutdown, next on the stack, takes the kernel's state with it.
"""

from __future__ import annotations

from raidlab import archs
from raidlab.archs.kcache import options_of
from raidlab.baselines import kcache, mdadm
from raidlab.errors import RaidlabError
from raidlab.export import mount_export
from raidlab.service.hosts.md import MdHost
from raidlab.service.hosts.status import disks_table, write_cache_note
from raidlab.service.hosts.volume import arch_config, make_drives

ORIGIN_MD, FAST_MD = "/dev/md0", "/dev/md1"


class KernelCacheHost(MdHost):
    family = "kcache"
    command_log = "commands.log"

    def __init__(self, daemon):
        super().__init__(daemon)
        self.options = options_of(self.spec.arch, dict(self.spec.options))
        self.serving = archs.get(self.spec.arch).serving  # raidlab.archs.kcache.Serving
        self.where = "vm"

    async def open(self, session, mode: str) -> dict:
        self.session = session
        fs, made = await make_drives(session, self.daemon, arch_config(self.spec))
        self.disks = [disk for _relpath, disk, _image in made]
        export = await mount_export(session, fs)
        self.member_files = [export.mountpoint / relpath for relpath, _d, _i in made]
        return {"device": None, "capacity": 0, "state": "starting",
                "members": [str(path) for path in self.member_files]}

    def _cleanup(self, what: str, argv: list[str]) -> None:
        """Push a teardown step that runs `argv` in the guest, unless the VM is being killed."""
        async def step():
            if self.vm is not None and self.vm.stopping_under_command():
                return f"{what} left to the lab VM's shutdown (it is killed under a running command)"
            rc, _out, err = await self._run(argv, timeout=120, check=False)
            if rc != 0:
                raise RaidlabError(f"{' '.join(argv[:2])} failed: {err.strip()[-200:]}")
            return f"{what} stopped"

        self.session.push(what, step)

    async def _sectors(self, device: str) -> int:
        return int((await self._run(["blockdev", "--getsz", device]))[1].split()[0])

    async def _build(self, devices: list[str], mode: str) -> dict:
        opts, kind = self.options, self.serving.kind
        self.daemon.status(("creating " if mode == "create" else "assembling ") + f"{self.spec.arch} in the lab VM")
        await self._run(kcache.modprobe(*self.serving.modules))
        if kind == "writecache":
            origin, cache = devices
            self.members = devices
            table = kcache.writecache_table(await self._sectors(origin), origin, cache, opts["block_size"], opts)
            await self._run(kcache.dmsetup_create("wc", table))
            self._cleanup("dm-writecache raidlab-wc", kcache.dmsetup_remove("wc"))
        elif kind == "cache-set":
            backing, cache = devices
            self.members = devices
            if mode == "create":
                await self._run(kcache.make_bcache(backing, cache, opts["cache_mode"], opts["bucket"]))
            for device in (cache, backing):
                await self._run(kcache.bcache_register(device))
            self._cleanup("bcache0 and its cache set", kcache.bcache_stop())
            await self._run(kcache.wait_for(kcache.BCACHE_DEVICE))
            for key in kcache.BCACHE_SETTINGS:
                if opts.get(key) is not None:
                    await self._run(kcache.bcache_set(key, opts[key]))
        else:
            await self._build_dm_cache(devices, mode)
        served = self.serving.device
        capacity = int((await self._run(["blockdev", "--getsize64", served]))[1].split()[0])
        return {"device": served, "capacity": capacity, "state": "running", "kcache": await self._counters()}

    async def _build_dm_cache(self, devices: list[str], mode: str) -> None:
        spec, opts = self.spec, self.options
        origin_members, fast_members = devices[:spec.disks], devices[spec.disks:]
        self.members = devices
        for md, level, members in ((ORIGIN_MD, "md-raid5", origin_members), (FAST_MD, "md-raid1", fast_members)):
            if mode == "create":
                argv = mdadm.create_argv(level, md, members, spec.chunk or mdadm.MD_DEFAULT_CHUNK,
                                         {"assume_clean": True})
            else:
                argv = mdadm.assemble_argv(md, members)
            await self._run(argv, timeout=300)
            self._cleanup(f"md array {md}", mdadm.stop_argv(md))
        meta = opts["metadata"] // kcache.SECTOR
        fast = await self._sectors(FAST_MD)
        for role, table in (("meta", kcache.linear_table(meta, FAST_MD, 0)),
                            ("fast", kcache.linear_table(fast - meta, FAST_MD, meta))):
            await self._run(kcache.dmsetup_create(role, table))
            self._cleanup(f"dm linear {kcache.dm_name(role)}", kcache.dmsetup_remove(role))
        table = kcache.cache_table(await self._sectors(ORIGIN_MD), kcache.dm_path("meta"), kcache.dm_path("fast"),
                                   ORIGIN_MD, opts["block"], opts["mode"])
        await self._run(kcache.dmsetup_create("cache", table))
        self._cleanup("dm-cache raidlab-cache", kcache.dmsetup_remove("cache"))

    async def _counters(self) -> dict:
        """The kernel's counters of the cache: dmsetup status parsed, or bcache's sysfs."""
        if self.serving.kind == "cache-set":
            text = (await self.vm.run_script(kcache.bcache_read_script(), timeout=30, check=False)).stdout_text
            return kcache.parse_bcache(text)
        role, parse = (("wc", kcache.parse_writecache_status) if self.serving.kind == "writecache"
                       else ("cache", kcache.parse_cache_status))
        _rc, out, _err = await self._run(kcache.dmsetup_status(role), check=False)
        line = out.strip()
        try:
            return {"status": line, **parse(line)}
        except ValueError:
            return {"status": line}

    async def op_status(self, request, send) -> dict:
        """The kernel's counters of the cache (and md's arrays under dm-cache), with what the
        emulated drives saw, as md's status shows its array. While the lab VM runs a command
        the guest's view waits for it; the drives' statistics do not."""
        drives = [{"index": i, **disk.statistics()} for i, disk in enumerate(self.disks)]
        served = self.serving.device
        head = (f"{self.spec.arch} {served} in the lab VM, drives {' '.join(self.members)}; "
                f"drives: {write_cache_note(drives)}")
        busy = self.vm.busy() if self.vm is not None else None
        counters: dict = {}
        block_stat: dict = {}
        if busy:
            lines = [f"the lab VM is running a command for {busy['seconds']:.0f} s ({busy['command']}); "
                     "the kernel's counters are read when it has ended"]
        else:
            counters = await self._counters()
            block_stat = await self._block_stat()
            lines = [f"{self.spec.arch}: " + ", ".join(f"{k} {' '.join(v) if isinstance(v, list) else v}"
                                                       for k, v in counters.items() if k not in ("status", "tail"))]
            if "status" in counters:
                lines += ["", "$ dmsetup status", counters["status"]]
            if self.serving.kind == "cache":
                lines += ["", "$ cat /proc/mdstat", *(await self._read("/proc/mdstat")).rstrip().splitlines()]
        return {"kind": "kcache", "device": served, "where": "vm", "members": self.members, "kcache": counters,
                "vm_busy": busy, "block_stat": block_stat, "statistics": {"members": drives},
                "report": [head, "", *lines], "tables": [disks_table(self.disks)],
                "commands_log": str(self.session.lab.path / self.command_log)}

    async def settle(self) -> dict:
        result = await super().settle()
        return {**result, "note": f"{self.spec.arch}'s cache stays as it is (it is part of the system under test); "
                                  "drives flushed"}


__all__ = ["KernelCacheHost"]
