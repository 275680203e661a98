"""[control], the runner-fairness control: the engine's raid5 beside md's raid5 on the same
drives. The report gives engine / md of the means per case and metric, "ok" inside the band,
"runner-biased" outside it (and a note beside each engine-vs-md claim there), "not measured"
where a mean is missing; the loader refuses a control that names no [[arch]], compares
different drives or has a bad band, listing it with the scenario's other problems."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raidlab import scenarios
from raidlab.report import control as controlmod
from raidlab.report.render import write_report
from raidlab.report.results import Stat
from raidlab.scenarios import ScenarioError

DRIVES = '''disks = 4
disk_model = ["ibm-dnes-318350", "ibm-dnes-309170", "seagate-st52160n", "seagate-st32151n"]
disk_size = "1G"
chunk = "64K"
'''

SCENARIO = f'''
[scenario]
id = "unit-control"
title = "unit control"
paper = "000"
source = "Table 2"
kind = "live"
runner = "vm"
repeat = 1

[[arch]]
label = "raid0"
arch = "md-raid0"
{DRIVES}
[[arch]]
label = "scd"
arch = "vcraid"
{DRIVES}options = {{ config = "scd", cache_model = "maxtor-91020d6", cache_size = "200M", ram_buffer = "4M" }}

[[arch]]
label = "raid5e"
arch = "raid5"
{DRIVES}
[[arch]]
label = "raid5"
arch = "md-raid5"
{DRIVES}
[workload]
name = "postmark"
params = {{ read_block = 1024, write_block = 1024 }}

[[case]]
name = "small"
params = {{ files = 1000, transactions = 50000 }}

[[case]]
name = "medium"
params = {{ files = 20000, transactions = 50000 }}

[[claim]]
id = "scd-over-raid5"
text = "VC-RAID beats RAID 5"
kind = "ratio"
metric = "tps"
cases = ["small", "medium"]
num = "scd"
den = "raid5"
min = 1.5

[[claim]]
id = "scd-near-raid0"
text = "VC-RAID is comparable to RAID 0"
kind = "ratio"
metric = "tps"
case = "small"
num = "scd"
den = "raid0"
min = 0.8
max = 1.25

[[claim]]
id = "scd-over-raid5e"
text = "VC-RAID beats the engine's RAID 5 (both served by the engine)"
kind = "order"
metric = "tps"
cases = ["small", "medium"]
order = ["scd", "raid5e"]

[control]
engine = "raid5e"
md = "raid5"
text = "raid5e is served to the lab VM as scd is."

[report]
style = "bars"
metrics = ["tps"]
'''


def _results_dir(root: Path, runs: dict[tuple[str, str], float], *, text: str = SCENARIO,
                 failed: tuple[tuple[str, str], ...] = ()) -> Path:
    """A results directory as `raidlab run` writes it: manifest, scenario copy, runs/ (one
    repetition per architecture and case; `failed` ones have status "failed")."""
    out = root / "results"
    (out / "runs").mkdir(parents=True)
    (out / "scenario.toml").write_text(text)
    planned = [f"{arch}--{case}--r1" for arch, case in [*runs, *failed]]
    (out / "manifest.json").write_text(json.dumps({
        "scenario": "unit-control", "runner": "vm", "quick": False, "status": "complete",
        "started": "2026-11-22T01:00:00", "finished": "2026-11-22T02:00:00", "planned_runs": planned,
        "git": {"revision": "r", "dirty": False}, "kernel": "k", "raidlab": "0.1.0"}))
    for (arch, case), tps in runs.items():
        (out / "runs" / f"{arch}--{case}--r1.json").write_text(json.dumps({
            "arch": arch, "case": case, "repetition": 1, "status": "ok",
            "metrics": {"tps": {"value": tps, "unit": "tx/s"}}}))
    for arch, case in failed:
        (out / "runs" / f"{arch}--{case}--r1.json").write_text(json.dumps({
            "arch": arch, "case": case, "repetition": 1, "status": "failed", "error": "boom", "metrics": {}}))
    return out


def _report(tmp_path: Path, runs: dict, **kw) -> str:
    [md] = write_report(_results_dir(tmp_path, runs, **kw), formats=("md",))
    return md.read_text()


def _section(text: str) -> str:
    return text.split("## Runner-fairness control", 1)[1].split("\n## ", 1)[0]


def _claim_row(text: str, claim_id: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"| {claim_id} |"))


BASE = {("raid0", "small"): 200.0, ("scd", "small"): 190.0, ("raid5", "small"): 100.0,
        ("raid0", "medium"): 60.0, ("scd", "medium"): 55.0, ("raid5", "medium"): 30.0}


def test_a_ratio_inside_the_band_is_ok_and_no_claim_is_noted(tmp_path):
    text = _report(tmp_path, {**BASE, ("raid5e", "small"): 105.0, ("raid5e", "medium"): 24.0})
    section = _section(text)
    assert "raid5e is served to the lab VM as scd is." in section
    assert "| case | metric | engine mean (raid5e) | md mean (raid5) | engine / md | control |" in section
    assert "| small | tps | 105 (n=1) | 100 (n=1) | 1.05 | ok |" in section
    assert "| medium | tps | 24 (n=1) | 30 (n=1) | 0.80 | ok |" in section     # the band includes its ends
    assert "2 ok, 0 runner-biased, 0 not measured." in section
    assert "runner-biased:" not in text
    assert "| scd-over-raid5 |" in text and _claim_row(text, "scd-over-raid5").split(" | ")[1] == "✓ holds"
    # the control arch is an architecture like any other in the metric's table
    assert "| small | raid5e | 105 (n=1) |" in text


def test_a_ratio_outside_the_band_flags_the_case_and_notes_engine_vs_md_claims(tmp_path):
    text = _report(tmp_path, {**BASE, ("raid5e", "small"): 150.0, ("raid5e", "medium"): 30.0})
    section = _section(text)
    assert "| small | tps | 150 (n=1) | 100 (n=1) | 1.50 | runner-biased |" in section
    assert "| medium | tps | 30 (n=1) | 30 (n=1) | 1.00 | ok |" in section
    note = "runner-biased: engine raid5 / md raid5 = 1.50 outside 0.8..1.25 (small)"
    # scd against md's raid5 (the control's md label), and scd against md's raid0 (an engine
    # architecture against an md one): the verdict stands, the note is beside it
    assert _claim_row(text, "scd-over-raid5").split(" | ")[1] == f"✓ holds; {note}"
    assert _claim_row(text, "scd-near-raid0").split(" | ")[1] == f"✓ holds; {note}"
    # scd against the engine's own raid5: both served by the engine, the control does not bear on it
    assert _claim_row(text, "scd-over-raid5e").split(" | ")[1] == "✓ holds"
    assert "(medium)" not in text
    assert "2 of the verdicts rest on a runner-biased comparison" in text


def test_a_missing_control_mean_is_not_measured_never_a_ratio(tmp_path):
    text = _report(tmp_path, {**BASE, ("raid5e", "small"): 150.0}, failed=(("raid5e", "medium"),))
    section = _section(text)
    assert "| medium | tps | not measured | 30 (n=1) |  | not measured |" in section
    assert "0 ok, 1 runner-biased, 1 not measured." in section
    assert "(medium)" not in text            # no note for a case whose control was not measured
    assert "outside 0.8..1.25 (small)" in _claim_row(text, "scd-over-raid5")


def test_a_scenario_without_control_reports_as_before(tmp_path):
    plain = SCENARIO.split("[control]")[0] + "[report]" + SCENARIO.split("[report]")[1]
    assert scenarios.loads(plain, check_references=False).control is None
    text = _report(tmp_path, {**BASE, ("raid5e", "small"): 150.0}, text=plain)
    assert "Runner-fairness" not in text and "runner-biased" not in text


def test_the_band_is_the_scenario_s_and_a_zero_md_mean_gives_no_ratio():
    control = scenarios.Control(engine="e", md="m", band=(0.9, 1.1))
    stats = {("e", "a", "tps"): Stat.of([115.0]), ("m", "a", "tps"): Stat.of([100.0]),
             ("e", "b", "tps"): Stat.of([0.0]), ("m", "b", "tps"): Stat.of([0.0]),
             ("e", "c", "tps"): Stat.of([5.0]), ("m", "c", "tps"): Stat.of([0.0])}
    rows = controlmod.evaluate(control, stats, ["a", "b", "c"], ["tps"])
    assert [(r.case, r.verdict, controlmod.ratio_text(r)) for r in rows] == [
        ("a", "runner-biased", "1.15"), ("b", "ok", "- (both 0)"), ("c", "runner-biased", "inf (md mean 0)")]


# ------------------------------------------------------------------------- the schema


def _load_error(tmp_path: Path, text: str) -> ScenarioError:
    path = tmp_path / "s.toml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as info:
        scenarios.load(path, check_references=False)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    return info.value


def test_the_control_table_loads_with_its_default_band(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO)
    control = scenarios.load(path, check_references=False).control
    assert control == scenarios.Control(engine="raid5e", md="raid5", band=(0.8, 1.25),
                                        text="raid5e is served to the lab VM as scd is.")
    path.write_text(SCENARIO.replace('md = "raid5"', 'md = "raid5"\nband = [0.9, 1]'))
    assert scenarios.load(path, check_references=False).control.band == (0.9, 1.0)


@pytest.mark.parametrize("old, new, key, what", [
    ('engine = "raid5e"', 'engine = "raid5x"', "control.engine", "no [[arch]] labelled 'raid5x'"),
    ('md = "raid5"', 'md = "md5"', "control.md", "no [[arch]] labelled 'md5'"),
    ('md = "raid5"', 'md = "raid5e"', "control.md", "also the engine's label"),
    ('md = "raid5"', 'md = "raid5"\nband = [1.25, 0.8]', "control.band", "needs 0 < lo < hi"),
    ('md = "raid5"', 'md = "raid5"\nband = [1.0, 1.0]', "control.band", "needs 0 < lo < hi"),
    ('md = "raid5"', 'md = "raid5"\nband = [0.8]', "control.band", "must be two numbers"),
    ('md = "raid5"', 'md = "raid5"\nband = [0.8, "1.25"]', "control.band", "must be two numbers"),
    ('md = "raid5"', 'md = "raid5"\nband = 1.25', "control.band", "must be list"),
    ('md = "raid5"', 'md = "raid5"\nmetric = "tps"', "control.metric", "unknown key"),
    ('engine = "raid5e"\n', '', "control.engine", "missing"),
])
def test_a_bad_control_names_its_key(tmp_path, old, new, key, what):
    err = _load_error(tmp_path, SCENARIO.replace(old, new))
    assert err.key == key and what in str(err)


@pytest.mark.parametrize("old, new, what", [
    ('chunk = "64K"', 'chunk = "128K"', "'raid5e' has chunk 131072 but 'raid5' has 65536"),
    ('disk_size = "1G"', 'disk_size = "2G"', "'raid5e' has disk_size 2147483648 but 'raid5' has 1073741824"),
    ('"seagate-st32151n"]', '"seagate-st52160n"]', "'raid5e' has disk_model"),
])
def test_the_control_compares_the_same_drives(tmp_path, old, new, what):
    engine = f'label = "raid5e"\narch = "raid5"\n{DRIVES}'
    err = _load_error(tmp_path, SCENARIO.replace(engine, engine.replace(old, new)))
    assert err.key == "control.engine" and what in str(err)


def test_with_the_registry_md_must_name_md_and_engine_the_engine(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO.replace('engine = "raid5e"\nmd = "raid5"', 'engine = "raid5"\nmd = "raid5e"'))
    with pytest.raises(ScenarioError) as info:
        scenarios.load(path)
    assert info.value.key == "control.engine" and "'raid5' is 'md-raid5', an md architecture" in str(info.value)
    path.write_text(SCENARIO)
    assert scenarios.load(path).control.engine == "raid5e"


def test_a_bad_control_is_listed_with_the_other_problems(tmp_path):
    err = _load_error(tmp_path, SCENARIO.replace('den = "raid5"', 'den = "raid9"')
                      .replace('engine = "raid5e"', 'engine = "raid5x"'))
    assert err.key == "claim[0].den"
    assert "and 1 more: control.engine: no [[arch]] labelled 'raid5x'" in str(err)
