"""Bonnie (bonnie++) block throughput and random seeks: He & Yang, VC-RAID §4.2.2 / §4.3.3,
Fig. 8 (and later the RAID-x paper's Bonnie tables, which use the other figures).

The paper ran Bonnie 2.0.6 on a 100 MB file and reports block write and random seeks: "4
concurrent processes operating on one large file of 100MB ... a total of 200,000 lseek()s ...
followed by a read ... 10% of them are rewritten". Bonnie itself is no longer packaged;
bonnie++ (its successor, same tests) is. The driver runs
    bonnie++ -d DIR -s SIZE:CHUNK:SEEKS:SEEKERS -r RAM -n FILES -u 0:0 -m raidlab -x 1 -z SEED -q
        [-f] [-D]
with the paper's 100 MB, 200,000 seeks and 4 seekers by default; how bonnie++ divides the
seeks among its seeker processes is bonnie++'s own (its CSV records both numbers). Where it
departs and why:
- `-r` (the RAM size bonnie++ assumes) defaults to half the file size: bonnie++ refuses a file
  smaller than twice the RAM it is told about, and the paper's 100 MB file was larger than
  the paper's 64 MB RAM. The real RAM of this host is far larger, so by default (`direct`)
  the bulk tests use O_DIRECT (-D): otherwise the 100 MB would be written to and read back
  from the page cache and the figures would not involve the array. `direct = false` gives
  plain bonnie++ behaviour.
- Per-character tests are skipped (-f) unless `per_char`: the paper reports block tests only,
  and putc/getc on 100 MB costs minutes of CPU and says nothing about the array.
- `-u 0:0` (numeric): bonnie++ refuses to run as root without -u, and the lab VM's
  initramfs has no /etc/passwd to look a name up in.
- A test that finished too quickly for bonnie++ to time prints "+++++": that figure is left
  out of the metrics and named in the notes (no invented number).

The CSV (-q puts it alone on stdout) is parsed by `parse_csv`; `bon_csv2html` (package
bonnie++) runs on the host to keep the HTML table bonnie++ users know.
"""

from __future__ import annotations

import re
import time

from raidlab.errors import UsageError, WorkloadError
from raidlab.tools.base import require, run as run_on_host
from raidlab.workloads.base import (TWIN_NETWORK_PARAMS, Commands, Outcome, Param, Progress, RunnerSession,
                                    Workload, join, require_empty_target, sim_resolver, text)

# bonnie++ 1.98+ CSV columns (format_version "1.98"), in order.
CSV_COLUMNS = (
    "format_version", "bonnie_version", "name", "concurrency", "seed", "file_size",
    "chunk_size", "seeks", "seek_proc_count",
    "putc", "putc_cpu", "put_block", "put_block_cpu", "rewrite", "rewrite_cpu",
    "getc", "getc_cpu", "get_block", "get_block_cpu", "seeks_per_second", "seeks_cpu",
    "num_files", "max_size", "min_size", "num_dirs", "file_chunk_size",
    "seq_create", "seq_create_cpu", "seq_stat", "seq_stat_cpu", "seq_del", "seq_del_cpu",
    "ran_create", "ran_create_cpu", "ran_stat", "ran_stat_cpu", "ran_del", "ran_del_cpu",
    "putc_latency", "put_block_latency", "rewrite_latency", "getc_latency",
    "get_block_latency", "seeks_latency", "seq_create_latency", "seq_stat_latency",
    "seq_del_latency", "ran_create_latency", "ran_stat_latency", "ran_del_latency",
)

# column -> (base name, unit). The rate metric is "<base>_kbs" (KiB/s, as bonnie++ writes
# its CSV) or "<base>_per_s"; "<base>_cpu_percent" and "<base>_latency_us" go with it.
RATE_METRICS = {
    "putc": ("char_write", "KiB/s"),
    "put_block": ("block_write", "KiB/s"),
    "rewrite": ("rewrite", "KiB/s"),
    "getc": ("char_read", "KiB/s"),
    "get_block": ("block_read", "KiB/s"),
    "seeks_per_second": ("random_seeks", "1/s"),
    "seq_create": ("seq_create", "1/s"),
    "seq_stat": ("seq_stat", "1/s"),
    "seq_del": ("seq_delete", "1/s"),
    "ran_create": ("random_create", "1/s"),
    "ran_stat": ("random_stat", "1/s"),
    "ran_del": ("random_delete", "1/s"),
}
_LATENCY_UNITS = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}


