"""Scenario files: the loader refuses bad input with one line naming file and key (exit 2, nothing
started); the run plan and claim verdicts follow the schema of scenarios/README.md."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

from raidlab import scenarios
from raidlab.errors import UsageError
from raidlab.report.claims import FAILS, HOLDS, NOT_MEASURED, evaluate
from raidlab.report.results import Stat, aggregate
from raidlab.scenarios import plan_runs
from raidlab.scenarios import ScenarioError

REPO = Path(__file__).resolve().parents[2]

GOOD = """
[scenario]
id = "unit-s"
title = "unit scenario"
paper = "000"
source = "Table 2"
kind = "live"
runner = "native"
repeat = 3

[[arch]]
label = "r5"
arch = "raid5"
disks = 4
disk_model = "ibm-dnes-309170"
disk_size = "64M"
chunk = "64K"

[[arch]]
label = "r0"
arch = "raid0"
disks = 4
disk_model = "ssd"
disk_size = "64M"
chunk = "64K"

[workload]
name = "postmark"
params = { files = 100, transactions = 500 }

[[case]]
name = "small"
params = { files = 100 }

[[case]]
name = "medium"
params = { files = 200 }

[quick]
repeat = 1
disk_size = "32M"
params = { transactions = 100 }
cases = ["small"]

[[paper]]
arch = "r5"
case = "small"
metric = "tps"
value = 561
unit = "tx/s"
note = "Table 2"

[[claim]]
id = "r0-beats-r5"
text = "RAID0 faster than RAID5"
kind = "order"
metric = "tps"
cases = ["small", "medium"]
order = ["r0", "r5"]

