"""Scale-out on one machine: the DCD Tables 2-5 and SA-RAID figure scenarios run serially,
with `--jobs 2`, and on a two-worker Dask LocalCluster (`--scheduler local:2`), one mode
after the other in one invocation, on a machine with nothing else running.

    python results/bench/scaleout/run.py [--out DIR] [--modes serial,jobs2,local2]

Each mode runs every scenario with `raidlab run` into DIR/<mode>/ (default
/tmp/raidlab-bench-scaleout). Written beside this file: times.json (per mode and scenario:
wall seconds, runs, the runs' own seconds summed from their run files) and table.md, with
the speed-up over serial and the executor's overhead per run: (wall x slots - the runs'
own seconds) / runs, what the slots spent not running a run. Virtual-time runs are
deterministic, so every mode must produce the same metrics; the script checks that too and
fails if they differ.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
SCENARIOS = ["dcd-table2", "dcd-table3", "dcd-table4", "dcd-table5", "sa-raid-figures"]
# Metrics of the wall clock, which differ from mode to mode; every other metric must not.
WALL = {"requests_per_wall_second", "wall_seconds", "virtual_seconds_per_wall_second"}
MODES = {"serial": ([], 1), "jobs2": (["--jobs", "2"], 2), "local2": (["--scheduler", "local:2"], 2)}


def _metrics(run: dict) -> dict:
    return {k: v["value"] for k, v in run["metrics"].items() if k not in WALL}


def run_mode(mode: str, out: Path) -> dict:
    extra, slots = MODES[mode]
    rows = {}
    for sid in SCENARIOS:
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-c", "from raidlab.cli import main; main()", "run",
                               str(REPO / "scenarios" / f"{sid}.toml"), "--results", str(out / mode), *extra],
                              capture_output=True, text=True, cwd=REPO)
        wall = time.monotonic() - started
        if proc.returncode != 0:
            raise SystemExit(f"{mode} {sid}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
        directory = Path(proc.stdout.strip().splitlines()[-1])
        runs = [json.loads(p.read_text()) for p in sorted((directory / "runs").glob("*.json"))]
        rows[sid] = {"wall_s": round(wall, 2), "runs": len(runs),
                     "run_seconds": round(sum(r["seconds"] for r in runs), 2), "directory": str(directory),
                     "metrics": {f"{r['arch']}/{r['case']}/{r['repetition']}": _metrics(r) for r in runs}}
        print(f"{mode} {sid}: {wall:.1f} s, {len(runs)} runs", file=sys.stderr)
    return {"slots": slots, "scenarios": rows}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="/tmp/raidlab-bench-scaleout")
    parser.add_argument("--modes", default=",".join(MODES))
    args = parser.parse_args()
    out = Path(args.out)
    modes = args.modes.split(",")
    result = {"commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                       cwd=REPO).stdout.strip(),
              "cpus": os.cpu_count(), "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "modes": {}}
    for mode in modes:
        result["modes"][mode] = run_mode(mode, out)
    reference = result["modes"][modes[0]]["scenarios"]
    for mode in modes[1:]:
        for sid, row in result["modes"][mode]["scenarios"].items():
            if row["metrics"] != reference[sid]["metrics"]:
                raise SystemExit(f"{mode} {sid}: metrics differ from {modes[0]}'s")
    lines = ["| mode | wall (s) | runs | runs' own seconds, summed | speed-up over serial | overhead per run (ms) |",
             "|---|---|---|---|---|---|"]
    serial_wall = None
    for mode in modes:
        block = result["modes"][mode]
        wall = sum(r["wall_s"] for r in block["scenarios"].values())
        runs = sum(r["runs"] for r in block["scenarios"].values())
        own = sum(r["run_seconds"] for r in block["scenarios"].values())
        serial_wall = wall if mode == "serial" else serial_wall
        speedup = f"{serial_wall / wall:.2f}" if serial_wall else "-"
        overhead = (wall * block["slots"] - own) / runs * 1000
        lines.append(f"| {mode} | {wall:.1f} | {runs} | {own:.1f} | {speedup} | {overhead:.0f} |")
    for block in result["modes"].values():
        for row in block["scenarios"].values():
            del row["metrics"]  # checked equal above; the run files keep them
    (HERE / "times.json").write_text(json.dumps(result, indent=1) + "\n")
    (HERE / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
