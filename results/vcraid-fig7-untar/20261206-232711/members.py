"""What the drives of the RAID 5 columns did in each run (raid5: md RAID 5 in the lab VM;
raid5e: the engine's raid5, served to the same VM): each drive's counters after the run
minus before, summed over the four members.

    python results/vcraid-fig7-untar/20261206-232711/members.py [RESULTS_DIR]

RESULTS_DIR: a results directory of this scenario (default: the one this file is in).

Only reads the run files, so what ran beside it changes nothing.
"""

import json
import pathlib

import sys

HERE = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent) / "runs"
FIELDS = ("reads", "bytes_read", "writes", "bytes_written", "busy_time")


def drives(status):
    return {m["name"]: m for m in status["statistics"]["members"]}


def totals(run):
    after, before = drives(run["array_status"]), drives(run["array_status_before"])
    return {f: sum(after[n][f] - before[n][f] for n in after) for f in FIELDS}


print("| run | untar / copy / remove s | member reads | MiB read | KiB a read | member writes | MiB written | "
      "KiB a write | drive busy s | engine: RCW / RMW stripes, stripe cache hits / misses |")
print("|---|---|---|---|---|---|---|---|---|---|")
for path in sorted(HERE.glob("raid5*--sync--r*.json")):
    run = json.loads(path.read_text())
    t = totals(run)
    m = run["metrics"]
    times = " / ".join(f"{m[k]['value'] if isinstance(m[k], dict) else m[k]:.0f}"
                       for k in ("untar_seconds", "copy_seconds", "remove_seconds"))
    engine = ""
    stats, before = run["array_status"]["statistics"], run["array_status_before"]["statistics"]
    if "rcw_stripes" in stats:
        cache, cache0 = stats["stripe_cache"], before["stripe_cache"]
        engine = (f"{stats['rcw_stripes'] - before['rcw_stripes']:,} / {stats['rmw_stripes'] - before['rmw_stripes']:,}, "
                  f"{cache['hits'] - cache0['hits']:,} / {cache['misses'] - cache0['misses']:,}")
    print(f"| {path.stem} | {times} | {t['reads']:,} | {t['bytes_read'] / 2**20:,.0f} | "
          f"{t['bytes_read'] / max(1, t['reads']) / 1024:.1f} | {t['writes']:,} | {t['bytes_written'] / 2**20:,.0f} | "
          f"{t['bytes_written'] / max(1, t['writes']) / 1024:.1f} | {t['busy_time']:,.0f} | {engine} |")
