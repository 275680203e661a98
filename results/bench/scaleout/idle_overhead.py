"""CPU used by an idle `--scheduler local:2` cluster (the command's own process, which holds
the scheduler and the nannies, and the two worker processes) over 30 s, with Dask's
defaults or with raidlab's QUIET_CONFIG.

Usage: python results/bench/scaleout/idle_overhead.py default|quiet
"""
import sys
import time
from unittest import mock

import psutil

from raidlab import scaleout


def main() -> None:
    which = sys.argv[1]
    config = scaleout.QUIET_CONFIG if which == "quiet" else {}
    with mock.patch.object(scaleout, "QUIET_CONFIG", config):
        with scaleout.connect("local:2", "virtual"):
            me = psutil.Process()
            time.sleep(5)
            procs = [me] + me.children(recursive=True)
            before = {p.pid: sum(p.cpu_times()[:4]) for p in procs}
            time.sleep(30)
            used = sorted(round(sum(p.cpu_times()[:4]) - before[p.pid], 2) for p in procs)
    print(f"{which}: {len(procs)} processes, {sum(used):.2f} CPU-s in 30 s, per process {used}")


if __name__ == "__main__":
    main()
