"""PostMark (Katcher, NetApp TR3022) as used by He & Yang, VC-RAID §4.2.3 / §4.3.4, Table 2.

The paper configures PostMark "in three different ways as in [KAT 99]": small 1,000 initial
files / 50,000 transactions, medium 20,000 / 50,000, large 20,000 / 100,000; read and write
block sizes 1 KB; "all other PostMark at their default settings"; the metric is transactions
per second. `PAPER_CASES` holds those three; everything else keeps PostMark 1.51's defaults
(file sizes 500 B - 9.77 KB, bias 5/5, buffered I/O, no subdirectories, seed 42), and the
driver writes every setting explicitly so the recorded configuration is complete.

Why the configuration goes on stdin: postmark reads its commands from stdin when no file is
given, so the driver needs no config file on the runner (in the VM: no extra put), and the
exact text is kept in the result (`raw.config`).

Two PostMark 1.51 crashes the driver refuses up front: fewer than 10 transactions (SIGFPE)
and a working directory longer than about 88 characters (SIGSEGV), both measured here.

Why the driver checks stderr: postmark exits 0 even when it cannot create its files (it prints
one "Error: ..." line per failed file and reports the run anyway), so "Error:" on stderr is a
WorkloadError, not a result.

PostMark reports whole seconds (`time()` deltas), so its transactions/s is coarse on short
runs; `elapsed_seconds` is the runner's measure of the whole postmark command.
"""

from __future__ import annotations

import re

from raidlab.errors import ToolFailedError, UsageError, WorkloadError
from raidlab.workloads.base import (Commands, Outcome, Param, Progress, RunnerSession, Workload,
                                    join, require_empty_target, text)

PAPER_CASES = {
    "small": {"files": 1_000, "transactions": 50_000},
    "medium": {"files": 20_000, "transactions": 50_000},
    "large": {"files": 20_000, "transactions": 100_000},
}

# PostMark 1.51 overflows a buffer on long working directories: measured here, a
# `set location` of 88 characters works and 89 dies of SIGSEGV; keep a margin.
MAX_LOCATION = 80

_UNITS = {"bytes": 1, "kilobytes": 1024, "megabytes": 1024 ** 2, "gigabytes": 1024 ** 3}


def config_text(params: dict, location: str) -> str:
    """PostMark commands for one run (fed on stdin)."""
    lines = [
        f"set location {location}",
        f"set number {params['files']}",
        f"set transactions {params['transactions']}",
        f"set size {params['min_size']} {params['max_size']}",
        f"set read {params['read_block']}",
        f"set write {params['write_block']}",
        f"set buffering {'true' if params['buffering'] else 'false'}",
        f"set bias read {params['bias_read']}",
        f"set bias create {params['bias_create']}",
        f"set seed {params['seed']}",
        *([f"set subdirectories {params['subdirectories']}"] if params["subdirectories"] else []),
        "set report verbose",
        "show",
        "run",
        "quit",
    ]
    return "\n".join(lines) + "\n"


def parse_report(output: str) -> dict[str, float]:
    """Figures of PostMark 1.51's verbose report (see tests/unit/data/postmark_*.txt)."""
    def grab(pattern: str, group: int = 1, flags: int = 0) -> float:
        m = re.search(pattern, output, flags)
        if m is None:
            raise ValueError(f"postmark report lacks {pattern!r}")
        return float(m.group(group))

    report = output[output.find("Time:"):] if "Time:" in output else output
    out = {
        "total_seconds": grab(r"(\d+) seconds total"),
        "transaction_seconds": grab(r"(\d+) seconds of transactions"),
        "tps": grab(r"seconds of transactions \(([\d.]+) per second\)"),
    }
    for key, word in (("created", "created"), ("read", "read"), ("appended", "appended"),
                      ("deleted", "deleted")):
        m = re.search(rf"^\s*(\d+) {word} \(([\d.]+) per second\)", report, re.M)
        if m is None:
            raise ValueError(f"postmark report lacks the files {word} line")
        out[f"files_{key}"], out[f"files_{key}_per_second"] = float(m.group(1)), float(m.group(2))
    alone = re.findall(r"(Creation|Deletion) alone: (\d+) files \(([\d.]+) per second\)", report)
    mixed = re.findall(r"Mixed with transactions: (\d+) files \(([\d.]+) per second\)", report)
    for (kind, count, rate), (mcount, mrate) in zip(alone, mixed):
        prefix = "create" if kind == "Creation" else "delete"
        out[f"{prefix}_alone"], out[f"{prefix}_alone_per_second"] = float(count), float(rate)
        out[f"{prefix}_mixed"], out[f"{prefix}_mixed_per_second"] = float(mcount), float(mrate)
    for direction in ("read", "written"):
        m = re.search(rf"([\d.]+) (bytes|kilobytes|megabytes|gigabytes) {direction} "
                      rf"\(([\d.]+) (bytes|kilobytes|megabytes|gigabytes) per second\)", report)
        if m is None:
            raise ValueError(f"postmark report lacks the data {direction} line")
        out[f"bytes_{direction}"] = float(m.group(1)) * _UNITS[m.group(2)]
        out[f"bytes_{direction}_per_second"] = float(m.group(3)) * _UNITS[m.group(4)]
    return out