def parse_latency_us(field: str) -> float | None:
    """'8491us' / '12ms' / '3s' -> microseconds; '' -> None."""
    m = re.fullmatch(r"([\d.]+)(ns|us|ms|s)", field.strip())
    return float(m.group(1)) * _LATENCY_UNITS[m.group(2)] if m else None


def parse_csv(line: str) -> tuple[dict[str, str], dict[str, tuple[float, str]], list[str]]:
    """One bonnie++ CSV line -> (all columns by name, metrics {name: (value, unit)},
    names of tests bonnie++ ran but could not time ("+++++"))."""
    fields = line.strip().split(",")
    if len(fields) != len(CSV_COLUMNS) or not fields[0].startswith("1.9"):
        raise ValueError(f"not a bonnie++ 1.98 CSV line ({len(fields)} fields): {line[:80]!r}")
    columns = dict(zip(CSV_COLUMNS, fields))
    metrics: dict[str, tuple[float, str]] = {}
    too_fast: list[str] = []
    for column, (base, unit) in RATE_METRICS.items():
        metric = f"{base}_kbs" if unit == "KiB/s" else f"{base}_per_s"
        value = columns[column]
        if value == "":
            continue                                   # test not run
        if set(value) == {"+"}:
            too_fast.append(metric)
            continue
        metrics[metric] = (float(value), unit)
        stem = "seeks" if column == "seeks_per_second" else column
        cpu = columns[f"{stem}_cpu"]
        if cpu and set(cpu) != {"+"}:
            metrics[f"{base}_cpu_percent"] = (float(cpu), "%")
        latency = parse_latency_us(columns[f"{stem}_latency"])
        if latency is not None:
            metrics[f"{base}_latency_us"] = (latency, "us")
    return columns, metrics, too_fast


def csv_line(stdout: str) -> str:
    lines = [ln for ln in stdout.splitlines() if ln.count(",") >= len(CSV_COLUMNS) - 1]
    if not lines:
        raise ValueError("bonnie++ printed no CSV line")
    return lines[-1]


# Bonnie in virtual time, from one node of the cluster's twin (raidlab.runners.bonnie): Bray's
# Bonnie's tests as block requests. Declared here beside the live driver so that scenario
# files are checked without importing the runners.
SIM_PARAMS: dict[str, Param] = {
    "file_mb": Param(int, 500, "the file, MiB (Bonnie's -s; RAID-x §10.1: 500 MB)", minimum=1),
    "chunk_kb": Param(int, 8, "bytes per seek's read, KiB (Bonnie's Chunk: 8 KiB)", minimum=1),
    "request_kb": Param(int, 32, "bytes per request the kernel sends for a stream, KiB (assumed, as the "
                        "parallel workload's: the 32 KB stripe unit)", minimum=1),
    "read_depth": Param(int, 4, "a stream's reads in flight (assumed: a 128 KiB read-ahead window)", minimum=1),
    "write_depth": Param(int, 64, "writes behind in flight (assumed: the kernel's request table)", minimum=1),
    "putc_mb_s": Param(float, 6.0, "the putc() loop's rate on the client's processor, MB/s (assumed)",
                       minimum=0.001),
    "getc_mb_s": Param(float, 6.0, "the getc() loop's rate on the client's processor, MB/s (assumed)",
                       minimum=0.001),
    "copy_mb_s": Param(float, 100.0, "a copy between the program and the buffer cache, MB/s (assumed)",
                       minimum=0.001),
    "seeks": Param(int, 4000, "random seeks in all (Bonnie: 4000)", minimum=1),
    "seekers": Param(int, 3, "seeking processes (Bonnie's SeekProcCount: 3)", minimum=1),
    "update_every": Param(int, 10, "a seeker writes back its first seek and every n-th after (Bonnie: 10)",
                          minimum=1),
    "fs_block_kb": Param(int, 1, "alignment of a seek's place, KiB (the file system's block: ext2's 1 KiB)",
                         minimum=1),
    "file_offset_kb": Param(int, 4096, "where the file starts in the volume, KiB (assumed)", minimum=0),
    "client": Param(int, 0, "the node that runs Bonnie", minimum=0),
    "nodes": Param(int, 0, "nodes of the cluster (0: as many as the disks need)", minimum=0),
    **TWIN_NETWORK_PARAMS,
    "seed": Param(int, 0, "seed of the seeks' places", minimum=0),
}


def _sim_combination(out: dict) -> None:
    if (out["file_mb"] * 1024) % out["request_kb"]:
        raise UsageError(f"file_mb {out['file_mb']} is not a whole number of {out['request_kb']} KiB requests")
    if out["chunk_kb"] > out["file_mb"] * 1024:
        raise UsageError(f"chunk_kb {out['chunk_kb']} is larger than the file")
    if out["nodes"] and out["client"] >= out["nodes"]:
        raise UsageError(f"client node {out['client']} is not one of the {out['nodes']} nodes")


