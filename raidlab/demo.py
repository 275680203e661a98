"""`raidlab demo` (`make demo`): two small comparisons a newcomer can read in a few minutes,
each ending in a report.

What it runs, in this order:

1. DCD Table 2 in virtual time (scenarios/dcd-table2.toml): the traditional disk against
   the logical DCD, replaying the scenario's three synthetic traces at their full length,
   one trace seed (the scenario's first of three). This is the paper's own size, so its
   claims are judged: the verdicts (holds / does not hold, and on which side of its band a
   ratio fell) mean what they say. About a minute and a quarter here; the replay is
   deterministic, so it gives the same numbers on any machine.
2. VC-RAID Table 2's PostMark "small" live (scenarios/vcraid-table2-postmark.toml) at its
   quick size (1,000 files; fewer transactions than the paper's 50,000), software RAID 5
   (md-raid5) against VC-RAID with a single cache disk (scd), one repetition, in the lab VM
   (md needs a kernel md driver this host may not have, and every architecture of one
   comparison runs in the same runner). At a quick size the claims are not judged: the
   report shows what both arrays measured, the real data path end to end, and says the
   numbers are not the paper's conditions.

Why these and not a bespoke demo: each part is exactly `raidlab run SCENARIO` (with
`--repeat 1`, or `--quick --only raid5,scd`) followed by `raidlab report`, so the demo
exercises the main job end to end and nothing in it is special-cased. Every number in its
reports is measured by those runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from raidlab import scenarios
from raidlab.report import claims as claimsmod
from raidlab.report import write_report
from raidlab.report.render import claim_verdicts
from raidlab.report.results import aggregate, load_results
from raidlab.run import Progress, RunSummary, check_programs, check_runner, run_scenario
from raidlab.scenarios import plan_runs

REPO = Path(__file__).resolve().parent.parent
DEMO_SCENARIO = REPO / "scenarios" / "vcraid-table2-postmark.toml"
DEMO_ARCHS = ("raid5", "scd")
VIRTUAL_SCENARIO = REPO / "scenarios" / "dcd-table2.toml"
VIRTUAL_REPEAT = 1  # one trace seed of the scenario's three: the paper's trace length, in about a minute


@dataclasses.dataclass
class DemoPart:
    """One comparison of the demo: what it is, its report, its run summary, and what the
    report's first screen says (verdict counts; one case's means, per arch label)."""

    title: str
    report: Path
    summary: RunSummary
    verdicts: dict[str, int]
    means: dict[str, float]
    unit: str

    def line(self) -> str:
        counts = ", ".join(f"{n} {k}" for k, n in self.verdicts.items() if n)
        measured = ", ".join(f"{label} {value:,.4g}{f' {self.unit}' if self.unit else ''}"
                             for label, value in self.means.items())
        return f"{self.title}: {measured}; claims: {counts or 'none'}"


class _Say(Progress):
    def __init__(self, say: Callable[[str], None], part: str):
        self.say = say
        self.part = part
        self.total = 0
        self.current = ""

    def start(self, total: int) -> None:
        self.total = total

    def run_started(self, index: int, run) -> None:
        self.current = (f"{self.part}, run {index + 1}/{self.total}: {run.arch.label} ({run.arch.arch}), "
                        f"{run.case.name}")
        self.say(self.current)

    def step(self, message: str) -> None:
        self.say(f"{self.current}: {message}")


def _part(title: str, scenario_file: Path, planned_of: Callable, *, runner: str, quick: bool,
          results_root: Path, home: str | None, progress: Callable[[str], None], argv: list[str],
          metric: str, case: str) -> DemoPart:
    scenario = scenarios.load(scenario_file)
    planned = planned_of(scenario)
    check_runner(scenario, runner)
    check_programs(scenario, runner)
    summary = run_scenario(scenario, planned, runner=runner, results_root=results_root, quick=quick,
                           home=home, progress=_Say(progress, title), command_line=argv)
    progress(f"{title}: writing the report")
    report = write_report(summary.out, formats=("md", "html"))[0]
    results = load_results(summary.out)
    verdicts = claim_verdicts(results)
    counts = {k: sum(1 for v in verdicts if v.verdict == k) for k in claimsmod.VERDICTS}
    stats = aggregate(results.runs)
    means = {f"{label} ({c})": stat.mean for (label, c, m), stat in stats.items() if m == metric and c == case}
    unit = next((stat.unit for (_l, _c, m), stat in stats.items() if m == metric), "")
    return DemoPart(title, report, summary, counts, means, unit)


def run_demo(results_root: Path, *, runner: str = "vm", home: str | None = None,
             progress: Callable[[str], None] = lambda s: None) -> list[DemoPart]:
    """Run both comparisons; return them in order (the virtual-time one first). The live
    part does not start when the first was interrupted."""
    virtual = _part("DCD Table 2, virtual time, one trace seed", VIRTUAL_SCENARIO,
                    lambda scn: plan_runs(scn, repeat=VIRTUAL_REPEAT),
                    runner="native", quick=False, results_root=results_root, home=home, progress=progress,
                    argv=["raidlab", "demo", "(raidlab run scenarios/dcd-table2.toml --repeat 1)"],
                    metric="write_mean_ms", case="hplajw")
    if virtual.summary.interrupted:
        return [virtual]
    live = _part("VC-RAID Table 2 small, live, quick size", DEMO_SCENARIO,
                 lambda scn: plan_runs(scn, quick=True, only=DEMO_ARCHS),
                 runner=runner, quick=True, results_root=results_root, home=home, progress=progress,
                 argv=["raidlab", "demo", "--runner", runner], metric="tps", case="small")
    return [virtual, live]
