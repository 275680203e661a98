"""`raidlab sweep`: the plan (dotted keys into the scenario document, TOML values, the
variants, the runs each claim reads, refusals naming the key and what exists) and a real
sweep in virtual time, end to end, whose report carries every variant's measured value and
verdict, computed as the variants' own reports compute them."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from raidlab import scenarios, sweep
from raidlab.errors import UsageError
from raidlab.report import sweep as sweep_report
from raidlab.report.claims import FAILS, HOLDS
from raidlab.report.results import aggregate, load_results
from raidlab.scenarios import ScenarioError

# Two raid0 arrays that differ in their chunk, one file written and read back in virtual
# time (a few tenths of a second per run); a third array no claim reads.
TINY = """
[scenario]
id = "unit-sweep"
title = "tiny sweep"
kind = "sim"
runner = "native"
repeat = 1

[workload]
name = "seqfile"
params = { block_kb = 4, file_kb = 2048 }

[[case]]
name = "2m"

[[case]]
name = "1.5m"
params = { file_kb = 1536 }

[[arch]]
label = "raid0-4k"
arch = "raid0"
disks = 2
disk_model = "ibm-ultrastar-9lzx"
disk_size = "64M"
chunk = "4K"

[[arch]]
label = "raid0-64k"
arch = "raid0"
disks = 2
disk_model = "ibm-ultrastar-9lzx"
disk_size = "64M"
chunk = "64K"

[[arch]]
label = "raid0-8k"
arch = "raid0"
disks = 2
disk_model = "ibm-ultrastar-9lzx"
disk_size = "64M"
chunk = "8K"

[[claim]]
id = "chunk-reads"
text = "a 64K chunk reads about as fast as a 4K one"
kind = "ratio"
metric = "read_mb_s"
case = "2m"
num = "raid0-64k"
den = "raid0-4k"
min = 0.95
max = 1.1

