"""workloads/*.toml document exactly the parameters the drivers declare (keys, types,
defaults, bounds), and their paper cases pass the drivers' validation."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

import raidlab.workloads as workloads

DEFINITIONS = Path(__file__).resolve().parents[2] / "workloads"


@pytest.mark.parametrize("name", workloads.NAMES)
def test_definition_matches_driver(name):
    doc = tomllib.loads((DEFINITIONS / f"{name}.toml").read_text())
    driver = workloads.get(name)
    assert doc["workload"]["name"] == name
    assert doc["workload"]["raw_device"] is (not driver.needs_mountpoint)
    assert doc["workload"]["programs"] == list(driver.programs)
    assert set(doc["params"]) == set(driver.params)
    for key, spec in driver.params.items():
        entry = doc["params"][key]
        assert entry["type"] == spec.kind.__name__, key
        assert entry.get("default") == spec.default, key
        assert entry.get("minimum") == spec.minimum, key
        assert entry.get("maximum") == spec.maximum, key
        assert tuple(entry["choices"]) == spec.choices if spec.choices else "choices" not in entry
        assert entry["help"] == spec.help
    for case, params in doc.get("cases", {}).items():
        driver.validate(params)     # raises UsageError if a case names an unknown key


def test_every_definition_has_a_driver():
    files = {p.stem for p in DEFINITIONS.glob("*.toml")}
    assert files == set(workloads.NAMES)


def test_postmark_cases_are_the_papers():
    from raidlab.workloads.postmark import PAPER_CASES

    doc = tomllib.loads((DEFINITIONS / "postmark.toml").read_text())
    assert doc["cases"] == PAPER_CASES
