"""`raidlab bench engine` end to end at a tiny size: the engine's loop device, the bare
FUSE pass-through and the raw loop device are each measured by fio in one run, and the lab
is released afterwards. No timing is asserted (timings are the benchmark's, not a test's)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from raidlab.lab import held_under

pytestmark = [pytest.mark.root, pytest.mark.live]


def test_bench_engine_measures_three_targets_and_leaves_nothing(raidlab_cmd, tmp_path):
    home = tmp_path / "home"
    proc = subprocess.run([*raidlab_cmd, "bench", "engine", "--arch", "raid5", "--disks", "3", "--disk-size", "16M",
                           "--runtime", "1", "--json"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "RAIDLAB_HOME": str(home)})
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert set(doc["results"]) == {"raw", "passthrough", "volume"}
    assert len(set(doc["devices"].values())) == 3
    for target, figures in doc["results"].items():
        for workload in ("randwrite_4k", "seqwrite_1m"):
            assert figures[workload]["ios"] > 0, (target, workload)
    for row in doc["ratios"]:
        assert row["raw"] > 0 and row["of_raw"] == pytest.approx(row["engine"] / row["raw"])
        assert row["ratio"] == pytest.approx(row["engine"] / row["passthrough"])
    assert doc["array"]["member_writes"] > 0
    assert held_under(home) == []
