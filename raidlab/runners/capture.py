"""`raidlab trace capture NAME -- COMMAND`: run a command against a live array while its volume
records every request (raidlab.traces.capture, in the array daemon), then optionally replay
the recorded trace on the same architecture in virtual time and compare response times.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from raidlab.errors import UsageError
from raidlab.runners.virtual import SimSpec, replay
from raidlab.service import control
from raidlab.tools.base import run
from raidlab.traces.formats import TraceReader


def capture_command(lab, argv: list[str], output: Path, *, timeout: float | None = None) -> dict[str, Any]:
    """Start a capture on `lab`'s volume, run `argv` ("{device}" replaced by the lab's block
    device), stop the capture whatever happens; return {"status", "capture", "rc", ...}."""
    status = control.request(lab, "status")
    device = status.get("device")
    if any("{device}" in a for a in argv) and not device:
        raise UsageError(f"array {lab.name} has no host block device to put in place of {{device}}")
    argv = [a.replace("{device}", device or "") for a in argv]
    output = Path(os.path.abspath(output))
    # This command opens the trace file, with its own permissions and never through a link,
    # and hands the daemon the open file (raidlab.service.daemonbase).
    try:
        fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise UsageError(f"cannot write the trace {output}: {exc.strerror}",
                         hint="give a file in an existing directory you can write to") from None
    try:
        control.request(lab, "capture", action="start", name=str(output), command=" ".join(argv), fds=[fd])
    finally:
        os.close(fd)
    try:
        done = run(argv, check=False, timeout=timeout, capture=False)
    finally:
        summary = control.request(lab, "capture", action="stop")
    return {"status": status, "argv": argv, "rc": done.returncode, "capture": summary}


def replay_capture(status: dict[str, Any], trace: Path, *, seed: int = 0) -> dict[str, Any]:
    """Replay a captured trace on the same architecture in virtual time (the lab's spec)."""
    spec = status["spec"]
    sim = SimSpec(arch=spec["arch"], disk_model=spec["disk_model"], disks=spec.get("disks"),
                  chunk=spec.get("chunk"), disk_size=spec.get("disk_size"),
                  discipline=spec.get("discipline") or "fifo", seed=seed, options=dict(spec.get("options") or {}),
                  bus=spec.get("bus"), partitions=spec.get("partitions"),
                  write_cache=spec.get("write_cache") or "model", span=spec.get("span"),
                  flushes=spec.get("flushes") or "honoured")
    return replay(sim, TraceReader(trace, "raidlab"))


def comparison_rows(live: dict[str, Any], virtual: dict[str, Any]) -> list[dict[str, Any]]:
    """Live vs virtual response times per op (pure): mean, p50, p95, max and their ratio."""
    rows = []
    for op in ("read", "write"):
        a, b = live["response"].get(op, {"count": 0}), virtual["response"].get(op, {"count": 0})
        if not a.get("count"):
            continue
        row = {"op": op, "count_live": a["count"], "count_virtual": b.get("count", 0)}
        for stat in ("mean_ms", "p50_ms", "p95_ms", "max_ms"):
            row[f"{stat}_live"] = a[stat]
            row[f"{stat}_virtual"] = b.get(stat)
        row["mean_ratio_live_over_virtual"] = (a["mean_ms"] / b["mean_ms"]) if b.get("mean_ms") else None
        rows.append(row)
    return rows
