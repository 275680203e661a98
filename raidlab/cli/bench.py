"""`raidlab bench ...`: timing commands (tests assert behaviour; timings live here).

The `bench` group is shared: other modules may add commands to it, so `register` adds the
group only if it is missing. This module adds `bench sim`: replay speed of a synthetic
trace on raid5 and on a single disk, with peak RSS; and
`bench engine`: an engine architecture's loop device against a bare pass-through FUSE file
and a raw loop device on an image file (the measurement itself is raidlab.service.bench).
"""

from __future__ import annotations

import json
import resource
from pathlib import Path

import click

from raidlab.units import parse_size


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _within(stream, seconds: float | None):
    """`stream` until `seconds` of wall time have passed since the first request (checked
    every 256 requests), then nothing more: the replay drains what it issued and reports."""
    import time

    if seconds is None:
        yield from stream
        return
    deadline = time.monotonic() + seconds
    for n, request in enumerate(stream):
        if n % 256 == 0 and time.monotonic() >= deadline:
            return
        yield request


def bench_sim(requests: int, archs: list[str], profile: str, seed: int, disk_model: str,
              progress=None, seconds: float | None = None) -> dict:
    """Replay the first `requests` requests of a synthetic `profile` trace on each arch in
    virtual time (raidlab.sched.run_virtual), each for at most `seconds` of wall time
    (None: no limit); the trace is generated as a stream (never held in memory). Requests per
    second count the requests replayed."""
    import itertools

    from raidlab.runners.virtual import SimSpec, replay_requests
    from raidlab.traces.synth import PROFILES, synth

    rate = PROFILES[profile].rate_per_s
    duration = requests / rate * 1.5 + 60  # long enough; cut at `requests`
    runs = []
    for arch in archs:
        stream = _within(itertools.islice(synth(profile, duration, seed), requests), seconds)
        report = replay_requests(SimSpec(arch, disk_model), stream,
                                 on_progress=(lambda n, _virtual, a=arch: progress(a, n)) if progress else None)
        runs.append({
            "arch": arch,
            "requests": report["trace"]["requests"],
            "virtual_seconds": report["virtual_seconds"],
            "wall_seconds": report["speed"]["wall_seconds"],
            "requests_per_wall_second": report["speed"]["requests_per_wall_second"],
            "virtual_seconds_per_wall_second": report["speed"]["virtual_seconds_per_wall_second"],
            "max_in_flight": report["max_in_flight"],
            "mean_write_ms": report["response"]["write"].get("mean_ms"),
            "mean_read_ms": report["response"]["read"].get("mean_ms"),
            "peak_rss_mib_so_far": _peak_rss_mib(),
        })
    from raidlab import compiled

    return {"profile": profile, "seed": seed, "disk_model": disk_model, "requests": requests,
            "seconds_per_run": seconds, "runs": runs, "peak_rss_mib": _peak_rss_mib(),
            "compiled": compiled.status()}


def against_python(requests: int, arch: str, profile: str, seed: int, disk_model: str) -> dict:
    """The same replay in a process that runs the compiled modules from their Python source
    (RAIDLAB_PURE_PYTHON=1, raidlab.compiled): its run entry and that process's peak RSS."""
    import os
    import subprocess
    import sys

    from raidlab import compiled

    code = ("import json; from raidlab.cli.bench import bench_sim; "
            f"print(json.dumps(bench_sim({requests}, [{arch!r}], {profile!r}, {seed}, {disk_model!r})))")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, compiled.ENV: "1"},
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"the Python reference replay failed: {out.stderr.strip().splitlines()[-1:]}")
    doc = json.loads(out.stdout)
    return {**doc["runs"][0], "peak_rss_mib": doc["peak_rss_mib"], "compiled": doc["compiled"]}