METRIC_UNITS = {"tps": "tx/s", "total_seconds": "s", "transaction_seconds": "s",
                "bytes_read": "B", "bytes_written": "B", "bytes_read_per_second": "B/s",
                "bytes_written_per_second": "B/s"}


class PostMark(Workload):
    name = "postmark"
    title = "PostMark small-file transactions"
    source = "VC-RAID §4.2.3, Table 2"
    params = {
        "files": Param(int, 1_000, "initial files (set number)", minimum=1),
        "transactions": Param(int, 50_000, "transactions (set transactions); postmark 1.51 "
                              "dies of SIGFPE below 10", minimum=10),
        "read_block": Param(int, 1024, "read block size, bytes (paper: 1 KB)", minimum=1),
        "write_block": Param(int, 1024, "write block size, bytes (paper: 1 KB)", minimum=1),
        "min_size": Param(int, 500, "smallest file, bytes (PostMark default)", minimum=1),
        "max_size": Param(int, 10_000, "largest file, bytes (PostMark default)", minimum=1),
        "subdirectories": Param(int, 0, "subdirectories (PostMark default 0: none; postmark "
                                "refuses `set subdirectories 0`, so 0 is not sent)", minimum=0),
        "buffering": Param(bool, True, "buffered stdio (PostMark default)"),
        "bias_read": Param(int, 5, "read vs append, 0-10 (PostMark default 5)",
                           minimum=-1, maximum=10),
        "bias_create": Param(int, 5, "create vs delete, 0-10 (PostMark default 5)",
                             minimum=-1, maximum=10),
        "seed": Param(int, 42, "random seed (PostMark default 42)", minimum=0),
        "timeout": Param(float, 7200.0, "seconds allowed", minimum=1),
    }
    programs = {"postmark": "postmark"}

    def check_combination(self, params: dict) -> None:
        if params["min_size"] > params["max_size"]:
            raise UsageError(f"workload 'postmark' parameter 'min_size' ({params['min_size']}) "
                             f"exceeds 'max_size' ({params['max_size']})", key="min_size")

    def execute(self, session: RunnerSession, commands: Commands, mountpoint: str | None,
                params: dict, progress: Progress) -> Outcome:
        assert mountpoint is not None
        out = Outcome()
        location = join(mountpoint, "postmark")
        if len(location) > MAX_LOCATION:
            raise WorkloadError(
                f"postmark's working directory {location} is {len(location)} characters; "
                f"PostMark 1.51 crashes beyond about 88, so raidlab allows {MAX_LOCATION}: "
                f"mount the filesystem at a shorter path", path=location)
        require_empty_target(commands, location)
        commands.run(["mkdir", location], timeout=60, label="make working directory")
        config = config_text(params, location)
        try:
            progress(f"postmark: {params['files']} files, {params['transactions']} transactions")
            result = commands.run(["postmark"], stdin=config.encode(), timeout=params["timeout"],
                                  check=False, label="postmark")
        finally:
            commands.run(["rm", "-rf", location], timeout=600, check=False,
                         label="cleanup (untimed)")
        stdout, stderr = text(result.stdout), text(result.stderr)
        out.raw.update(config=config, stdout=stdout, stderr=stderr)
        errors = [line for line in stderr.splitlines() if line.startswith("Error")]
        if errors:
            raise WorkloadError(f"postmark reported {len(errors)} errors, first: {errors[0]}",
                                errors=len(errors))
        if result.rc != 0:
            raise ToolFailedError(["postmark"], result.rc, stderr or stdout)
        try:
            figures = parse_report(stdout)
        except ValueError as exc:
            # e.g. "out of files!": far more transactions than files makes PostMark give up
            said = [line for line in (re.sub(r"^(pm>)+", "", raw).strip() for raw in stdout.splitlines()) if line]
            raise WorkloadError(f"postmark output not understood: {exc}"
                                + (f"; it said: {' '.join(said[-4:])[:300]}" if said else "")) from None
        for key, value in figures.items():
            unit = METRIC_UNITS.get(key) or ("1/s" if key.endswith("per_second") else "files")
            out.metric(key, value, unit)
        out.metric("elapsed_seconds", round(result.seconds, 6), "s")
        out.notes.append("postmark reports whole seconds; its tps is transactions divided by "
                         "an integer number of seconds (a run shorter than 1 s counts as 1 s)")
        if figures["transaction_seconds"] < 10:
            out.notes.append(f"coarse: the transactions took {figures['transaction_seconds']:g} "
                             f"s by postmark's clock, so its tps may be off by up to "
                             f"{100 / max(1.0, figures['transaction_seconds']):.0f}%; use "
                             f"more transactions for a meaningful figure")
        return out


WORKLOAD = PostMark()
