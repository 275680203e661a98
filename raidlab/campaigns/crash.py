"""`raidlab crashtest ARCH`: kill an array's daemon with SIGKILL at random moments of an untar
onto ext4, recover with `assemble`, and check that ext4 is consistent and every file whose
fsync returned is intact.

Why this harness: the caching architectures acknowledge writes from
RAM (DCD immediate report, VC-RAID's RAM buffer) and keep data on a cache disk for a long
time; the claim to test is the block-device contract ext4 relies on — a flush (fsync, a
journal commit) returns only when everything acknowledged before it survives a crash. A
SIGKILL of the daemon is that crash: RAM is lost, the member images keep what reached them.
Each point is one independent run, so a failure names its seed and kill moment:

    create (the CLI's path: spec + daemon) -> mkfs.ext4 -> mount -> a writer process
    untars a generated tree, fsyncs every 4th file (and its directories) and prints its
    checksum only after fsync returned -> after the writer reports file K (random) plus a
    random few milliseconds (even points: K an fsync'ed file, 0-2 ms), SIGKILL the daemon -> kill the writer, unmount what is left,
    release the dead daemon's loop device and FUSE mount -> `assemble` (crash recovery:
    DCD rescans its log, VC-RAID writes its cache disks to the raid5) -> mount and unmount
    (ext4 replays its journal) -> e2fsck -fn must be clean -> every fsync'ed file must have
    its checksum -> destroy.

The presets are the architectures' own (each declaration's `crash_presets`, raidlab.archs,
in the registry's order; each says why it is there): DCD's two report modes, VC-RAID's four
configurations (scd and mcd also in durability `paper`; each mode's promise is PROMISES'),
TSS without and with its data log (sync and async writes), RAID-x with its image buffer on
disk and in memory, SA3 with an uneven persisted mapping, the engine's redundant layouts,
and md's raid1, raid5 (also with its write journal) and raid10; any other architecture id
runs with --disks and -o options, so the harness serves it too. After each
point the host is searched, without the lab's records, for loop devices, mounts and
processes that still name the lab: a point that leaves one fails.
Everything a point starts (daemon, writer, mounts, loop devices, lab) is released on
success, failure, Ctrl-C and SIGTERM.

md runs in the lab VM where the kernel has no md: then the file system is the guest's, the
writer a busybox script in the guest's background (`sync FILE` is its fsync), read by
polling its log, and mkfs, the journal replay, e2fsck and the checksums run there; the kill
and the power cut happen on this host as for every other architecture (the drives are the
daemon's), and assembly boots a fresh VM.

Modes. `kill` is the crash above: the member images keep every write that reached them.
The power modes also cut the drives' power at the kill: the array is created with its
drives' write caches volatile (raidlab.disks.volatile: every drive keeps an undo log of the
writes its cache holds), and before `assemble` each image loses what its drive would have
lost: `power` every write not made durable by a FLUSH or FUA, `power-model` what the drive's
model had not written back yet, `power-random` a random subset of those, each drive on its
own (the seed of the point). A point's result says how many writes each drive lost. The
caching presets' caches are smaller than the untar, and every third of their points cuts
inside a level-2 destage: the daemon is armed (`crash_at`) to kill itself between the
destage's writes home and their flush, so the cut meets drives that hold destaged writes
(kill_moment).
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from raidlab import archs
from raidlab.baselines import md_journal, mdadm
from raidlab.disks import catalog
from raidlab.disks.volatile import power_cut_images
from raidlab.errors import RaidlabError, ToolFailedError, UsageError
from raidlab.export.serve import check_live_prerequisites
from raidlab.lab import Lab, held_under
from raidlab.service import control
from raidlab.service.spec import FORCE_ENV, ArraySpec
from raidlab.signals import terminate_as_interrupt
from raidlab.tools.base import require
from raidlab.tools.mkfs import FSCK_OPERATIONAL_ERROR, e2fsck, mkfs_ext4
from raidlab.tools.mount import is_mount_point, mount, umount

KiB, MiB = 1024, 1 << 20

# Every architecture's crash presets (raidlab.archs.base.CrashPreset), by name. The caching
# presets' caches are smaller than the untar (about 7 MiB in 120 files), so the cache disks
# fill and level-2 destage runs during it, and every third point cuts inside one
# (`in_destage`, kill_moment).
PRESETS: dict[str, dict[str, Any]] = {
    preset.name: dict(arch=arch.name, disks=preset.disks, options=dict(preset.options), in_destage=preset.in_destage,
                      flushes=preset.flushes)
    for arch in archs.REGISTRY.values() for preset in arch.crash_presets or ()
}
MODES = {"kill": None, "power": "all", "power-model": "model", "power-random": "random"}  # -> power_cut's mode

# What a point may lose, by the promise of the array's mode (`promise_of`). "flush": every write
# a flush or FUA acknowledged is on the media, so every fsync'ed file survives and ext4 is clean,
# killed or cut. "report", under a power cut, in the papers' world (drives that never get a
# flush or FUA: raidlab.disks.disk, "Flushes") and for an architecture whose options let a
# flush return before the media has it (its `flush_on_media`: VC-RAID's durability=paper): an fsync
# returns once the drives reported the writes, which a drive with its write cache on does from
# the cache, as under the papers' Linux 2.0, which knew no flush or FUA; a kill keeps what the
# drives reported (their caches keep power), a power cut may take it. Under "report" fsync'ed
# files lost and an unclean ext4 are counted apart, as losses the promise allows; an error (a
# refused or failed recovery), a leak or a hang still fail the point.
PROMISES = {
    "flush": "every write a flush or FUA acknowledged survives",
    "report": "an fsync returns on the drives' report from their write caches; a power cut may take it, "
              "and an assembly refused as unclean may need --force",
}


def promise_of(arch: str, options: dict[str, Any], mode: str, flushes: str = "honoured") -> str:
    """The promise a point of `arch` with `options` and drives whose flushes are `flushes`,
    in crash `mode`, is held to (PROMISES)."""
    on_media = archs.get(arch).flush_on_media
    if MODES[mode] is not None and (flushes == "dropped" or (on_media is not None and not on_media(options))):
        return "report"
    return "flush"
FILE_SIZES = (700, 3000, 4096, 12_000, 40_000, 100_000, 250_000)
SYNC_EVERY = 4  # every 4th file of the tree is fsync'ed


@dataclasses.dataclass
class CrashConfig:
    name: str          # preset name or arch id (the lab is named crashtest-<name>)
    arch: str
    disks: int
    options: dict[str, Any]
    disk_model: str = "none"
    disk_size: int = 64 * MiB
    chunk: int = 64 * KiB
    files: int = 120
    commit_interval: int = 1  # ext4 commit= seconds: journal commits during the untar too
    mode: str = "kill"        # MODES: the daemon killed, or the power cut too
    runner: str = "native"    # "vm": md's levels, in the lab VM (the file system work there too)
    in_destage: bool = False  # every third point cuts while a level-2 destage writes home
    flushes: str = "honoured"  # the drives' world (raidlab.disks.disk, "Flushes")

    @property
    def promise(self) -> str:
        return promise_of(self.arch, self.options, self.mode, self.flushes)


def config_for(name: str, *, disks: int | None, options: dict[str, Any], disk_model: str,
               disk_size: int, chunk: int, files: int, mode: str = "kill") -> CrashConfig:
    """A preset (options merged over its own) or any arch id; validated, nothing started."""
    if mode not in MODES:
        raise UsageError(f"unknown crash mode {mode!r}", hint=f"one of {', '.join(MODES)}")
    in_destage, flushes = False, "honoured"
    if name in PRESETS:
        preset = PRESETS[name]
        arch, n, opts = preset["arch"], disks or preset["disks"], {**preset["options"], **options}
        in_destage, flushes = preset.get("in_destage", False), preset.get("flushes", "honoured")
    elif name in archs.names("native") or name in archs.names("vm"):
        arch, n, opts = name, disks or 3, dict(options)
    else:
        raise UsageError(f"unknown crash-test target {name!r}",
                         hint=f"use a preset ({', '.join(PRESETS)}) or an architecture id")
    if files < 2 * SYNC_EVERY:
        raise UsageError(f"a tree of {files} files is too small for a crash test", hint="use --files 8 or more")
    catalog.member_models(disk_model, n)  # one model, or one per member
    # md natively where the kernel has it, else in the lab VM, as is what runs only there
    runs_on = archs.get(arch).runners
    runner = "vm" if "native" not in runs_on or (archs.get(arch).family == "md" and not mdadm.kernel_has_md()) \
        else "native"
    archs.validate(arch, n, disk_size, chunk, opts, disk_model=disk_model, runner=runner)
    return CrashConfig(name, arch, n, opts, disk_model, disk_size, chunk, files, mode=mode, runner=runner,
                       in_destage=in_destage, flushes=flushes)


# ---------------------------------------------------------------------- the file tree (pure)


def make_tree(seed: int, files: int) -> bytes:
    """A tar archive of `files` seeded random files in nested directories."""
    rng = random.Random(seed)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for i in range(files):
            data = rng.randbytes(rng.choice(FILE_SIZES))
            info = tarfile.TarInfo(f"t{i % 6}/s{i % 4}/f{i:04d}.bin")
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def writer_main(tar_path: str, dest: str) -> int:
    """The untar process: one line per file written ("done I"), and for every SYNC_EVERY-th
    file, after fsync of the file and its directory returned, "synced PATH SHA256"."""
    out = sys.stdout
    with tarfile.open(tar_path) as tar:
        for index, member in enumerate(m for m in tar.getmembers() if m.isfile()):
            data = tar.extractfile(member).read()
            path = Path(dest) / member.name
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, data)
                synced = index % SYNC_EVERY == 0
                if synced:
                    os.fsync(fd)
            finally:
                os.close(fd)
            if synced:  # and every directory up to the mount point, for the new entries
                for directory in [path.parent, *path.parent.parents]:
                    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
                    try:
                        os.fsync(dfd)
                    finally:
                        os.close(dfd)
                    if directory == Path(dest):
                        break
                out.write(f"synced {member.name} {hashlib.sha256(data).hexdigest()}\n")
            out.write(f"done {index}\n")
            out.flush()
    return 0


IN_DESTAGE_WAIT = 20.0  # seconds an in-destage point waits for a destage before it cuts anyway


def kill_moment(point_seed: int, point: int, files: int, in_destage: bool = False) -> tuple[int, float, str]:
    """(file index after which to kill, extra delay in ms, kind). Even points kill right
    after an fsync returned (the moment a flush that acknowledged too early is caught: the
    acknowledged data is still in RAM); odd points anywhere in the untar. With `in_destage`
    every third point instead kills, after a file of the untar's second half (the cache has
    filled by then), inside the next level-2 destage: the daemon, armed by its `crash_at` op,
    kills itself between the destage's writes home and their flush, so the drives hold writes
    of the destage that no flush has made durable yet."""
    rng = random.Random(point_seed)
    if in_destage and point % 3 == 2:
        return rng.randrange(files // 2, files - 1), 0.0, "in-destage"
    if point % 2 == 0:
        synced = list(range(SYNC_EVERY, files - 1, SYNC_EVERY))
        return rng.choice(synced), round(rng.uniform(0, 2), 3), "after-fsync"
    return rng.randrange(1, files - 1), round(rng.uniform(0, 20), 3), "during-untar"


# ---------------------------------------------------------------------- one crash point


@dataclasses.dataclass
class PointResult:
    point: int
    seed: int
    kill_after_files: int
    kill_delay_ms: float
    kill_moment: str
    files_written: int = 0
    fsynced: int = 0
    intact: int = 0
    damaged: list[str] = dataclasses.field(default_factory=list)
    fsck_clean: bool | None = None
    fsck_output: str = ""
    recovered: dict[str, Any] = dataclasses.field(default_factory=dict)
    power_cut: dict[str, Any] = dataclasses.field(default_factory=dict)  # per image: writes kept and lost
    promise: str = "flush"    # PROMISES: what this point is held to
    forced: str | None = None  # the refusal that `assemble --force` then overcame (promise "report" only)
    unmountable: str | None = None  # the mount's refusal after recovery (promise "report" only): e2fsck -fy ran
    journal: dict[str, Any] | None = None  # md's write journal as its recovery will read it (md_journal)
    kept: str | None = None   # where the images after the cut were kept (run_crashtest's keep_failed)
    error: str | None = None
    seconds: float = 0.0
    leaks: list[str] = dataclasses.field(default_factory=list)  # what the point left on the host

    @property
    def lost(self) -> int:
        """fsync'ed files that came back different, unreadable or not at all."""
        return len(self.damaged) + max(self.fsynced - self.intact - len(self.damaged), 0)

    @property
    def allowed(self) -> bool:
        """The point's losses and an unclean ext4 are ones its promise allows (PROMISES)."""
        return self.promise == "report"

    @property
    def ok(self) -> bool:
        if self.error is not None or self.leaks or self.fsck_clean is None:
            return False
        return self.allowed or (bool(self.fsck_clean) and self.lost == 0)

    def as_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "lost": self.lost, "ok": self.ok}


