"""Run each test id of FILE alone (no xdist) and write its wall time and the whole machine's busy
CPU seconds over it (from /proc/stat) as JSON lines. Usage: cpu_per_test.py IDS_FILE OUT.jsonl."""
import json, subprocess, sys, time
from pathlib import Path
REPO = Path(__file__).resolve().parents[3]
def stat():
    f = open("/proc/stat").readline().split()[1:]
    v = list(map(int, f)); return (sum(v) - v[3] - v[4]) / 100.0  # busy jiffies (not idle/iowait)
ids = [l.strip() for l in open(sys.argv[1]) if l.strip()]
out = open(sys.argv[2], "a")
for nid in ids:
    c0, t0 = stat(), time.time()
    p = subprocess.run([str(REPO / ".venv/bin/python"), "-m", "pytest", "-q", "-p", "no:xdist", "-m", "", nid], capture_output=True, text=True, cwd=REPO)
    rec = {"id": nid, "wall": round(time.time() - t0, 1), "cpu": round(stat() - c0, 1), "rc": p.returncode}
    print(json.dumps(rec), file=out, flush=True)
