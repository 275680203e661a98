"""Where a lab-VM run's time went, from a `raidlab run` results directory: the run's wall
time, the PostMark phase, the steps around it, the CPU of the array daemon and of QEMU,
and the busiest drive's busy time during the workload (the run's own counters).

    python results/bench/vm-time/summarize.py RESULTS_DIR
"""

import glob
import json
import sys


def drive_busy(status: dict) -> list[float]:
    for table in (status or {}).get("tables", []):
        if table["title"] == "drives":
            return [float(row[-1]) for row in table["rows"]]
    members = (status or {}).get("statistics", {}).get("members", [])  # the engine's own arrays
    return [float(m["busy_time"]) for m in members]


def main(directory: str) -> None:
    print("| arch | run s | workload s | tx/s | mkfs s | settle s | last umount s | daemon CPU s | QEMU CPU s | busiest drive busy s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for path in sorted(glob.glob(f"{directory}/runs/*.json")):
        run = json.load(open(path))
        after, before = run.get("array_status") or {}, run.get("array_status_before") or {}

        def cpu(who: str) -> float:
            return sum(after.get("cpu", {}).get(who, {}).values()) - sum(before.get("cpu", {}).get(who, {}).values())

        busy_after, busy_before = drive_busy(after), drive_busy(before)
        busy = [a - b for a, b in zip(busy_after, busy_before)] if busy_before else busy_after
        steps = run.get("setup_commands", [])
        mkfs = sum(c["seconds"] for c in steps if c["argv"][0].startswith("mkfs"))
        umounts = [c["seconds"] for c in steps if c["argv"][0] == "umount"]
        metrics = {k: v["value"] for k, v in run.get("metrics", {}).items()}
        workload = metrics.get("elapsed_seconds") or sum(
            c["seconds"] for c in run.get("commands", []) if c.get("label") == run.get("workload"))
        print(f"| {run['arch']} | {run['seconds']:.0f} | {workload:.1f} | {metrics.get('tps', '')} | {mkfs:.1f} "
              f"| {(run.get('cold_start') or {}).get('seconds', 0):.1f} | {umounts[-1] if umounts else 0:.1f} "
              f"| {cpu('daemon'):.1f} | {cpu('vm'):.1f} | {max(busy) if busy else 0:.1f} |")


if __name__ == "__main__":
    main(sys.argv[1])