[[claim]]
id = "ratio"
text = "RAID0 about twice RAID5"
kind = "ratio"
metric = "tps"
case = "small"
num = "r0"
den = "r5"
min = 1.5
max = 2.5
"""


def _has_workloads() -> bool:
    try:
        import raidlab.workloads as w

        w.get("postmark")
        return True
    except Exception:  # noqa: BLE001
        return False


needs_workloads = pytest.mark.skipif(not _has_workloads(), reason="workload drivers (raidlab.workloads) absent")


def _write(tmp_path: Path, text: str, name: str = "s.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _load_error(tmp_path: Path, text: str) -> ScenarioError:
    path = _write(tmp_path, text)
    with pytest.raises(ScenarioError) as info:
        scenarios.load(path)
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)
    return info.value


@pytest.mark.parametrize("old,new,key", [
    ('disk_model = "ssd"', 'disk_modle = "ssd"', "arch[1].disk_modle"),
    ('repeat = 3', 'repeat = 3\nrepeats = 3', "scenario.repeats"),
    ('[quick]\nrepeat = 1', '[quick]\nrepeat = 1\nsize = 3', "quick.size"),
    ('unit = "tx/s"', 'units = "tx/s"', "paper[0].units"),
    ('[report]', '[reprot]', "reprot"),
])
def test_unknown_key_names_file_and_key(tmp_path, old, new, key):
    text = GOOD + "\n[report]\nstyle = \"bars\"\n"
    assert old in text
    err = _load_error(tmp_path, text.replace(old, new, 1))
    assert err.key == key
    assert "unknown key" in str(err)


def test_unknown_architecture(tmp_path):
    err = _load_error(tmp_path, GOOD.replace('arch = "raid0"', 'arch = "raid9"'))
    assert err.key == "arch[1].arch"
    assert "raid9" in str(err) and "raid5" in str(err)  # names the known ids


def test_unknown_model_also_in_options(tmp_path):
    err = _load_error(tmp_path, GOOD.replace('disk_model = "ssd"', 'disk_model = "floppy"'))
    assert err.key == "arch[1].disk_model"
    text = GOOD.replace('label = "r0"\narch = "raid0"', 'label = "r0"\narch = "vcraid"\noptions = { config = "scd", cache_model = "zip-drive" }')
    err = _load_error(tmp_path, text)
    assert err.key == "arch[1].options.cache_model"


def test_impossible_arch_configuration(tmp_path):
    err = _load_error(tmp_path, GOOD.replace('label = "r5"\narch = "raid5"\ndisks = 4', 'label = "r5"\narch = "raid5"\ndisks = 1'))
    assert err.key.startswith("arch[0]")


def test_references_and_types(tmp_path):
    assert _load_error(tmp_path, GOOD.replace('order = ["r0", "r5"]', 'order = ["r0", "r6"]')).key == "claim[0].order"
    assert _load_error(tmp_path, GOOD.replace('case = "small"\nmetric = "tps"\nvalue', 'case = "huge"\nmetric = "tps"\nvalue')).key == "paper[0].case"
    assert _load_error(tmp_path, GOOD.replace("repeat = 3", 'repeat = "three"')).key == "scenario.repeat"
    assert _load_error(tmp_path, GOOD.replace('kind = "live"', 'kind = "dream"')).key == "scenario.kind"
    assert _load_error(tmp_path, GOOD.replace('label = "r0"', 'label = "r5"')).key == "arch[1].label"
    assert _load_error(tmp_path, GOOD.replace('disk_size = "64M"', 'disk_size = "lots"', 1)).key == "arch[0].disk_size"
    assert _load_error(tmp_path, GOOD.replace("min = 1.5\nmax = 2.5", "")).key == "claim[1].min"
    assert _load_error(tmp_path, GOOD + "\n[[arch]]\nlabel = \n").key == "(syntax)"


def test_unknown_workload(tmp_path):
    err = _load_error(tmp_path, GOOD.replace('name = "postmark"', 'name = "nfsstone"'))
    assert err.key == "workload.name"
    # one line that says it once and names the workloads there are
    assert str(err).count("nfsstone") == 1 and "known: " in str(err) and "postmark" in str(err)


@needs_workloads
def test_unknown_workload_parameter(tmp_path):
    err = _load_error(tmp_path, GOOD.replace("params = { files = 200 }", "params = { filez = 200 }"))
    assert err.key.startswith("case[1]")
    assert "filez" in str(err)


@needs_workloads
def test_good_scenario_loads_and_plans(tmp_path):
    scn = scenarios.load(_write(tmp_path, GOOD))
    assert [a.label for a in scn.archs] == ["r5", "r0"]
    assert scn.case("small").params == {"files": 100, "transactions": 500}
    full = plan_runs(scn)
    assert len(full) == 3 * 2 * 2
    # repetitions are the outer loop: every arch and case once before the next repetition
    assert [p.repetition for p in full[:4]] == [1, 1, 1, 1] and full[4].repetition == 2
    assert full[0].run_id == "r5--small--r1"
    quick = plan_runs(scn, quick=True)
    assert [p.run_id for p in quick] == ["r5--small--r1", "r0--small--r1"]
    assert quick[0].case.params == {"files": 100, "transactions": 100}
    assert quick[0].arch.disk_size == 32 << 20
    assert [p.run_id for p in plan_runs(scn, quick=True, repeat=2, only=("r0",))] == ["r0--small--r1", "r0--small--r2"]
    with pytest.raises(UsageError, match="r7"):
        plan_runs(scn, only=("r7",))
    assert [p.run_id for p in plan_runs(scn, cases_only=("medium",), repeat=1)] == ["r5--medium--r1", "r0--medium--r1"]
    with pytest.raises(UsageError, match="huge"):
        plan_runs(scn, cases_only=("huge",))


def _stats(values: dict[tuple[str, str], list[float]]) -> dict:
    runs = [{"status": "ok", "arch": a, "case": c, "metrics": {"tps": {"value": v, "unit": "tx/s"}}}
            for (a, c), vs in values.items() for v in vs]
    runs.append({"status": "failed", "arch": "r0", "case": "small", "metrics": {}})
    return aggregate(runs)


@needs_workloads
def test_claim_verdicts(tmp_path):
    scn = scenarios.load(_write(tmp_path, GOOD))
    order, ratio = scn.claims
    stats = _stats({("r0", "small"): [200, 220], ("r5", "small"): [100, 100], ("r0", "medium"): [50],
                    ("r5", "medium"): [40]})
    assert stats[("r0", "small", "tps")] == Stat(2, 210.0, stats[("r0", "small", "tps")].sd, 200, 220, "tx/s")
    v = evaluate(order, stats)
    assert v.verdict == HOLDS and "r0 210 > r5 100" in v.measured
    v = evaluate(ratio, stats)
    assert v.verdict == HOLDS and v.ratios == {"small": pytest.approx(2.1)}
    stats = _stats({("r0", "small"): [400], ("r5", "small"): [100], ("r0", "medium"): [30], ("r5", "medium"): [40]})
    assert evaluate(order, stats).verdict == FAILS
    v = evaluate(ratio, stats)
    assert v.verdict == FAILS and "4.00" in v.measured
    stats = _stats({("r0", "small"): [400]})
    assert evaluate(ratio, stats).verdict == NOT_MEASURED


@needs_workloads
def test_a_failing_case_refutes_a_claim_while_another_case_has_no_result(tmp_path):
    """A claim holds only in every named case: one measured case outside the band makes it
    "does not hold" and the case without a result is still named; a measured case inside the
    band leaves it "not measured" until the other case has run."""
    scn = scenarios.load(_write(tmp_path, GOOD))
    order, _ = scn.claims
    assert order.cases == ("small", "medium")
    v = evaluate(order, _stats({("r0", "small"): [90], ("r5", "small"): [100], ("r0", "medium"): [30]}))
    assert v.verdict == FAILS
    assert "no result for r5/medium" in v.measured and "small: r5 100 > r0 90" in v.measured
    v = evaluate(order, _stats({("r0", "small"): [210], ("r5", "small"): [100], ("r0", "medium"): [30]}))
    assert v.verdict == NOT_MEASURED
    assert "no result for r5/medium" in v.measured and "small: r0 210 > r5 100" in v.measured


def test_cli_bad_scenario_exits_2_without_starting(tmp_path, raidlab_cmd):
    path = _write(tmp_path, GOOD.replace('disk_model = "ssd"', 'disk_modle = "ssd"'))
    home = tmp_path / "home"
    proc = subprocess.run(raidlab_cmd + ["run", str(path), "--home", str(home), "--results", str(tmp_path / "res")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "arch[1].disk_modle" in lines[0] and str(path) in lines[0]
    assert not home.exists() and not (tmp_path / "res").exists()


def test_shipped_vcraid_scenarios_parse():
    """Every scenario file in the repository loads with all its references checked
    (architectures for its runner, models, workloads and their parameters, quick variants)."""
    files = sorted((REPO / "scenarios").glob("*.toml"))
    assert any(p.name.startswith("vcraid-") for p in files)
    for path in files:
        scn = scenarios.load(path)
        assert scn.id == path.stem
        assert plan_runs(scn, quick=True)


SIM = """
[scenario]
id = "unit-sim"
title = "replay"
kind = "sim"

