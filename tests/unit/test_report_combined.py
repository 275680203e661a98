"""`raidlab report DIR DIR ... --out OUT`: results directories of one scenario (e.g. Fig. 4's
write ratios, run at different times) make one report; repetitions of one architecture and
case are pooled; mixing scenarios, runners or sizes is refused with one line, exit 2."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from raidlab.errors import UsageError
from raidlab.report.render import write_report
from raidlab.report.results import load_combined

REPO = Path(__file__).resolve().parents[2]
FIG4 = REPO / "scenarios" / "vcraid-fig4-tps.toml"


def _results_dir(root: Path, name: str, runs: dict[tuple[str, str], float], *,
                 scenario: Path = FIG4, quick: bool = False, started: str = "2026-11-22T01:00:00",
                 not_run: tuple[str, ...] = ()) -> Path:
    """A results directory as `raidlab run` writes it: manifest, scenario copy, runs/;
    `not_run`: planned run ids without a result (an interrupted run)."""
    out = root / name
    (out / "runs").mkdir(parents=True)
    (out / "scenario.toml").write_text(scenario.read_text())
    scenario_id = next(line.split('"')[1] for line in scenario.read_text().splitlines()
                       if line.startswith("id = "))
    planned = [f"{arch}--{case}--r1" for arch, case in runs] + list(not_run)
    (out / "manifest.json").write_text(json.dumps({
        "scenario": scenario_id, "runner": "vm", "quick": quick, "status": "complete",
        "started": started, "finished": started, "planned_runs": planned,
        "git": {"revision": name, "dirty": False}, "kernel": "k", "raidlab": "0.1.0"}))
    for (arch, case), tps in runs.items():
        (out / "runs" / f"{arch}--{case}--r1.json").write_text(json.dumps({
            "arch": arch, "case": case, "repetition": 1, "status": "ok",
            "metrics": {"tps": {"value": tps, "unit": "tx/s"}}}))
    return out


def test_directories_of_one_scenario_make_one_report(tmp_path):
    a = _results_dir(tmp_path, "a", {("raid5", "w0.5"): 90.0, ("mcd", "w0.5"): 180.0})
    b = _results_dir(tmp_path, "b", {("raid5", "w0.9"): 60.0, ("mcd", "w0.9"): 200.0,
                                     ("raid5", "w0.5"): 110.0}, started="2026-11-22T02:00:00")
    res = load_combined([a, b])
    assert len(res.runs) == 5 and [p.path for p in res.sources] == [a, b]
    assert res.manifest["planned_runs"] == ["raid5--w0.5--r1", "mcd--w0.5--r1",
                                            "raid5--w0.9--r1", "mcd--w0.9--r1"]
    out = tmp_path / "combined"
    [md] = write_report([a, b], formats=("md",), out_dir=out)
    text = md.read_text()
    # raid5 at w0.5 pooled over both directories: mean 100 of 90 and 110
    assert "| w0.5 | raid5 | 100 ± 14 (n=2, 90..110) |" in text
    # claims across directories: w0.5 from a and b, w0.9 from b
    assert "w0.5: mcd/raid5 = 1.8" in text and "w0.9: mcd/raid5 = 3.33" in text
    assert f"`{a}`" in text and f"`{b}`" in text                  # each source listed
    assert not (a / "report").exists() and not (b / "report").exists()


@pytest.mark.parametrize("second, message", [
    ("scenario", "scenario: 'vcraid-fig5-scd-mcd' but"),
    ("quick", "quick: 'quick' but"),
    ("same", "given twice"),
])
def test_mixing_is_refused(tmp_path, second, message):
    a = _results_dir(tmp_path, "a", {("raid5", "w0.5"): 90.0})
    if second == "scenario":
        b = _results_dir(tmp_path, "b", {("scd", "w0.5-512"): 1.0},
                         scenario=REPO / "scenarios" / "vcraid-fig5-scd-mcd.toml")
    elif second == "quick":
        b = _results_dir(tmp_path, "b", {("raid5", "w0.5"): 90.0}, quick=True)
    else:
        b = a
    with pytest.raises(UsageError, match=message):
        load_combined([a, b])


def test_cli_needs_out_for_several_directories(tmp_path, raidlab_cmd):
    a = _results_dir(tmp_path, "a", {("raid5", "w0.5"): 90.0})
    b = _results_dir(tmp_path, "b", {("raid5", "w0.9"): 60.0})
    proc = subprocess.run([*raidlab_cmd, "report", str(a), str(b)], capture_output=True, text=True)
    assert proc.returncode == 2 and "--out" in proc.stderr and len(proc.stderr.strip().splitlines()) <= 2
    assert not (a / "report").exists()
    proc = subprocess.run([*raidlab_cmd, "report", str(a), str(b), "--out", str(tmp_path / "o"),
                           "--format", "md"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()) == tmp_path / "o" / "report.md"


def test_a_left_out_run_file_is_not_pooled_and_is_named(tmp_path, raidlab_cmd):
    # a has raid5 and mcd at w0.5; b has mcd at w0.5 again (say, after an engine change):
    # leaving a's mcd out gives b's value alone, and the report says which file went.
    a = _results_dir(tmp_path, "a", {("raid5", "w0.5"): 90.0, ("mcd", "w0.5"): 100.0})
    b = _results_dir(tmp_path, "b", {("mcd", "w0.5"): 180.0}, started="2026-11-22T02:00:00")
    old = a / "runs" / "mcd--w0.5--r1.json"
    proc = subprocess.run([*raidlab_cmd, "report", str(a), str(b), "--out", str(tmp_path / "o"),
                           "--format", "md", "--leave-out", str(old)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "o" / "report.md").read_text()
    assert "| w0.5 | mcd | 180 (n=1) |" in text
    assert "w0.5: mcd/raid5 = 2" in text
    assert f"Left out of this report (`--leave-out`): [{old}](../a/runs/mcd--w0.5--r1.json)." in text


def test_leaving_out_a_file_that_is_no_run_is_refused(tmp_path, raidlab_cmd):
    a = _results_dir(tmp_path, "a", {("raid5", "w0.5"): 90.0})
    proc = subprocess.run([*raidlab_cmd, "report", str(a), "--leave-out", str(a / "manifest.json")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "--leave-out" in proc.stderr and "not a run file" in proc.stderr
    assert not (a / "report").exists()


def test_each_directory_is_counted_and_checked_against_its_own_plan(tmp_path):
    # a was interrupted before raid5 at w0.9; b has a run of the same id. The combined
    # report counts both plans whole and still names a's missing run.
    a = _results_dir(tmp_path, "a", {("raid5", "w0.5"): 90.0, ("mcd", "w0.5"): 180.0},
                     not_run=("raid5--w0.9--r1",))
    b = _results_dir(tmp_path, "b", {("raid5", "w0.5"): 110.0, ("raid5", "w0.9"): 60.0},
                     started="2026-11-22T02:00:00")
    [md] = write_report([a, b], formats=("md",), out_dir=tmp_path / "o")
    text = md.read_text()
    assert "4 runs ok, 0 failed, 5 planned." in text
    assert "1 planned runs have no result (interrupted before they ran): a/raid5--w0.9--r1" in text


def test_a_left_out_run_is_not_called_missing(tmp_path):
    a = _results_dir(tmp_path, "a", {("raid5", "w0.5"): 90.0, ("mcd", "w0.5"): 180.0},
                     not_run=("mcd--w0.9--r1",))
    [md] = write_report([a], formats=("md",), out_dir=tmp_path / "o",
                        left_out=[a / "runs" / "mcd--w0.5--r1.json"])
    text = md.read_text()
    assert "1 planned runs have no result (interrupted before they ran): mcd--w0.9--r1" in text
    assert "1 runs ok, 0 failed, 3 planned." in text


def test_a_resumed_directory_names_the_kernel_and_commit_of_each_part(tmp_path):
    # a ran raid5 on host kernel k1 at commit c1, was interrupted, and was resumed twice:
    # once on k2 at c2 and once more on k2 at c2; b ran once
    a = _results_dir(tmp_path, "a", {("raid5", "w0.5"): 90.0, ("mcd", "w0.5"): 180.0})
    man = json.loads((a / "manifest.json").read_text())
    man.update(kernel="k2", git={"revision": "c2", "dirty": False}, resumed=[
        {"at": "2026-11-22T03:00:00", "git": {"revision": "c2"}, "previous_git": {"revision": "c1"},
         "previous_kernel": "k1", "previous_status": "interrupted", "kept": ["raid5--w0.5--r1"]},
        {"at": "2026-11-22T04:00:00", "git": {"revision": "c2"}, "previous_git": {"revision": "c2"},
         "previous_kernel": "k2", "previous_status": "interrupted", "kept": ["raid5--w0.5--r1"]}])
    (a / "manifest.json").write_text(json.dumps(man))
    b = _results_dir(tmp_path, "b", {("raid5", "w0.9"): 60.0}, started="2026-11-22T05:00:00")
    [md] = write_report([a, b], formats=("md",), out_dir=tmp_path / "o")
    rows = {line.split(" | ")[0]: line for line in md.read_text().splitlines() if line.startswith("| `")}
    assert "| k1, then k2 | 0.1.0 | c1, then c2 |" in rows[f"| `{a}`"]
    assert "| k | 0.1.0 | b |" in rows[f"| `{b}`"]


def test_runs_pooled_from_another_durability_world_are_named(tmp_path):
    """A label whose runs' drives lived in another flush world than the scenario now sets
    (a run file from before the setting was kept counts as honoured) gets a caveat."""
    fig7 = REPO / "scenarios" / "vcraid-fig7-untar.toml"
    runs = {("raid0", "sync"): 1.0, ("raid5", "sync"): 2.0, ("raid5-today", "sync"): 3.0}
    old = _results_dir(tmp_path, "old", runs, scenario=fig7)
    new = _results_dir(tmp_path, "new", {("raid0", "sync"): 1.0}, scenario=fig7, started="2026-11-22T02:00:00")
    for path, spec in ((old / "runs" / "raid0--sync--r1.json", {"arch": "md-raid0"}),
                       (old / "runs" / "raid5--sync--r1.json", {"arch": "md-raid5", "flushes": "dropped"}),
                       (old / "runs" / "raid5-today--sync--r1.json", {"arch": "md-raid5", "flushes": "honoured"}),
                       (new / "runs" / "raid0--sync--r1.json", {"arch": "md-raid0", "flushes": "dropped"})):
        doc = json.loads(path.read_text())
        doc["array_status"] = {"spec": spec}
        path.write_text(json.dumps(doc))
    [md] = write_report([old, new], formats=("md",), out_dir=tmp_path / "o")
    lines = [line for line in md.read_text().splitlines() if "**Durability world**" in line]
    assert len(lines) == 1, lines
    assert ("`raid0` is set to flushes dropped; its 2 runs here ran 1 with flushes dropped (case sync), 1 with "
            "flushes honoured (case sync; not recorded: made before run files kept the setting)") in lines[0]
    [md] = write_report([new], formats=("md",), out_dir=tmp_path / "p")
    assert "**Durability world**" not in md.read_text()
