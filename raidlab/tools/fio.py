"""fio: run a job, read its JSON report.

Why a job object and a pure parser: the results of an experiment keep fio's raw JSON and the
exact command line (tools.base records it), and the few figures raidlab reports (IOPS,
bandwidth, latency, verify errors) are read from that JSON by a function the unit tests
exercise without running fio.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from raidlab.errors import ToolFailedError
from raidlab.tools.base import run


@dataclass
class FioJob:
    """One fio job on a file or block device. `extra` adds any other fio option."""

    name: str
    filename: str
    rw: str = "randwrite"
    bs: str = "4k"
    size: str = "16m"
    iodepth: int = 1
    ioengine: str = "libaio"
    direct: bool = True
    verify: str | None = None          # e.g. "crc32c": write, then read back and check
    runtime: float | None = None       # seconds; time_based when set
    seed: int | None = None
    extra: dict[str, str] = field(default_factory=dict)

    def args(self) -> list[str]:
        """fio command-line options for this job (without the program name)."""
        out = [f"--name={self.name}", f"--filename={self.filename}", f"--rw={self.rw}",
               f"--bs={self.bs}", f"--size={self.size}", f"--iodepth={self.iodepth}",
               f"--ioengine={self.ioengine}", f"--direct={1 if self.direct else 0}"]
        if self.verify:
            # verify_state_save=0: fio would otherwise leave *-verify.state files in the
            # working directory after a failed verify
            out += [f"--verify={self.verify}", "--verify_fatal=1", "--do_verify=1",
                    "--verify_state_save=0"]
        if self.runtime is not None:
            out += [f"--runtime={self.runtime:g}", "--time_based=1"]
        if self.seed is not None:
            out += [f"--randseed={self.seed}"]
        out += [f"--{k}={v}" for k, v in sorted(self.extra.items())]
        return out


@dataclass(frozen=True)
class FioDirection:
    ios: int
    bytes: int
    iops: float
    bw_bytes: float          # bytes per second
    lat_mean_ns: float
    lat_p99_ns: float | None


@dataclass(frozen=True)
class FioJobResult:
    name: str
    error: int               # fio's per-job error (an errno; EILSEQ=84 on a verify mismatch)
    read: FioDirection
    write: FioDirection


@dataclass
class FioRun:
    argv: list[str]
    returncode: int
    raw: dict[str, Any]
    jobs: list[FioJobResult]
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and all(j.error == 0 for j in self.jobs)


def extract_json(text: str) -> dict[str, Any]:
    """fio may print notes ("fio: ...") before its JSON document: skip to the first '{'."""
    start = text.find("{")
    if start < 0:
        raise ValueError("no JSON object in fio output")
    obj, _end = json.JSONDecoder().raw_decode(text[start:])
    return obj


def _direction(d: dict[str, Any]) -> FioDirection:
    lat = d.get("clat_ns") or d.get("lat_ns") or {}
    pct = lat.get("percentile") or {}
    p99 = pct.get("99.000000")
    return FioDirection(
        ios=int(d.get("total_ios", 0)),
        bytes=int(d.get("io_bytes", 0)),
        iops=float(d.get("iops", 0.0)),
        bw_bytes=float(d.get("bw_bytes", d.get("bw", 0) * 1024)),
        lat_mean_ns=float((d.get("lat_ns") or {}).get("mean", 0.0)),
        lat_p99_ns=float(p99) if p99 is not None else None,
    )


def parse_report(data: dict[str, Any]) -> list[FioJobResult]:
    """The figures raidlab uses from fio's --output-format=json report."""
    out = []
    for job in data.get("jobs", []):
        out.append(FioJobResult(
            name=job.get("jobname", ""),
            error=int(job.get("error", 0)),
            read=_direction(job.get("read", {})),
            write=_direction(job.get("write", {})),
        ))
    return out


def run_jobs(jobs: list[FioJob], *, timeout: float = 600, check: bool = True,
             env: dict[str, str] | None = None) -> FioRun:
    """Run the jobs (one fio process, jobs in sequence via stonewall) and parse the report.

    With check, a non-zero exit or a job error (a verify mismatch is one) raises
    ToolFailedError with fio's message.
    """
    argv = ["fio", "--output-format=json"]
    for index, job in enumerate(jobs):
        argv += job.args()
        if index:
            argv.append("--stonewall")
    proc = run(argv, check=False, timeout=timeout, env=env or dict(os.environ))
    try:
        raw = extract_json(proc.stdout)
    except ValueError:
        raise ToolFailedError(argv, proc.returncode or 1, proc.stderr or proc.stdout) from None
    result = FioRun(argv, proc.returncode, raw, parse_report(raw), proc.stderr)
    if check and not result.ok:
        raise ToolFailedError(argv, proc.returncode or 1,
                              proc.stderr or f"job errors: {[j.error for j in result.jobs]}")
    return result


def run_job(job: FioJob, **kwargs) -> FioRun:
    return run_jobs([job], **kwargs)
