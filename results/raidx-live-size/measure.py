"""How large a live cluster this host runs: for N nodes, `raidlab cluster up`, a raidx over
it from node 0, 64 MiB written and read back with O_DIRECT, then everything down; the time
of each step, the throughput, and the memory of the processes the cluster runs. Run as
root from the repository: .venv/bin/python results/raidx-live-size/measure.py 4 8 16"""

import os
import re
import subprocess
import sys
import time

HOME = "/tmp/raidlab-live-size"
ENV = {**os.environ, "RAIDLAB_HOME": HOME}
RAIDLAB = [os.path.join(os.path.dirname(sys.executable), "raidlab")]


def run(*argv, check=True):
    proc = subprocess.run([*RAIDLAB, *argv], env=ENV, capture_output=True, text=True)
    if check and proc.returncode:
        raise RuntimeError(f"{' '.join(argv)}: {proc.stderr.strip().splitlines()[-1:]}")
    return proc.stdout.strip()


def rss_mib(pattern):
    pids = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                total += int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
        except (OSError, AttributeError):
            pass
    return total / 1024, len(pids)


for n in [int(a) for a in sys.argv[1:]] or [4, 8, 16]:
    t0 = time.monotonic()
    try:
        run("cluster", "up", "big", "--nodes", str(n), "--disk-size", "64M")
        t1 = time.monotonic()
        dev = run("create", "bx", "--arch", "raidx", "--cluster", "big", "--chunk", "32K")
        t2 = time.monotonic()
        w = subprocess.run(["dd", "if=/dev/zero", f"of={dev}", "bs=1M", "count=64", "oflag=direct"],
                           capture_output=True, text=True).stderr.strip().splitlines()[-1]
        r = subprocess.run(["dd", f"if={dev}", "of=/dev/null", "bs=1M", "count=64", "iflag=direct"],
                           capture_output=True, text=True).stderr.strip().splitlines()[-1]
        nbd_mib, nbd_count = rss_mib("nbdkit|nbdfuse")
        daemons_mib, _ = rss_mib("raidlab.(cluster|service).daemon")
        print(f"n={n}: up {t1 - t0:.1f} s, create {t2 - t1:.1f} s; write {w.split(', ')[-1]}, "
              f"read {r.split(', ')[-1]}; {nbd_count} nbdkit/nbdfuse processes {nbd_mib:.0f} MiB, "
              f"daemons {daemons_mib:.0f} MiB", flush=True)
    except RuntimeError as exc:
        print(f"n={n}: {exc}", flush=True)
    finally:
        run("destroy", "bx", check=False)
        run("cluster", "down", "big", check=False)
left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
print("namespaces left:", sum(1 for line in left.splitlines() if line.startswith("rlx-big-")))