resolve_sim = sim_resolver("bonnie", SIM_PARAMS, _sim_combination)


class Bonnie(Workload):
    name = "bonnie"
    title = "Bonnie (bonnie++) block write/read, rewrite, random seeks"
    source = "VC-RAID §4.2.2, Fig. 8"
    params = {
        "size_mb": Param(int, 100, "file size in MiB (paper: 100 MB)", minimum=1),
        "ram_mb": Param(int, None, "RAM size bonnie++ assumes (-r); default size_mb // 2",
                        minimum=0),
        "chunk_bytes": Param(int, 8192, "block size of the bulk tests (bonnie++ default 8192)",
                             minimum=512),
        "seeks": Param(int, 200_000, "random seeks (paper: 200,000)", minimum=1),
        "seekers": Param(int, 4, "seeker processes (paper: 4)", minimum=1, maximum=64),
        "files_k": Param(int, 0, "file-creation tests with this many x1024 files (-n); 0 skips "
                         "them (the VC-RAID paper reports block tests only)", minimum=0),
        "direct": Param(bool, True, "O_DIRECT for the bulk tests (-D)"),
        "per_char": Param(bool, False, "run the per-character tests (omit -f)"),
        "seed": Param(int, 1, "random seed (-z)", minimum=0),
        "timeout": Param(float, 7200.0, "seconds allowed", minimum=1),
    }
    programs = {"bonnie++": "bonnie++"}

    def check_combination(self, params: dict) -> None:
        ram = params["ram_mb"] if params["ram_mb"] is not None else params["size_mb"] // 2
        if params["size_mb"] < 2 * ram:
            raise UsageError(f"workload 'bonnie': size_mb ({params['size_mb']}) must be at least "
                             f"twice ram_mb ({ram}); bonnie++ refuses otherwise", key="ram_mb")

    @staticmethod
    def argv(params: dict, directory: str) -> list[str]:
        ram = params["ram_mb"] if params["ram_mb"] is not None else params["size_mb"] // 2
        argv = ["bonnie++", "-d", directory,
                "-s", f"{params['size_mb']}:{params['chunk_bytes']}:{params['seeks']}:"
                      f"{params['seekers']}",
                "-r", str(ram), "-n", str(params["files_k"]), "-u", "0:0", "-m", "raidlab",
                "-x", "1", "-z", str(params["seed"]), "-q"]
        if not params["per_char"]:
            argv.append("-f")
        if params["direct"]:
            argv.append("-D")
        return argv

    def execute(self, session: RunnerSession, commands: Commands, mountpoint: str | None,
                params: dict, progress: Progress) -> Outcome:
        assert mountpoint is not None
        require("bon_csv2html")                    # host side, checked before anything runs
        out = Outcome()
        directory = join(mountpoint, "bonnie")
        require_empty_target(commands, directory)
        commands.run(["mkdir", directory], timeout=60, label="make working directory")
        argv = self.argv(params, directory)
        try:
            progress(f"bonnie++: {params['size_mb']} MiB file, {params['seeks']} seeks")
            result = commands.run(argv, timeout=params["timeout"], label="bonnie++")
        finally:
            commands.run(["rm", "-rf", directory], timeout=600, check=False,
                         label="cleanup (untimed)")
        stdout = text(result.stdout)
        out.raw.update(stdout=stdout, stderr=text(result.stderr))
        try:
            line = csv_line(stdout)
            columns, metrics, too_fast = parse_csv(line)
        except ValueError as exc:
            raise WorkloadError(f"bonnie++ output not understood: {exc}") from None
        out.raw["csv"] = line
        out.extra["bonnie"] = {k: columns[k] for k in
                               ("bonnie_version", "file_size", "chunk_size", "seeks",
                                "seek_proc_count", "seed", "num_files")}
        for name, (value, unit) in metrics.items():
            out.metric(name, value, unit)
        for name in too_fast:
            out.notes.append(f"{name}: bonnie++ printed +++++ (the test ran too briefly to be "
                             f"timed); not measured")
        started = time.monotonic()
        html = run_on_host(["bon_csv2html"], input=line + "\n", timeout=60)
        commands.host({"argv": ["bon_csv2html"], "rc": html.returncode,
                       "seconds": round(time.monotonic() - started, 6), "label": "csv to html"})
        out.raw["html"] = html.stdout
        return out


WORKLOAD = Bonnie()
