"""The claim table (raidlab.report.claimtable, `raidlab claims`): counted from the results
current.toml names (or a scenario's newest complete run), each verdict the report's own, the
headline with what its sweep says flips it, and a pending scenario listed as not counted."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from raidlab.cli import main
from raidlab.errors import UsageError
from raidlab.report import claims as claimsmod
from raidlab.report import claimtable

RUN = "sa-raid-figures/20261206-033504"
SWEEP = "sweeps/sa-raid-figures/20261206-034622"


@pytest.fixture
def roots(tmp_path):
    results, scns = tmp_path / "results", tmp_path / "scenarios"
    shutil.copytree(Path("results") / RUN, results / RUN)
    (results / SWEEP).mkdir(parents=True)
    shutil.copy(Path("results") / SWEEP / "sweep.json", results / SWEEP / "sweep.json")
    scns.mkdir()
    for name in ("sa-raid-figures.toml", "tss-table3.toml"):
        shutil.copy(Path("scenarios") / name, scns / name)
    return results, scns


def test_counts_come_from_the_named_results_and_the_headline_from_its_sweep(roots):
    results, scns = roots
    (results / "current.toml").write_text(
        f'[[current]]\nscenario = "sa-raid-figures"\nresults = "{RUN}"\nheadline = "sa3-over-raid0-read"\n'
        f'sweep = "{SWEEP}"\n\n[[current]]\nscenario = "tss-table3"\npending = "a test"\n')
    rows = {r.scenario: r for r in claimtable.rows(results, scns)}
    sa = rows["sa-raid-figures"]
    assert (sa.count(claimsmod.HOLDS), sa.judged, sa.count(claimsmod.CALIBRATION)) == (13, 18, 1)
    assert sa.headline_flip.startswith("host.copy_mb_s=40 (does not hold)")
    assert rows["tss-table3"].pending == "a test" and not rows["tss-table3"].verdicts
    text = claimtable.markdown(list(rows.values()))
    assert "| statically adaptive RAID0 | 13 | 18 | 1 | 0 |" in text
    assert "not counted: tss-table3" in text


def test_an_unlisted_scenario_is_read_from_its_newest_complete_run(roots):
    results, scns = roots
    rows = {r.scenario: r for r in claimtable.rows(results, scns)}
    assert rows["sa-raid-figures"].sources == (RUN,)
    assert rows["tss-table3"].pending == "no complete run"


def test_current_toml_is_checked(roots):
    results, scns = roots
    (results / "current.toml").write_text('[[current]]\nscenario = "no-such"\n')
    with pytest.raises(UsageError, match="no scenario 'no-such'"):
        claimtable.rows(results, scns)
    (results / "current.toml").write_text('[[current]]\nscenario = "sa-raid-figures"\nheadline = "nope"\n')
    with pytest.raises(UsageError, match="no claim 'nope'"):
        claimtable.rows(results, scns)
    (results / "current.toml").write_text('[[current]]\nscenario = "sa-raid-figures"\nresult = "x"\n')
    with pytest.raises(UsageError, match="unknown key 'result'"):
        claimtable.rows(results, scns)


def test_the_command_writes_the_table(roots, tmp_path):
    results, scns = roots
    out = tmp_path / "CLAIMS.md"
    assert main(["claims", "--results", str(results), "--scenarios", str(scns), "--write", str(out)]) == 0
    assert out.read_text().startswith("# Claims")


def test_the_committed_claim_table_is_the_one_the_committed_results_give():
    # results/CLAIMS.md is generated, never edited: a result or current.toml changed without
    # `raidlab claims --write results/CLAIMS.md` shows up here.
    root = Path(__file__).resolve().parents[2]
    table = claimtable.markdown(claimtable.rows(root / "results", root / "scenarios"))
    committed = (root / "results" / "CLAIMS.md").read_text()
    assert table == committed, "results/CLAIMS.md differs from what `raidlab claims` writes: run it again"
