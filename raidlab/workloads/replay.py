"""A block trace replayed live on the raw array device: the DCD and TSS papers' trace-driven
experiments on a real array, beside their replays in virtual time.

The trace is one of raidlab's synthetic profiles (raidlab.traces.synth: hplajw, snake, cello,
oltp, cello-usr, cello-var), generated on the host for `duration` seconds with `trace_seed`
over the smaller of the device and `device_size`, as a virtual-time case generates it. The program
raidlab/workloads/replay.c (static, so it also runs in the lab VM) issues each request with
O_DIRECT at its arrival time divided by `compact`, from a pool of `threads` workers, open
loop: a request's response time runs from its arrival to its completion, waiting for a
worker included, as in the papers' simulators. Data written is a pattern; nothing is read
back for checking (fio --verify does that elsewhere).

Metrics (milliseconds): mean_ms, read_mean_ms, write_mean_ms, their p99 and max, and
`requests` and `late` (requests dispatched more than 1 ms after their arrival: the
replayer could not keep up, so the trace's timing was not met; the report shows it).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from raidlab.errors import WorkloadError
from raidlab.traces.synth import HP_C2200A_BYTES, PROFILES, profile, synth
from raidlab.units import parse_size
from raidlab.workloads.base import Commands, Outcome, Param, Progress, RunnerSession, Workload, join, text
from raidlab.workloads.cprogram import program
from raidlab.workloads.trace import duration_seconds


def trace_text(profile_name: str, duration: float, seed: int, device_size: int) -> tuple[str, int]:
    """The program's input (`TIME r|w OFFSET LENGTH` per line) and the number of requests; only
    reads and writes (a synthetic profile has nothing else)."""
    lines = []
    for request in synth(profile_name, duration, seed, device_size=device_size):
        if request.op in ("read", "write"):
            lines.append(f"{request.time:.6f} {request.op[0]} {request.offset} {request.length}\n")
    return "".join(lines), len(lines)


class Replay(Workload):
    name = "replay"
    title = "a synthetic block trace replayed on the raw device, open loop"
    source = "DCD §3-4 and TSS §5's trace-driven tests, live"
    needs_mountpoint = False
    raw_device_only = True
    params = {
        "profile": Param(str, "hplajw", "synthetic trace profile", choices=tuple(PROFILES)),
        "duration": Param(str, "15m", "trace length (seconds, or 90s/15m/2h)"),
        "trace_seed": Param(int, 1, "seed of the synthetic trace", minimum=0),
        "compact": Param(float, 1.0, "divide inter-arrival times by this", minimum=0.001),
        "device_size": Param(str, "", "the trace's address space (default: the device, at most an HP C2200A's)"),
        "threads": Param(int, 64, "requests in flight at most (the replayer's workers)", minimum=1, maximum=1024),
        "timeout": Param(float, 7200.0, "seconds allowed", minimum=1),
    }
    programs = {}  # the replay binary the driver copies, and blockdev, rm and chmod (busybox)

    def check_combination(self, params: dict) -> None:
        profile(params["profile"])
        duration_seconds(params["duration"])
        if params["device_size"]:
            parse_size(params["device_size"], "device_size")

    def execute(self, session: RunnerSession, commands: Commands, mountpoint: str | None,
                params: dict, progress: Progress) -> Outcome:
        out = Outcome()
        device = session.device
        result = commands.run(["blockdev", "--getsize64", device], timeout=60, label="device size")
        size = int(text(result.stdout).split()[0])
        space = min(size, parse_size(params["device_size"], "device_size") if params["device_size"]
                    else HP_C2200A_BYTES)
        duration = duration_seconds(params["duration"])
        body, count = trace_text(params["profile"], duration, params["trace_seed"], space)
        binary = program("replay")
        remote, remote_trace = join(session.scratch, binary.name), join(session.scratch, "replay-trace.txt")
        with tempfile.TemporaryDirectory() as tmp:
            local = Path(tmp) / "trace.txt"
            local.write_text(body)
            session.put(local, remote_trace)
        session.put(binary, remote)
        commands.run(["chmod", "755", remote], timeout=60, label="make replay executable")
        progress(f"replay: {params['profile']} for {duration:.0f} s ({count} requests over {space >> 20} MiB), "
                 f"compacted {params['compact']:g}x, {params['threads']} in flight at most")
        try:
            result = commands.run([remote, "--device", device, "--trace", remote_trace,
                                   "--threads", str(params["threads"]), "--scale", str(params["compact"])],
                                  timeout=params["timeout"], check=False, label="replay")
        finally:
            commands.run(["rm", "-f", remote, remote_trace], timeout=600, check=False, label="cleanup (untimed)")
        stdout, stderr = text(result.stdout), text(result.stderr)
        out.raw.update(stdout=stdout, stderr=stderr)
        if result.rc != 0:
            raise WorkloadError(f"replay failed: {(stderr.strip().splitlines() or [f'exit {result.rc}'])[-1]}",
                                returncode=result.rc)
        try:
            doc = json.loads(stdout.strip().splitlines()[-1])
        except (ValueError, IndexError) as exc:
            raise WorkloadError(f"replay output not understood: {exc}") from None
        out.metric("requests", doc["requests"], "requests")
        out.metric("late", doc["late"], "requests")
        out.metric("elapsed_s", doc["elapsed_s"], "s")
        for group, prefix in (("all", ""), ("read", "read_"), ("write", "write_")):
            figures = doc[group]
            if not figures["count"]:
                continue
            for key in ("mean", "p99", "max"):
                out.metric(f"{prefix}{key}_ms", figures[f"{key}_ms"], "ms")
        out.extra["trace"] = {"profile": params["profile"], "duration_s": duration, "seed": params["trace_seed"],
                              "space_bytes": space, "requests": count}
        return out


WORKLOAD = Replay()
