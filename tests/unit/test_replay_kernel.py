"""A replay on raidlab's kernel is deterministic: the same requests give the same report on
every replayable architecture and for the cluster's workloads; a stop signal ends it in one
line."""

from __future__ import annotations

import itertools
import signal
import subprocess
import time

import pytest

from raidlab import archs
from raidlab.disks import host as hosts
from raidlab.runners.virtual import SimSpec, replay_requests
from raidlab.traces.synth import synth

REQUESTS = 600


def _replay(arch: str) -> dict:
    report = replay_requests(SimSpec(arch, "hp-c2200a"), itertools.islice(synth("cello", 120, 1), REQUESTS))
    report.pop("speed")
    return report


@pytest.mark.parametrize("arch", archs.names("sim"))
def test_a_replay_gives_the_same_report_twice(arch):
    first = _replay(arch)
    assert first["trace"]["requests"] > 0
    assert first["response"]["read"]["count"] + first["response"]["write"]["count"] > 0
    assert _replay(arch) == first


def test_a_sim_case_names_no_scheduler():
    from raidlab.errors import UsageError
    from raidlab.workloads.trace import validate_params

    with pytest.raises(UsageError, match="unknown sim parameter 'scheduler'"):
        validate_params({"profile": "cello", "duration": 60, "scheduler": "kernel"})


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_a_replay_in_one_line(tmp_path, signum, raidlab_cmd, terminal_sigint):
    trace = tmp_path / "cello.trace"
    subprocess.run([*raidlab_cmd, "trace", "synth", "--profile", "cello", "--duration", "6h", "-o", str(trace)],
                   check=True, capture_output=True)
    proc = subprocess.Popen([*raidlab_cmd, "sim", "--arch", "raid5", "--disks", "4", "--disk-model", "hp-c2200a",
                             "--trace", str(trace)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=terminal_sigint)
    time.sleep(4.0)  # inside the replay by now (six hours of cello take longer)
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, err[-3000:]
    assert "Traceback" not in err, err[-3000:]


MiB = 1 << 20
RAIDX = SimSpec(arch="raidx", disk_model="maxtor-91020d6", disks=4, chunk=32 * 1024, disk_size=256 * MiB,
                discipline="scan", options={"image_buffer": "memory"})
TWIN_HOST = hosts.get("raidx-pentium-node")   # the twin's nodes (andrew, parallel, bonnie)


def _workload(name: str, params: dict) -> dict:
    import dataclasses
    import importlib

    run = getattr(importlib.import_module(f"raidlab.runners.{name}"), f"run_{name}")
    host = TWIN_HOST if name != "stream" else None
    report = run(dataclasses.replace(RAIDX, host=host), params)
    report.pop("speed", None)
    return report


@pytest.mark.parametrize("name, params", [
    ("andrew", {"clients": 3, "region_kb": 16384}),
    ("parallel", {"clients": 4, "op": "write", "file_kb": 4096}),
    ("bonnie", {"file_mb": 2, "seeks": 40}),
    ("stream", {"file_kb": 4096}),
])
def test_the_cluster_workloads_run_deterministically(name, params):
    assert _workload(name, params) == _workload(name, params)