class CrashRun:
    """Runs the points of one CrashConfig in its own home directory; `close()` releases."""

    def __init__(self, config: CrashConfig, *, home: str | None, seed: int,
                 phase: Callable[[str], None] = lambda s: None, keep_failed: Path | None = None):
        self.config, self.home, self.seed, self.phase = config, home, seed, phase
        self.keep_failed = keep_failed
        self.lab_name = f"crashtest-{config.name}"
        self.lab = Lab(self.lab_name, home=home, create=True)
        # Scratch (the tree's tar file, the ext4 mount point) beside the labs of this home,
        # so concurrent runs with different homes never see each other's.
        scratch_base = self.lab.path.parent.parent / "crashtest"
        scratch_base.mkdir(parents=True, exist_ok=True)
        self.scratch = Path(tempfile.mkdtemp(prefix="raidlab-crashtest-", dir=scratch_base))
        self.mountpoint = self.scratch / "mnt"
        self.mountpoint.mkdir()
        self.writer: subprocess.Popen | None = None

    # -- lab lifecycle, as the CLI does it ---------------------------------------------

    def _start(self, mode: str, *, force: bool = False) -> dict[str, Any]:
        c = self.config
        if mode == "create":
            ArraySpec(self.lab_name, c.arch, c.disks, c.disk_model, c.disk_size, c.chunk, "fifo",
                      dict(c.options), c.runner, flushes=c.flushes,
                      power_loss=MODES[c.mode] is not None).save(self.lab.path)
        return control.start_daemon(self.lab, mode, home=self.home, on_status=lambda m: self.phase(m),
                                    env={FORCE_ENV: "1"} if force else None)

    def _mounted(self) -> bool:
        return is_mount_point(self.mountpoint)

    def _unmount(self) -> None:
        if not self._mounted():
            return
        try:
            umount(self.mountpoint, timeout=30)
        except RaidlabError:
            umount(self.mountpoint, lazy=True, timeout=30)

    def _stop_writer(self) -> None:
        if self.writer is not None:
            if self.writer.poll() is None:
                self.writer.kill()
            self.writer.wait()
            self.writer = None

    def _teardown(self) -> None:
        """Whatever state a point is in: writer, mount, daemon, leftovers, lab — all gone."""
        self._stop_writer()
        self._unmount()
        control.stop_daemon(self.lab)
        control.release_leftovers(self.lab)
        control.remove_lab(self.lab, keep_images=False)
        self.lab.path.mkdir(parents=True, exist_ok=True)

    def close(self) -> None:
        try:
            self._teardown()
        finally:
            if not self._mounted():
                shutil.rmtree(self.scratch, ignore_errors=True)
                try:
                    self.scratch.parent.rmdir()  # the home's crashtest/ when no other run uses it
                except OSError:
                    pass
            if self.lab.path.exists() and not self.lab.resources() and not self.lab.in_use():
                control.remove_lab(self.lab, keep_images=False)

    # -- one point -----------------------------------------------------------------------

    def run_point(self, point: int) -> PointResult:
        c = self.config
        point_seed = self.seed * 1000 + point
        result = PointResult(point, point_seed, *kill_moment(point_seed, point, c.files, c.in_destage),
                             promise=c.promise)
        started = time.monotonic()
        synced: dict[str, str] = {}
        try:
            self._teardown()  # a previous point's or run's leftovers
            self.phase("create")
            ready = self._start("create")
            side = self._side(ready)
            self.phase("mkfs.ext4")
            side.make_fs(c.commit_interval)
            if c.flushes == "dropped":
                # In the papers' world no flush reaches a drive: the array and its file system
                # were made before the experiment, and the drives wrote their caches back on
                # their own meanwhile (the settle a run starts from), so the cut can take only
                # what the untar wrote.
                self.phase("settle (the drives write their caches back)")
                control.request(self.lab, "settle", timeout=600)
            tar_path = self.scratch / "tree.tar"
            tar_path.write_bytes(make_tree(point_seed, c.files))
            self.phase(f"untar, SIGKILL after file {result.kill_after_files}")
            side.start_writer(tar_path)
            pid = control.daemon_pid(self.lab)
            side.read_until(result.kill_after_files, lambda line: self._take(line, synced, result))
            if result.kill_moment == "in-destage":
                # The daemon kills itself between a destage's writes home and their flush.
                control.request(self.lab, "crash_at", at="home-flush")
                if not self._wait_dead(pid, IN_DESTAGE_WAIT):
                    result.kill_moment = f"in-destage (none wrote home within {IN_DESTAGE_WAIT:g} s: cut then)"
            time.sleep(result.kill_delay_ms / 1000)
            if pid is not None and Path(f"/proc/{pid}").exists() and not _is_zombie(pid):
                os.kill(pid, signal.SIGKILL)
            self._wait_dead(pid)
            # What the writer said before it was stopped still counts: every "synced" line
            # was printed after fsync returned.
            side.after_kill(lambda line: self._take(line, synced, result))
            result.fsynced = len(synced)
            self.phase("release the killed daemon's leftovers")
            self._unmount()
            control.release_leftovers(self.lab)
            images = sorted(self.lab.images_dir.glob("*.img"))
            if MODES[c.mode] is not None:
                self.phase(f"power cut ({c.mode})")
                result.power_cut = power_cut_images(images, MODES[c.mode], point_seed)
            # md's write journal, read before md's recovery rewrites it: where recovery will
            # start and which log records it will not reach (raidlab.baselines.md_journal).
            try:
                result.journal = md_journal.describe_images(images)
            except (OSError, UsageError) as exc:  # a reading, not the point's verdict
                result.journal = {"summary": f"unreadable: {exc}"}
            if self.keep_failed is not None:
                self.phase("keep the images as the cut left them")
                result.kept = str(keep_images(images, self.keep_failed / f"{c.name}-{c.mode}-point-{point}"))
            self.phase("assemble (crash recovery)")
            try:
                ready = self._start("assemble")
            except RaidlabError as exc:
                if not result.allowed:
                    raise
                # The papers' world: members whose superblock writes a power cut took
                # disagree, and mdadm (or the engine) refuses the unclean start.
                # `assemble --force` is the step an administrator then takes; the point is
                # counted as forced (PROMISES).
                result.forced = f"{type(exc).__name__}: {exc}".splitlines()[0]
                self.phase("assemble --force (crash recovery, the refusal the papers' world allows)")
                ready = self._start("assemble", force=True)
            result.recovered = ready.get("recovered") or {}
            side = self._side(ready)
            check_point(side, result, synced, self.phase)
        except KeyboardInterrupt:
            raise
        except (RaidlabError, OSError, subprocess.SubprocessError) as exc:
            result.error = f"{type(exc).__name__}: {exc}"
        finally:
            result.seconds = round(time.monotonic() - started, 2)
            self.phase("destroy")
            self._teardown()
            # Checked without the lab's own records: loops, mounts, processes naming it.
            result.leaks = held_under(self.lab.path) + held_under(self.mountpoint)
            if result.kept is not None:
                if result.ok:
                    shutil.rmtree(result.kept, ignore_errors=True)
                    result.kept = None
                else:
                    (Path(result.kept) / "point.json").write_text(json.dumps(result.as_json(), indent=2) + "\n")
        return result

    def _side(self, ready: dict[str, Any]) -> "_HostSide | _GuestSide":
        return _HostSide(self, ready["device"]) if self.config.runner == "native" else _GuestSide(self.lab)

    @staticmethod
    def _take(line: str, synced: dict[str, str], result: PointResult) -> None:
        parts = line.split()
        if len(parts) == 3 and parts[0] == "synced":
            synced[parts[1]] = parts[2]
        elif len(parts) == 2 and parts[0] == "done":
            result.files_written = max(result.files_written, int(parts[1]) + 1)

    def _wait_dead(self, pid: int | None, timeout: float = 30.0) -> bool:
        """Wait up to `timeout` s for the daemon `pid` to be gone and the lab unlocked;
        whether it is."""
        deadline = time.monotonic() + timeout
        while pid is not None and time.monotonic() < deadline:
            try:
                os.waitpid(pid, os.WNOHANG)  # our child (control.start_daemon): reap it
            except ChildProcessError:
                pass
            if not Path(f"/proc/{pid}").exists() or _is_zombie(pid):
                break
            time.sleep(0.02)
        while self.lab.in_use() and time.monotonic() < deadline:
            time.sleep(0.02)
        return not self.lab.in_use()


