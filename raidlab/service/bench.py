"""`raidlab bench engine`: what the engine costs on top of a bare FUSE file.

What it measures: on `none` member disks (no timing model: every microsecond is the
engine's, FUSE's or the host's), fio through the engine's loop device (the lab file
`volume`) and through a bare pass-through FUSE file over one image (the lab file
`passthrough`, raidlab.export.passthrough.ImageFileTarget) in the same run, the same FUSE
mount and the same trio loop, so both pay for the same kernel round trips and the ratio
isolates the engine (layout planning, member fan-out, the disks' service path):

    4 KiB random writes, iodepth 32, IOPS        (aim: raid0 >= 0.8x, raid5 >= 0.5x)
    1 MiB sequential writes, iodepth 8, MB/s     (aim: raid5 >= 0.5x, others >= 0.8x)

A third target in the same run is the physical limit: a loop device (direct I/O) straight
on an image file of the host's file system (`raw`), without FUSE or userspace. The engine
against it says what the whole userspace path costs; the pass-through against it, what FUSE
alone costs.

Why this shape:
* The array is built the way the array daemon builds it (raidlab.service.hosts.engine.EngineHost:
  lab session -> member images -> EmulatedDisks -> create_array -> FUSE -> losetup
  --direct-io=on), but inside this process, so `--profile` can run cProfile in the very
  trio thread that serves FUSE and executes the engine: that thread is the engine's hot
  path (the members' small writes and cached reads run in it too; the rest run in worker
  threads and show up as the loop's waits).
* The profiled run is an extra fio run after the timed ones, so the profiler's overhead
  never enters the reported numbers.
* The lab lives in a temporary RAIDLAB_HOME-style directory under the lab home; the lab
  runtime (raidlab.lab.open_lab) releases loop devices, the FUSE mount and the disks on
  success, failure, Ctrl-C and SIGTERM. fio runs with the lab's run token in its
  environment and a cleanup entry above the loop devices kills it first, so an interrupted
  bench never leaves a loop device held open by a stray fio.
* Both files are preconditioned (written once sequentially, whole) before anything is
  timed: the first write to a sparse image allocates host blocks, which is the host file
  system's cost, not the engine's, and would otherwise favour whichever target ran second.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from raidlab import archs
from raidlab.engine import build
from raidlab.errors import UsageError
from raidlab.export import (BlockExportFS, ImageFileTarget, attach_loop, attach_loop_file, create_sparse_image,
                            mount_export)
from raidlab.export.serve import ServeRequest, build_disks, check_live_prerequisites
from raidlab.lab import kill_tagged_processes, open_lab, private_dir, raidlab_home
from raidlab.tools import fio
from raidlab.tools.base import require
from raidlab.units import parse_key_values

KiB, MiB = 1 << 10, 1 << 20

AIMS = {  # (workload, arch) -> minimum ratio engine / pass-through; "*" for any arch
    ("randwrite_4k", "raid0"): 0.8,
    ("randwrite_4k", "raid5"): 0.5,
    ("seqwrite_1m", "raid5"): 0.5,
    ("seqwrite_1m", "*"): 0.8,
}


@dataclass(frozen=True)
class Workload:
    key: str
    rw: str
    bs: str
    iodepth: int
    metric: str  # "iops" | "mb_per_s"


WORKLOADS = (
    Workload("randwrite_4k", "randwrite", "4k", 32, "iops"),
    Workload("seqwrite_1m", "write", "1m", 8, "mb_per_s"),
)


@dataclass
class BenchConfig:
    arch: str
    disks: int = 4
    disk_size: int = 256 * MiB
    chunk: int = 64 * KiB
    runtime: float = 10.0
    options: dict[str, Any] = field(default_factory=dict)
    profile_path: Path | None = None
    profile_workload: str = "randwrite_4k"
    home: Path | None = None


def aim_for(workload: str, arch: str) -> float | None:
    return AIMS.get((workload, arch), AIMS.get((workload, "*")))


# The targets, in the order each workload runs on them.
TARGETS = ("raw", "passthrough", "volume")


def ratio_rows(results: dict[str, dict[str, dict[str, float]]], arch: str) -> list[dict[str, Any]]:
    """Per workload: the engine's, the pass-through's and (where measured) the raw loop
    device's figures, the engine against the pass-through (`ratio`, which the aim is for)
    and against the raw device (`of_raw`) (pure)."""
    rows = []
    for wl in WORKLOADS:
        engine = results["volume"][wl.key][wl.metric]
        bare = results["passthrough"][wl.key][wl.metric]
        raw = results.get("raw", {}).get(wl.key, {}).get(wl.metric)
        ratio = engine / bare if bare else None
        aim = aim_for(wl.key, arch)
        rows.append({"workload": wl.key, "metric": wl.metric, "engine": engine, "passthrough": bare,
                     "raw": raw, "ratio": ratio, "of_raw": engine / raw if raw else None, "aim": aim,
                     "meets_aim": None if aim is None or ratio is None else ratio >= aim})
    return rows


def _fio_figures(run, metric: str) -> dict[str, float]:
    job = run.jobs[0].write
    return {"iops": job.iops, "mb_per_s": job.bw_bytes / 1e6, "lat_mean_us": job.lat_mean_ns / 1e3,
            "lat_p99_us": (job.lat_p99_ns or 0.0) / 1e3, "ios": job.ios, "metric": metric}


def _profile_text(profiler: cProfile.Profile, limit: int = 30) -> str:
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(limit)
    stats.sort_stats("cumulative").print_stats(limit)
    return out.getvalue()


async def run_bench(cfg: BenchConfig, *, status: Callable[[str], None],
                    phase: Callable[[str, float], None]) -> dict[str, Any]:
    """Build the lab, run fio on both files, return the result document.

    status(message): lab messages; phase(label, seconds): a timed phase starts (progress).
    """
    check_live_prerequisites("raidlab bench engine")
    require("fio")
    if archs.validate(cfg.arch, cfg.disks, cfg.disk_size, cfg.chunk, cfg.options).family != "engine":
        raise UsageError(f"raidlab bench engine measures engine layouts, not {cfg.arch}",
                         hint=f"use one of: {', '.join(a.name for a in archs.REGISTRY.values() if a.family == 'engine')}")

    home = cfg.home
    own_home = home is None
    if own_home:
        base = private_dir(raidlab_home(), tighten=False)
        home = Path(tempfile.mkdtemp(prefix="bench-engine-", dir=base))
    name = f"bench-{cfg.arch}"
    doc: dict[str, Any] = {"arch": cfg.arch, "disks": cfg.disks, "disk_model": "none",
                           "disk_size": cfg.disk_size, "chunk": cfg.chunk, "runtime_s": cfg.runtime,
                           "workloads": [wl.__dict__ for wl in WORKLOADS], "results": {}}
    try:
        async with open_lab(name, home=home, status=status) as session:
            fs = BlockExportFS()
            req = ServeRequest(disks=cfg.disks, model="none", size=cfg.disk_size, name=name, home=str(home))
            made = await build_disks(session, fs, req)
            members = [disk for _rel, disk, _image in made]
            array, _keeper = await build.create_array(name, cfg.arch, members, chunk=cfg.chunk,
                                                      options=cfg.options, status=status,
                                                      nursery=session.nursery)
            fs.add("volume", array)
            image = create_sparse_image(session.lab.images_dir / "passthrough.img", array.size)
            bare = ImageFileTarget("passthrough", image)

            def release_bare():
                bare.close()
                image.unlink(missing_ok=True)
                return "image removed"

            session.push_sync("pass-through image", release_bare)
            fs.add("passthrough", bare)
            raw_image = create_sparse_image(session.lab.images_dir / "raw.img", array.size)
            session.push_sync("raw image", lambda: raw_image.unlink(missing_ok=True) or "image removed")
            export = await mount_export(session, fs)
            devices = {rel: (await attach_loop(session, export, rel)).device for rel in ("passthrough", "volume")}
            devices["raw"] = (await attach_loop_file(session, raw_image, "raw.img")).device
            run_id = session.lab.run_id
            session.push_sync("fio of this run", lambda: f"killed {kill_tagged_processes(run_id)}")
            env = session.child_env({})
            doc["devices"] = devices
            doc["capacity"] = array.size
            doc["tuning"] = export.tuning.__dict__ if export.tuning else None

            async def fio_run(job: fio.FioJob, label: str, seconds: float):
                phase(label, seconds)
                return await trio.to_thread.run_sync(
                    lambda: fio.run_jobs([job], timeout=seconds * 4 + 300, env=env), abandon_on_cancel=True)

            size = array.size
            for rel in TARGETS:
                precondition = fio.FioJob(name=f"fill-{rel}", filename=devices[rel], rw="write", bs="1m",
                                          size=str(size), iodepth=8)
                await fio_run(precondition, f"filling {rel} ({size // MiB} MiB)", size / (200 * MiB))
            results: dict[str, dict[str, dict[str, float]]] = {rel: {} for rel in TARGETS}
            raw: dict[str, Any] = {}
            for wl in WORKLOADS:
                for rel in TARGETS:
                    job = fio.FioJob(name=f"{wl.key}-{rel}", filename=devices[rel], rw=wl.rw, bs=wl.bs,
                                     size=str(size), iodepth=wl.iodepth, runtime=cfg.runtime, seed=1)
                    run = await fio_run(job, f"{wl.key} on {rel}", cfg.runtime)
                    results[rel][wl.key] = _fio_figures(run, wl.metric)
                    raw[f"{wl.key}/{rel}"] = {"argv": run.argv, "jobs": run.raw.get("jobs")}
            doc["results"] = results
            doc["ratios"] = ratio_rows(results, cfg.arch)
            doc["fuse"] = fs.statistics()
            doc["array"] = {k: v for k, v in array.statistics().items() if k != "members"}
            doc["fio"] = raw
            if cfg.profile_path is not None:
                wl = next(w for w in WORKLOADS if w.key == cfg.profile_workload)
                job = fio.FioJob(name=f"profile-{wl.key}", filename=devices["volume"], rw=wl.rw, bs=wl.bs,
                                 size=str(size), iodepth=wl.iodepth, runtime=cfg.runtime, seed=2)
                profiler = cProfile.Profile()
                profiler.enable()
                try:
                    run = await fio_run(job, f"profiling {wl.key} on volume", cfg.runtime)
                finally:
                    profiler.disable()
                cfg.profile_path.parent.mkdir(parents=True, exist_ok=True)
                profiler.dump_stats(str(cfg.profile_path))
                text_path = cfg.profile_path.with_suffix(".txt")
                text_path.write_text(_profile_text(profiler))
                doc["profile"] = {"workload": wl.key, "pstats": str(cfg.profile_path), "text": str(text_path),
                                  "profiled": _fio_figures(run, wl.metric)}
    finally:
        # The lab runtime released everything (also after a failure or a signal) unless
        # something is still mounted under the temporary home: only then is it kept.
        if own_home:
            if _mounted_under(home):
                status(f"lab left in {home} (see `RAIDLAB_HOME={home} raidlab lab cleanup {name}`)")
            else:
                shutil.rmtree(home, ignore_errors=True)
    return doc


def _mounted_under(directory: Path) -> bool:
    prefix = str(directory.resolve()) + "/"
    with open("/proc/self/mounts") as mounts:
        return any(line.split()[1].startswith(prefix) for line in mounts if len(line.split()) > 1)


def parse_options(pairs: tuple[str, ...]) -> dict[str, Any]:
    """-o KEY=VALUE pairs -> architecture options; a value is an int or a float if it reads
    as one, else the string itself."""
    out: dict[str, Any] = {}
    for key, value in parse_key_values(pairs, example="layout=n2").items():
        try:
            out[key] = int(value)
        except ValueError:
            try:
                out[key] = float(value)
            except ValueError:
                out[key] = value
    return out


__all__ = ["AIMS", "TARGETS", "WORKLOADS", "BenchConfig", "aim_for", "parse_options", "ratio_rows", "run_bench"]
