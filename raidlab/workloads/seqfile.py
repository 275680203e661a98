"""Write one file, fsync, drop the caches, read it back: the SA-RAID paper's test (McCormick §3).

§3.1: "all of the read and write tests were done by invoking the read and write system calls
followed by an fsync system call"; one file of 64 KB, 1 MB or 256 MB written and read in
4 KB blocks, the bandwidth of each phase (Figures 1, 5-9). The issue of §3.2, "partition 1
on each disk is about 20% faster than partition 8 ... a write and then read on the raw
device", is the same test with `filesystem = "none"`: the program then writes the device's
first bytes (--raw).

The program is raidlab/workloads/seqfile.c (static, so it also runs in the lab VM; see
raidlab.workloads.cprogram). A phase's time runs from open to the end of the fsync (write)
or of the last read (read). Between them the page cache is dropped (sync; 3 >
/proc/sys/vm/drop_caches); the member drives keep their own buffers, as the paper's disks
did. Every block is a pattern of its index and is checked when read back.

Metrics: write_mb_s, read_mb_s (10^6 bytes per second), write_seconds, read_seconds, and
write_read_mb_s (both phases' bytes over both phases' time: §3.2's raw-device measure).
Virtual time runs the same test as block requests (raidlab.runners.stream).
"""

from __future__ import annotations

import json
from typing import Any

from raidlab.errors import UsageError, WorkloadError
from raidlab.workloads.base import (Commands, Outcome, Param, Progress, RunnerSession, Workload, join,
                                    require_empty_target, sim_resolver, text)
from raidlab.workloads.cprogram import program

KiB = 1024

# The same test in virtual time (raidlab.runners.stream), declared here beside the live one so
# that scenario files are checked without importing the runners.
SIM_PARAMS: dict[str, Param] = {
    "file_kb": Param(int, 262144, "file size, KiB (the paper: 64, 1024, 262144)", minimum=1),
    "block_kb": Param(int, 4, "bytes per read or write call and per request, KiB (the paper: 4)", minimum=1),
    "write_depth": Param(int, 256, "writes in flight during fsync (assumed: the kernel's request table)", minimum=1),
    "read_depth": Param(int, 32, "reads in flight (assumed: a 128 KiB read-ahead window of 4 KiB blocks)",
                        minimum=1),
    "file_offset_kb": Param(int, 4096, "where the file starts in the volume, KiB (assumed: after ext2's first "
                                       "block group metadata)", minimum=0),
    "inode_offset_kb": Param(int, 1024, "where the file's inode block lies, KiB (assumed: ext2's first inode table)",
                             minimum=0),
    "metadata": Param(bool, True, "write the inode block after the data, read it before"),
    "random_reads": Param(int, 0, "after the read, this many reads at random places in the file (0: none)",
                          minimum=0),
    "random_kb": Param(int, 8, "size of each random read, KiB (the paper's suggestion: twice the chunk)", minimum=1),
    "random_depth": Param(int, 1, "random reads in flight", minimum=1),
    "seed": Param(int, 0, "seed of the random reads' places", minimum=0),
}


def _sim_combination(out: dict[str, Any]) -> None:
    if out["file_kb"] % out["block_kb"]:
        raise UsageError(f"file_kb {out['file_kb']} is not a whole number of {out['block_kb']} KiB blocks")
    if out["random_kb"] > out["file_kb"] or out["random_kb"] % out["block_kb"]:
        raise UsageError(f"random_kb {out['random_kb']} must be whole {out['block_kb']} KiB blocks within the file")


resolve_sim = sim_resolver("seqfile", SIM_PARAMS, _sim_combination)  # raidlab.runners.stream's parameters


def parse_output(stdout: str) -> dict[str, dict]:
    """{"write": {...}, "read": {...}} from the program's JSON lines."""
    phases = {}
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            event = json.loads(line)
            phases[event["phase"]] = event
    return phases


class SeqFile(Workload):
    name = "seqfile"
    title = "write one file, fsync, drop caches, read it back"
    source = "SA-RAID §3.1, Figures 1, 5-9"
    needs_mountpoint = False  # a file on the mounted file system, or the raw device (filesystem none)
    params = {
        "file_kb": Param(int, 262144, "file size, KiB (paper: 64, 1024, 262144)", minimum=1),
        "block_kb": Param(int, 4, "bytes per read and write call, KiB (paper: 4)", minimum=1, maximum=65536),
        "drop_caches": Param(bool, True, "drop the page cache between writing and reading"),
        "timeout": Param(float, 3600.0, "seconds allowed", minimum=1),
    }
    programs = {}  # only the seqfile binary the driver copies, and rm/chmod

    def check_combination(self, params: dict) -> None:
        if params["file_kb"] % params["block_kb"]:
            raise UsageError(f"workload 'seqfile': file_kb {params['file_kb']} is not a whole number of "
                             f"{params['block_kb']} KiB blocks")

    def execute(self, session: RunnerSession, commands: Commands, mountpoint: str | None,
                params: dict, progress: Progress) -> Outcome:
        out = Outcome()
        binary = program("seqfile")
        remote = join(session.scratch, binary.name)
        session.put(binary, remote)
        commands.run(["chmod", "755", remote], timeout=60, label="make seqfile executable")
        raw = mountpoint is None
        path = session.device if raw else join(mountpoint, "seqfile.dat")
        if not raw:
            require_empty_target(commands, path)
        argv = [remote, "--path", path, "--bytes", str(params["file_kb"] * KiB),
                "--block", str(params["block_kb"] * KiB)]
        if raw:
            argv.append("--raw")
        if not params["drop_caches"]:
            argv.append("--no-drop-caches")
        progress(f"seqfile: write, fsync, read {params['file_kb']} KiB in {params['block_kb']} KiB calls"
                 + (" on the raw device" if raw else ""))
        try:
            result = commands.run(argv, timeout=params["timeout"], check=False, label="seqfile")
        finally:
            commands.run(["rm", "-f", remote] + ([] if raw else [path]), timeout=600, check=False,
                         label="cleanup (untimed)")
        stdout, stderr = text(result.stdout), text(result.stderr)
        out.raw.update(stdout=stdout, stderr=stderr)
        try:
            phases = parse_output(stdout)
        except (ValueError, KeyError) as exc:
            raise WorkloadError(f"seqfile output not understood: {exc}") from None
        if result.rc != 0 or set(phases) != {"write", "read"}:
            last = (stderr.strip().splitlines() or [f"exit {result.rc}"])[-1]
            if phases.get("read", {}).get("bad_blocks"):
                last = f"{phases['read']['bad_blocks']} blocks read back wrong"
            raise WorkloadError(f"seqfile failed: {last}", returncode=result.rc)
        for phase in ("write", "read"):
            seconds = phases[phase]["seconds"]
            out.metric(f"{phase}_seconds", seconds, "s")
            out.metric(f"{phase}_mb_s", phases[phase]["bytes"] / seconds / 1e6 if seconds > 0 else None, "MB/s")
        both = phases["write"]["seconds"] + phases["read"]["seconds"]
        out.metric("write_read_mb_s", 2 * phases["write"]["bytes"] / both / 1e6 if both > 0 else None, "MB/s")
        return out


WORKLOAD = SeqFile()
