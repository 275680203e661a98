"""`raidlab reproduce`: every claim scenario of the named papers, planned, costed and run.

Why a command of its own: a reproduction is many scenarios (VC-RAID's live ones in the lab
VM, the others in virtual time), each with its repetitions at the paper's sizes, and a
reader who wants to rerun a paper first needs to know what that costs. The plan is the
scenarios' own (raidlab.scenarios.plan_runs, as `raidlab run` makes it); what is added is
the order, the estimate and, after the runs, the reports and the claim table of exactly the
directories this reproduction wrote.

* Which scenarios: every scenario file with claims whose paper is named (a seed number
  such as 004, or a short name: `PAPER_NAMES`); all papers when none is named. Extras and
  variants carry no claims and are left out; the controls (no paper) go with every
  reproduction of all papers, since the comparisons rest on them.
* The estimate: each planned run costs what the same architecture and case cost when it
  last ran, from the run files under the results root (`seconds`, the run's wall time: the
  median of its repetitions in the newest directory of that scenario that ran it, at the
  same sizes, --quick or not); a run
  never measured is costed at the median of the scenario's measured runs, and a scenario
  with no measured run at all is said to be unknown, not guessed. Machine-hours are the sum;
  the runs' order and the executor decide the wall time, which `docs/scale-out.md` gives
  for 1, 4 and 16 machines.
* The runs go through `raidlab run`'s own loop and executors (local workers or a Dask
  scheduler), one scenario after another, so each scenario's directory is an ordinary
  results directory and `raidlab run --resume` continues it.
* Afterwards each directory gets its report (`raidlab report DIR`), and the claim table of
  these directories is written beside them (`<results>/reproduce-<time>.md`, the same
  generator as results/CLAIMS.md, raidlab.report.claimtable). Runs at --quick sizes judge no
  claim; their table says so.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Iterable
from pathlib import Path

from raidlab import scenarios
from raidlab.errors import UsageError
from raidlab.scenarios import PlannedRun, Scenario

# Short names a reader may give instead of a seed number (seeds/INDEX.md numbers the papers).
PAPER_NAMES = {short: seed for seed, short in scenarios.PAPER_SHORT_NAMES.items()}
CONTROLS = ""  # the paper field of a control scenario (no paper)


@dataclasses.dataclass(frozen=True)
class ScenarioPlan:
    """One scenario of a reproduction: its runs and what they are estimated to cost."""

    scenario: Scenario
    path: Path
    runs: tuple[PlannedRun, ...]
    seconds: float | None        # the runs' estimated machine time; None: never measured
    measured: int                # planned runs costed from their own earlier runs
    costed_by_median: int        # planned runs costed at the scenario's median


def paper_ids(names: Iterable[str]) -> tuple[str, ...]:
    """Seed numbers of the named papers (all papers when none is named); a name that is
    neither a seed number nor a short name is refused with the known ones."""
    chosen = []
    for name in names:
        key = name.strip().lower()
        seed = PAPER_NAMES.get(key, key)
        if seed not in scenarios.PAPERS:
            known = ", ".join(f"{short} ({seed})" for short, seed in PAPER_NAMES.items())
            raise UsageError(f"no paper {name!r}", hint=f"name one of: {known}")
        if seed not in chosen:
            chosen.append(seed)
    return tuple(chosen)


def claim_scenarios(scenario_dir: Path, papers: tuple[str, ...]) -> list[tuple[Path, Scenario]]:
    """The scenario files with claims of the chosen papers (and the controls, when every
    paper is chosen), in file order."""
    everything = not papers
    out = []
    for path in sorted(scenario_dir.glob("*.toml")):
        scn = scenarios.load(path, check_references=False)
        if not scn.claims:
            continue
        if scn.paper in papers or (everything and (scn.paper in scenarios.PAPERS or scn.paper == CONTROLS)):
            out.append((path, scn))
    if not out:
        raise UsageError(f"no scenario with claims for {', '.join(papers) or 'any paper'} in {scenario_dir}")
    return out


def recorded_seconds(results_root: Path, scenario_id: str, *, quick: bool) -> dict[tuple[str, str], list[float]]:
    """(arch label, case) -> the wall seconds of its ok runs in the newest directory of that
    scenario under `results_root` that has any, at the same sizes (--quick or not): the code
    that ran last is the nearest to the code that will run."""
    out: dict[tuple[str, str], list[float]] = {}
    base = results_root / scenario_id
    if not base.is_dir():
        return out
    for directory in sorted(base.iterdir()):
        manifest = directory / "manifest.json"
        if not manifest.is_file():
            continue
        try:
            if bool(json.loads(manifest.read_text()).get("quick")) != quick:
                continue
        except (OSError, ValueError):
            continue
        found: dict[tuple[str, str], list[float]] = {}
        for path in sorted((directory / "runs").glob("*.json")):
            try:
                doc = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if doc.get("status") != "ok" or not isinstance(doc.get("seconds"), (int, float)):
                continue
            label, case = doc.get("arch"), doc.get("case")  # the run's arch label and case name
            if isinstance(label, str) and isinstance(case, str):
                found.setdefault((label, case), []).append(float(doc["seconds"]))
        out.update(found)  # directories in time order: a newer one's record replaces an older one's
    return out


def estimate(runs: Iterable[PlannedRun], recorded: dict[tuple[str, str], list[float]]) -> tuple[float | None, int, int]:
    """(estimated seconds, runs costed from their own record, runs costed at the median of
    all records); None when nothing of the scenario was ever measured."""
    runs = list(runs)
    every = [s for values in recorded.values() for s in values]
    if not every:
        return None, 0, 0
    fallback = statistics.median(every)
    total, own, median = 0.0, 0, 0
    for run in runs:
        values = recorded.get((run.arch.label, run.case.name))
        if values:
            total += statistics.median(values)
            own += 1
        else:
            total += fallback
            median += 1
    return total, own, median


def plan(scenario_dir: Path, results_root: Path, papers: tuple[str, ...], *, quick: bool) -> list[ScenarioPlan]:
    """Every claim scenario of `papers` with its runs (each scenario's repetitions, its sizes
    or --quick ones) and their estimated cost."""
    out = []
    for path, scn in claim_scenarios(scenario_dir, papers):
        runs = tuple(scenarios.plan_runs(scn, quick=quick))
        seconds, own, median = estimate(runs, recorded_seconds(results_root, scn.id, quick=quick))
        out.append(ScenarioPlan(scn, path, runs, seconds, own, median))
    return out


def hours(seconds: float | None) -> str:
    return "unknown" if seconds is None else f"{seconds / 3600:.2f}"


def plan_table(plans: list[ScenarioPlan]) -> str:
    """The plan as Markdown: a row per scenario (kind, runner, runs, machine-hours and how
    they were costed), then the total."""
    lines = ["| scenario | paper | kind | runner | runs | machine-hours | costed from |",
             "|---|---|---|---|---|---|---|"]
    for p in plans:
        scn = p.scenario
        source = ("never measured" if p.seconds is None else
                  f"{p.measured} runs' own records" + (f", {p.costed_by_median} at the median" if p.costed_by_median
                                                      else ""))
        lines.append(f"| {scn.id} | {scenarios.PAPERS.get(scn.paper, ('controls',))[0]} | {scn.kind} | "
                     f"{scn.runner} | {len(p.runs)} | {hours(p.seconds)} | {source} |")
    known = [p.seconds for p in plans if p.seconds is not None]
    unknown = [p.scenario.id for p in plans if p.seconds is None]
    total = f"{sum(known) / 3600:.2f}" + (f" + {len(unknown)} scenario(s) never measured" if unknown else "")
    lines.append(f"| **total** | | | | {sum(len(p.runs) for p in plans)} | {total} | |")
    live = sum(p.seconds or 0.0 for p in plans if p.scenario.kind == "live")
    lines += ["", f"Live runs (one at a time per machine): {live / 3600:.2f} machine-hours; virtual-time runs "
                  f"spread over every core: {(sum(known) - live) / 3600:.2f}."]
    return "\n".join(lines) + "\n"
