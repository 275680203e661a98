"""Live cluster against its twin at 4 nodes: the same parallel clients (RAID-x §7's test,
20 MB files in 32 KiB requests, 4 in flight, O_DIRECT) on a live cluster of 4 namespaces
(`raidlab cluster clients`, each client on its own instance of the array) and on the twin
(raidlab.runners.parallel) with the same layout, disks of model `none` (no drive time), the
twin's links at 12.5 MB/s each way (the live cables' 100mbit tbf), 20 µs per hop and no
driver cost. Run as root from the repository:
    .venv/bin/python results/raidx-live-vs-twin/compare.py
Prints one line per (architecture, op, clients) and writes compare.json beside itself."""

import json
import os
import subprocess
import sys
from pathlib import Path

from raidlab.runners.parallel import run_parallel
from raidlab.runners.virtual import SimSpec

HERE = Path(__file__).resolve().parent
HOME = "/tmp/raidlab-live-vs-twin"
ENV = {**os.environ, "RAIDLAB_HOME": HOME}
RAIDLAB = os.path.join(os.path.dirname(sys.executable), "raidlab")
ARCHS = [("chained", {}), ("raid10", {}), ("raidx", {"image_buffer": "memory"})]
CLIENTS = [1, 2, 4]


def rl(*argv, check=True):
    proc = subprocess.run([RAIDLAB, *argv], env=ENV, capture_output=True, text=True)
    if check and proc.returncode:
        raise SystemExit(f"raidlab {' '.join(argv)}: {proc.stderr.strip()}")
    return proc.stdout


rows = []
rl("cluster", "up", "lvt", "--nodes", "4", "--disk-size", "128M")
try:
    for arch, options in ARCHS:
        opts = [x for k, v in options.items() for x in ("-o", f"{k}={v}")]
        rl("create", "a", "--arch", arch, "--cluster", "lvt", "--chunk", "32K", *opts)
        try:
            spec = SimSpec(arch=arch, disk_model="none", disks=4, chunk=32 * 1024, disk_size=128 << 20,
                           options=options)
            for op in ("write", "read"):
                for clients in CLIENTS:
                    live = json.loads(rl("cluster", "clients", "lvt", "a", "--clients", str(clients), "--op", op,
                                         "--json"))
                    twin = run_parallel(spec, {"clients": clients, "op": op, "file_kb": 20480, "block_kb": 32,
                                               "read_depth": 4, "write_depth": 4, "file_offset_kb": 0, "nodes": 4})
                    row = {"arch": arch, "options": options, "op": op, "clients": clients,
                           "live_mb_s": live["aggregate_mb_s"], "twin_mb_s": twin["aggregate_mb_s"],
                           "live_sent_per_node": live["bytes_sent_per_node"],
                           "twin_sent_per_node": [n["bytes_sent"] for n in twin["network"]["nodes"]]}
                    rows.append(row)
                    print(f"{arch:8s} {op:5s} {clients} client(s): live {row['live_mb_s']:6.2f} MB/s, "
                          f"twin {row['twin_mb_s']:6.2f} MB/s, live/twin {row['live_mb_s'] / row['twin_mb_s']:.2f}",
                          flush=True)
        finally:
            rl("destroy", "a", check=False)
finally:
    rl("cluster", "down", "lvt", check=False)
(HERE / "compare.json").write_text(json.dumps(rows, indent=1))