[[arch]]
label = "disk"
arch = "disk"
disks = 1
disk_model = "hp-c2200a"
disk_size = 335333376

[workload]
name = "trace"

[[case]]
name = "hplajw"
params = { profile = "hplajw", duration = "1h" }
"""


def test_sim_scenarios_check_the_replay_references(tmp_path):
    """kind = "sim": the replay's architectures (the single `disk` no daemon builds) and case
    parameters are checked by raidlab.traces, not the array daemon's families."""
    scn = scenarios.load(_write(tmp_path, SIM))
    assert scn.kind == "sim" and scn.archs[0].arch == "disk"
    assert _load_error(tmp_path, SIM.replace('arch = "disk"', 'arch = "dsik"')).key == "arch[0].arch"
    assert _load_error(tmp_path, SIM.replace('duration = "1h"', 'duration = "1h", speed = 2')).key.startswith("case[0]")
    # the same architecture in a live scenario is refused: no array daemon builds it
    assert _load_error(tmp_path, SIM.replace('kind = "sim"', 'kind = "live"')).key == "arch[0].arch"


def test_order_claim_lower_is_better():
    from raidlab.scenarios import Claim

    claim = Claim(id="t", text="a faster", kind="order", metric="seconds", cases=("c",), better="lower",
                  order=("a", "b"))
    stats = {("a", "c", "seconds"): Stat.of([10.0, 12.0], "s"), ("b", "c", "seconds"): Stat.of([20.0], "s")}
    v = evaluate(claim, stats)
    assert v.verdict == HOLDS and v.measured == "c: a 11 < b 20"
    stats[("b", "c", "seconds")] = Stat.of([5.0], "s")
    v = evaluate(claim, stats)
    assert v.verdict == FAILS and v.measured == "c: b 5 < a 11"
    assert evaluate(claim, stats, planned_cases={"other"}).verdict == NOT_MEASURED


