"""Andrew in virtual time on the cluster's twin (raidlab.runners.andrew): deterministic, a
phase is its reads, its processor time and its writes behind, the writes do not hold the
client up unless asked, clients contend for what they share, and a sim scenario runs it."""

from __future__ import annotations

import pytest

from raidlab import scenarios
from raidlab.disks import host as hosts
from raidlab.errors import UsageError
from raidlab.runners import sim
from raidlab.runners.andrew import run_andrew
from raidlab.runners.virtual import SimSpec
from raidlab.workloads.andrew import resolve_sim

MiB = 1 << 20
NO_IO = {"reads": [0] * 5, "read_kb": [0] * 5, "writes": [0] * 5, "write_kb": [0] * 5}


def _spec(arch: str = "raidx", disks: int = 4, host: str | None = "raidx-pentium-node") -> SimSpec:
    return SimSpec(arch=arch, disk_model="maxtor-91020d6", disks=disks, chunk=32 * 1024, disk_size=256 * MiB,
                   discipline="scan", options={"image_buffer": "memory"} if arch == "raidx" else {},
                   host=hosts.get(host) if host else None)


def test_deterministic():
    params = {"clients": 3, "region_kb": 16384}
    assert run_andrew(_spec(), params)["clients"] == run_andrew(_spec(), params)["clients"]


def test_without_io_a_client_takes_its_processor_time():
    report = run_andrew(_spec(), {**NO_IO, "cpu_ms": [10, 20, 30, 40, 500], "cpu_scale": 2.0})
    assert report["elapsed_seconds"] == pytest.approx(1.2)
    assert report["phase_seconds"]["compile"] == pytest.approx(1.0)


def test_writes_go_behind_unless_the_client_waits_for_them():
    params = {**NO_IO, "cpu_ms": [0, 0, 0, 0, 100], "writes": [0, 0, 0, 0, 64], "write_kb": [0, 0, 0, 0, 4096],
              "region_kb": 16384}
    behind = run_andrew(_spec(), params)
    waited = run_andrew(_spec(), {**params, "sync_at_end": True})
    assert behind["elapsed_seconds"] == pytest.approx(0.1)
    assert behind["background_seconds"] > 0
    assert waited["elapsed_seconds"] > behind["elapsed_seconds"] + 0.05
    written = sum(m["bytes_written"] for m in behind["members"])
    assert written >= 2 * 4096 * 1024        # RAID-x: every write and its image


def test_clients_share_disks_cables_and_each_others_processors():
    params = {"region_kb": 16384, "nodes": 8}
    one = run_andrew(_spec(disks=8), {**params, "clients": 1})
    eight = run_andrew(_spec(disks=8), {**params, "clients": 8})
    assert len(eight["clients"]) == 8
    assert eight["elapsed_seconds"] > one["elapsed_seconds"]
    served = [n["requests_served"] for n in eight["network"]["nodes"]]
    assert min(served) > 0      # every node's disk serves the others


@pytest.mark.parametrize("params, words", [
    ({"cpu_ms": [1, 2, 3]}, "Andrew has 5 phases"),
    ({"writes": [1, 0, 0, 0, 0], "write_kb": [0, 0, 0, 0, 0]}, "mkdir: 1 writes of 0 KiB"),
    ({"write_kb": [0, 70000, 0, 0, 0], "writes": [0, 1, 0, 0, 0]}, "do not fit in its region"),
    ({"clients": 4, "nodes": 2}, "4 clients need 4 nodes"),
    ({"compile": 1}, "no parameter 'compile'"),
])
def test_bad_parameters_are_one_line(params, words):
    with pytest.raises(UsageError, match=words):
        resolve_sim(params)


def test_the_fig7_scenario_runs_quick_with_the_elapsed_time():
    scenario = scenarios.load("scenarios/raidx-fig7-andrew.toml")
    entry = next(a for a in scenario.archs if a.label == "raidx-mem")
    case = next(c for c in scenario.cases if c.name == "c4")
    doc = sim.run_andrew_case(entry, scenarios.quick_params(scenario, case))
    assert doc["metrics"]["elapsed_seconds"]["value"] > 0
    assert doc["metrics"]["clients"]["value"] == 4
