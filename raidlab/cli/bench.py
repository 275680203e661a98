"""`raidlab bench ...`: timing commands (tests assert behaviour; timings live here).

The `bench` group is shared: other modules may add commands to it, so `register` adds the
group only if it is missing. This module adds `bench sim`: replay speed of a synthetic
trace on raid5 and on a single disk (issue 7 "Determinism and speed"), with peak RSS.
"""

from __future__ import annotations

import json
import resource

import click


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def bench_sim(requests: int, archs: list[str], profile: str, seed: int, disk_model: str,
              progress=None) -> dict:
    """Replay the first `requests` requests of a synthetic `profile` trace on each arch;
    the trace is generated as a stream (never held in memory)."""
    import itertools

    from raidlab.traces.replay import SimSpec, replay_requests
    from raidlab.traces.synth import PROFILES, synth

    rate = PROFILES[profile].rate_per_s
    duration = requests / rate * 1.5 + 60  # long enough; cut at `requests`
    runs = []
    for arch in archs:
        stream = itertools.islice(synth(profile, duration, seed), requests)
        report = replay_requests(SimSpec(arch, disk_model), stream,
                                 on_progress=(lambda n, a=arch: progress(a, n)) if progress else None)
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
    return {"profile": profile, "seed": seed, "disk_model": disk_model, "requests": requests, "runs": runs,
            "peak_rss_mib": _peak_rss_mib(), "aim_requests_per_wall_second": 50_000}


def register(cli: click.Group) -> None:
    bench = cli.commands.get("bench")
    if bench is None:
        @cli.group("bench")
        def bench() -> None:
            """Timing benchmarks (numbers measured on this machine)."""

    @bench.command("sim")
    @click.option("--requests", type=click.IntRange(1000, 100_000_000), default=1_000_000, show_default=True)
    @click.option("--arch", "archs", multiple=True, default=("raid5", "disk"), show_default=True,
                  help="Architectures to replay on (repeatable).")
    @click.option("--profile", default="cello", show_default=True, help="Synthetic trace profile.")
    @click.option("--seed", type=int, default=1, show_default=True)
    @click.option("--disk-model", default="hp-c2200a", show_default=True)
    @click.option("--json", "as_json", is_flag=True)
    def sim_bench(requests: int, archs: tuple[str, ...], profile: str, seed: int, disk_model: str,
                  as_json: bool) -> int:
        """Replay speed of a synthetic trace on raid5 and one disk, and peak memory."""
        from raidlab.traces.replay import arch_names
        from raidlab.errors import UsageError

        for arch in archs:
            if arch not in arch_names():
                raise UsageError(f"unknown architecture {arch!r}", hint=f"choose one of: {', '.join(arch_names())}")

        def progress(arch: str, n: int) -> None:
            if not as_json:
                click.echo(f"  {arch}: {n:,} requests issued", err=True)

        result = bench_sim(requests, list(archs), profile, seed, disk_model, progress)
        if as_json:
            click.echo(json.dumps(result, indent=2))
            return 0
        click.echo(f"synthetic {profile} trace, {requests:,} requests, {disk_model}, seed {seed}")
        for run in result["runs"]:
            click.echo(f"{run['arch']:<8} {run['requests_per_wall_second']:>10,.0f} requests/s  "
                       f"{run['virtual_seconds_per_wall_second']:>10,.1f} virtual s/wall s  "
                       f"wall {run['wall_seconds']:.1f} s  max in flight {run['max_in_flight']}")
        click.echo(f"peak RSS {result['peak_rss_mib']:.0f} MiB (aim: 50,000 requests/s)")
        return 0