def test_ratio_claim_across_cases():
    """den_case: the denominator's mean comes from another case (an improvement factor, one
    architecture at 16 clients over itself at 1)."""
    from raidlab.report.claims import band
    from raidlab.scenarios import Claim

    claim = Claim(id="t", text="x scales", kind="ratio", metric="mb_s", cases=("c16",), num="x", den="x",
                  den_case="c1", min=4.0, max=8.0)
    stats = {("x", "c16", "mb_s"): Stat.of([15.0, 17.0], "MB/s"), ("x", "c1", "mb_s"): Stat.of([2.5], "MB/s")}
    v = evaluate(claim, stats)
    assert v.verdict == HOLDS and v.ratios == {"c16": pytest.approx(6.4)}
    assert v.measured == "c16: x/x in c1 = 6.40"
    assert band(claim) == "4 <= x/(x in c1) <= 8"
    del stats[("x", "c1", "mb_s")]
    v = evaluate(claim, stats)
    assert v.verdict == NOT_MEASURED and "x/c1" in v.measured


def test_den_case_must_name_a_case(tmp_path):
    bad = GOOD.replace('den = "r5"', 'den = "r5"\nden_case = "nowhere"', 1)
    assert bad != GOOD
    err = _load_error(tmp_path, bad)
    assert "den_case" in err.key and "nowhere" in str(err)


def test_vm_available_memory(tmp_path):
    """`vm_available_memory` (the guest memory left to the workload, VC-RAID's ~50 MB) is
    read as MiB; below the floor it is refused naming the key; absent it is None."""
    assert scenarios.load(_write(tmp_path, GOOD)).vm_available_mib is None
    text = GOOD.replace("repeat = 3", 'repeat = 3\nvm_available_memory = "50M"', 1)
    assert scenarios.load(_write(tmp_path, text)).vm_available_mib == 50
    err = _load_error(tmp_path, GOOD.replace("repeat = 3", 'repeat = 3\nvm_available_memory = "4M"', 1))
    assert err.key == "scenario.vm_available_memory" and "16 MiB" in str(err)
    assert _load_error(tmp_path, GOOD.replace("repeat = 3", 'repeat = 3\nvm_available_memory = "lots"', 1)
                       ).key == "scenario.vm_available_memory"
    for path in sorted((REPO / "scenarios").glob("vcraid-*.toml")):  # the paper's 64 MB machine
        assert scenarios.load(path).vm_available_mib == 50, path


def test_vcraid_ram_buffer_comes_out_of_the_guest_memory():
    """VC-RAID reserved its RAM buffer out of the paper machine's 64 MB; the run gives the
    lab VM that much less (Fig. 6's sweep then shrinks the file cache as in §4.3.1)."""
    from raidlab.archs.caching import reserved_ram

    def guest_available_mib(entry, available):  # what the hosted VM pins down to
        return available - (reserved_ram(entry.arch, entry.options) >> 20)

    fig6 = scenarios.load(REPO / "scenarios" / "vcraid-fig6-ram-buffer.toml")
    left = {a.options["ram_buffer"]: guest_available_mib(a, 50) for a in fig6.archs}
    assert left == {"1M": 49, "2M": 48, "4M": 46, "8M": 42, "16M": 34}
    table2 = scenarios.load(REPO / "scenarios" / "vcraid-table2-postmark.toml")
    assert {a.label: guest_available_mib(a, 50) for a in table2.archs} == {"raid0": 50, "scd": 46, "raid5": 50,
                                                                           "scd-strict": 46, "raid5e": 50,
                                                                           "raid0-today": 50, "raid5-today": 50}
    default = dataclasses.replace(table2.arch("scd"), options={"config": "scd"})
    assert guest_available_mib(default, 50) == 46  # the 4 MB default buffer


def test_plan_only_and_case_select_and_refuse(tmp_path):
    scn = scenarios.load(_write(tmp_path, GOOD))
    runs = plan_runs(scn, only=("r0",), cases_only=("medium",), repeat=1)
    assert [r.run_id for r in runs] == ["r0--medium--r1"]
    with pytest.raises(UsageError) as err:
        plan_runs(scn, only=("r9",))
    assert "--only r9: no architecture labelled 'r9'" in str(err.value) and "r5, r0" in err.value.hint
    with pytest.raises(UsageError) as err:
        plan_runs(scn, cases_only=("huge",))
    assert "--case huge: no case named 'huge'" in str(err.value) and "small, medium" in err.value.hint
    with pytest.raises(UsageError, match="none of these runs in the --quick subset"):
        plan_runs(scn, quick=True, cases_only=("medium",))


