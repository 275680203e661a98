"""ServerBench-like transactions per second (He & Yang, VC-RAID §4.2.1 / §4.3.1, Figs. 4-6).

What the paper ran: ZD's ServerBench 4.1, a server program on the machine under test and
client programs on five Windows 98 PCs over 100 Mbit Ethernet; "4 test sets corresponding to
1 to 4 clients", "for each test set, there are 16 groups (mixes), each with 32 transactions";
a transaction is a client's read or write request, the server processing it, and the response;
write ratio 0.1 / 0.5 / 0.9; mean request size 1 KB (0.5 KB for Fig. 5); a 128 MB data set
in 4 segments of 32 MB; the score is transactions per second.

What this reproduces (raidlab/workloads/tps.c, a static C program so it also runs in the lab
VM, which has no Python):
- a server process on the machine with the array, forking one handler per client connection,
  serving read and write transactions with pread/pwrite on the data set's files on the array;
- 1..N client processes over TCP (127.0.0.1, TCP_NODELAY), each sending its transactions one
  at a time and waiting for the response; client sets run one after another;
- per client: `mixes` x `mix_tx` transactions (16 x 32), read or write drawn with the write
  ratio, segment and request-aligned offset drawn uniformly (the paper: "fairly random with
  no spatial and temporal localities");
- the data set: `dataset_mb` in `segments` files, written in full and fsync'ed before the
  first set (untimed), so writes are overwrites;
- TPS of a set = its transactions / (last client's end - common start); per-mix aggregate
  rates (sum over clients of 32 / mix time) are reported as mix_tps_mean/min/max.

What it does not reproduce, and why:
- ServerBench's own mixes (its standard suite mixes disk, processor and network work in
  proportions we do not have); ours are 16 disk-transaction groups that differ only in their
  random draws. ServerBench's clients ran for fixed periods with think times; ours run a fixed
  number of transactions back to back.
- The network: the paper's clients sat behind a 10/100 switch whose NIC limited TPS beyond 2
  clients (§4.3.1); loopback has no such limit, so the drop after 2 clients is not expected.
- The request size is fixed (1 KB or 0.5 KB), where the paper gives a mean.
- Server file I/O uses O_DIRECT by default (`io = "direct"`): the paper's server had 64 MB of
  RAM against the 128 MB data set, so its reads and writes reached the disks; on a host with
  gigabytes of RAM buffered I/O would serve the whole data set from the page cache. `dsync`
  (O_DSYNC, buffered reads) and `buffered` are available.
- `idle_s` (default 0): with it, the data set is written by one `tps --prepare`, the runner
  stays idle that many seconds (a write-back cache such as VC-RAID's can destage the data set
  from its log), then `tps --run` times the client sets. The paper does not say how long its
  data set sat before the test, so the claims use 0.
- Each read is checked: every 512-byte block carries its block number, so data read from the
  wrong place is counted (verify_errors) and fails the run.

The binary is built on first use with `gcc -O2 -static` and cached under
~/.cache/raidlab/bin/tps-<source hash> (`tps_binary()`, raidlab.workloads.cprogram); the lab
VM image includes it.
"""

from __future__ import annotations

import json
from pathlib import Path

from raidlab.errors import UsageError, WorkloadError
from raidlab.workloads.cprogram import static_program
from raidlab.workloads.base import (Commands, Outcome, Param, Progress, RunnerSession, Workload,
                                    join, require_empty_target, text)

SOURCE = Path(__file__).with_name("tps.c")


def tps_binary() -> Path:
    """The static TPS program, built from tps.c on first use and cached by source hash."""
    return static_program(SOURCE, "tps")


def parse_output(stdout: str) -> list[dict]:
    """The JSON lines tps prints (events prepare, set, done)."""
    events = []
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            events.append(json.loads(line))
    return events


def _last_line(result) -> str:
    """The last line of a failed command's stderr, or its exit status."""
    return (text(result.stderr).strip().splitlines() or [f"exit {result.rc}"])[-1]


