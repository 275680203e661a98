"""kind = "sim" scenarios: run_case's result document, the same trace for every arch,
determinism, scenario checks against the replay, and `raidlab run`'s results layout."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from raidlab.scenarios import ScenarioError
from raidlab.runners.sim import run_case
from raidlab.scenarios import load as load_scenario

ROOT = Path(__file__).resolve().parents[2]

TINY = """
[scenario]
id = "tiny-dcd"
title = "tiny"
kind = "sim"

[[arch]]
label = "disk"
arch = "disk"
disks = 1
disk_model = "hp-c2200a"
disk_size = 335333376

[[arch]]
label = "dcd-logical"
arch = "dcd"
disks = 1
disk_model = "hp-c2200a"
disk_size = 314853376
options = { cache = "logical", report = "immediate" }

[workload]
name = "trace"
params = { trace_seed = 4 }

[[case]]
name = "hplajw"
params = { profile = "hplajw", duration = "4h" }

[quick]
case_params = { hplajw = { duration = "1h" } }

[[claim]]
id = "faster"
text = "DCD writes are faster"
kind = "order"
metric = "write_mean_ms"
case = "hplajw"
order = ["dcd-logical", "disk"]
better = "lower"
"""


@pytest.mark.parametrize("table", [2, 3, 4, 5])
def test_dcd_scenarios_load_and_reference_the_replay(table):
    scenario = load_scenario(ROOT / "scenarios" / f"dcd-table{table}.toml")
    assert scenario.kind == "sim" and scenario.paper == "002" and scenario.source == f"Table {table}"
    assert {c.name for c in scenario.cases} == {"hplajw", "cello", "snake"}
    assert scenario.paper_values and scenario.claims


def test_run_case_document_and_same_trace_for_every_arch(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    scenario = load_scenario(path)
    case = scenario.case("hplajw")
    disk = run_case(scenario, scenario.arch("disk"), case)
    dcd = run_case(scenario, scenario.arch("dcd-logical"), case)
    for doc in (disk, dcd):
        assert doc["workload"] == "trace" and doc["commands"] == []
        assert doc["metrics"]["write_mean_ms"]["unit"] == "ms"
        assert doc["metrics"]["requests"]["value"] == doc["raw"]["trace_stats"]["requests"] > 0
        assert doc["raw"]["replay"]["per_disk"] and doc["raw"]["replay"]["virtual_seconds"] > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.toml"]  # no second copy of the replay
    # One trace for both: addressed inside the smaller volume (the logical DCD's data disk).
    assert disk["raw"]["trace_stats"] == dcd["raw"]["trace_stats"]
    assert disk["raw"]["trace"]["device_size"] == 314853376
    assert dcd["metrics"]["write_mean_ms"]["value"] * 10 < disk["metrics"]["write_mean_ms"]["value"]
    assert dcd["metrics"]["log_writes"]["value"] > 0
    again = run_case(scenario, scenario.arch("dcd-logical"), case)
    assert again["metrics"] == dcd["metrics"] and again["raw"]["replay"] == dcd["raw"]["replay"]


@pytest.mark.parametrize("edit, key", [
    (('arch = "disk"', 'arch = "tape"'), "arch[0].arch"),
    (('cache = "logical"', 'cache = "nvram"'), "arch[1].options"),
    (('duration = "4h"', 'duration = "4h", colour = 1'), "case[0] (hplajw) params"),
    (('duration = "4h"', 'duration = "4h", scheduler = "kernel"'), "case[0] (hplajw) params"),  # virtual time has one
])
def test_bad_sim_scenarios_name_file_and_key(tmp_path, edit, key):
    path = tmp_path / "bad.toml"
    path.write_text(TINY.replace(*edit))
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert str(info.value).startswith(f"{path}: {key}: ")


def test_raidlab_run_writes_the_results_layout(tmp_path, raidlab_cmd):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    done = subprocess.run([*raidlab_cmd, "run", str(path), "--quick", "--results", str(tmp_path / "res"),
                           "--home", str(tmp_path / "home")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = Path(done.stdout.strip())
    assert out.parent == tmp_path / "res" / "tiny-dcd"
    runs = sorted(p.name for p in (out / "runs").iterdir())
    assert runs == ["dcd-logical--hplajw--r1.json", "disk--hplajw--r1.json"]
    doc = json.loads((out / "runs" / "disk--hplajw--r1.json").read_text())
    assert doc["status"] == "ok" and doc["arch"] == "disk" and doc["case"] == "hplajw"
    assert doc["params"]["duration"] == "1h"  # the [quick] duration
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete"