def test_runner_override_checks_only_the_selected_architectures(raidlab_cmd, tmp_path):
    """`--runner native --only scd` on a VM scenario with md baselines runs the vcraid arch
    natively; the md archs not selected are not refused (they would be on a kernel without md)."""
    from raidlab.baselines.mdadm import kernel_has_md

    scn = REPO / "scenarios" / "vcraid-fig7-untar.toml"

    def dry(*args):
        return subprocess.run(raidlab_cmd + ["run", str(scn), "--runner", "native", "--dry-run",
                                             "--results", str(tmp_path / "res"), *args],
                              capture_output=True, text=True, timeout=120)

    proc = dry("--only", "scd", "--case", "sync", "--repeat", "1")
    assert proc.returncode == 0, proc.stderr
    assert [line.split("\t")[0] for line in proc.stdout.splitlines()] == ["scd--sync--r1"]
    proc = dry("--only", "scd,raid5")
    if kernel_has_md():
        assert proc.returncode == 0, proc.stderr
    else:
        assert proc.returncode == 2
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "arch[1] (raid5) with --runner native" in lines[0] and "no md driver" in lines[0]
    assert not (tmp_path / "res").exists()


def test_unknown_paper_and_how_a_report_cites_a_known_one(tmp_path):
    err = _load_error(tmp_path, GOOD.replace('paper = "000"', 'paper = "007"'))
    assert err.key == "scenario.paper" and "'007'" in str(err)
    assert "000 (VC-RAID)" in err.hint and "002 (DCD)" in err.hint
    assert scenarios.paper_citation("000").startswith('He & Yang, "On Design and Implementation')
    assert scenarios.paper_citation("000").endswith("[seed 000]")
    assert scenarios.paper_citation("") == "-"


def test_a_shared_bus_is_checked_and_drives_are_for_sim_scenarios(tmp_path):
    with_bus = SIM.replace('arch = "disk"', 'arch = "disk"\nbus = "shared"')
    assert scenarios.load(_write(tmp_path, with_bus)).archs[0].bus == "shared"
    assert _load_error(tmp_path, with_bus.replace('"shared"', '"fast"')).key == "arch[0].bus"
    assert _load_error(tmp_path, SIM.replace('arch = "disk"', 'arch = "disk"\nbus = "10,sideways"')).key == "arch[0].bus"
    live = GOOD.replace('disk_model = "ssd"', 'disk_model = "ssd"\nbus = 10', 1)
    assert scenarios.load(_write(tmp_path, live)).archs[1].bus == 10   # live drives share a bus too
    live = GOOD.replace('disk_model = "ssd"', 'disk_model = "ssd"\ndrives = 2', 1)
    assert _load_error(tmp_path, live).key.endswith(".drives")


PARTITIONED = GOOD.replace('''disk_model = "ibm-dnes-309170"
disk_size = "64M"''', '''disk_model = "ibm-ultrastar-9lzx"
partitions = "b8-c1-d1-e1"''')


def test_partitions_give_the_members_and_their_size(tmp_path):
    """`partitions` names each member's drive and partition; the member size is the
    partition's (a quick disk_size does not change it); contradictions are refused."""
    scn = scenarios.load(_write(tmp_path, PARTITIONED))
    entry = scn.archs[0]
    assert entry.partitions == "b8-c1-d1-e1" and entry.disks == 4 and entry.disk_size == 128 << 20
    quick = plan_runs(scn, quick=True)
    assert {run.arch.disk_size for run in quick if run.arch.label == "r5"} == {128 << 20}
    assert _load_error(tmp_path, PARTITIONED.replace('partitions = "b8-c1-d1-e1"',
                                                     'partitions = "b8-c1-d1-e1"\ndisk_size = "64M"')).key.endswith(
        ".disk_size")
    assert _load_error(tmp_path, PARTITIONED.replace('"b8-c1-d1-e1"', '"b9-c1-d1-e1"')).key.endswith(".partitions")
    assert _load_error(tmp_path, PARTITIONED.replace('disks = 4\ndisk_model = "ibm-ultrastar-9lzx"',
                                                     'disks = 3\ndisk_model = "ibm-ultrastar-9lzx"')).key.endswith(
        ".disks")
    assert _load_error(tmp_path, PARTITIONED.replace('"ibm-ultrastar-9lzx"', '"ibm-dnes-309170"')).key.endswith(
        ".partitions")   # that model has no partition table