def register(cli: click.Group) -> None:
    bench = cli.commands.get("bench")
    if bench is None:
        @cli.group("bench")
        def bench() -> None:
            """Timing benchmarks (numbers measured on this machine)."""

    _register_engine(bench)

    @bench.command("sim")
    @click.option("--requests", type=click.IntRange(1000, 100_000_000), default=None,
                  help="Replay exactly this many requests per architecture (no time limit).  "
                       "[default: as many as --seconds allows, at most 1,000,000]")
    @click.option("--seconds", type=click.FloatRange(1, 86400), default=60.0, show_default=True,
                  help="Wall time for the whole run, shared evenly by the architectures (without --requests).")
    @click.option("--arch", "archs", multiple=True, default=("raid5", "disk", "dcd", "vcraid"), show_default=True,
                  help="Architectures to replay on (repeatable).")
    @click.option("--profile", default="cello", show_default=True, help="Synthetic trace profile.")
    @click.option("--seed", type=int, default=1, show_default=True)
    @click.option("--disk-model", default="hp-c2200a", show_default=True)
    @click.option("--against-python", "against_python_", is_flag=True,
                  help="After each architecture, replay the same requests with the compiled modules run "
                       "from their Python source (needs --requests), and give the ratio.")
    @click.option("--json", "as_json", is_flag=True)
    def sim_bench(requests: int | None, seconds: float, archs: tuple[str, ...], profile: str, seed: int,
                  disk_model: str, against_python_: bool, as_json: bool) -> int:
        """Replay speed of a synthetic trace per architecture (requests per wall second), and
        peak memory. By default about --seconds in all; --requests N replays N each."""
        from raidlab import archs as registry
        from raidlab.errors import UsageError

        for arch in archs:
            registry.get(arch, "sim")  # UsageError naming the replayable ids
        if against_python_ and requests is None:
            raise UsageError("--against-python compares replays of the same requests", hint="give --requests N")

        def progress(arch: str, n: int) -> None:
            if not as_json:
                click.echo(f"  {arch}: {n:,} requests issued", err=True)

        budget = None if requests is not None else seconds / len(archs)
        if not against_python_:
            result = bench_sim(requests or 1_000_000, list(archs), profile, seed, disk_model, progress, budget)
        else:  # each architecture compiled, then in Python, alternately, in this one run
            result = {}
            for arch in archs:
                one = bench_sim(requests, [arch], profile, seed, disk_model, progress)
                run = one["runs"][0]
                reference = against_python(requests, arch, profile, seed, disk_model)
                same = all(run[k] == reference[k] for k in ("requests", "virtual_seconds", "mean_read_ms", "mean_write_ms"))
                if not same:
                    raise RuntimeError(f"{arch}: the compiled and the Python replays differ")
                run["python"] = {k: reference[k] for k in ("wall_seconds", "requests_per_wall_second", "peak_rss_mib")}
                run["compiled_over_python"] = run["requests_per_wall_second"] / reference["requests_per_wall_second"]
                result = {**one, "runs": result.get("runs", []) + [run]}
        if as_json:
            click.echo(json.dumps(result, indent=2))
            return 0
        click.echo(f"synthetic {profile} trace, {disk_model}, seed {seed}, "
                   + (f"{requests:,} requests each" if budget is None else f"about {budget:.0f} s each"))
        for run in result["runs"]:
            click.echo(f"{run['arch']:<8} {run['requests']:>9,} requests "
                       f"{run['requests_per_wall_second']:>10,.0f} requests/s  "
                       f"{run['virtual_seconds_per_wall_second']:>10,.1f} virtual s/wall s  "
                       f"wall {run['wall_seconds']:.1f} s  max in flight {run['max_in_flight']}")
            if "python" in run:
                click.echo(f"{'':<8} {'in Python':>18} {run['python']['requests_per_wall_second']:>10,.0f} requests/s"
                           f"  compiled / Python {run['compiled_over_python']:.2f}")
        modules = ", ".join(f"{name.rpartition('.')[2]} {how}" for name, how in result["compiled"].items())
        click.echo(f"peak RSS {result['peak_rss_mib']:.0f} MiB; modules: {modules}")
        return 0


