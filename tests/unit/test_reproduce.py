"""`raidlab reproduce`: which scenarios a reproduction plans, what it estimates they cost,
and a quick reproduction end to end (raidlab.reproduce, raidlab.cli.reproduce)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from raidlab import reproduce as repro
from raidlab import scenarios
from raidlab.cli import cli
from raidlab.errors import UsageError

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def test_papers_are_named_by_seed_number_or_short_name_and_a_wrong_name_is_refused():
    assert repro.paper_ids(["raidx", "002", "RAIDX"]) == ("004", "002")
    assert repro.paper_ids([]) == ()
    with pytest.raises(UsageError, match="no paper 'raid7'") as caught:
        repro.paper_ids(["raid7"])
    assert "vcraid (000)" in caught.value.hint


def test_only_scenarios_with_claims_of_the_named_papers_are_planned():
    chosen = repro.claim_scenarios(SCENARIOS, ("004",))
    ids = [scn.id for _path, scn in chosen]
    assert ids and all(i.startswith("raidx-") for i in ids)
    assert all(scn.claims and scn.paper == "004" for _path, scn in chosen)
    every = {scn.id for _path, scn in repro.claim_scenarios(SCENARIOS, ())}
    assert "control-engine-vs-md" in every  # the controls go with a reproduction of everything
    assert "tss-table3-variants" not in every  # an extra: no claims
    assert set(ids) <= every


def _record(root: Path, scenario_id: str, stamp: str, runs: dict[str, float], *, quick=False, failed=()):
    directory = root / scenario_id / stamp
    (directory / "runs").mkdir(parents=True)
    (directory / "manifest.json").write_text(json.dumps({"quick": quick, "status": "complete"}))
    for run_id, seconds in runs.items():
        label, case, _rep = run_id.split("--")
        status = "failed" if run_id in failed else "ok"
        (directory / "runs" / f"{run_id}.json").write_text(
            json.dumps({"arch": label, "case": case, "status": status, "seconds": seconds}))


def test_the_estimate_reads_each_runs_newest_record_at_the_same_sizes(tmp_path):
    scn = scenarios.load(SCENARIOS / "dcd-table4.toml")
    planned = scenarios.plan_runs(scn)
    distinct = list({(run.arch.label, run.case.name): run for run in planned}.values())
    first, second = distinct[0], distinct[1]
    reps = len(planned) // len(distinct)  # each (architecture, case) runs once per repetition
    key = lambda run: f"{run.arch.label}--{run.case.name}--r1"  # noqa: E731
    _record(tmp_path, scn.id, "20260101-000000", {key(first): 100.0, key(second): 50.0})
    _record(tmp_path, scn.id, "20260102-000000", {key(first): 10.0})
    _record(tmp_path, scn.id, "20260103-000000", {key(first): 999.0}, quick=True)
    _record(tmp_path, scn.id, "20260104-000000", {key(second): 777.0}, failed={key(second)})
    recorded = repro.recorded_seconds(tmp_path, scn.id, quick=False)
    assert recorded[(first.arch.label, first.case.name)] == [10.0]   # the newer directory's
    assert recorded[(second.arch.label, second.case.name)] == [50.0]  # a failed run is no record
    seconds, own, median = repro.estimate(planned, recorded)
    others = len(planned) - 2 * reps
    assert (own, median) == (2 * reps, others)
    assert seconds == pytest.approx(reps * (10.0 + 50.0) + others * 30.0)  # the rest at the median of 10 and 50
    assert repro.estimate(planned, {}) == (None, 0, 0)


def test_the_plan_table_totals_the_known_and_names_the_unknown(tmp_path):
    plans = repro.plan(SCENARIOS, tmp_path, ("002",), quick=False)
    assert [p.scenario.id for p in plans] == ["dcd-table2", "dcd-table3", "dcd-table4", "dcd-table5"]
    assert all(p.seconds is None for p in plans)
    text = repro.plan_table(plans)
    assert "| dcd-table2 | DCD | sim | native |" in text
    assert "0.00 + 4 scenario(s) never measured" in text
    assert f"| **total** | | | | {sum(len(p.runs) for p in plans)} |" in text


def test_a_quick_reproduction_runs_reports_and_writes_its_claim_table(tmp_path):
    scenario_dir = tmp_path / "scenarios"
    scenario_dir.mkdir()
    shutil.copy(SCENARIOS / "dcd-table4.toml", scenario_dir)
    results = tmp_path / "results"
    result = CliRunner().invoke(cli, ["reproduce", "dcd", "--quick", "--scenarios", str(scenario_dir),
                                      "--results", str(results)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (directory,) = (results / "dcd-table4").iterdir()
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["quick"] is True
    assert (directory / "report" / "report.md").is_file()
    (table,) = results.glob("reproduce-*.md")
    text = table.read_text()
    assert f"[dcd-table4/{directory.name}](dcd-table4/{directory.name})" in text
    assert "--quick sizes judge no claim" in text
    # the estimate of a second reproduction reads the first one's runs
    again = repro.plan(scenario_dir, results, ("002",), quick=True)
    assert again[0].seconds is not None and again[0].measured == len(again[0].runs)
