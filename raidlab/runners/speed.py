"""How fast the machine was when a live run started: two small fixed loops, timed.

A live result depends on the machine's speed wherever a CPU is the bottleneck: the lab VM's
guest runs under TCG, so a benchmark bound by the guest's CPU (Bonnie's per-character tests,
PostMark at small sizes) slows down in proportion when the host gives less CPU, and a
results directory filled over several days can mix runs of a fast and a slow host. The
emulated drives' service times do not change with it; the CPU-bound parts do.

Each live run records, after the cold start, just before the workload:

* `host_us_per_loop`: a fixed pure-Python loop on the host (the engine's and QEMU's side),
  the best of three, in microseconds per iteration.
* `runner_us_per_loop`: a fixed busybox/POSIX shell loop where the workload runs (the
  guest under TCG, or the host for the native runner), timed inside that shell from
  /proc/uptime, so the lab VM's command round trip is not in it; microseconds per
  iteration, the best of three. /proc/uptime counts in 10 ms, so the loop is long enough
  (at least about 0.2 s) for that to stay within a few percent.

Both are a snapshot of a second or two. On a virtual machine whose hypervisor shares the
cores with other guests, the speed can change within minutes, so after the workload the
run also records `host_steal_share`: the share of the host's CPU time, over the whole
workload, that the hypervisor gave to others (the `steal` column of /proc/stat; 0 on bare
metal).

The report compares them across the runs of a directory (raidlab.report.timing): it flags
a spread above SPREAD_FLAG (the runs did not all get the same machine) and names the runs
that lost more than a tenth of the host's CPU time to steal.
"""

from __future__ import annotations

import time
from typing import Any

HOST_LOOPS = 200_000
HOST_REPEATS = 3
RUNNER_REPEATS = 3
# The guest's shell under TCG runs the loop about 10-30x slower than the host's.
RUNNER_LOOPS = {"vm": 20_000, "native": 200_000}
RUNNER_SCRIPT = ('read a _ < /proc/uptime; i=0; while [ "$i" -lt "$1" ]; do i=$((i+1)); done; '
                 'read b _ < /proc/uptime; echo "$a $b"')
RUNNER_TIMEOUT = 300
# Runs of one directory whose probes differ by more than this factor did not get the same
# machine: a fifth of the speed is about the spread of one workload's repetitions here.
SPREAD_FLAG = 1.25


def host_us_per_loop(loops: int = HOST_LOOPS, repeats: int = HOST_REPEATS) -> float:
    """Microseconds per iteration of a fixed pure-Python loop, the best of `repeats`."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        acc = 0
        for i in range(loops):
            acc = (acc + i * i) & 0xFFFF
        best = min(best, time.perf_counter() - started)
    return best / loops * 1e6


def runner_us_per_loop(session, loops: int) -> float | None:
    """Microseconds per iteration of RUNNER_SCRIPT's loop where `session` runs commands;
    None if the shell did not answer with two uptimes."""
    result = session.exec(["sh", "-c", RUNNER_SCRIPT, "sh", str(loops)], timeout=RUNNER_TIMEOUT, check=False)
    try:
        start, end = (float(x) for x in result.stdout.decode().split())
    except ValueError:
        return None
    if result.rc != 0 or end <= start:
        return None
    return (end - start) / loops * 1e6


def probe(session) -> dict[str, Any]:
    """The run's speed record: both loops, with the loop counts they were measured over, and
    the host's CPU counters to measure steal against (steal_share, after the workload)."""
    loops = RUNNER_LOOPS.get(session.runner, RUNNER_LOOPS["native"])
    runner = [t for t in (runner_us_per_loop(session, loops) for _ in range(RUNNER_REPEATS)) if t is not None]
    return {
        "host_us_per_loop": round(host_us_per_loop(), 4),
        "host_loops": HOST_LOOPS,
        "runner_us_per_loop": _round(min(runner) if runner else None),
        "runner_loops": loops,
        "runner": session.runner,
        "host_cpu_ticks": host_cpu_ticks(),
    }


def host_cpu_ticks() -> tuple[int, int] | None:
    """(steal, all) clock ticks of the host's CPUs since boot, from /proc/stat; None where
    it cannot be read."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    ticks = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return (ticks[7] if len(ticks) > 7 else 0), sum(ticks)


def finish(record: dict[str, Any]) -> dict[str, Any]:
    """The record after the workload: `host_steal_share` over the workload in place of the
    counters taken before it."""
    out = dict(record)
    before, after = out.pop("host_cpu_ticks", None), host_cpu_ticks()
    share = None
    if before and after and after[1] > before[1]:
        share = round((after[0] - before[0]) / (after[1] - before[1]), 4)
    out["host_steal_share"] = share
    return out


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def spread(values: list[float | None]) -> tuple[float, float, float] | None:
    """(slowest, fastest, slowest / fastest) of the measured values; None under two."""
    vals = [v for v in values if v is not None and v > 0]
    if len(vals) < 2:
        return None
    return max(vals), min(vals), max(vals) / min(vals)
