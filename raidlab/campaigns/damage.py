"""`raidlab damagetest TARGET`: damage a stopped array's metadata on one drive, assemble it
again, and read every byte back against what was written.

Why this harness: every stateful architecture keeps state on its drives that assembly trusts
(the superblock slots of every member; VC-RAID's and DCD's log on the cache disk: records,
headers, tombstones; TSS's map table and data log; RAID-x's image log; SA-RAID's persisted
virtual device array). A damaged copy of it must never turn into silently wrong data. So each
trial is one independent array, as a user makes it:

    create (the CLI) -> write a seeded pattern over the whole volume (O_DIRECT, then fsync) ->
    stop: destroy --keep-images (a clean stop: caches drained home), or on every other trial
    SIGKILL of the daemon (a crash: what the caches hold is in their logs, which assembly
    replays) -> damage one drive's metadata -> assemble -> read the whole volume back and
    compare with the pattern -> destroy

and its outcome is one of: *refused* (assemble said no, in one line), *recovered* (it
assembled and every byte reads back as written, degraded or not), *wrong* (it assembled and
a byte differs or a read fails): only the last fails a trial, as do an error of another kind
(a traceback, a hang: the assemble is bounded by a timeout) and anything left on the host.

Where the metadata is (`metadata_regions`): on a drive that holds the array's data (an
engine layout's member, a VC-RAID raid5 member, a TSS column) the bytes before its data
offset (the superblock slots and the architecture's reserved area), never the data itself;
a drive that holds only state (VC-RAID's and DCD's cache disk, TSS's log drive) is metadata
whole, its log records included. A drive without a superblock (DCD's data disk, which is the
volume as it stands) is left alone.

Kinds of damage (KINDS), drawn per trial from its seed: *flip* 1-8 random bits; *zero* a 4 KiB
sector; *torn* a 4 KiB sector whose second half is zeros, as a write cut half way; *stale* the
region as it was right after create (an older generation); *foreign* the region from a drive
of another array of the same architecture; *swap* two data drives' images exchanged whole.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from raidlab import archs
from raidlab.engine import metadata
from raidlab.errors import UsageError
from raidlab.lab import Lab, held_under, labs_dir
from raidlab.service import control
from raidlab.service.spec import RUNTIME_FILE
from raidlab.units import parse_size

KiB, MiB = 1024, 1 << 20
KINDS = ("flip", "zero", "torn", "stale", "foreign", "swap")
SECTOR_4K = 4096
STEP_TIMEOUT = 300.0  # seconds for one create, assemble or destroy

# The stateful architectures, each with the options that give it state on its drives: every
# architecture's damage targets (raidlab.archs.base.DamageTarget), by name.
TARGETS: dict[str, dict[str, Any]] = {
    target.name: dict(arch=arch.name, disks=target.disks, options=dict(target.options))
    for arch in archs.REGISTRY.values() for target in arch.damage_targets
}


@dataclasses.dataclass
class Trial:
    trial: int
    seed: int
    kind: str
    drive: str
    stop: str = "clean"      # clean | kill
    detail: str = ""
    outcome: str = ""        # refused | recovered | wrong | error
    message: str = ""        # assemble's refusal, or what differed
    state: str = ""          # the array's state once assembled
    leaks: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.outcome in ("refused", "recovered") and not self.leaks


def metadata_regions(images: list[Path], data_drives: int) -> dict[str, tuple[int, int]]:
    """Image name -> the byte range of it that is metadata (module doc); drives without a
    superblock are left out."""
    out = {}
    for index, image in enumerate(images):
        with open(image, "rb") as f:
            head = f.read(2 * metadata.SLOT_SIZE)
        sb = metadata.newest(head[:metadata.SLOT_SIZE], head[metadata.SLOT_SIZE:])
        if sb is None:
            continue
        size = image.stat().st_size
        out[image.name] = (0, sb.data_offset if index < data_drives else size)
    return out


def damage(image: Path, region: tuple[int, int], kind: str, rng: random.Random, *, stale: bytes | None = None,
           foreign: bytes | None = None) -> str:
    """Damage `region` of `image` as `kind` says (module doc); what was done, in words."""
    start, end = region
    with open(image, "r+b") as f:
        if kind == "flip":
            flips = []
            for _ in range(rng.randint(1, 8)):
                offset = rng.randrange(start, end)
                f.seek(offset)
                byte = f.read(1)[0]
                bit = rng.randrange(8)
                f.seek(offset)
                f.write(bytes([byte ^ (1 << bit)]))
                flips.append(f"{offset}:{bit}")
            return "bits " + " ".join(flips)
        sector = start + rng.randrange((end - start) // SECTOR_4K) * SECTOR_4K
        if kind == "zero":
            f.seek(sector)
            f.write(bytes(SECTOR_4K))
            return f"sector at {sector} zeroed"
        if kind == "torn":
            f.seek(sector + SECTOR_4K // 2)
            f.write(bytes(SECTOR_4K // 2))
            return f"sector at {sector} torn half way"
        source = stale if kind == "stale" else foreign
        if source is None:
            raise ValueError(f"{kind} damage needs its source region")
        f.seek(start)
        f.write(source[: end - start])
        return f"bytes {start}..{end} from {'right after create' if kind == 'stale' else 'another array'}"


def _pattern(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


class DamageRun:
    """The trials of one target, each in its own lab of `home` (module doc)."""

    def __init__(self, target: str, *, disk_size: int, home: Path, cli: list[str],
                 phase: Callable[[str], None] = lambda s: None):
        if target not in TARGETS:
            raise UsageError(f"unknown damage-test target {target!r}", hint=f"one of {', '.join(TARGETS)}")
        self.target, self.config = target, TARGETS[target]
        self.disk_size, self.home, self.cli, self.phase = disk_size, home, cli, phase
        self.env = {**os.environ, "RAIDLAB_HOME": str(home), "COLUMNS": "1000"}  # one line, unwrapped
        archs.validate(self.config["arch"], self.config["disks"], disk_size, 64 * KiB, self._options(),
                       disk_model="none")

    def _options(self) -> dict[str, Any]:
        return {k: v for k, v in self.config["options"].items()}

    def _raidlab(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([*self.cli, *args], capture_output=True, text=True, env=self.env,
                              timeout=STEP_TIMEOUT)
        if check and proc.returncode != 0:
            raise RuntimeError(f"raidlab {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
        return proc

    def _create(self, name: str) -> dict[str, Any]:
        argv = ["create", name, "--arch", self.config["arch"], "--disks", str(self.config["disks"]),
                "--disk-size", str(self.disk_size), "--disk-model", "none", "--chunk", "64K", "--json"]
        for key, value in self._options().items():
            text = "[" + ",".join(f"{v:g}" for v in value) + "]" if isinstance(value, (list, tuple)) else value
            argv += ["-o", f"{key}={text}"]
        return json.loads(self._raidlab(*argv).stdout)

    def _images(self, name: str) -> list[Path]:
        return sorted((labs_dir(self.home) / name / "images").glob("d*.img"), key=lambda p: int(p.stem[1:]))

    def foreign_regions(self) -> dict[str, bytes]:
        """Every drive's metadata of another array of this architecture (for `foreign`)."""
        name = f"dmg-{self.target}-other"
        self._create(name)
        try:
            self._raidlab("destroy", name, "--keep-images")
            images = self._images(name)
            regions = metadata_regions(images, self.config["disks"])
            return {image.name: image.read_bytes()[slice(*regions[image.name])] for image in images
                    if image.name in regions}
        finally:
            self._raidlab("destroy", name, check=False)

    def run_trial(self, trial: int, seed: int, foreign: dict[str, bytes]) -> Trial:
        rng = random.Random(seed)
        kind = KINDS[trial % len(KINDS)]
        name = f"dmg-{self.target}"
        result = Trial(trial, seed, kind, "", stop="kill" if (trial // len(KINDS)) % 2 else "clean")
        started = time.monotonic()
        lab_dir = labs_dir(self.home) / name
        try:
            self.phase(f"trial {trial}: create")
            ready = self._create(name)
            images = self._images(name)
            regions = metadata_regions(images, self.config["disks"])
            stale = {image.name: image.read_bytes()[slice(*regions[image.name])] for image in images
                     if image.name in regions}
            capacity = ready["capacity"]
            pattern = _pattern(seed, capacity)
            self.phase(f"trial {trial}: write {capacity} bytes")
            _write_all(ready["device"], pattern)
            if result.stop == "kill":
                lab = Lab(name, home=self.home)
                control.kill_daemon(lab)
                control.release_leftovers(lab)
                (lab.path / RUNTIME_FILE).unlink(missing_ok=True)
            else:
                self._raidlab("destroy", name, "--keep-images")
            data_drives = [image for image in images[: self.config["disks"]] if image.name in regions]
            if kind == "swap" and len(data_drives) >= 2:
                a, b = rng.sample(data_drives, 2)
                tmp = a.with_suffix(".swap")
                os.replace(a, tmp)
                os.replace(b, a)
                os.replace(tmp, b)
                result.drive, result.detail = f"{a.name}+{b.name}", "images exchanged"
            else:
                if kind == "swap":
                    kind = result.kind = "flip"
                victim = rng.choice([image for image in images if image.name in regions])
                result.drive = victim.name
                result.detail = damage(victim, regions[victim.name], kind, rng, stale=stale.get(victim.name),
                                       foreign=foreign.get(victim.name))
            self.phase(f"trial {trial}: assemble after {kind} on {result.drive}")
            assembled = self._raidlab("assemble", name, "--json", check=False)
            if assembled.returncode != 0:
                # Progress lines come before it on stderr; the refusal is one error line.
                errors = [line for line in assembled.stderr.splitlines() if line.startswith("raidlab: error:")]
                one_line = len(errors) == 1 and "Traceback" not in assembled.stderr and assembled.returncode == 2
                result.outcome = "refused" if one_line else "error"
                tail = [line for line in assembled.stderr.strip().splitlines() if line.strip()]
                result.message = (errors[0] if one_line else (tail[-1] if tail else f"exit {assembled.returncode}"))[:300]
                return result
            ready = json.loads(assembled.stdout)
            status = json.loads(self._raidlab("status", name, "--json").stdout)
            result.state = str(status.get("state") or status.get("statistics", {}).get("state", ""))
            self.phase(f"trial {trial}: read back")
            wrong = _compare(ready["device"], pattern)
            result.outcome = "wrong" if wrong else "recovered"
            result.message = wrong
        except subprocess.TimeoutExpired as exc:
            result.outcome, result.message = "error", f"timed out: {' '.join(map(str, exc.cmd))[-200:]}"
        except (RuntimeError, OSError, ValueError) as exc:
            result.outcome, result.message = "error", f"{type(exc).__name__}: {exc}"[:400]
        finally:
            self._raidlab("destroy", name, check=False)
            result.leaks = held_under(lab_dir)
            shutil.rmtree(lab_dir, ignore_errors=True)
            result.seconds = round(time.monotonic() - started, 2)
        return result


def _write_all(device: str, data: bytes) -> None:
    fd = os.open(device, os.O_WRONLY | os.O_DIRECT)
    try:
        import mmap

        step = 1 * MiB
        buf = mmap.mmap(-1, step)
        for offset in range(0, len(data), step):
            chunk = data[offset:offset + step]
            buf[: len(chunk)] = chunk
            os.pwrite(fd, memoryview(buf)[: len(chunk)], offset)
        os.fsync(fd)
    finally:
        os.close(fd)


def _compare(device: str, data: bytes) -> str:
    """'' if the device reads back as `data`, else where it first differs (or the read error)."""
    fd = os.open(device, os.O_RDONLY | os.O_DIRECT)
    try:
        import mmap

        step = 1 * MiB
        buf = mmap.mmap(-1, step)
        for offset in range(0, len(data), step):
            n = min(step, len(data) - offset)
            try:
                got = os.preadv(fd, [memoryview(buf)[:n]], offset)
            except OSError as exc:
                return f"read at {offset} failed: {exc.strerror}"
            if got != n or buf[:n] != data[offset:offset + n]:
                first = next((i for i in range(n) if buf[i] != data[offset + i]), 0)
                return f"differs at byte {offset + first}"
        return ""
    finally:
        os.close(fd)


def run_damagetest(target: str, *, trials: int, seed: int, home: Path, disk_size: str = "32M",
                   cli: list[str] | None = None, phase: Callable[[int, str], None] = lambda k, s: None,
                   done: Callable[[Trial], None] = lambda t: None) -> dict[str, Any]:
    """Run `trials` trials of `target`; the summary document."""
    current = [0]
    run = DamageRun(target, disk_size=parse_size(disk_size, "--disk-size"), home=home,
                    cli=cli or [sys.executable, "-c", "import sys; from raidlab.cli import main; sys.exit(main())"],
                    phase=lambda s: phase(current[0], s))
    started = time.monotonic()
    foreign = run.foreign_regions()
    results = []
    for k in range(trials):
        current[0] = k
        results.append(run.run_trial(k, seed * 1000 + k, foreign))
        done(results[-1])
    config = TARGETS[target]
    return {
        "target": target, "arch": config["arch"], "disks": config["disks"], "options": config["options"],
        "seed": seed, "trials": len(results),
        "refused": sum(t.outcome == "refused" for t in results),
        "recovered": sum(t.outcome == "recovered" for t in results),
        "wrong": sum(t.outcome == "wrong" for t in results),
        "errors": sum(t.outcome == "error" for t in results),
        "leaks": sum(len(t.leaks) for t in results),
        "passed": sum(t.ok for t in results),
        "seconds": round(time.monotonic() - started, 1),
        "results": [{**dataclasses.asdict(t), "ok": t.ok} for t in results],
    }