class _HostSide:
    """The file system on this host: the array's loop device, the writer a child process."""

    def __init__(self, run: CrashRun, device: str):
        self.run, self.device = run, device

    def make_fs(self, commit_interval: int) -> None:
        mkfs_ext4(self.device)
        mount(self.device, self.run.mountpoint, options=[f"commit={commit_interval}"])

    def start_writer(self, tar_path: Path) -> None:
        self.run.writer = subprocess.Popen(
            [sys.executable, "-m", "raidlab.campaigns.crash", "writer", str(tar_path), str(self.run.mountpoint)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def read_until(self, index: int, take: Callable[[str], None]) -> None:
        for line in self.run.writer.stdout:
            take(line)
            if line.startswith("done ") and int(line.split()[1]) >= index:
                break

    def after_kill(self, take: Callable[[str], None]) -> None:
        writer, self.run.writer = self.run.writer, None
        writer.kill()
        rest, _ = writer.communicate()
        for line in rest.splitlines():
            take(line)

    def check_fs(self) -> tuple[bool, str]:
        mount(self.device, self.run.mountpoint)  # ext4 replays its journal
        self.run._unmount()
        fsck = e2fsck(self.device)
        return fsck.clean, fsck.output

    def repair_fs(self) -> str:
        """e2fsck -fy: what it said (it may not have made the file system mountable)."""
        try:
            fsck = e2fsck(self.device, repair=True)
        except ToolFailedError as exc:  # beyond repair: what the file check then finds
            return f"e2fsck -fy: {exc}"
        return f"e2fsck -fy exit {fsck.returncode}\n{fsck.output}"

    def digests(self, rels: list[str]) -> dict[str, tuple[str, str] | OSError]:
        """rel -> (sha256, what it is) or the OSError reading it."""
        out: dict[str, tuple[str, str] | OSError] = {}
        mount(self.device, self.run.mountpoint, options=["ro"])
        try:
            for rel in rels:
                try:
                    content = (self.run.mountpoint / rel).read_bytes()
                except OSError as exc:
                    out[rel] = exc
                    continue
                zeros = content.count(0) * 100 // max(len(content), 1)
                out[rel] = (hashlib.sha256(content).hexdigest(), f"{len(content)} bytes, {zeros}% zero bytes")
        finally:
            self.run._unmount()
        return out


# The writer in the lab VM (busybox sh): the tree unpacked to the guest's RAM first, then each
# file copied onto the array in the archive's order, as writer_main writes it; every
# SYNC_EVERY-th file fsync'ed with its directories (busybox `sync FILE` is fsync) before its
# "synced" line.
GUEST_WRITER = r"""
set -e
tar=$1; dest=$2; stage=/tmp/crashtest-tree
rm -rf $stage; mkdir -p $stage; tar -xf $tar -C $stage
i=0
for name in $(tar -tf $tar); do
  case $name in */) continue;; esac
  mkdir -p "$(dirname "$dest/$name")"
  cat "$stage/$name" > "$dest/$name"
  if [ $((i % SYNC_EVERY)) -eq 0 ]; then
    sync "$dest/$name"
    d=$(dirname "$dest/$name")
    while :; do sync "$d"; [ "$d" = "$dest" ] && break; d=$(dirname "$d"); done
    echo "synced $name $(sha256sum < "$dest/$name" | cut -d' ' -f1)"
  fi
  echo "done $i"
  i=$((i + 1))
done
echo finished
"""
GUEST_MOUNT = "/mnt/crashtest"
GUEST_LOG = "/tmp/crashtest.log"
POLL_SECONDS = 0.02


class _GuestSide:
    """The file system in the lab VM (md): every step a command of the daemon's runner
    session. The writer runs in the guest's background and its log is read by polling
    (about 70 ms a read under TCG), so the kill lands at the first poll that shows the
    chosen file done; acknowledgements the guest printed after that poll die with it and
    are not checked (fewer files checked, none wrongly)."""

    def __init__(self, lab: Lab):
        from raidlab.runners.session import open_session

        self.session = open_session(lab)
        self.device = self.session.device
        self.lines_seen = 0

    def _sh(self, script: str, *args: str, timeout: float = 300, stdin: bytes | None = None,
            check: bool = True):
        return self.session.exec(["sh", "-c", script, "sh", *args], timeout=timeout, stdin=stdin, check=check)

    def make_fs(self, commit_interval: int) -> None:
        self._sh(f'mkfs.ext4 -F -q "$1" && mkdir -p {GUEST_MOUNT} && mount -o commit={commit_interval} "$1" '
                 f'{GUEST_MOUNT}', self.device)

    def start_writer(self, tar_path: Path) -> None:
        scratch = self.session.scratch
        self._sh(f'cat > {scratch}/crashtest.tar', stdin=tar_path.read_bytes())
        self._sh(f'cat > {scratch}/crashtest-writer.sh', stdin=GUEST_WRITER.replace("SYNC_EVERY", str(SYNC_EVERY))
                 .encode())
        self._sh(f'sh {scratch}/crashtest-writer.sh {scratch}/crashtest.tar {GUEST_MOUNT} > {GUEST_LOG} 2>&1 '
                 '< /dev/null &')

    def read_until(self, index: int, take: Callable[[str], None], timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = self._sh(f"cat {GUEST_LOG}").stdout.decode(errors="replace").splitlines()
            fresh, self.lines_seen = lines[self.lines_seen:], len(lines)
            for line in fresh:
                take(line)
                if (line.startswith("done ") and int(line.split()[1]) >= index) or line == "finished":
                    return
            time.sleep(POLL_SECONDS)
        raise RaidlabError(f"the writer in the lab VM did not reach file {index} in {timeout:.0f} s")

    def after_kill(self, take: Callable[[str], None]) -> None:
        pass  # the guest died with its daemon: what it printed after the last poll is gone

    def check_fs(self) -> tuple[bool, str]:
        self._sh(f'mkdir -p {GUEST_MOUNT} && mount "$1" {GUEST_MOUNT} && umount {GUEST_MOUNT}', self.device)
        fsck = self.session.exec(["e2fsck", "-f", "-n", self.device], timeout=600, check=False)
        if fsck.rc >= FSCK_OPERATIONAL_ERROR:
            raise RaidlabError(f"e2fsck in the lab VM failed (exit {fsck.rc}): "
                               f"{(fsck.stderr or fsck.stdout).decode(errors='replace')[-300:]}")
        return fsck.rc == 0, (fsck.stdout + fsck.stderr).decode(errors="replace")

    def repair_fs(self) -> str:
        """e2fsck -fy in the guest: what it said (it may not have made the file system mountable)."""
        fsck = self.session.exec(["e2fsck", "-f", "-y", self.device], timeout=600, check=False)
        return f"e2fsck -fy exit {fsck.rc}\n" + (fsck.stdout + fsck.stderr).decode(errors="replace")

    def digests(self, rels: list[str]) -> dict[str, tuple[str, str] | OSError]:
        script = (f'mount -o ro "$1" {GUEST_MOUNT}; shift; cd {GUEST_MOUNT}; '
                  'for f in "$@"; do if [ -r "$f" ]; then echo "$(sha256sum < "$f" | cut -d" " -f1) '
                  '$(stat -c %s "$f") $f"; else echo "- 0 $f"; fi; done; cd /; umount ' + GUEST_MOUNT)
        out: dict[str, tuple[str, str] | OSError] = {}
        for line in self._sh(script, self.device, *rels).stdout.decode(errors="replace").splitlines():
            digest, size, rel = line.split(" ", 2)
            out[rel] = (OSError(errno.ENOENT, "missing or unreadable") if digest == "-"
                        else (digest, f"{size} bytes"))
        return out


def check_point(side: "_HostSide | _GuestSide", result: PointResult, synced: dict[str, str],
                phase: Callable[[str], None] = lambda s: None) -> None:
    """After recovery: replay ext4's journal, e2fsck -fn, and read back every fsync'ed file
    into `result` (what the point's promise then judges, PointResult.ok)."""
    phase("journal replay, e2fsck -fn")
    try:
        result.fsck_clean, output = side.check_fs()
    except (RaidlabError, OSError, subprocess.SubprocessError) as exc:
        if not result.allowed:
            raise
        # The papers' world: the cut took writes ext4's journal or metadata needed,
        # which the drives had reported, and the file system no longer mounts.
        # e2fsck -fy is the step an administrator then takes; an unclean file
        # system and the files it costs are losses the promise allows.
        result.unmountable = f"{type(exc).__name__}: {exc}".splitlines()[0][-300:]
        phase("e2fsck -fy (the repair the papers' world allows)")
        result.fsck_clean, output = False, side.repair_fs()
    if not result.fsck_clean:
        result.fsck_output = output[-2000:]
    phase("verify fsync'ed files")
    try:
        digests = side.digests(sorted(synced))
    except (RaidlabError, OSError, subprocess.SubprocessError) as exc:
        if result.unmountable is None:
            raise
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][-200:]
        digests = {rel: OSError(errno.EIO, f"the file system did not mount after e2fsck -fy: {reason}")
                   for rel in sorted(synced)}
    for rel, got in digests.items():
        if isinstance(got, OSError):
            result.damaged.append(f"{rel} (unreadable: {got.strerror})")
        elif got[0] == synced[rel]:
            result.intact += 1
        else:
            result.damaged.append(f"{rel} (different content: {got[1]})")


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] == "Z"
    except (OSError, IndexError):
        return True


def writes_cut_reason(mode: str, results: list[PointResult]) -> str | None:
    """Why a power cell cut no write, from its points' own counts (None when it cut some,
    or is not a power cell)."""
    if MODES[mode] is None or any(d["writes_lost"] for r in results for d in r.power_cut.values()):
        return None
    if not any(r.power_cut for r in results):
        return "no point reached its cut"
    if all(d["writes_kept"] == 0 for r in results for d in r.power_cut.values()):
        return "at every cut each drive had made all it held durable (a flush or FUA came after the last write)"
    return "each write a drive held at a cut was kept by the drawn cut (power-random/power-model)"


def keep_images(images: list[Path], dest: Path) -> Path:
    """Copy `images` (sparse: holes stay holes) into the new directory `dest`; return it."""
    dest.mkdir(parents=True, exist_ok=False)
    for image in images:
        subprocess.run(["cp", "--sparse=always", str(image), str(dest / image.name)], check=True,
                       stdin=subprocess.DEVNULL, capture_output=True)
    return dest


def run_crashtest(config: CrashConfig, *, points: int, seed: int, home: str | None,
                  phase: Callable[[int, str], None] = lambda k, s: None,
                  done: Callable[[PointResult], None] = lambda r: None,
                  keep_failed: Path | None = None) -> dict[str, Any]:
    """Run `points` crash points; return the summary document. SIGTERM acts as Ctrl-C;
    either way everything is released before KeyboardInterrupt propagates. With
    `keep_failed`, each failed point leaves its drive images as the cut left them (before
    recovery touched them) and its result in `keep_failed`/TARGET-MODE-point-K/."""
    check_live_prerequisites("raidlab crashtest")
    for prog in ("mkfs.ext4", "e2fsck"):
        require(prog)
    current = [0]
    started = time.monotonic()
    results: list[PointResult] = []
    with terminate_as_interrupt():
        run = CrashRun(config, home=home, seed=seed, phase=lambda s: phase(current[0], s), keep_failed=keep_failed)
        try:
            for k in range(points):
                current[0] = k
                result = run.run_point(k)
                results.append(result)
                done(result)
        finally:
            run.close()
    return {
        "target": config.name, "mode": config.mode, "arch": config.arch, "disks": config.disks,
        "options": {**config.options, **({"flushes": config.flushes} if config.flushes != "honoured" else {})},
        "disk_model": config.disk_model, "disk_size": config.disk_size, "files": config.files,
        "seed": seed, "points": len(results),
        "passed": sum(r.ok for r in results), "failed": sum(not r.ok for r in results),
        "promise": config.promise,
        "fsynced_files_checked": sum(r.fsynced for r in results),
        "fsynced_files_lost": sum(r.lost for r in results if not r.allowed),
        "fsynced_files_lost_allowed": sum(r.lost for r in results if r.allowed),
        "fsck_unclean": sum(r.fsck_clean is False for r in results if not r.allowed),
        "fsck_unclean_allowed": sum(r.fsck_clean is False for r in results if r.allowed),
        "in_destage_cuts": sum(r.kill_moment == "in-destage" for r in results),
        "forced": sum(r.forced is not None for r in results),
        "unmountable": sum(r.unmountable is not None for r in results),
        "errors": sum(r.error is not None for r in results),
        "leaks": sum(len(r.leaks) for r in results),
        "writes_lost_to_power_cuts": sum(d["writes_lost"] for r in results for d in r.power_cut.values()),
        "writes_cut_reason": writes_cut_reason(config.mode, results),
        "seconds": round(time.monotonic() - started, 1),
        "results": [r.as_json() for r in results],
    }


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "writer":
        sys.exit(writer_main(sys.argv[2], sys.argv[3]))
    print("usage: python -m raidlab.campaigns.crash writer TAR DEST (use `raidlab crashtest`)", file=sys.stderr)
    sys.exit(2)
