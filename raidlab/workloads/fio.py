"""fio jobs on the raw array device: quick checks of what the block layer delivers before a
filesystem is put on it (no paper section of its own; the RAID-x paper's large/small read and
write tests are of this kind).

Why reuse raidlab.tools.fio: the job options (`FioJob.args`) and the JSON report parser
(`extract_json`, `parse_report`) already exist and are tested; this driver only builds the
job list from parameters and runs one fio command through the RunnerSession (so it also works
in the lab VM), instead of tools.fio.run_jobs which runs on the host.

Jobs: each entry of `jobs` is one of randwrite, randread, write, read, randrw; they run one
after another (--stonewall) on `session.device` over the first `size_mb` MiB, each for
`runtime` seconds (time_based) or until `size_mb` is done when runtime is 0. Direct I/O by
default so the page cache is out of the measurement. Destructive: the runner gives a fresh
array, which is what the workload is for.
"""

from __future__ import annotations

import json

from raidlab.errors import UsageError, WorkloadError
from raidlab.tools.fio import FioJob, extract_json, parse_report
from raidlab.workloads.base import Commands, Outcome, Param, Progress, RunnerSession, Workload, text

JOB_KINDS = ("randwrite", "randread", "write", "read", "randrw")


def build_jobs(params: dict, device: str) -> list[FioJob]:
    jobs = []
    for kind in params["jobs"]:
        sequential = kind in ("write", "read")
        jobs.append(FioJob(
            name=kind, filename=device, rw=kind,
            bs=f"{params['seq_block_kb' if sequential else 'block_kb']}k",
            size=f"{params['size_mb']}m", iodepth=params["iodepth"],
            ioengine=params["ioengine"], direct=params["direct"],
            runtime=params["runtime"] or None, seed=params["seed"],
        ))
    return jobs


def fio_argv(jobs: list[FioJob]) -> list[str]:
    argv = ["fio", "--output-format=json"]
    for index, job in enumerate(jobs):
        argv += job.args()
        if index:
            argv.append("--stonewall")
    return argv


class Fio(Workload):
    name = "fio"
    title = "fio jobs on the raw array device"
    source = "raw-device checks (no paper table)"
    needs_mountpoint = False
    raw_device_only = True
    params = {
        "jobs": Param(str, "randwrite,randread,write,read",
                      f"comma-separated job kinds, run in order ({', '.join(JOB_KINDS)})"),
        "block_kb": Param(int, 4, "block size of random jobs, KiB", minimum=1),
        "seq_block_kb": Param(int, 1024, "block size of sequential jobs, KiB", minimum=1),
        "size_mb": Param(int, 64, "region of the device used, MiB", minimum=1),
        "runtime": Param(float, 10.0, "seconds per job (0: until size_mb is done)", minimum=0),
        "iodepth": Param(int, 1, "outstanding I/Os", minimum=1, maximum=256),
        "ioengine": Param(str, "psync", "fio ioengine (psync works everywhere; libaio for "
                          "iodepth > 1)", choices=("psync", "sync", "libaio", "io_uring")),
        "direct": Param(bool, True, "O_DIRECT"),
        "seed": Param(int, 1, "fio randseed", minimum=0),
        "timeout": Param(float, 3600.0, "seconds allowed", minimum=1),
    }
    programs = {"fio": "fio"}

    def resolve(self, params: dict | None) -> dict:
        params = dict(params or {})
        if isinstance(params.get("jobs"), list):        # scenarios may give a TOML list
            params["jobs"] = ",".join(map(str, params["jobs"]))
        out = super().resolve(params)
        kinds = [k.strip() for k in out["jobs"].split(",") if k.strip()]
        bad = [k for k in kinds if k not in JOB_KINDS]
        if not kinds or bad:
            raise UsageError(f"workload 'fio' parameter 'jobs': unknown job kind "
                             f"{(bad or [''])[0]!r}; known: {', '.join(JOB_KINDS)}", key="jobs")
        out["jobs"] = kinds
        return out

    def execute(self, session: RunnerSession, commands: Commands, mountpoint: str | None,
                params: dict, progress: Progress) -> Outcome:
        out = Outcome()
        device = session.device
        jobs = build_jobs(params, device)
        progress(f"fio on {device}: {', '.join(params['jobs'])}")
        result = commands.run(fio_argv(jobs), timeout=params["timeout"], check=False,
                              label="fio")
        stdout, stderr = text(result.stdout), text(result.stderr)
        out.raw["stderr"] = stderr
        try:
            report = extract_json(stdout)
        except (ValueError, json.JSONDecodeError):
            raise WorkloadError(f"fio printed no JSON report (exit {result.rc}): "
                                f"{(stderr.strip().splitlines() or [''])[-1]}") from None
        out.raw["fio"] = report
        parsed = parse_report(report)
        errors = [j for j in parsed if j.error]
        if result.rc != 0 or errors:
            raise WorkloadError(f"fio failed (exit {result.rc}, job errors "
                                f"{[j.error for j in parsed]}): "
                                f"{(stderr.strip().splitlines() or [''])[-1]}")
        for job in parsed:
            for direction, figures in (("read", job.read), ("write", job.write)):
                if figures.ios == 0:
                    continue
                prefix = f"{job.name}_{direction}" if job.name == "randrw" else job.name
                out.metric(f"{prefix}_iops", round(figures.iops, 3), "IO/s")
                out.metric(f"{prefix}_bw", round(figures.bw_bytes / 2**20, 3), "MiB/s")
                out.metric(f"{prefix}_lat_mean_ms", round(figures.lat_mean_ns / 1e6, 4), "ms")
                if figures.lat_p99_ns is not None:
                    out.metric(f"{prefix}_lat_p99_ms", round(figures.lat_p99_ns / 1e6, 4), "ms")
        out.extra["fio_version"] = report.get("fio version")
        return out


WORKLOAD = Fio()