class TPS(Workload):
    name = "tps"
    title = "ServerBench-like transactions per second over loopback"
    source = "VC-RAID §4.2.1, Figs. 4-6"
    params = {
        "clients": Param(list, [1, 2, 3, 4], "client sets, run in this order (paper: 1..4)",
                         minimum=1, maximum=64),
        "write_ratio": Param(float, 0.5, "fraction of write transactions (paper: 0.1/0.5/0.9)",
                             minimum=0.0, maximum=1.0),
        "request_size": Param(int, 1024, "bytes per transaction (paper: 1 KB; Fig. 5 0.5 KB)",
                              minimum=512, maximum=65536),
        "mixes": Param(int, 16, "mixes per client set (paper: 16)", minimum=1, maximum=64),
        "mix_tx": Param(int, 32, "transactions per mix and client (paper: 32)", minimum=1),
        "dataset_mb": Param(int, 128, "data set in MiB (paper: 128 MB)", minimum=1),
        "segments": Param(int, 4, "data segments / files (paper: 4 of 32 MB)", minimum=1,
                          maximum=64),
        "io": Param(str, "direct", "server file I/O: direct (O_DIRECT), dsync, buffered",
                    choices=("direct", "dsync", "buffered")),
        "seed": Param(int, 1, "seed of the clients' random draws", minimum=0),
        "idle_s": Param(float, 0.0, "idle seconds between writing the data set and the first "
                        "client set (the paper does not say: 0)", minimum=0.0, maximum=3600.0),
        "timeout": Param(float, 7200.0, "seconds allowed", minimum=1),
    }
    programs = {}          # only the tps binary the driver copies, and rm/mkdir/chmod

    def check_combination(self, params: dict) -> None:
        if params["request_size"] % 512:
            raise UsageError("workload 'tps' parameter 'request_size' must be a multiple of 512",
                             key="request_size")
        if (params["dataset_mb"] << 20) % (params["segments"] * params["request_size"]):
            raise UsageError("workload 'tps': dataset_mb must split into 'segments' segments of "
                             "whole requests", key="dataset_mb")

    @staticmethod
    def argv(binary: str, params: dict, directory: str,
             steps: tuple[str, ...] = ("--prepare", "--run")) -> list[str]:
        return [binary, *steps, "--dir", directory,
                "--dataset-mb", str(params["dataset_mb"]), "--segments", str(params["segments"]),
                "--clients", ",".join(map(str, params["clients"])),
                "--mixes", str(params["mixes"]), "--mix-tx", str(params["mix_tx"]),
                "--request-size", str(params["request_size"]),
                "--write-ratio", repr(params["write_ratio"]), "--io", params["io"],
                "--seed", str(params["seed"])]

    def execute(self, session: RunnerSession, commands: Commands, mountpoint: str | None,
                params: dict, progress: Progress) -> Outcome:
        assert mountpoint is not None
        out = Outcome()
        binary = tps_binary()
        remote = join(session.scratch, binary.name)
        session.put(binary, remote)
        commands.run(["chmod", "755", remote], timeout=60, label="make tps executable")
        directory = join(mountpoint, "tps")
        require_empty_target(commands, directory)
        commands.run(["mkdir", directory], timeout=60, label="make data directory")
        try:
            progress(f"tps: {params['dataset_mb']} MiB data set, clients "
                     f"{params['clients']}, write ratio {params['write_ratio']}")
            prepared = ""
            if params["idle_s"] > 0:
                first = commands.run(self.argv(remote, params, directory, ("--prepare",)),
                                     timeout=params["timeout"], check=False, label="tps prepare")
                prepared = text(first.stdout)
                if first.rc != 0:
                    out.raw.update(stdout=prepared, stderr=text(first.stderr))
                    raise WorkloadError(f"tps --prepare failed: {_last_line(first)}",
                                        returncode=first.rc)
                commands.idle(params["idle_s"], "after the data set: idle (untimed)")
                steps: tuple[str, ...] = ("--run",)
            else:
                steps = ("--prepare", "--run")
            result = commands.run(self.argv(remote, params, directory, steps),
                                  timeout=params["timeout"], check=False, label="tps")
        finally:
            commands.run(["rm", "-rf", directory, remote], timeout=600, check=False,
                         label="cleanup (untimed)")
        stdout, stderr = prepared + text(result.stdout), text(result.stderr)
        out.raw.update(stdout=stdout, stderr=stderr)
        try:
            events = parse_output(stdout)
        except ValueError as exc:
            raise WorkloadError(f"tps output not understood: {exc}") from None
        sets = [e for e in events if e.get("event") == "set"]
        bad = [s for s in sets if s["error"] or s["verify_errors"]
               or s["server_reads"] != s["reads"] or s["server_writes"] != s["writes"]]
        if result.rc != 0 or bad or len(sets) != len(params["clients"]):
            detail = (bad[0]["error"] or f"{bad[0]['verify_errors']} verify errors") if bad \
                else _last_line(result)
            raise WorkloadError(f"tps failed: {detail}", returncode=result.rc)
        prepare = next((e for e in events if e.get("event") == "prepare"), None)
        if prepare:
            out.metric("prepare_seconds", prepare["seconds"], "s")
        for s in sets:
            n = s["clients"]
            out.metric(f"tps_c{n}", s["tps"], "tx/s")
            out.metric(f"mean_latency_ms_c{n}", s["mean_latency_ms"], "ms")
            out.metric(f"mix_tps_mean_c{n}", s["mix_tps_mean"], "tx/s")
        out.metric("tps", round(sum(s["tps"] for s in sets) / len(sets), 3), "tx/s")
        out.extra["sets"] = sets
        out.notes.append("tps is the mean over the client sets; tps_cN is the set with N "
                         "clients (the paper's Fig. 4 x axis)")
        return out


WORKLOAD = TPS()
