"""A live scenario whose [[arch]] names `cluster_nodes`: each run brings up a cluster of that
many nodes, builds the array over its disks from node 0, runs the workload, and takes it all
down; a run killed outright leaves array and cluster to the next run, which destroys both."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lab_leftovers import leftovers

pytestmark = [pytest.mark.root, pytest.mark.live]

SCENARIO = """
[scenario]
id = "unit-cluster-run"
title = "a live run over a scratch cluster"
paper = "004"
source = "Fig. 11"
kind = "live"
runner = "native"
repeat = 1

[[arch]]
label = "raidx"
arch = "raidx"
disks = 3
cluster_nodes = 3
disk_model = "none"
disk_size = "64M"
chunk = "32K"

[workload]
name = "seqfile"
params = { file_kb = FILE_KB, block_kb = 64 }

[[case]]
name = "file"
"""


def _netns() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith("rlx-rc")]


def test_a_run_over_a_scratch_cluster_and_a_killed_one(tmp_path, raidlab_cmd):
    path = tmp_path / "s.toml"
    home, results = tmp_path / "home", tmp_path / "res"
    path.write_text(SCENARIO.replace("FILE_KB", "8192"))
    argv = [*raidlab_cmd, "run", str(path), "--home", str(home), "--results", str(results)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads(next(results.glob("unit-cluster-run/*/runs/raidx--file--r1.json")).read_text())
    assert run["status"] == "ok" and run["metrics"]["read_mb_s"]["value"] > 0
    assert run["array_status"]["cluster"]["node"] == 0
    assert run["array_status"]["cluster"]["name"].startswith("rc")
    assert not _netns() and not leftovers(home)

    # Killed outright mid-workload: the array and its cluster stay; the next run destroys both.
    path.write_text(SCENARIO.replace("FILE_KB", "65536"))
    killed = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    seen = ""
    while "seqfile running" not in seen and time.monotonic() < deadline:
        seen += killed.stdout.readline()
    assert "seqfile running" in seen, seen[-2000:]
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=30)
    assert len(_netns()) == 3
    path.write_text(SCENARIO.replace("FILE_KB", "4096"))
    again = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    said = again.stdout + again.stderr
    assert "destroyed scratch array" in said and "destroyed scratch cluster" in said
    assert not _netns() and not leftovers(home)
