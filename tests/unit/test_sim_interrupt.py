"""SIGTERM or Ctrl-C during a virtual-time scenario run stops it with one line, exit 128+N,
and the manifest says interrupted: the signal lands inside trio's tasks and must unwind as
itself, not as a traceback of nested exception groups."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCENARIO = """
[scenario]
id = "sim-interrupt"
title = "t"
paper = "004"
kind = "sim"
runner = "native"
repeat = 1

[workload]
name = "bonnie"
params = { file_mb = 4000 }

[host]
model = "raidx-pentium-node"

[[case]]
name = "long"

[[arch]]
label = "raid10"
arch = "raid10"
disks = 4
chunk = "32K"
disk_model = "maxtor-91020d6"
disk_size = "8G"
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_a_sim_run_in_one_line(tmp_path, signum, raidlab_cmd, terminal_sigint):
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO)
    proc = subprocess.Popen([*raidlab_cmd, "run", str(path), "--results", str(tmp_path / "results")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=terminal_sigint)
    runs = tmp_path / "results" / "sim-interrupt"
    deadline = time.monotonic() + 60
    while not list(runs.glob("*/manifest.json")) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(2.0)  # inside the replay by now (4000 MiB take minutes)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    manifest = json.loads(next(runs.glob("*/manifest.json")).read_text())
    assert manifest["status"] == "interrupted"