def _register_engine(bench: click.Group) -> None:
    @bench.command("engine")
    @click.option("--arch", required=True, help="Engine architecture (raid0, raid5, raidx, ...).")
    @click.option("--disks", type=click.IntRange(1, 64), default=4, show_default=True)
    @click.option("--disk-size", default="256M", show_default=True, help="Size of each member image.")
    @click.option("--chunk", default="64K", show_default=True)
    @click.option("--runtime", type=click.FloatRange(1, 3600), default=10.0, show_default=True,
                  help="Seconds per fio run.")
    @click.option("-o", "options", multiple=True, metavar="KEY=VALUE", help="Architecture option.")
    @click.option("--profile", "profile_path", type=click.Path(dir_okay=False, path_type=Path),
                  help="Also run the engine once more under cProfile; write pstats here (and a .txt).")
    @click.option("--profile-workload", type=click.Choice(["randwrite_4k", "seqwrite_1m"]),
                  default="randwrite_4k", show_default=True)
    @click.option("--json", "as_json", is_flag=True)
    def engine_bench(arch: str, disks: int, disk_size: str, chunk: str, runtime: float,
                     options: tuple[str, ...], profile_path: Path | None, profile_workload: str,
                     as_json: bool) -> int:
        """4 KiB random / 1 MiB sequential writes: engine loop device vs bare FUSE file vs raw
        loop device (needs root)."""
        import trio
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        from raidlab.outputs import new_file
        from raidlab.service.bench import BenchConfig, parse_options, run_bench

        if profile_path is not None:
            new_file(profile_path, "--profile")
            new_file(profile_path.with_suffix(".txt"), "--profile (its text)")
        cfg = BenchConfig(arch=arch, disks=disks, disk_size=parse_size(disk_size, "--disk-size"), chunk=parse_size(chunk, "--chunk"),
                          runtime=runtime, options=parse_options(options), profile_path=profile_path,
                          profile_workload=profile_workload)
        console = Console(stderr=True, highlight=False)
        progress = Progress(TextColumn("{task.description}"), BarColumn(), TimeRemainingColumn(),
                            console=console, transient=True)
        current: dict = {}

        def status(message: str) -> None:
            progress.console.print(f"  {message}", markup=False, highlight=False)

        def phase(label: str, seconds: float) -> None:
            if "task" in current:
                progress.update(current["task"], completed=current["seconds"])
            current["task"] = progress.add_task(label, total=max(seconds, 0.1))
            current["seconds"] = max(seconds, 0.1)
            current["start"] = trio.current_time()

        async def main():
            async def tick():
                while True:
                    await trio.sleep(0.25)
                    if "task" in current:
                        done = min(trio.current_time() - current["start"], current["seconds"])
                        progress.update(current["task"], completed=done)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(tick)
                try:
                    return await run_bench(cfg, status=status, phase=phase)
                finally:
                    nursery.cancel_scope.cancel()

        from raidlab.errors import RaidlabError, leaf_exceptions

        with progress:
            try:
                doc = trio.run(main)
            except BaseExceptionGroup as group:  # the ticker's nursery wraps run_bench's error
                leaves = leaf_exceptions(group)
                first = next((e for e in leaves if isinstance(e, RaidlabError)), None)
                raise (first or leaves[0]) from None
        if as_json:
            click.echo(json.dumps({k: v for k, v in doc.items() if k != "fio"}, indent=2))
            return 0
        click.echo(f"{arch} over {disks} x none ({disk_size} each, chunk {chunk}), fio {runtime:g} s per run")
        for row in doc["ratios"]:
            unit = "IOPS" if row["metric"] == "iops" else "MB/s"
            aim = f"aim >= {row['aim']:.1f}x: {'met' if row['meets_aim'] else 'NOT met'}" if row["aim"] else ""
            click.echo(f"{row['workload']:<14} engine {row['engine']:>10,.0f} {unit}   pass-through "
                       f"{row['passthrough']:>10,.0f} {unit}   ratio {row['ratio']:.2f}x   {aim}")
            click.echo(f"{'':<14} raw loop device {row['raw']:>10,.0f} {unit}: engine {row['of_raw']:.2f}x, "
                       f"pass-through {row['passthrough'] / row['raw']:.2f}x of it")
        if "profile" in doc:
            p = doc["profile"]
            click.echo(f"profile of {p['workload']} (profiled run: {p['profiled']['iops']:,.0f} IOPS): "
                       f"{p['pstats']} and {p['text']}")
        return 0
