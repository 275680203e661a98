"""Bonnie in virtual time from one node of the cluster's twin (raidlab.runners.bonnie):
deterministic, Bonnie's order and counts, every byte where the layout puts it, the program's
processor time on the client's processor, and a sim scenario runs it with Bonnie's metrics."""

from __future__ import annotations

import pytest

from raidlab import scenarios
from raidlab.disks import host as hosts
from raidlab.errors import UsageError
from raidlab.runners import sim
from raidlab.runners.bonnie import PHASES, run_bonnie
from raidlab.runners.virtual import SimSpec
from raidlab.workloads.bonnie import resolve_sim

MiB = 1 << 20
SMALL = {"file_mb": 2, "seeks": 40}
NODE = hosts.get("raidx-pentium-node")   # the driver's cost on every node


def _spec(arch: str = "raid10", disks: int = 4, **options) -> SimSpec:
    return SimSpec(arch=arch, disk_model="maxtor-91020d6", disks=disks, chunk=32 * 1024, disk_size=64 * MiB,
                   discipline="scan", options=options, host=NODE)


def test_deterministic_and_in_bonnies_order():
    first, again = run_bonnie(_spec(), SMALL), run_bonnie(_spec(), SMALL)
    assert list(first["phases"]) == list(PHASES)
    assert first["phases"] == again["phases"]
    assert run_bonnie(_spec(), {**SMALL, "seed": 1})["phases"]["random_seeks"] != first["phases"]["random_seeks"]


def test_every_test_moves_the_file_through_the_layout():
    """raid10 (two copies): a write test writes the file twice over the members, a read test
    reads it once; rewrite does both; the seeks read 40 chunks and write back each seeker's
    first and every tenth."""
    phases = run_bonnie(_spec(), SMALL)["phases"]
    moved = {name: (sum(m["bytes_read"] for m in p["members"]), sum(m["bytes_written"] for m in p["members"]))
             for name, p in phases.items() if name != "random_seeks"}
    file = 2 * MiB
    # a write test's numbers end at close(); up to write_depth requests are written after it
    for name in ("char_write", "block_write"):
        assert moved[name][0] == 0 and 0 < moved[name][1] <= 2 * file
    for name in ("char_read", "block_read"):
        assert moved[name] == (file, 0)
    assert moved["rewrite"][0] == file and 0 < moved["rewrite"][1] <= 2 * file
    seeks = phases["random_seeks"]
    assert sum(m["reads"] for m in seeks["members"]) >= 40
    # three seekers share 40 tickets: each writes back its 1st, 11th, 21st, 31st seek
    assert 4 <= seeks["writes_back"] <= 3 * 4


def test_the_putc_loop_runs_on_the_clients_processor():
    slow = run_bonnie(_spec(), {**SMALL, "putc_mb_s": 0.5})["phases"]["char_write"]
    fast = run_bonnie(_spec(), SMALL)["phases"]["char_write"]
    assert slow["client_program_cpu_s"] == pytest.approx(2 * MiB / 0.5e6)
    assert slow["mb_s"] < 0.5 < fast["mb_s"]
    assert slow["client_cpu_utilization"] > 0.95


def test_a_disk_on_bonnies_own_node_costs_no_network():
    """A one-member layout on node 0, Bonnie on node 0: nothing crosses a cable."""
    phases = run_bonnie(_spec("disk", disks=1), SMALL)["phases"]
    assert all(p["client_bytes_sent"] == 0 and p["client_bytes_received"] == 0 for p in phases.values())
    remote = run_bonnie(_spec("disk", disks=1), {**SMALL, "client": 1})["phases"]
    assert remote["block_read"]["client_bytes_received"] >= 2 * MiB


@pytest.mark.parametrize("params, words", [
    ({"file_mb": 1, "request_kb": 3}, "whole number"),
    ({"chunk_kb": 4096, "file_mb": 1}, "larger than the file"),
    ({"client": 4, "nodes": 2}, "not one of the 2 nodes"),
    ({"putc": 1}, "no parameter 'putc'"),
])
def test_bad_parameters_are_one_line(params, words):
    with pytest.raises(UsageError, match=words):
        resolve_sim(params)


def test_the_fig11_scenario_runs_quick_with_bonnies_metrics():
    scenario = scenarios.load("scenarios/raidx-fig11-bonnie.toml")
    entry = next(a for a in scenario.archs if a.label == "raidx-mem-d4")
    case = next(c for c in scenario.cases if c.name == "bonnie")
    doc = sim.run_bonnie_case(entry, scenarios.quick_params(scenario, case))
    for name in ("char_write_mb_s", "block_write_mb_s", "rewrite_mb_s", "char_read_mb_s", "block_read_mb_s",
                 "random_seeks_per_s"):
        assert doc["metrics"][name]["value"] > 0
    assert doc["raw"]["bonnie"]["params"]["file_mb"] == 8