[[claim]]
id = "level"
text = "the 8K array writes at least 1 MB/s"
kind = "value"
metric = "write_mb_s"
case = "1.5m"
arch = "raid0-8k"
min = 1.0
max = 1000.0
"""


def _scenario(tmp_path: Path, text: str = TINY) -> scenarios.Scenario:
    path = tmp_path / "tiny.toml"
    path.write_text(text)
    return scenarios.load(path)


# ---------------------------------------------------------------------- values and keys


@pytest.mark.parametrize("text, value", [("4", 4), ("0.5", 0.5), ("true", True), ("512K", "512K"),
                                         ('"a b"', "a b"), ("hp-c2200a", "hp-c2200a"), ("-3", -3)])
def test_values_are_toml_scalars_or_bare_words(text, value):
    parsed = sweep.parse_value(text)
    assert parsed == value and type(parsed) is type(value)


def test_vary_splits_on_commas_outside_quotes():
    assumption = sweep.parse_vary('arch.*.disk_model="hp-c2200a,ssd",ssd')
    assert assumption.key == "arch.*.disk_model"
    assert assumption.values == ("hp-c2200a,ssd", "ssd")
    with pytest.raises(UsageError, match="KEY=V1,V2"):
        sweep.parse_vary("workload.params.read_depth")
    with pytest.raises(UsageError, match="empty value"):
        sweep.parse_vary("workload.params.read_depth=4,,8")


def test_a_key_reaches_tables_cases_by_name_and_archs_by_label(tmp_path):
    doc = tomllib.loads(_scenario(tmp_path).text)
    changed = sweep.apply(doc, "workload.params.read_depth", 8)
    assert changed["workload"]["params"] == {"block_kb": 4, "file_kb": 2048, "read_depth": 8}
    assert "read_depth" not in doc["workload"]["params"]  # the base document is left as it was
    changed = sweep.apply(doc, "case.1.5m.params.file_kb", 1024)  # a name with a dot in it
    assert [c.get("params") for c in changed["case"]] == [None, {"file_kb": 1024}]
    changed = sweep.apply(doc, "case.2m.params.read_depth", 2)  # a table the case did not have
    assert changed["case"][0] == {"name": "2m", "params": {"read_depth": 2}}
    changed = sweep.apply(doc, "arch.raid0-64k.chunk", "128K")
    assert [a["chunk"] for a in changed["arch"]] == ["4K", "128K", "8K"]
    changed = sweep.apply(doc, "arch.*.disk_model", "hp-c2200a")
    assert {a["disk_model"] for a in changed["arch"]} == {"hp-c2200a"}
    assert sweep.base_values(doc, "arch.*.chunk") == ["4K", "64K", "8K"]
    assert sweep.base_values(doc, "workload.params.read_depth") == [None]


@pytest.mark.parametrize("key, words, hint", [
    ("arch.nope.chunk", "no [[arch]] named 'nope'", "raid0-4k, raid0-64k, raid0-8k"),
    ("case.9m.params.file_kb", "no [[case]] named '9m'", "2m, 1.5m"),
    ("host.copy_mb_s", "no [host] table", "arch, case, claim, scenario, workload"),
    ("claim.chunk-reads.min", "[claim] says what is claimed", "vary [[arch]]"),
    ("scenario.repeat", "[scenario] says what is claimed", "--repeat"),
    ("arch.raid0-4k.label", "label names the entry", None),
    ("arch.raid0-4k", "names an entry of [[arch]]", "arch.raid0-4k.chunk"),
    ("workload.params", "is a table, not a value", "block_kb, file_kb"),
    ("workload.name.x", "workload.name is a value", None),
    ("case.2m.params.trace", "trace names a file", None),
    ("workload..params", "not a dotted key", None),
])
def test_a_key_the_scenario_does_not_have_is_refused_naming_what_it_has(tmp_path, key, words, hint):
    doc = tomllib.loads(_scenario(tmp_path).text)
    with pytest.raises(UsageError) as info:
        sweep.apply(doc, key, 1)
    assert key in info.value.message and words in info.value.message
    if hint:
        assert hint in info.value.hint


def test_variant_ids_name_the_key_and_value_as_a_file_name_can():
    assert sweep.variant_id("workload.params.read_depth", 4) == "workload.params.read_depth=4"
    assert sweep.variant_id("arch.*.disk_model", "a/b c") == "arch.all.disk_model=a_b_c"
    assert sweep.variant_id("x.flag", True) == "x.flag=true"


# ---------------------------------------------------------------------- claims -> runs


def test_each_claim_reads_its_labels_in_its_cases():
    ratio = scenarios.Claim(id="r", text="", kind="ratio", metric="m", cases=("a", "b"), num="n", den="d",
                            den_case="one", min=1.0)
    assert sweep.claim_runs(ratio) == {("n", "a"), ("n", "b"), ("d", "one")}
    order = scenarios.Claim(id="o", text="", kind="order", metric="m", cases=("a",), order=("x", "y", "z"))
    assert sweep.claim_runs(order) == {("x", "a"), ("y", "a"), ("z", "a")}
    value = scenarios.Claim(id="v", text="", kind="value", metric="m", cases=("a", "b"), arch="x", min=0, max=1)
    assert sweep.claim_runs(value) == {("x", "a"), ("x", "b")}


def test_the_plan_makes_only_the_runs_the_chosen_claims_read(tmp_path):
    base = _scenario(tmp_path)
    vary = [sweep.parse_vary("workload.params.read_depth=4,32"), sweep.parse_vary("arch.*.chunk=16K")]
    plan = sweep.plan(base, vary, claims=["chunk-reads"], repeat=2)
    assert [v.id for v in plan.variants] == ["base", "workload.params.read_depth=4", "workload.params.read_depth=32",
                                             "arch.all.chunk=16K"]
    assert [p.run_id for p in plan.variants[0].planned] == [
        "raid0-4k--2m--r1", "raid0-64k--2m--r1", "raid0-4k--2m--r2", "raid0-64k--2m--r2"]
    variant = plan.variant("workload.params.read_depth=4")
    assert all(p.case.params["read_depth"] == 4 for p in variant.planned)
    assert variant.scenario.text.startswith("# raidlab sweep: a variant of")
    assert tomllib.loads(variant.scenario.text)["workload"]["params"]["read_depth"] == 4
    assert {p.arch.chunk for p in plan.variant("arch.all.chunk=16K").planned} == {16 * 1024}
    everything = sweep.plan(base, vary[:1])
    assert {p.arch.label for p in everything.variants[0].planned} == {"raid0-4k", "raid0-64k", "raid0-8k"}
    assert [c.id for c in everything.claims] == ["chunk-reads", "level"]
    with pytest.raises(UsageError, match="no claim 'nope'") as info:
        sweep.plan(base, vary, claims=["nope"])
    assert "chunk-reads, level" in info.value.hint


def test_a_variant_that_makes_the_base_runs_is_read_from_the_base(tmp_path):
    base = _scenario(tmp_path)
    plan = sweep.plan(base, [sweep.parse_vary("arch.raid0-4k.chunk=4K,8K")])
    assert [(v.id, v.runs_in) for v in plan.variants] == [
        ("base", "base"), ("arch.raid0-4k.chunk=4K", "base"), ("arch.raid0-4k.chunk=8K", "arch.raid0-4k.chunk=8K")]
    assert [v.id for v in plan.to_run] == ["base", "arch.raid0-4k.chunk=8K"]


def test_a_value_the_loader_refuses_is_refused_before_anything_runs(tmp_path):
    base = _scenario(tmp_path)
    with pytest.raises(UsageError) as info:
        sweep.plan(base, [sweep.parse_vary("workload.params.read_dpeth=4")])
    assert "--vary workload.params.read_dpeth=4" in info.value.message
    assert "read_dpeth" in str(info.value) and "its parameters: file_kb" in str(info.value)
    with pytest.raises(UsageError, match="unknown disk model 'nope'"):  # virtual time's own check of a file
        sweep.plan(base, [sweep.parse_vary("arch.*.disk_model=nope")])
    with pytest.raises(UsageError, match="given twice"):
        sweep.plan(base, [sweep.parse_vary("workload.params.read_depth=4,4")])
    with pytest.raises(UsageError, match="nothing to vary"):
        sweep.plan(base, [])


def test_sweep_tables_give_the_default_assumptions_and_are_checked_by_the_loader(tmp_path):
    text = TINY + '\n[[sweep]]\nkey = "workload.params.read_depth"\nvalues = [4, 8]\nlabel = "read-ahead"\n' \
                  'reason = "assumed: a 128 KiB window"\n'
    base = _scenario(tmp_path, text)
    assumptions = sweep.scenario_assumptions(base)
    assert assumptions == (sweep.Assumption("workload.params.read_depth", (4, 8), "read-ahead",
                                            "assumed: a 128 KiB window"),)
    with pytest.raises(ScenarioError) as info:
        scenarios.loads(TINY + '\n[[sweep]]\nkey = "workload.params.read_depth"\nvaleus = [4]\n')
    assert info.value.key == "sweep[0].valeus"


def test_load_doc_is_loads_after_parsing(tmp_path):
    base = _scenario(tmp_path)
    again = scenarios.load_doc(tomllib.loads(base.text), base.text, base.path, file_checks=True)
    assert again == base


def test_a_live_scenario_is_swept_one_variant_at_a_time():
    live = scenarios.loads(TINY.replace('kind = "sim"', 'kind = "live"').replace('name = "seqfile"',
                                                                                 'name = "fio"'),
                           check_references=False)
    sweep.check_jobs(live, 1)
    with pytest.raises(UsageError, match="--jobs 2: .* live scenario"):
        sweep.check_jobs(live, 2)


# ---------------------------------------------------------------------- a real sweep


def _ratio(out: Path, variant: str) -> float:
    stats = aggregate(load_results(out / variant).runs)
    return stats[("raid0-64k", "2m", "read_mb_s")].mean / stats[("raid0-4k", "2m", "read_mb_s")].mean


def test_a_sweep_in_virtual_time_reports_every_variant_of_every_claim(tmp_path, raidlab_cmd):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    out = tmp_path / "sweep"
    proc = subprocess.run([*raidlab_cmd, "sweep", str(path), "--vary", "workload.params.read_depth=1,4",
                           "--claim", "chunk-reads", "--jobs", "2", "-o", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == str(out)
    ids = ["base", "workload.params.read_depth=1", "workload.params.read_depth=4"]
    for variant in ids:  # each an ordinary results directory, with the variant's scenario
        results = load_results(out / variant)
        assert results.manifest["status"] == "complete"
        assert sorted(r["arch"] for r in results.ok_runs) == ["raid0-4k", "raid0-64k"]
    assert "read_depth" not in tomllib.loads((out / "base" / "scenario.toml").read_text())["workload"]["params"]
    assert load_results(out / ids[2]).scenario.cases[0].params["read_depth"] == 4

    data = json.loads((out / "sweep.json").read_text())
    [claim] = data["claims"]
    assert claim["id"] == "chunk-reads" and claim["min"] == 0.95 and claim["max"] == 1.1
    assert claim["base"]["values"]["2m"] == pytest.approx(_ratio(out, "base"))
    [row] = claim["assumptions"]
    assert [p["value"] for p in row["points"]] == ["1", "4"]
    for point in row["points"]:
        ratio = _ratio(out, point["variant"])
        assert point["values"]["2m"] == pytest.approx(ratio)
        assert point["verdict"] == (HOLDS if 0.95 <= ratio <= 1.1 else FAILS)
    flipped = [p["value"] for p in row["points"] if p["verdict"] != claim["base"]["verdict"]]
    assert row["flips_at"] == (flipped[0] if flipped else None)
    assert row["range"]["2m"] == [min(p["values"]["2m"] for p in row["points"]),
                                  max(p["values"]["2m"] for p in row["points"])]

    md = (out / "sweep.md").read_text()
    assert "`chunk-reads`" in md and "flips at" in md
    for point in row["points"]:
        assert f"{point['value']} → {point['values']['2m']:.3f} ({point['text']})" in md
    assert (row["flips"] in md) and (out / "figures" / "chunk-reads.png").stat().st_size > 1000

    again = subprocess.run([*raidlab_cmd, "sweep", "--resume", str(out)], capture_output=True, text=True,
                           timeout=120, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stderr.count("finished before") == 3


def test_resume_runs_what_an_interrupted_sweep_left(tmp_path):
    """A variant never begun runs; one a killed worker left in staging is moved into place and
    continued (its ok runs kept); a finished one is kept as it is."""
    base = _scenario(tmp_path)
    plan = sweep.plan(base, [sweep.parse_vary("workload.params.read_depth=2,8")], claims=["chunk-reads"])
    out = sweep.prepare(plan, tmp_path / "sweep", tmp_path, runner="native", jobs=1, command_line=["test"])
    first = sweep.execute(plan, out, runner="native")
    assert not first.interrupted and first.failed == 0
    kept = (out / "base" / "manifest.json").read_bytes()
    # as a killed sweep leaves it: one variant not begun, one in staging with a run lost
    for path in (out / "workload.params.read_depth=2").rglob("*"):
        if path.is_file():
            path.unlink()
    for path in sorted((out / "workload.params.read_depth=2").rglob("*"), reverse=True):
        path.rmdir()
    (out / "workload.params.read_depth=2").rmdir()
    staged = out / ".staging" / "workload.params.read_depth=8" / base.id / "20260101-000000"
    staged.parent.mkdir(parents=True)
    os.rename(out / "workload.params.read_depth=8", staged)
    (staged / "runs" / "raid0-64k--2m--r1.json").unlink()
    manifest = json.loads((staged / "manifest.json").read_text())
    (staged / "manifest.json").write_text(json.dumps({**manifest, "status": "interrupted"}))
    doc = json.loads((out / "plan.json").read_text())
    (out / "plan.json").write_text(json.dumps({**doc, "status": "interrupted"}))

    resumed, _doc = sweep.resume(out)
    assert [v.id for v in resumed.variants] == [v.id for v in plan.variants]
    summary = sweep.execute(resumed, out, runner="native")
    outcomes = {o.variant: o for o in summary.outcomes}
    assert outcomes["base"].kept and (out / "base" / "manifest.json").read_bytes() == kept
    assert outcomes["workload.params.read_depth=2"].ok == 2 and not outcomes["workload.params.read_depth=2"].kept
    continued = json.loads((out / "workload.params.read_depth=8" / "manifest.json").read_text())
    assert continued["status"] == "complete"
    assert continued["resumed"][-1]["kept"] == ["raid0-4k--2m--r1"]
    assert not (out / ".staging").exists()
    assert json.loads((out / "plan.json").read_text())["status"] == "complete"
    written = sweep_report.write_sweep_report(out)
    assert out / "sweep.md" in written and out / "sweep.json" in written


def test_an_out_directory_that_holds_a_sweep_is_refused(tmp_path):
    base = _scenario(tmp_path)
    plan = sweep.plan(base, [sweep.parse_vary("workload.params.read_depth=2")], claims=["chunk-reads"])
    out = sweep.prepare(plan, tmp_path / "sweep", tmp_path, runner="native", jobs=1, command_line=["test"])
    with pytest.raises(UsageError, match="already holds a sweep") as info:
        sweep.prepare(plan, out, tmp_path, runner="native", jobs=1, command_line=["test"])
    assert "--resume" in info.value.hint
    with pytest.raises(UsageError, match="still going"):  # its plan says running, by this very process
        sweep.resume(out)


def test_a_host_value_left_to_the_catalog_shows_the_catalogs_value():
    doc = tomllib.loads('[host]\nmodel = "raidx-pentium-node"\n')
    assert sweep.base_values(doc, "host.message_mb_s") == [4.05]
    assert sweep.base_values(doc, "host.message_holds_cpu") == [True]
    doc = tomllib.loads('[host]\nmodel = "sa-raid-dual-pentium"\ncopy_mb_s = 65\n')
    assert sweep.base_values(doc, "host.copy_mb_s") == [65]