def test_a_value_claim_bounds_one_architecture(tmp_path):
    text = GOOD + '''
[[claim]]
id = "level"
text = "RAID5 does about 100 tx/s"
kind = "value"
metric = "tps"
case = "small"
arch = "r5"
min = 85
max = 115
'''
    claim = scenarios.load(_write(tmp_path, text)).claims[-1]
    assert claim.kind == "value" and claim.arch == "r5"
    assert evaluate(claim, {("r5", "small", "tps"): Stat.of([100.0, 110.0], "tx/s")}).verdict == HOLDS
    v = evaluate(claim, {("r5", "small", "tps"): Stat.of([130.0], "tx/s")})
    assert v.verdict == FAILS and v.measured == "small: r5 = 130"
    assert evaluate(claim, {}).verdict == NOT_MEASURED
    assert _load_error(tmp_path, text.replace('arch = "r5"\nmin = 85', 'arch = "r5"\nnum = "r0"\nmin = 85')).key.endswith(
        ".num")
    assert _load_error(tmp_path, text.replace("max = 115", "max = 15")).key.endswith(".min")


def test_every_problem_is_listed_in_one_line(tmp_path):
    """A bad [[arch]], a bad [[paper]] and a bad [[claim]] are all named, keyed by the first;
    what refers to the bad [[arch]]'s label is not refused as well."""
    text = (GOOD.replace('disk_model = "ssd"', 'disk_model = "ssd"\ncolour = "red"', 1)
            .replace('metric = "tps"\nvalue = 561', 'metric = "tps"\nvalue = "lots"')
            .replace('num = "r0"', 'num = "r9"'))
    err = _load_error(tmp_path, text)
    assert err.key == "arch[1].colour"
    assert "and 2 more: paper[0].value: must be float" in str(err) and "claim[1].num: no [[arch]] labelled 'r9'" in str(err)
    assert str(err).count("claim[") == 1          # the order claim naming r0 (the bad [[arch]]) is not refused too


def test_a_line_figure_may_put_disks_or_the_chunk_on_x():
    """RAID-x Figs. 9 and 10: one [[arch]] per stripe unit or number of disks, the figure's x
    taken from that field (the chunk in KiB)."""
    from raidlab.scenarios import x_value

    fig9 = scenarios.load(REPO / "scenarios/raidx-fig9-stripe-unit.toml")
    assert [x_value(fig9.report, fig9.arch(f"raid5-k{k}"), {}) for k in (16, 32, 64, 128)] == [16, 32, 64, 128]
    fig10 = scenarios.load(REPO / "scenarios/raidx-fig10-disks.toml")
    assert x_value(fig10.report, fig10.arch("chained-d12"), {}) == 12


def test_cluster_nodes_is_for_live_engine_arrays_of_one_disk_per_node(tmp_path):
    """[[arch]].cluster_nodes: the run's array is built over a scratch cluster of that many
    nodes; refused with disks != nodes, with the VM runner, beside partitions, and in virtual
    time (whose cluster is the twin)."""
    text = GOOD.replace('label = "r5"\narch = "raid5"\ndisks = 4', 'label = "r5"\narch = "raid5"\ndisks = 4\ncluster_nodes = 4', 1)
    assert text != GOOD
    assert scenarios.load(_write(tmp_path, text)).arch("r5").cluster_nodes == 4
    err = _load_error(tmp_path, text.replace("cluster_nodes = 4", "cluster_nodes = 3"))
    assert err.key == "arch[0].cluster_nodes" and "disks = 4" in str(err)
    err = _load_error(tmp_path, text.replace('runner = "native"', 'runner = "vm"', 1))
    assert err.key == "arch[0].cluster_nodes" and "native" in str(err)
    assert scenarios.load(_write(tmp_path, GOOD)).arch("r5").cluster_nodes is None
    sim = SIM.replace('arch = "disk"\ndisks = 1', 'arch = "disk"\ndisks = 1\ncluster_nodes = 1', 1)
    assert sim != SIM
    err = _load_error(tmp_path, sim)
    assert err.key == "arch[0].cluster_nodes" and "twin" in err.hint
