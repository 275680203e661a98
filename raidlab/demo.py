"""`raidlab demo` (`make demo`): the small default comparison, ending with a report's path.

What it runs: the VC-RAID paper's Table 2 scenario (scenarios/vcraid-table2-postmark.toml)
at its quick size -- PostMark "small" (1,000 files; fewer transactions than the paper's
50,000), software RAID 5 (md-raid5) against VC-RAID with a single cache disk (scd), one
repetition -- in the lab VM, because md needs a kernel md driver this host may not have and
every architecture of one comparison must run in the same runner. Then the report (figures,
our numbers beside Table 2's, claim verdicts) is written and its path returned.

Why this and not a bespoke demo: it is exactly `raidlab run SCENARIO --quick --only raid5,scd`
followed by `raidlab report`, so the demo exercises the main job end to end and nothing in
it is special-cased. Every number in its report is measured by that run.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from raidlab import scenarios
from raidlab.report import write_report
from raidlab.run import Progress, check_programs, check_runner, run_scenario
from raidlab.scenarios import plan_runs

REPO = Path(__file__).resolve().parent.parent
DEMO_SCENARIO = REPO / "scenarios" / "vcraid-table2-postmark.toml"
DEMO_ARCHS = ("raid5", "scd")


class _Say(Progress):
    def __init__(self, say: Callable[[str], None]):
        self.say = say
        self.total = 0
        self.current = ""

    def start(self, total: int) -> None:
        self.total = total

    def run_started(self, index: int, run) -> None:
        self.current = f"run {index + 1}/{self.total}: {run.arch.label} ({run.arch.arch}), {run.case.name}"
        self.say(self.current)

    def step(self, message: str) -> None:
        self.say(f"{self.current}: {message}")


def run_demo(results_root: Path, *, runner: str = "vm", home: str | None = None,
             progress: Callable[[str], None] = lambda s: None) -> tuple[Path, object]:
    """Run the demo comparison; return (path of report.md, run summary)."""
    scenario = scenarios.load(DEMO_SCENARIO)
    planned = plan_runs(scenario, quick=True, only=DEMO_ARCHS)
    check_runner(scenario, runner)
    check_programs(scenario, runner)
    summary = run_scenario(scenario, planned, runner=runner, results_root=results_root, quick=True,
                           home=home, progress=_Say(progress),
                           command_line=["raidlab", "demo", "--runner", runner])
    progress("writing the report")
    report = write_report(summary.out, formats=("md", "html"))[0]
    return report, summary
