"""process_cpu reads a process's CPU seconds from /proc (the daemon's status reports its own
and QEMU's): checked against getrusage for this process, and None for a process that is gone."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

from raidlab.lab import process_cpu


def test_matches_getrusage_for_this_process():
    sum(i * i for i in range(3_000_000))  # some user time to measure
    mine = process_cpu(os.getpid())
    usage = resource.getrusage(resource.RUSAGE_SELF)
    assert mine is not None and mine["user_s"] > 0
    assert abs(mine["user_s"] - usage.ru_utime) < 0.1
    assert abs(mine["system_s"] - usage.ru_stime) < 0.1


def test_none_for_a_process_that_is_gone_or_unknown():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert process_cpu(proc.pid) is None
    assert process_cpu(None) is None
